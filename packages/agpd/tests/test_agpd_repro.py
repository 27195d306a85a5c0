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
    """reproduce() on the core runner, in this process (1 epoch per model keeps this short): results,
    records, figures and claim fields; a --resume rerun trains nothing; changed settings are refused."""
    monkeypatch.setitem(R.SETTINGS, True, dict(data="digits", epochs=1, model="small", augment=False))
    rep = run_reproduction("agpd", lambda q, o: R.reproduce(q, o, seeds=(0,), workers=1), quick=True,
                           out_dir=tmp_path, version="test")
    assert [c.name for c in rep.claims] == NAMES
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["method"] == "agpd" and len(data["claims"]) == len(NAMES)
    assert data["cpu_seconds"] > 0
    for c in rep.claims:
        if c.name.endswith("fpr_agpd") and math.isnan(c.ours):  # TPR = 0: the FPR claim is void, not held
            assert not c.holds and "not meaningful" in c.note
            continue
        assert not math.isnan(c.ours), c.name
        assert c.holds == data["claims"][NAMES.index(c.name)]["holds"]
    # every claim fills the core record; one seed: no spread
    for c in rep.claims:
        assert c.kind in ("headline", "mechanism", "sanity"), c.name
        assert c.paper_ref and "spec" not in c.paper_ref and "spec" not in c.paper, c.name
        assert c.n_seeds == 1 and c.spread is None, c.name
        assert (c.paper_value is None) == ("direction only" in c.paper_ref), c.name
    assert {c.plot for c in rep.claims} - {""} == {"detection.png", "target_z.png"}
    for png in ("detection.png", "target_z.png"):
        assert (tmp_path / png).stat().st_size > 1000
    exps = json.loads((tmp_path / "experiments.json").read_text())
    assert exps["seeds"] == [0] and set(exps["runs"][0]) == {"badnets", "blended", "clean"}
    assert set(exps["runs"][0]["badnets"]["agpd"]) == {"paper", "backdoorbench", "backdoorbench-m10"}
    assert (tmp_path / "checkpoints" / "badnets_seed0.pt").is_file()
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == [
        "badnets_seed0.json", "blended_seed0.json", "clean_seed0.json"]

    # a --resume rerun into the same folder reuses every finished experiment (no training, no detection) ...
    def boom(*a, **k):
        raise AssertionError("run_experiment called for a finished experiment")

    monkeypatch.setattr("iclr25.agpd.pipeline.run_experiment", boom)
    again = R.reproduce(True, tmp_path, seeds=(0,), workers=1, resume=True)
    assert [(c.name, c.holds) for c in again] == [(c.name, c.holds) for c in rep.claims]
    assert json.loads((tmp_path / "experiments.json").read_text()) == exps
    # ... but refuses one recorded under other settings
    monkeypatch.setitem(R.SETTINGS, True, dict(data="digits", epochs=2, model="small", augment=False))
    with pytest.raises(ValueError, match="settings"):
        R.reproduce(True, tmp_path, seeds=(0,), workers=1, resume=True)


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
    # two identical seeds: n_seeds 2 and a zero seed spread of the compared quantity
    assert all(c.n_seeds == 2 and c.spread == 0.0 for c in good), [(c.name, c.spread) for c in good]
    tpr = next(c for c in good if c.name == "badnets/tpr_agpd_vs_spectral")
    assert (tpr.paper_value, tpr.paper_ref, tpr.kind, tpr.plot) == (90.06, "Table 1", "headline", "detection.png")
    two = R.claims_from_experiments([{"badnets": exp([0], 0.95, 0.01, 0.93)}, {"badnets": exp([0], 0.75, 0.01, 0.8)}],
                                    "t")
    gap = next(c for c in two if c.name == "badnets/tpr_agpd_vs_spectral")  # sd of (ours - Spectral) per seed
    assert gap.spread == pytest.approx(abs(95.0 - 75.0) / 2 ** 0.5)
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


@pytest.mark.slow
def test_reproduce_workers_match_serial(tmp_path, monkeypatch):
    """--workers 2 (the core runner's spawned processes) gives the same records and claims as the serial
    path. Tiny config: digits, 1 epoch, BadNets + clean, 2 seeds (4 experiments per path). Slow (two spawned
    workers importing torch: 60-550 s wall on the shared machine); the runner's own tests check equal records
    for 1 and 2 workers on every package's behalf."""
    tiny = dict(data="digits", epochs=1, model="small", augment=False)
    monkeypatch.setitem(R.SETTINGS, True, tiny)  # the job settings are built in this process
    monkeypatch.setattr(R, "ATTACKS", ("badnets",))
    ser = R.reproduce(True, tmp_path / "serial", seeds=(0, 1), workers=1)
    par = R.reproduce(True, tmp_path / "parallel", seeds=(0, 1), workers=2)
    js = json.loads((tmp_path / "serial" / "experiments.json").read_text())
    jp = json.loads((tmp_path / "parallel" / "experiments.json").read_text())
    assert js["seeds"] == jp["seeds"] == [0, 1]
    assert _without_timings(js["runs"]) == _without_timings(jp["runs"])
    assert js["runs"][0]["badnets"]["n_poison"] > 0  # the records hold real experiments
    strip = lambda cs: [(c.name, c.holds, None if math.isnan(c.ours) else round(c.ours, 9), c.note, c.spread)  # noqa: E731
                        for c in cs]
    assert strip(ser) == strip(par)
    assert sorted(p.name for p in (tmp_path / "parallel" / "records").iterdir()) == sorted(
        p.name for p in (tmp_path / "serial" / "records").iterdir())
    assert all(c.n_seeds == 2 for c in ser)
    with pytest.raises(ValueError, match="workers"):
        R.reproduce(True, tmp_path / "x", workers=0)


def test_plots_without_matplotlib_warn_once(tmp_path, monkeypatch, caplog):
    """Without the [plot] extra the figures are skipped with one warning naming the install command."""
    import iclr25.agpd.plots as P

    monkeypatch.setattr(P, "have_matplotlib", lambda: False)
    with caplog.at_level("WARNING", logger="iclr25.agpd"):
        assert P.write_plots([{}], tmp_path) == []
    msgs = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(msgs) == 1 and "iclr25-agpd[plot]" in msgs[0]
