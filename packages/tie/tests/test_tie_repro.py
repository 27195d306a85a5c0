"""Reproduction: the synthetic part and the claim construction (fast), the quick run (slow)."""

import json

import numpy as np
import pytest

from iclr25.core.results import Claim
from iclr25.tie.reproduce import CLAIM_NAMES, QUICK, _claims, _offline_metrics, _tables, synthetic_results


def _fake_offline(seed: int) -> dict:
    """An offline-pair result built from the synthetic model (shape of run_offline_seed's output)."""
    from iclr25.tie import make_synthetic

    d = make_synthetic(seed, d=16, test_sizes=(100, 100, 100, 100))
    rng = np.random.default_rng(seed)
    n = 1000
    y10 = rng.integers(0, 10, n)
    T = rng.standard_normal((10, 16))
    x = T[y10] + rng.standard_normal((n, 16))
    g = x + 2 * d.text_emb_spurious[0]
    b = x + 2 * d.text_emb_spurious[1]
    ctrl = {c: x + rng.standard_normal(16) for c in ("red", "yellow", "purple", "orange", "white", "black")}
    return {"seed": seed, "rho": 0.95, "pool_emb": np.concatenate([g[:500], b[500:]]),
            "pool_a": np.repeat([0, 1], 500), "test_emb": np.concatenate([g, b]), "test_y": np.concatenate([y10, y10]),
            "test_a": np.repeat([0, 1], n), "text_emb_class": T, "text_emb_spurious": d.text_emb_spurious,
            "colour_text": {"green": d.text_emb_spurious[0], "blue": d.text_emb_spurious[1],
                            **{c: rng.standard_normal(16) for c in ctrl}},
            "control_img": ctrl, "n_params": {"image": 327392, "text_head": 24640}, "train_seconds": 1.0,
            "embed_test_seconds": 1.0, "epochs_done": 6, "temperature": 0.07}


def test_claims_from_synthetic_and_fake_offline_results():
    syn = synthetic_results((0, 1), ("default", "kappa=0.3"), sweep_scale=1)
    off = [_offline_metrics(_fake_offline(s), n_random=2000) for s in (0, 1)]
    claims = _claims(off, syn, dict(QUICK, sweep_scale=1))
    assert [c.name for c in claims] == list(CLAIM_NAMES)
    assert all(isinstance(c, Claim) and np.isfinite(c.ours) for c in claims)
    by = {c.name: c for c in claims}
    assert by["synthetic/tie_wga_gt_zero_shot"].holds                  # spec: +57 points
    assert "mechanism/translation_keeps_covariance" not in by          # holds by algebra: test_tie_kat.py
    share = by["synthetic/tie_star_tracks_attribute_inference"]
    assert 0 < share.baseline <= 1.05 and share.spread is not None and share.n_seeds == 2
    for c in claims:
        assert c.kind in ("headline", "mechanism") and c.paper_ref and c.plot.endswith(".png")
        assert c.n_seeds == 2 and c.spread is not None
    assert by["mechanism/text_direction_matches_image_shift"].ours > 0.99  # shift is exactly 2(s1 - s0)
    assert "sd" in by["offline_pair/tie_wga_gt_zero_shot"].note
    json.dumps(off)                                                      # JSON-ready
    md = _tables(off, syn, QUICK, True)
    assert "superclass × colour" in md and "â-accuracy sweep" in md


@pytest.mark.slow
def test_quick_reproduction(tmp_path):
    from iclr25.tie.reproduce import reproduce

    claims = reproduce(True, tmp_path, quiet=True)
    assert [c.name for c in claims] == list(CLAIM_NAMES)
    meta = json.loads((tmp_path / "metrics.json").read_text())
    assert len(meta["offline_pair"]) == 2 and meta["preset"]["epochs"] == 6


def test_claims_from_runner_records_and_report_only_resume(tmp_path):
    """The synthetic model runs as a runner job (record under records/), the claims come from the records
    alone (a resume over them computes nothing), and the jobs are declared per encoder."""
    from pathlib import Path

    from iclr25.core.runner import Job, run_jobs
    from iclr25.tie.reproduce import claims_from_records, jobs, synthetic_job

    p = dict(QUICK, sweep_scale=1)
    declared = jobs(p, tmp_path, Path("data.npz"), "cpu")
    assert [j.name for j in declared] == ["offline_rho0.95_seed0", "offline_rho0.95_seed1", "synthetic"]
    assert declared[0].settings["ck_dir"] == str(tmp_path / "encoders" / "rho0.95_seed0")
    syn_job = [Job("synthetic", synthetic_job, settings=declared[-1].settings)]
    r = run_jobs(syn_job, tmp_path, workers=1, quiet=True)
    assert (tmp_path / "records" / "synthetic.json").is_file()
    records = dict(r.records)
    for s in (0, 1):
        records[f"offline_rho0.95_seed{s}"] = json.loads(json.dumps(_offline_metrics(_fake_offline(s), n_random=2000)))
    claims = claims_from_records(records, p, tmp_path, True, "cpu", "data.npz", 2, 1, r.summary())
    assert [c.name for c in claims] == list(CLAIM_NAMES)
    direct = _claims([records[f"offline_rho0.95_seed{s}"] for s in (0, 1)],
                     synthetic_results((0, 1), ("default", "kappa=0.3"), sweep_scale=1), p)
    assert [(c.ours, c.baseline) for c in claims] == [(c.ours, c.baseline) for c in direct]
    meta = json.loads((tmp_path / "metrics.json").read_text())
    assert meta["runner"]["ran"] == ["synthetic"] and meta["seconds"]["synthetic"] > 0
    again = run_jobs(syn_job, tmp_path, workers=1, resume=True, quiet=True)
    assert again.ran == [] and again.records == r.records


def test_tie_star_share_known_values():
    from iclr25.tie.reproduce import tie_star_share

    run = {"zero_shot": {"worst_group": 0.3}, "tie": {"worst_group": 0.9}, "tie_star": {"worst_group": 0.75}}
    assert tie_star_share(run) == pytest.approx(0.75)          # (0.75 - 0.3) / (0.9 - 0.3)
    assert np.isnan(tie_star_share({**run, "tie": {"worst_group": 0.3}}))


def test_reproduce_jobs_hold_absolute_paths_so_a_relative_out_resumes(tmp_path, monkeypatch):
    """The runner compares job settings on --resume; with a relative --out / --data the encoders' ck_dir and
    data_path were relative, so `--out results/tie --resume` after a run with the absolute path (or from another
    folder) was refused as changed settings. They are resolved now."""
    import iclr25.core.runner as runner
    import iclr25.tie.reproduce as rep

    seen = {}

    class _Stop(Exception):
        pass

    def fake_run_jobs(jobs, out, **kw):
        seen["jobs"], seen["out"] = jobs, out
        raise _Stop

    monkeypatch.setattr(runner, "run_jobs", fake_run_jobs)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    with pytest.raises(_Stop):
        rep.reproduce(True, "res", data="data", device="cpu", quiet=True)
    enc = [j for j in seen["jobs"] if j.name.startswith("offline_")]
    assert enc and all(j.settings["ck_dir"].startswith(str(tmp_path / "res")) for j in enc)
    assert all(j.settings["data_path"] == str(tmp_path / "data") for j in enc)
