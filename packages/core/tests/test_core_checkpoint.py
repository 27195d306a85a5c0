"""Training-state helpers: atomic checkpoint folders (torn writes), every RNG state, log trimming, and the
kill -9 + --resume test helper (which must also fail when a resume is not exact)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from iclr25.core.checkpoint import (
    atomic_folder,
    atomic_write_bytes,
    atomic_write_json,
    capture_rng_state,
    recover_folder,
    restore_rng_state,
    trim_jsonl,
)
from iclr25.core.testing import assert_same_files, assert_same_logs, kill_and_resume


def test_atomic_folder_replaces_and_keeps_old_on_error(tmp_path):
    ck = tmp_path / "ckpt"
    with atomic_folder(ck) as tmp:
        (tmp / "a.txt").write_text("one")
    assert (ck / "a.txt").read_text() == "one"
    with pytest.raises(RuntimeError):
        with atomic_folder(ck) as tmp:
            (tmp / "a.txt").write_text("two (torn)")
            raise RuntimeError("killed mid-save")
    assert (ck / "a.txt").read_text() == "one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    with atomic_folder(ck) as tmp:
        (tmp / "b.txt").write_text("two")
    assert sorted(p.name for p in ck.iterdir()) == ["b.txt"]  # the new checkpoint, not a merge with the old


def test_recover_folder_after_kill_between_renames(tmp_path):
    ck = tmp_path / "ckpt"
    old = tmp_path / "ckpt.old"
    old.mkdir()
    (old / "w").write_text("step 60")
    (tmp_path / "ckpt.tmp").mkdir()  # an unfinished new write
    assert recover_folder(ck) == ck
    assert (ck / "w").read_text() == "step 60"
    assert not old.exists() and not (tmp_path / "ckpt.tmp").exists()
    assert recover_folder(tmp_path / "none") is None


_SLOW_WRITER = """
import sys, time
from pathlib import Path
from iclr25.core.checkpoint import atomic_folder
ck = Path(sys.argv[1])
with atomic_folder(ck) as tmp:
    (tmp / "model.bin").write_bytes(b"new" * 1000)
    print("writing", flush=True)
    with open(tmp / "optimizer.bin", "wb") as f:
        for _ in range(1000):
            f.write(b"x" * 1000); f.flush(); time.sleep(0.01)
"""


def test_kill_during_save_leaves_previous_checkpoint(tmp_path):
    """A real SIGKILL in the middle of writing the optimiser file: the previous checkpoint survives whole."""
    ck = tmp_path / "ckpt"
    with atomic_folder(ck) as tmp:
        (tmp / "model.bin").write_bytes(b"old")
        (tmp / "optimizer.bin").write_bytes(b"old-opt")
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(ck)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert (tmp_path / "ckpt.tmp").exists()  # the torn write is there ...
    assert recover_folder(ck) == ck  # ... and is discarded
    assert (ck / "model.bin").read_bytes() == b"old" and (ck / "optimizer.bin").read_bytes() == b"old-opt"


def test_rng_state_round_trip_through_json():
    torch = pytest.importorskip("torch")
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    random.random(), np.random.rand(), torch.rand(1)
    state = json.loads(json.dumps(capture_rng_state(torch_state=True)))
    want = (random.random(), np.random.rand(3).tolist(), np.random.randn(), torch.rand(4).tolist())
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    restore_rng_state(state)
    got = (random.random(), np.random.rand(3).tolist(), np.random.randn(), torch.rand(4).tolist())
    assert got == want


def test_rng_state_keeps_numpy_gauss_cache_and_refuses_other_version():
    np.random.seed(5)
    np.random.randn()  # leaves a cached second gaussian
    state = capture_rng_state(torch_state=False)
    want = np.random.randn(2).tolist()
    np.random.seed(0)
    restore_rng_state(state)
    assert np.random.randn(2).tolist() == want
    with pytest.raises(ValueError, match="version"):
        restore_rng_state({**state, "version": 99})


def test_trim_jsonl_cuts_to_checkpointed_step_and_torn_line(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 1.0 / (s + 1)}) + "\n" for s in range(1, 9))
                   + '{"step": 9, "lo')
    assert trim_jsonl(log, 6) == 6
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [1, 2, 3, 4, 5, 6]
    assert trim_jsonl(log, lambda r: r["step"] % 2 == 0) == 3
    assert trim_jsonl(tmp_path / "missing.jsonl", 3) == 0
    with pytest.raises(TypeError):
        trim_jsonl(log, "6")


def test_atomic_write_bytes_old_or_new(tmp_path, monkeypatch):
    """A single-file checkpoint (a torch.save into bytes) is replaced whole; a write that fails half-way leaves the
    old file and no temporary file."""
    f = tmp_path / "sub" / "checkpoint.pt"
    atomic_write_bytes(f, b"old")
    assert f.read_bytes() == b"old"
    atomic_write_bytes(f, b"new" * 1000)
    assert f.read_bytes() == b"new" * 1000

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(f, b"torn")
    monkeypatch.undo()
    assert f.read_bytes() == b"new" * 1000
    assert [p.name for p in f.parent.iterdir()] == ["checkpoint.pt"]  # no temporary file left behind


# A toy trainer that uses the helpers as a package would: state per step in an atomic checkpoint with every
# RNG state, a per-step log trimmed on resume. BUGGY=1 forgets the RNG state (as prereq-tune's did).
_TRAINER = textwrap.dedent("""
    import argparse, json, os, time
    from pathlib import Path
    import numpy as np
    from iclr25.core.checkpoint import atomic_folder, atomic_write_json, capture_rng_state, recover_folder
    from iclr25.core.checkpoint import restore_rng_state, trim_jsonl
    from iclr25.core.config import guard_resume_settings
    ap = argparse.ArgumentParser(); ap.add_argument("--out"); ap.add_argument("--resume", action="store_true")
    ap.add_argument("--lr", type=float, default=0.1); a = ap.parse_args()
    out = Path(a.out); guard_resume_settings(out, {"lr": a.lr}, resume=a.resume)
    ck = out / "checkpoint"; w = np.zeros(8); start = 0
    if a.resume and recover_folder(ck):
        st = json.loads((ck / "state.json").read_text())
        w = np.array(st["w"]); start = st["step"]
        if not os.environ.get("BUGGY"):
            restore_rng_state(st["rng"])
        trim_jsonl(out / "metrics.jsonl", start)
    else:
        np.random.seed(0)
    for step in range(start + 1, 41):
        w = w - a.lr * (w - np.random.randn(8))
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "loss": float(w @ w), "time": time.time()}) + "\\n")
        time.sleep(0.01)
        with atomic_folder(ck) as tmp:
            atomic_write_json(tmp / "state.json", {"w": w.tolist(), "step": step, "rng": capture_rng_state()})
    atomic_write_json(out / "final.json", {"w": w.tolist()})
""")


def _trainer(tmp_path: Path) -> list[str]:
    script = tmp_path / "trainer.py"
    script.write_text(_TRAINER)
    return [sys.executable, str(script)]


def _ready(out: Path) -> bool:
    return (out / "checkpoint" / "state.json").exists()


def test_kill_and_resume_bit_identical(tmp_path):
    res = kill_and_resume(_trainer(tmp_path), killed_out=tmp_path / "k", reference_out=tmp_path / "r",
                          ready=_ready, compare=["final.json"], logs=["metrics.jsonl"], max_delay=0.2, seed=3,
                          timeout=120)
    assert res["compared"] == ["final.json"]
    steps = [json.loads(x)["step"] for x in (tmp_path / "k" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 41))  # each step logged once


def test_kill_and_resume_detects_a_resume_that_is_not_exact(tmp_path):
    with pytest.raises(AssertionError, match="differs"):
        kill_and_resume(_trainer(tmp_path), killed_out=tmp_path / "k", reference_out=tmp_path / "r",
                        ready=_ready, compare=["final.json"], max_delay=0.1, seed=1, timeout=120,
                        env={"BUGGY": "1"})


def test_kill_and_resume_refuses_changed_settings(tmp_path):
    cmd = _trainer(tmp_path)
    subprocess.run(cmd + ["--out", str(tmp_path / "o")], check=True, timeout=120)
    r = subprocess.run(cmd + ["--out", str(tmp_path / "o"), "--resume", "--lr", "0.5"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "lr: 0.1 -> 0.5" in r.stderr


def test_assert_same_files_and_logs_fail_loudly(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    atomic_write_json(a / "x.json", {"v": 1})
    atomic_write_json(b / "x.json", {"v": 2})
    with pytest.raises(AssertionError, match="no file matches"):
        assert_same_files(a, b, ["*.safetensors"])
    with pytest.raises(AssertionError, match="differs"):
        assert_same_files(a, b, ["*.json"])
    with pytest.raises(AssertionError, match="first difference"):
        assert_same_logs(a, b, ["x.json"])
    atomic_write_json(b / "x.json", {"v": 1, "wall_s": 3.0})
    assert_same_logs(a, b, ["x.json"])  # clock fields are not compared


def test_atomic_write_text_failure_leaves_no_temporary_file(tmp_path):
    p = tmp_path / "x.json"
    atomic_write_json(p, {"v": 1})
    with pytest.raises(ValueError):
        atomic_write_json(p, {"v": float("nan")})  # refused before anything is written
    with pytest.raises(UnicodeEncodeError):
        from iclr25.core.checkpoint import atomic_write_text

        atomic_write_text(p, "\ud800")  # a lone surrogate cannot be encoded
    assert sorted(q.name for q in tmp_path.iterdir()) == ["x.json"] and json.loads(p.read_text()) == {"v": 1}


def test_atomic_write_bytes_replaces_whole_and_leaves_no_temporary(tmp_path):
    f = tmp_path / "sub" / "ref.pt"
    atomic_write_bytes(f, b"old")
    atomic_write_bytes(f, bytes(range(256)))
    assert f.read_bytes() == bytes(range(256))
    assert sorted(p.name for p in f.parent.iterdir()) == ["ref.pt"]
