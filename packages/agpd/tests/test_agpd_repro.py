"""Smoke tests of the reproduction: claim construction on a tiny run, and (slow) the full quick run."""

import json
import math

import pytest

import iclr25.agpd.reproduce as R
from iclr25.core.registry import run_reproduction

NAMES = [n for a in ("badnets", "blended")
         for n in ([f"{a}/{c}" for c in ("asr_before_detection", "target_identified", "target_identified_m10",
                                         "tpr_agpd_vs_spectral", "tpr_agpd_vs_ac", "fpr_agpd", "f1_agpd")]
                   + [f"mechanism/stage3_given_target_{a}_tpr", f"mechanism/stage3_given_target_{a}_fpr",
                      f"mechanism/{a}_target_rank", f"mechanism/{a}_inclass_separation"])]
NAMES += ["clean/no_target_class", "clean/target_named_when_planted", "clean/no_target_class_m10"]


def test_reproduce_tiny_writes_results(tmp_path, monkeypatch):
    """reproduce() itself runs with one torch thread; 1 epoch per model keeps this short."""
    monkeypatch.setitem(R.SETTINGS, True, dict(data="digits", epochs=1, model="small", augment=False))
    rep = run_reproduction("agpd", lambda q, o: R.reproduce(q, o, seeds=(0,)), quick=True, out_dir=tmp_path,
                           version="test")
    assert [c.name for c in rep.claims] == NAMES
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["method"] == "agpd" and len(data["claims"]) == len(NAMES)
    for c in rep.claims:
        if c.name.endswith("fpr_agpd") and math.isnan(c.ours):  # TPR = 0: the FPR claim is void, not held
            assert not c.holds and "not meaningful" in c.note
            continue
        assert not math.isnan(c.ours), c.name
        assert c.holds == data["claims"][NAMES.index(c.name)]["holds"]
    exps = json.loads((tmp_path / "experiments.json").read_text())
    assert exps["seeds"] == [0] and set(exps["runs"][0]) == {"badnets", "blended", "clean"}
    assert set(exps["runs"][0]["badnets"]["agpd"]) == {"paper", "backdoorbench", "backdoorbench-m10"}
    assert (tmp_path / "checkpoints" / "badnets.pt").is_file()

    # a rerun into the same folder reuses every finished experiment (no training, no detection) ...
    def boom(*a, **k):
        raise AssertionError("run_experiment called for a finished experiment")

    monkeypatch.setattr(R, "run_experiment", boom)
    again = R.reproduce(True, tmp_path, seeds=(0,))
    assert [(c.name, c.holds) for c in again] == [(c.name, c.holds) for c in rep.claims]
    assert json.loads((tmp_path / "experiments.json").read_text()) == exps
    # ... but not one recorded under other settings
    monkeypatch.setitem(R.SETTINGS, True, dict(data="digits", epochs=2, model="small", augment=False))
    with pytest.raises(AssertionError, match="finished experiment"):
        R.reproduce(True, tmp_path, seeds=(0,))


def test_claims_follow_the_numbers():
    def exp(targets, tpr, fpr, f1, rank=1, ratio=2.0, asr=0.95, planted=(0,)):
        given = {"layer": "l", "TPR": tpr, "FPR": fpr, "stop": 12, "js_len": 40}
        m = {"TPR": tpr, "FPR": fpr, "F1": f1, "target_classes": targets, "layer": "l", "z": [9.0] + [0.0] * 9,
             "fallback": False, "n_flagged": 1, "target_rank": rank, "target_z": 9.0, "given_target": given,
             "given_target_per_layer": {"l": given},
             "planted": {"targets": list(planted), "fallback": False, "layer": "l", "z_target": 50.0,
                         "n_planted": 13, "TPR": 1.0, "FPR": 0.0, "F1": 1.0}}
        sep = {"l": {"angle_deg": 40.0, "clean_spread_deg": 40.0 / ratio, "ratio": ratio}}
        return {"acc": 0.9, "asr": asr, "agpd": {"paper": m, "backdoorbench": m, "backdoorbench-m10": m},
                "baselines": {"spectral": {"TPR": 0.2, "FPR": 0.03}, "ac": {"TPR": 0.1, "FPR": 0.01}},
                "inclass_separation": sep}

    good = R.claims_from_experiments([{"badnets": exp([0], 0.95, 0.01, 0.93), "clean": exp([], 0, 0, 0)}] * 2, "t")
    assert all(c.holds for c in good), [c.name for c in good if not c.holds]
    bad = R.claims_from_experiments({"badnets": exp([3], 0.0, 0.001, 0.0, rank=4, ratio=0.5, asr=0.5),
                                     "clean": exp([4], 0, 0, 0, planted=())}, "t")
    assert not any(c.holds for c in bad if not c.name.endswith("_fpr")), [c.name for c in bad if c.holds]
    assert {c.name for c in bad} >= {"mechanism/stage3_given_target_badnets_tpr", "clean/target_named_when_planted"}
    # "no target on the clean model" is paired with a planted certain target: naming nothing fails the pair
    silent = R.claims_from_experiments({"clean": exp([], 0, 0, 0, planted=())}, "t")
    assert [(c.name, c.holds) for c in silent][:2] == [("clean/no_target_class", True),
                                                       ("clean/target_named_when_planted", False)]
    fpr = next(c for c in bad if c.name == "badnets/fpr_agpd")  # FPR 0.1 % but TPR 0: vacuous, not held
    assert math.isnan(fpr.ours) and "not meaningful" in fpr.note
    # one poisoned sample of 400 found and 4 clean ones flagged (full run, seed 0): FPR 0.1 %, still void
    few = R.claims_from_experiments({"badnets": exp([0, 2], 0.0025, 0.001, 0.005)}, "t")
    fpr = next(c for c in few if c.name == "badnets/fpr_agpd")
    assert math.isnan(fpr.ours) and not fpr.holds and "below 50 %" in fpr.note
    ok = R.claims_from_experiments({"badnets": exp([0], 0.6, 0.001, 0.7)}, "t")
    assert next(c for c in ok if c.name == "badnets/fpr_agpd").holds


@pytest.mark.slow
def test_reproduce_quick_full(tmp_path):
    rep = run_reproduction("agpd", R.reproduce, quick=True, out_dir=tmp_path, version="test")
    assert [c.name for c in rep.claims] == NAMES
    assert rep.seconds < 600


def _without_timings(runs):
    return [{a: {k: v for k, v in e.items() if k != "seconds"} for a, e in r.items()} for r in runs]


def test_reproduce_workers_match_serial(tmp_path, monkeypatch):
    """--workers 2 (spawned processes) gives the same records and claims as the serial path, and
    reuses finished experiments like it. Tiny config: digits, 1 epoch, BadNets + clean, 2 seeds
    (4 experiments per path)."""
    tiny = dict(data="digits", epochs=1, model="small", augment=False)
    monkeypatch.setitem(R.SETTINGS, True, tiny)  # passed to the workers explicitly (spawn re-imports)
    monkeypatch.setattr(R, "ATTACKS", ("badnets",))  # the job list is built in this process
    ser = R.reproduce(True, tmp_path / "serial", seeds=(0, 1))
    par = R.reproduce(True, tmp_path / "parallel", seeds=(0, 1), workers=2)
    js = json.loads((tmp_path / "serial" / "experiments.json").read_text())
    jp = json.loads((tmp_path / "parallel" / "experiments.json").read_text())
    assert js["seeds"] == jp["seeds"] == [0, 1]
    assert _without_timings(js["runs"]) == _without_timings(jp["runs"])
    assert js["runs"][0]["badnets"]["n_poison"] > 0  # the records hold real experiments
    strip = lambda cs: [(c.name, c.holds, None if math.isnan(c.ours) else round(c.ours, 9), c.note) for c in cs]  # noqa: E731
    assert strip(ser) == strip(par)
    assert sorted(p.name for p in (tmp_path / "parallel" / "experiments").iterdir()) == sorted(
        p.name for p in (tmp_path / "serial" / "experiments").iterdir())

    # the parallel path reads finished experiments in this process: nothing is recomputed
    def boom(*a, **k):
        raise AssertionError("run_experiment called for a finished experiment")

    monkeypatch.setattr(R, "run_experiment", boom)
    again = R.reproduce(True, tmp_path / "parallel", seeds=(0, 1), workers=2)
    assert strip(again) == strip(par)
    with pytest.raises(ValueError, match="workers"):
        R.reproduce(True, tmp_path / "x", workers=0)
