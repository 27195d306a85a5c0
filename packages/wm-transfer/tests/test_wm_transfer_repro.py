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
                              jobs=1, min_bit_acc=0.0)
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
    saved = json.loads((tmp_path / "comparison_target.json").read_text())
    assert saved["complete"] and not (tmp_path / "comparison_target.partial.json").exists()
    assert saved["comparison"] == comp

    # --resume reuses a finished comparison with the same key (a marked value comes back) ...
    wb = comp["whitebox"]["evasion_rate"]
    saved["comparison"]["whitebox"]["evasion_rate"] = 0.123
    (tmp_path / "comparison_target.json").write_text(json.dumps(saved))
    claims = {c.name: c for c in rep.reproduce(True, tmp_path, seeds=[0, 1], jobs=1, min_bit_acc=0.0, resume=True)}
    assert claims["evasion/whitebox_upper_bound"].ours == pytest.approx(0.123)
    # ... and recomputes one whose key differs (other attack settings or models)
    saved["key"]["attack"]["alpha"] = 9.0
    (tmp_path / "comparison_target.json").write_text(json.dumps(saved))
    claims = {c.name: c for c in rep.reproduce(True, tmp_path, seeds=[0, 1], jobs=1, min_bit_acc=0.0, resume=True)}
    wb2 = claims["evasion/whitebox_upper_bound"].ours
    assert math.isnan(wb2) if wb is None else wb2 == pytest.approx(wb)
    assert json.loads((tmp_path / "comparison_target.json").read_text())["key"]["attack"]["alpha"] == 0.125


def test_reproduce_two_targets_in_two_processes(need_mirror, tmp_path, monkeypatch):
    """The full preset's layout (robust + non-robust target): trainings and the two comparisons in 2 processes."""
    monkeypatch.setattr(rep, "QUICK", dict(TINY_PRESET, nonrobust_target=True, n_images=4, max_iters=2))
    claims = rep.reproduce(True, tmp_path, seeds=[0, 1], jobs=2, min_bit_acc=0.0)
    assert [c.name for c in claims] == list(rep.CLAIM_NAMES)
    comps = json.loads((tmp_path / "comparison.json").read_text())
    assert set(comps) == {"target", "target_nonrobust"}
    for name, comp in comps.items():
        saved = json.loads((tmp_path / f"comparison_{name}.json").read_text())
        assert saved["complete"] and saved["comparison"] == comp
    # the non-robust target is attacked with its own message and images watermarked by it
    assert saved["key"]["target"] != json.loads((tmp_path / "comparison_target.json").read_text())["key"]["target"]
    assert "## target_nonrobust" in (tmp_path / "comparison.md").read_text()


def test_reproduce_stops_on_decoder_check(tiny, need_mirror, tmp_path):
    with pytest.raises(DecoderCheckError, match="< 0.99"):
        rep.reproduce(True, tmp_path, seeds=[0, 1], jobs=1, min_bit_acc=0.99)
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
