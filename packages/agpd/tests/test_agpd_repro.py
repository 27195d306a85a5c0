"""Smoke tests of the reproduction: claim construction on a tiny run, and (slow) the full quick run."""

import json
import math

import pytest

import iclr25.agpd.reproduce as R
from iclr25.core.registry import run_reproduction

NAMES = [f"{a}/{c}" for a in ("badnets", "blended")
         for c in ("target_identified", "tpr_agpd_vs_spectral", "tpr_agpd_vs_ac", "fpr_agpd", "f1_agpd")]
NAMES.append("clean/no_target_class")


def test_reproduce_tiny_writes_results(tmp_path, monkeypatch):
    """reproduce() itself runs with one torch thread; 1 epoch per model keeps this short."""
    monkeypatch.setitem(R.SETTINGS, True, dict(data="digits", epochs=1, model="small", augment=False))
    rep = run_reproduction("agpd", R.reproduce, quick=True, out_dir=tmp_path, version="test")
    assert [c.name for c in rep.claims] == NAMES
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["method"] == "agpd" and len(data["claims"]) == len(NAMES)
    for c in rep.claims:
        assert not math.isnan(c.ours)
        assert c.holds == data["claims"][NAMES.index(c.name)]["holds"]
    exps = json.loads((tmp_path / "experiments.json").read_text())
    assert set(exps) == {"badnets", "blended", "clean"}
    assert set(exps["badnets"]["agpd"]) == {"paper", "backdoorbench"}
    assert (tmp_path / "checkpoints" / "badnets.pt").is_file()


def test_claims_follow_the_numbers():
    def exp(targets, tpr, fpr, f1):
        m = {"TPR": tpr, "FPR": fpr, "F1": f1, "target_classes": targets, "layer": "l", "z": [9.0] + [0.0] * 9,
             "fallback": False, "n_flagged": 1}
        return {"acc": 0.9, "asr": 0.95, "agpd": {"paper": m, "backdoorbench": m},
                "baselines": {"spectral": {"TPR": 0.2, "FPR": 0.03}, "ac": {"TPR": 0.1, "FPR": 0.01}}}

    good = R.claims_from_experiments({"badnets": exp([0], 0.95, 0.01, 0.93), "clean": exp([], 0, 0, 0)}, "t")
    assert all(c.holds for c in good)
    bad = R.claims_from_experiments({"badnets": exp([3], 0.0, 0.05, 0.0), "clean": exp([4], 0, 0, 0)}, "t")
    assert not any(c.holds for c in bad)


@pytest.mark.slow
def test_reproduce_quick_full(tmp_path):
    rep = run_reproduction("agpd", R.reproduce, quick=True, out_dir=tmp_path, version="test")
    assert [c.name for c in rep.claims] == NAMES
    assert rep.seconds < 600
