"""``embed_rows``: resumable shards, ``--shard k/n`` work sharing and the run fingerprint (numpy only)."""

import json

import numpy as np
import pytest

from iclr25.tie.embed import embed_rows, fingerprint


class _Encoder:
    """Deterministic fake image encoder (row ``i`` → ``[i, i², 1]``) that records what it was asked for."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        self.calls.append(idx.tolist())
        i = idx.astype(np.float64)
        return np.stack([i, i * i, np.ones_like(i)], axis=1)


def _expected(n: int) -> np.ndarray:
    i = np.arange(n, dtype=np.float64)
    return np.stack([i, i * i, np.ones_like(i)], axis=1).astype(np.float32)


def test_single_process_embeds_all_rows_in_order(tmp_path):
    enc = _Encoder()
    emb = embed_rows(11, enc, tmp_path, fingerprint="f", shard_size=4, quiet=True)
    np.testing.assert_array_equal(emb, _expected(11))
    assert emb.dtype == np.float32
    assert enc.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"fingerprint": "f", "n_rows": 11, "shard_size": 4}


def test_rerun_skips_finished_shards(tmp_path):
    embed_rows(11, _Encoder(), tmp_path, fingerprint="f", shard_size=4, quiet=True)
    (tmp_path / "shards" / "shard_00001.npy").unlink()          # as if the run had died during shard 1
    enc = _Encoder()
    emb = embed_rows(11, enc, tmp_path, fingerprint="f", shard_size=4, quiet=True)
    assert enc.calls == [[4, 5, 6, 7]]                           # only the missing shard is recomputed
    np.testing.assert_array_equal(emb, _expected(11))
    assert not list((tmp_path / "shards").glob("*.tmp.npy"))


def test_k_of_n_processes_share_the_shards_and_the_last_assembles(tmp_path):
    e0, e1 = _Encoder(), _Encoder()
    assert embed_rows(10, e0, tmp_path, fingerprint="f", shard_size=3, shard=(0, 2), quiet=True) is None
    assert e0.calls == [[0, 1, 2], [6, 7, 8]]                    # shards 0 and 2
    emb = embed_rows(10, e1, tmp_path, fingerprint="f", shard_size=3, shard=(1, 2), quiet=True)
    assert e1.calls == [[3, 4, 5], [9]]                          # shards 1 and 3
    np.testing.assert_array_equal(emb, _expected(10))


def test_shards_of_another_run_are_refused(tmp_path):
    embed_rows(5, _Encoder(), tmp_path, fingerprint=fingerprint("enc A", ["a.png", "b.png"]), shard_size=2, quiet=True)
    with pytest.raises(ValueError, match="holds shards of another run.*new --out"):
        embed_rows(5, _Encoder(), tmp_path, fingerprint=fingerprint("enc B", ["a.png", "b.png"]), shard_size=2,
                   quiet=True)
    with pytest.raises(ValueError, match="holds shards of another run"):
        embed_rows(5, _Encoder(), tmp_path, fingerprint=fingerprint("enc A", ["a.png", "b.png"]), shard_size=3,
                   quiet=True)


def test_fingerprint_depends_on_encoder_and_every_item():
    f = fingerprint("enc", ["a", "b"])
    assert f == fingerprint("enc", ["a", "b"])
    assert len({f, fingerprint("enc2", ["a", "b"]), fingerprint("enc", ["b", "a"]), fingerprint("enc", ["ab"])}) == 4


def test_encoder_returning_wrong_row_count_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="returned 2 rows for 3 images"):
        embed_rows(3, lambda idx: np.zeros((2, 4)), tmp_path, fingerprint="f", shard_size=3, quiet=True)
