"""The reproduction: a miniature run on the mirror (fast) and the real quick run (slow)."""

import json

import pytest

from iclr25.frs import reproduce as rep


@pytest.mark.realdata
def test_reproduce_miniature(tmp_path, monkeypatch, mirror, capfd, caplog):
    mirror("sst2/train_sub.tsv")
    small = dict(rep.QUICK, n_attack=300, attack_epochs=1, n_finetune=200, n_clean=20, n_triggered=12, k=2,
                 iterations=4, n_empirical=4, empirical_samples=3, d_model=16, d_ff=32)
    monkeypatch.setattr(rep, "QUICK", small)
    with caplog.at_level("WARNING", logger="iclr25.frs"):
        claims = rep.reproduce(True, tmp_path, seeds=[0, 1])
    # the few-votes warning was printed once per arm and seed (8 times, with source lines) by the workers: now
    # one log line per distinct warning, naming the arms
    assert "FewVotesWarning" not in capfd.readouterr().err
    few = [r.getMessage() for r in caplog.records if "N = 4 votes" in r.getMessage()]
    assert len(few) == 1 and "arm(s) uniform, frs;" in few[0], few
    assert [c.name for c in claims] == list(rep.CLAIM_NAMES)
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert len(m["per_seed"]) == 2 and set(m["aggregate"]) == set(rep.ARM_ORDER)
    assert (tmp_path / "texts" / "seed1_frs.jsonl").is_file() and (tmp_path / "arms.md").is_file()
    assert m["warnings"]  # N = 4 votes -> the few-votes warning is recorded
    for c in claims:
        assert c.note
    # per-class numbers (issue #40): in the results, the table and the notes, computed from the per-class values
    frs0 = m["per_seed"][0]["frs"]
    assert {"CA_c0", "CA_c1", "certified_accuracy_clean_c0", "wrong_certified_clean_c0", "empirical_radius_c0"} <= set(frs0)
    recs = [json.loads(r) for r in (tmp_path / "texts" / "seed0_frs.jsonl").read_text().splitlines()]
    neg = [r for r in recs if r["set"] == "clean" and r["true_label"] == 0]
    wrong = sum(not r["abstain"] and r["radius"] > 0 and r["label"] != 0 for r in neg)
    assert frs0["wrong_certified_clean_c0"] == pytest.approx(100 * wrong / len(neg))
    assert "| frs | 1 |" in (tmp_path / "arms.md").read_text()
    note = {c.name: c.note for c in claims}
    ca = m["aggregate"]["frs"]["CA_c0"]["mean"]
    assert f"frs class 0 {ca:.1f}" in note["clean_acc/frs_cost"] and "the <= 5 p.p. bound holds" in note["clean_acc/frs_cost"]
    assert "Triggered texts are all of class 0" in note["asr/frs_lt_uniform"]
    assert "On clean texts, like for like" in note["radius/frs_unconditional_ge_uniform"]
    assert "Not like for like" in note["radius/frs_certified_gt_uniform"]
    # the core record's fields (issue #45 §1) and the figures beside the claims (issue #47 §2)
    for c in claims:
        assert c.kind in ("headline", "mechanism", "sanity") and c.paper_ref, c.name
        assert "prototype" not in c.paper and "spec" not in c.paper_ref, c.name
        assert c.paper_value is None and "direction only" in c.paper_ref, c.name  # the paper gives no cell values
        assert c.plot in ("arms.png", "radius.png"), c.name
    by = {c.name: c for c in claims}
    assert by["backdoor/survives_clean_finetune"].n_seeds == 1 and by["backdoor/survives_clean_finetune"].spread is None
    asr = m["aggregate"]
    gaps = [f - u for f, u in zip(asr["frs"]["ASR"]["values"], asr["uniform"]["ASR"]["values"])]
    assert by["asr/frs_lt_uniform"].n_seeds == 2
    assert by["asr/frs_lt_uniform"].spread == pytest.approx(abs(gaps[0] - gaps[1]) / 2 ** 0.5)
    for png in ("arms.png", "radius.png"):
        assert (tmp_path / png).stat().st_size > 1000
    # the claims are a function of metrics.json: rebuilt without models they are the same
    from iclr25.frs.claims import claims_from_metrics

    again = claims_from_metrics(m)
    assert [(c.name, c.holds, c.note, c.spread) for c in again] == [(c.name, c.holds, c.note, c.spread) for c in claims]
    # a certifier warning is named with its arm and attached only to the claims comparing that arm (the full run's
    # "N = 2 votes ... EVERY text abstains" came from ftr-only and was shown under the FRS-vs-uniform radius claim)
    for r in m["per_seed"]:
        for arm in rep.ARM_ORDER:
            r[arm]["warnings"] = ["W-ftr"] if arm == "ftr-only" else []
    note = {c.name: c.note for c in claims_from_metrics(m)}
    assert "ftr-only arm: W-ftr" in note["ablation/frs_lt_no_bmps"]
    assert all("W-ftr" not in n for k, n in note.items() if k != "ablation/frs_lt_no_bmps")
    m["per_seed"][1]["uniform"]["warnings"] = ["W-uni"]
    note = {c.name: c.note for c in claims_from_metrics(m)}
    assert "uniform arm: W-uni" in note["radius/frs_certified_gt_uniform"] and "W-ftr" not in note["radius/frs_certified_gt_uniform"]


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick(tmp_path, mirror):
    mirror("sst2/test.tsv")
    from iclr25.core.registry import run_reproduction

    r = run_reproduction("frs", rep.reproduce, quick=True, out_dir=tmp_path)
    assert len(r.claims) == len(rep.CLAIM_NAMES)


#: the smallest settings that still exercise every stage (setup + 2 seed jobs)
TINY = dict(rep.QUICK, n_attack=120, attack_epochs=1, n_finetune=80, n_clean=8, n_triggered=6, k=2,
            iterations=2, n_empirical=2, empirical_samples=2, d_model=8, n_heads=2, d_ff=16)
_TIMES = ("seconds", "empirical_seconds", "train_seconds")


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in _TIMES}
    return [_strip(v) for v in x] if isinstance(x, list) else x


def _same(a, b):  # NaN-aware (NaN != NaN): compare the JSON texts
    return json.dumps(_strip(a), sort_keys=True) == json.dumps(_strip(b), sort_keys=True)


def _records(out):
    return {f.stem: json.loads(f.read_text())["record"] for f in sorted((out / "records").glob("*.json"))}


@pytest.mark.realdata
def test_reproduce_resume_after_a_kill_reuses_records_and_refuses_changed_settings(tmp_path, monkeypatch, mirror):
    """A run killed inside seed 1 resumes to the numbers of an uninterrupted run, reusing the setup's
    models and seed 0's record; a resume with other settings is refused naming the setting."""
    mirror("sst2/train_sub.tsv")
    monkeypatch.setattr(rep, "QUICK", TINY)
    full, part = tmp_path / "full", tmp_path / "part"
    rep.reproduce(True, full, seeds=[0, 1], workers=1)
    ref = json.loads((full / "metrics.json").read_text())

    # kill the second run inside seed 1's first arm (jobs run in this process with workers=1)
    import iclr25.frs.evaluate as ev

    calls = {"n": 0}
    real = ev.evaluate_arm

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == len(rep.ARM_ORDER) + 1:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(ev, "evaluate_arm", dying)
    with pytest.raises(KeyboardInterrupt):
        rep.reproduce(True, part, seeds=[0, 1], workers=1)
    assert sorted(f.stem for f in (part / "records").glob("*.json")) == ["seed0", "setup"]
    calls["n"] = -100  # no more interruptions; count the arms evaluated now
    mtime = (part / "models" / "bmps" / "model.safetensors").stat().st_mtime_ns
    rep.reproduce(True, part, seeds=[0, 1], workers=1, resume=True)
    assert calls["n"] == -100 + len(rep.ARM_ORDER)  # only seed 1 ran
    assert (part / "models" / "bmps" / "model.safetensors").stat().st_mtime_ns == mtime  # not retrained
    got = json.loads((part / "metrics.json").read_text())
    assert got["resumed"] and not ref["resumed"]
    assert sorted(got["runner"]["reused"]) == ["seed0", "setup"] and got["runner"]["ran"] == ["seed1"]
    assert _same(got["per_seed"], ref["per_seed"]) and _same(got["aggregate"], ref["aggregate"])
    assert got["single_models"] == ref["single_models"] and got["occlusion_rate"] == ref["occlusion_rate"]
    # settings must match on resume: the changed one is named
    monkeypatch.setattr(rep, "QUICK", dict(TINY, k=3))
    with pytest.raises(ValueError, match=r"other settings.*\bk: 2 -> 3"):
        rep.reproduce(True, part, seeds=[0, 1], workers=1, resume=True)


@pytest.mark.realdata
def test_reproduce_same_records_with_one_and_two_workers(tmp_path, monkeypatch, mirror):
    """Issue #48: the records (and so the claims) do not depend on the number of worker processes."""
    mirror("sst2/train_sub.tsv")
    monkeypatch.setattr(rep, "QUICK", TINY)
    one = rep.reproduce(True, tmp_path / "w1", seeds=[0, 1], workers=1)
    two = rep.reproduce(True, tmp_path / "w2", seeds=[0, 1], workers=2)
    m2 = json.loads((tmp_path / "w2" / "metrics.json").read_text())
    assert m2["runner"]["workers"] == 2 and len(m2["runner"]["ran"]) == 3
    r1, r2 = _records(tmp_path / "w1"), _records(tmp_path / "w2")
    assert sorted(r1) == ["seed0", "seed1", "setup"] and _same(r1, r2)
    assert [(c.name, c.ours, c.holds, c.note) for c in one] == [(c.name, c.ours, c.holds, c.note) for c in two]


def test_rebuild_claims_on_the_finished_full_run(tmp_path, capsys, mirror):
    """benchmarks/rebuild_claims.py still reads a finished full run's metrics.json (5/8 claims hold there): the
    README's full run (its metrics.json and results.json ship in tests/data/full-run; ``FRS_FULL_RUN`` points at
    another run folder), rebuilt to the committed snapshot docs/results-full.json."""
    import importlib.util
    import os
    from pathlib import Path

    mirror("sst2/test.tsv")  # the claims name the data set's classes: skip without the mirror
    here = Path(__file__).resolve().parent
    run = Path(os.environ.get("FRS_FULL_RUN", here / "data" / "full-run"))
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "rebuild_claims.py"
    spec = importlib.util.spec_from_file_location("frs_rebuild_claims", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([str(run), str(tmp_path)]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    held = sum(c["holds"] for c in res["claims"])
    assert (held, len(res["claims"])) == (5, 8), capsys.readouterr().out
    if "FRS_FULL_RUN" not in os.environ:  # the shipped run rebuilds to the README's snapshot, claim by claim
        snap = json.loads((here.parent / "docs" / "results-full.json").read_text())["claims"]
        assert [(c["name"], c["ours"], c["holds"]) for c in res["claims"]] == \
            [(c["name"], c["ours"], c["holds"]) for c in snap]
