"""Issue 43, item 9 (aihf): a corrupt ``.jsonl.gz`` and a reward model with another vocabulary than the
policy are clear errors (before: an ``EOFError`` / ``BadGzipFile`` traceback from ``data.py`` and an
``IndexError`` from the reward model's embedding)."""

from __future__ import annotations

import gzip
import json

import pytest

from iclr25.core.jsonl import JsonlError


def _gz(path, n=200):
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"prompt": f"Q{i}: ", "chosen": f"good answer number {i}",
                                 "rejected": f"bad answer {i * 7}"}) + "\n")
    return path


def _truncated(src, dst):
    b = src.read_bytes()
    dst.write_bytes(b[: len(b) * 2 // 3])
    return dst


def _bad_crc(src, dst):
    b = bytearray(src.read_bytes())
    b[-8] ^= 0xFF  # the gzip trailer's CRC-32
    dst.write_bytes(bytes(b))
    return dst


def _not_gzip(src, dst):
    dst.write_bytes(b"this is not gzip data\n")
    return dst


@pytest.mark.parametrize("damage", [_truncated, _bad_crc, _not_gzip])
def test_corrupt_jsonl_gz_is_jsonl_error(tmp_path, damage):
    from iclr25.aihf.data import read_preferences

    good = _gz(tmp_path / "prefs.jsonl.gz")
    assert len(read_preferences(good)) == 200
    bad = damage(good, tmp_path / "bad.jsonl.gz")
    with pytest.raises(JsonlError, match=r"bad\.jsonl\.gz: corrupt or truncated gzip after line \d+"):
        read_preferences(bad)


def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "</s>", "Q0:", "Q1:", "good", "bad", "yes"]
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=t, pad_token="[PAD]", eos_token="</s>", unk_token="[UNK]")


def _save(folder, *, vocab_size=None, word=False):
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    tok = _word_tokenizer() if word else byte_tokenizer()
    kw = dict(eos_token_id=2, pad_token_id=0) if word else {}
    tiny_causal_lm(vocab_size=vocab_size or len(tok), n_layer=1, n_embd=16, n_head=2, n_positions=128, seed=0,
                   **kw).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def text_files(tmp_path):
    d = tmp_path / "demos.jsonl"
    p = tmp_path / "prefs.jsonl"
    d.write_text("".join(json.dumps({"prompt": f"Q{i}: ", "response": "yes good"}) + "\n" for i in range(2)))
    p.write_text("".join(json.dumps({"prompt": f"Q{i}: ", "chosen": "good", "rejected": "bad"}) + "\n"
                         for i in range(2)))
    return d, p


@pytest.mark.parametrize("kind, message", [
    ("word", "--reward-model has another vocabulary than --policy"),
    ("small", "--reward-model: the tokenizer has 258 tokens but the model's embedding has 64 rows"),
])
def test_reward_model_with_other_vocabulary_is_exit_2(tmp_path, text_files, capsys, kind, message):
    from iclr25.aihf.cli import main

    pol = _save(tmp_path / "pol")
    rm = _save(tmp_path / "rm", word=True) if kind == "word" else _save(tmp_path / "rm", vocab_size=64)
    d, p = text_files
    code = main(["train", "--task", "text", "--policy", str(pol), "--reward-model", str(rm), "--demos", str(d),
                 "--prefs", str(p), "--max-new-tokens", "2", "--max-length", "32", "--rounds", "1", "--quiet",
                 "--device", "cpu", "--out", str(tmp_path / "o")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    # the last stderr line is the one-line error (a transformers config warning may come before it)
    assert code == 2 and message in last and last.startswith("iclr25-aihf train: error:"), last


def test_cli_corrupt_prefs_gz_is_exit_2(tmp_path, text_files, capsys):
    from iclr25.aihf.cli import main

    pol = _save(tmp_path / "pol")
    d, _ = text_files
    bad = _truncated(_gz(tmp_path / "prefs.jsonl.gz"), tmp_path / "bad.jsonl.gz")
    code = main(["train", "--task", "text", "--policy", str(pol), "--demos", str(d), "--prefs", str(bad),
                 "--max-length", "32", "--rounds", "1", "--quiet", "--device", "cpu", "--out", str(tmp_path / "o")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "corrupt or truncated gzip" in last and last.startswith("iclr25-aihf train: error:"), last
