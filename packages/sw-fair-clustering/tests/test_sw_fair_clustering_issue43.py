"""Issue 43, item 8: corrupt ``.npz`` files, an unchecked ``WeightedSet(...)`` and a 1-D ``X`` are clear
errors (before: a ``BadZipFile`` traceback, silently kept negative/NaN weights, a colours-shape error)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from iclr25.sw_fair_clustering import SlidingWindowCoreset, WeightedSet, fairlet_tree_solver, load_npz


def _npz(path, n=60, seed=0):
    rng = np.random.default_rng(seed)
    np.savez_compressed(path, X=rng.normal(size=(n, 3)), colors=np.arange(n) % 2)
    return path


def _truncated(src, dst):
    b = src.read_bytes()
    dst.write_bytes(b[: len(b) // 2])
    return dst


def _bad_member(src, dst):
    # keep the zip directory, flip bytes inside the compressed member data (CRC / zlib failure on read)
    b = bytearray(src.read_bytes())
    for i in range(200, 260):
        b[i] ^= 0xFF
    dst.write_bytes(bytes(b))
    return dst


@pytest.mark.parametrize("damage", [_truncated, _bad_member])
def test_load_npz_corrupt_is_value_error(tmp_path, damage):
    bad = damage(_npz(tmp_path / "ok.npz"), tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="bad.npz"):
        load_npz(bad)


@pytest.mark.parametrize("damage", [_truncated, _bad_member])
def test_sliding_window_load_corrupt_is_value_error(tmp_path, damage):
    sw = SlidingWindowCoreset(window=40, k=2, z=2, eps=0.5, n_colors=2, seed=0)
    rng = np.random.default_rng(1)
    sw.insert_many(rng.normal(size=(80, 3)), np.arange(80) % 2)
    good = sw.save(tmp_path / "summary.npz")
    assert SlidingWindowCoreset.load(good).t == 80
    bad = damage(good, tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="is not a saved SlidingWindowCoreset"):
        SlidingWindowCoreset.load(bad)


def test_cli_stream_corrupt_npz_exits_2_one_line(tmp_path):
    bad = _truncated(_npz(tmp_path / "ok.npz"), tmp_path / "bad.npz")
    p = subprocess.run([sys.executable, "-m", "iclr25.sw_fair_clustering", "stream", "--data", str(bad),
                        "--out", str(tmp_path / "o"), "--quiet"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "not a readable .npz" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("weights, message", [
    ([1.0, -1.0], "weights must be finite and >= 0"),
    ([1.0, np.nan], "weights must be finite and >= 0"),
    ([1.0, np.inf], "weights must be finite and >= 0"),
])
def test_weighted_set_constructor_checks_weights(weights, message):
    with pytest.raises(ValueError, match=message):
        WeightedSet(np.zeros((2, 2)), np.array(weights), np.array([0, 1]), np.array([1.0, 2.0]), 2)


def test_weighted_set_constructor_checks_shapes_and_colours():
    with pytest.raises(ValueError, match="weights must have shape"):
        WeightedSet(np.zeros((2, 2)), np.ones(3), np.array([0, 1]), np.array([1.0, 2.0]), 2)
    with pytest.raises(ValueError, match="colors must be integer indices"):
        WeightedSet(np.zeros((2, 2)), np.ones(2), np.array([0, 2]), np.array([1.0, 2.0]), 2)
    ws = WeightedSet(np.zeros((2, 2)), np.ones(2), np.array([0, 1]), np.array([1.0, 2.0]), 2)
    assert ws.total_weight() == 2.0


def test_one_dimensional_x_is_an_x_error():
    x = np.arange(5.0)
    c = np.array([0, 1, 0, 1, 0])
    with pytest.raises(ValueError, match=r"points is 1-D with shape \(5,\).*reshape\(-1, 1\)"):
        WeightedSet.from_arrays(x, c)
    sw = SlidingWindowCoreset(window=10, k=1, z=2, eps=0.5, n_colors=2, seed=0)
    with pytest.raises(ValueError, match=r"points is 1-D"):
        sw.insert_many(x, c)
    with pytest.raises(ValueError, match=r"points is 1-D"):
        fairlet_tree_solver(x, 1, 1, 1, z=2, colors=c)
    # the fix the message names works, and one 1-D point with one colour is still one point
    assert len(WeightedSet.from_arrays(x.reshape(-1, 1), c)) == 5
    assert WeightedSet.from_arrays(np.array([1.0, 2.0]), np.array([0])).dim == 2


def test_npz_one_dimensional_x_empty_colour_and_no_points_are_named(tmp_path):
    """Trial s52: a 1-D X in an .npz was a colours-shape error, an empty string colour became a colour of its own,
    and an .npz with no points ran 0 queries with exit 0."""

    rng = np.random.default_rng(0)
    x, c = rng.normal(size=30), np.where(rng.random(30) < 0.5, "a", "b")
    np.savez(tmp_path / "one_d.npz", X=x, colors=c)
    with pytest.raises(ValueError, match=r"one_d.npz: X is 1-D.*X.reshape\(-1, 1\)"):
        load_npz(tmp_path / "one_d.npz")
    c2 = c.copy()
    c2[4] = ""
    np.savez(tmp_path / "empty_colour.npz", X=x.reshape(-1, 1), colors=c2)
    with pytest.raises(ValueError, match=r"empty_colour.npz: colour of point 4 is an empty string"):
        load_npz(tmp_path / "empty_colour.npz")
    np.savez(tmp_path / "none.npz", X=np.zeros((0, 2)), colors=np.zeros(0, int))
    p = subprocess.run([sys.executable, "-m", "iclr25.sw_fair_clustering", "stream", "--data",
                        str(tmp_path / "none.npz"), "--window", "20", "--coreset-size", "5", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "none.npz: no data points" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "o").exists()
