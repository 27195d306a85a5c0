"""The claims as a pure function of hand-made records: each claim compares what it says, and can fail."""

from __future__ import annotations

import numpy as np
import pytest

from iclr25.seal.claims import claims_from_runs, kept_unsafe_spearman

KEEP = 0.8


def _run(method, keep, kept_unsafe, margin, n_kept=360, mixed=False, **kw):
    base = {"method": method, "keep": keep, "n_kept": n_kept, "kept_unsafe": kept_unsafe, "kept_low_quality": 10,
            "mixed_safe": mixed, "margin": margin, "refusal_rate": 0.0, "safe_loss": 3.0, "em_benign_a": 0.9,
            "em_benign_b": 0.8, "win_rate_vs_standard": 50.0, "judge_scores": [0.5] * 4}
    return {**base, **kw}


def _record(seed, lq_seal=0.97, lq_loss=0.74, ku=(60, 15, 1, 0), margins=(0.1, 0.5, 2.0, 3.0)):
    sel = {m: {"auroc_unsafe": a, "auroc_low_quality": lq} for m, a, lq in
           (("seal_sgd", 0.998, lq_seal), ("seal_adam", 0.9, 0.8), ("loss_filter", 0.9995, lq_loss), ("random", 0.5, 0.5))}
    sel["seal_sgd"].update(spearman_vs_base_loss=0.6, history=[{"sigma": 0.73}])
    runs = [_run("standard", None, 75, -0.3, n_kept=450), _run("oracle", None, 0, 6.0, n_kept=300),
            _run("safeinstr", None, 75, 2.0, n_kept=750, mixed=True)]
    for m, u, g in zip(("random", "seal_adam", "seal_sgd", "loss_filter"), ku, margins):
        runs.append(_run(m, KEEP, u, g + 0.01 * seed))
    runs.append(_run("seal_safeinstr", KEEP, ku[2], 9.0, mixed=True))
    return {"task": "synthetic", "seed": seed, "n_ft": 450, "n_safe": 300, "keeps": [KEEP], "selection": sel, "runs": runs,
            "base": {"safe_loss": 0.1, "margin": 5.0, "refusal_rate": 1.0, "em_benign_b": 0.0}}


def _by_name(claims):
    return {c.name: c for c in claims}


def test_loss_filter_claim_compares_low_quality_auroc_and_can_fail():
    c = _by_name(claims_from_runs([_record(0), _record(1)], plots=False))["selection/seal_gt_loss_filter"]
    assert c.ours == pytest.approx(0.97) and c.baseline == pytest.approx(0.74) and c.holds
    assert c.spread == pytest.approx(0.0) and c.n_seeds == 2
    lose = _by_name(claims_from_runs([_record(0, lq_seal=0.745), _record(1, lq_seal=0.745)], plots=False))
    assert not lose["selection/seal_gt_loss_filter"].holds  # within the 0.01 margin: does not hold


def test_margin_tracks_kept_unsafe_uses_equal_size_subsets_only():
    r = _record(0)
    # standard (75 unsafe, margin −0.3), oracle (0, 6.0) and the SafeInstr mixes are different sizes: excluded
    assert kept_unsafe_spearman(r, KEEP) == pytest.approx(-1.0)
    claims = _by_name(claims_from_runs([_record(0), _record(1)], plots=False))
    c = claims["mechanism/margin_tracks_kept_unsafe"]
    assert c.holds and c.kind == "mechanism" and c.ours == pytest.approx(-1.0)
    # margins that do not follow the kept unsafe count: the claim fails
    flat = [_record(s, margins=(3.0, 0.5, 2.0, 0.1)) for s in (0, 1)]
    c2 = _by_name(claims_from_runs(flat, plots=False))["mechanism/margin_tracks_kept_unsafe"]
    assert not c2.holds and c2.ours > -0.5


def test_every_claim_fills_the_record_fields():
    claims = claims_from_runs([_record(0), _record(1)])
    assert "selection/all_ft_samples_updated" not in {c.name for c in claims}  # an engineering check: a test
    for c in claims:
        assert c.kind in ("headline", "mechanism", "sanity"), c.name
        assert c.paper_ref and c.n_seeds == 2 and c.plot.endswith(".png"), c.name
        assert c.spread is not None and np.isfinite(c.spread), c.name
    wr = _by_name(claims)["winrate/seal_gt_random"]
    assert wr.paper_value == pytest.approx(61.13)
    one = claims_from_runs([_record(0)])
    assert all(c.spread is None and c.n_seeds == 1 for c in one)


def test_quick_runs_without_the_oracle():
    from iclr25.seal.experiment import METHODS
    from iclr25.seal.reproduce import QUICK

    assert set(QUICK["methods"]) == set(METHODS) - {"oracle"}
    rs = [_record(s) for s in (0, 1)]
    for r in rs:
        r["runs"] = [x for x in r["runs"] if x["method"] != "oracle"]
    claims = _by_name(claims_from_runs(rs, plots=False))
    assert "oracle" not in claims["safety/margin_gt_random"].note
    assert "oracle" in _by_name(claims_from_runs([_record(0), _record(1)], plots=False))["safety/margin_gt_random"].note


def test_details_keep_methods_without_a_keep_apart(tmp_path):
    """A run's ``keep`` None ("all of D_ft") survives the record round trip (it was turned into NaN, which
    split standard/SafeInstr into rows of NaN in details.md)."""
    import importlib
    import json

    rep = importlib.import_module("iclr25.seal.reproduce")

    recs = {f"s{s}": json.loads(json.dumps(_record(s))) for s in (0, 1)}
    for r in recs.values():
        r["selection"]["seal_sgd"].update(fraction_updated_every_epoch=1.0, zip_fraction_updated_every_epoch=0.02)
        r["selection"]["seal_adam"].update(fraction_updated_every_epoch=1.0)
        r["selection"]["seal_sgd"]["spearman_vs_base_loss"] = None       # undefined: recorded as None
    rep.claims_from_records(recs, (0.8,), tmp_path, plots=False)
    md = (tmp_path / "details.md").read_text()
    assert "| nan |" not in md  # no method row with a NaN keep
    assert md.count("| standard | all |") == 1 and "| seal_sgd | 0.998 ± 0.000 | 0.970 ± 0.000 | nan ± nan |" in md
