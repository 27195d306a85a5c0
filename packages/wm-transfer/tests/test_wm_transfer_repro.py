"""reproduce(): a tiny smoke run through every stage (real data), the decoder-check failure path, and
(slow) the real quick run."""

import json
import math

import pytest

import iclr25.wm_transfer.reproduce as rep
from iclr25.core.registry import run_reproduction
from iclr25.wm_transfer.checkpoint import DecoderCheckError

TINY_PRESET = dict(n_train=64, n_val=16, epochs_target=1, epochs_surrogate=1, n_images=8, max_iters=3,
                   m_values=(1, 2), n_subsets=2, seeds=(0, 1, 2), nonrobust_target=False)


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(rep, "QUICK", TINY_PRESET)


def test_reproduce_smoke(tiny, need_mirror, tmp_path):
    report = run_reproduction("wm-transfer", rep.reproduce, quick=True, out_dir=tmp_path, seeds=[0, 1],
                              workers=1, min_bit_acc=0.0)
    assert [c.name for c in report.claims] == list(rep.CLAIM_NAMES)
    for f in ("results.json", "results.md", "config.json", "models.json", "comparison.json", "comparison.md"):
        assert (tmp_path / f).is_file(), f
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["attack"]["alpha"] == pytest.approx(0.125) and cfg["seeds"] == [0, 1]
    comp = json.loads((tmp_path / "comparison.json").read_text())["target"]
    assert set(comp["transfer"]) == {"1", "2"} and len(comp["transfer"]["1"]) == 2
    res = json.loads((tmp_path / "results.json").read_text())
    for c in res["claims"]:  # holds is recomputed from the numbers by the core
        assert isinstance(c["holds"], bool)
    assert "surrogate0" in report.claims[0].note  # every model's accuracy is reported
    # one record per job of the core runner; no partial file left
    names = {p.stem for p in (tmp_path / "records").glob("*.json")}
    assert names == {"train_target", "train_surrogate0", "train_surrogate1", "decoder_check", "compare_target"}
    assert json.loads((tmp_path / "records" / "compare_target.json").read_text())["record"] == comp
    assert not (tmp_path / "comparison_target.partial.json").exists()

    # --resume with every record there trains nothing: the claims come from the records (a marked value
    # comes back, the model files are untouched) ...
    f = tmp_path / "records" / "compare_target.json"
    saved = json.loads(f.read_text())
    wb = comp["whitebox"]["evasion_rate"]
    saved["record"]["whitebox"]["evasion_rate"] = 0.123
    f.write_text(json.dumps(saved))
    mtime = (tmp_path / "models" / "target.pt").stat().st_mtime_ns
    claims = {c.name: c for c in rep.reproduce(True, tmp_path, seeds=[0, 1], workers=1, min_bit_acc=0.0, resume=True)}
    assert claims["evasion/whitebox_upper_bound"].ours == pytest.approx(0.123)
    assert (tmp_path / "models" / "target.pt").stat().st_mtime_ns == mtime
    # ... a changed setting is refused ...
    with pytest.raises(ValueError, match="resume"):
        rep.reproduce(True, tmp_path, seeds=[0, 1], workers=1, min_bit_acc=0.5, resume=True)
    # ... and a deleted record is recomputed alone
    f.unlink()
    claims = {c.name: c for c in rep.reproduce(True, tmp_path, seeds=[0, 1], workers=1, min_bit_acc=0.0, resume=True)}
    wb2 = claims["evasion/whitebox_upper_bound"].ours
    assert math.isnan(wb2) if wb is None else wb2 == pytest.approx(wb)
    assert (tmp_path / "models" / "target.pt").stat().st_mtime_ns == mtime


def test_reproduce_two_targets_in_two_processes(need_mirror, tmp_path, monkeypatch):
    """The full preset's layout (robust + non-robust target): the jobs in 2 worker processes of the runner."""
    monkeypatch.setattr(rep, "QUICK", dict(TINY_PRESET, nonrobust_target=True, n_images=4, max_iters=2))
    claims = rep.reproduce(True, tmp_path, seeds=[0, 1], workers=2, min_bit_acc=0.0)
    assert [c.name for c in claims] == list(rep.CLAIM_NAMES)
    comps = json.loads((tmp_path / "comparison.json").read_text())
    assert set(comps) == {"target", "target_nonrobust"}
    sha = json.loads((tmp_path / "models.json").read_text())["sha256"]
    assert sha["target"] != sha["target_nonrobust"]
    assert "## target_nonrobust" in (tmp_path / "comparison.md").read_text()


def test_reproduce_stops_on_decoder_check(tiny, need_mirror, tmp_path):
    with pytest.raises(DecoderCheckError, match="< 0.99"):
        rep.reproduce(True, tmp_path, seeds=[0, 1], workers=1, min_bit_acc=0.99)
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["status"] == "decoder_check_failed" and res["claims"] == []
    assert set(res["decoder_bit_acc"]) == {"target", "surrogate0", "surrogate1"}
    assert not (tmp_path / "comparison.json").exists()


def test_reproduce_needs_enough_seeds(tmp_path):
    with pytest.raises(ValueError, match="at least 2 distinct surrogate seeds"):
        rep.reproduce(True, tmp_path, seeds=[0])


@pytest.mark.slow
def test_quick_reproduction_claims(need_mirror, tmp_path):
    report = run_reproduction("wm-transfer", rep.reproduce, quick=True, out_dir=tmp_path)
    assert [c.name for c in report.claims] == list(rep.CLAIM_NAMES)
    held = {c.name: c.holds for c in report.claims}
    assert held["detect/target_clean_bit_acc"], "the target must read its watermark before anything else means much"


@pytest.mark.slow
def test_distributed_training_two_cpu_processes():
    """Gradients really synchronise across 2 processes (benchmarks/check_distributed.py under torchrun)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("accelerate")
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    script = Path(__file__).parents[1] / "benchmarks" / "check_distributed.py"
    r = subprocess.run([torchrun, "--nproc_per_node", "2", str(script)], capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "parameters identical across processes: True" in r.stdout
