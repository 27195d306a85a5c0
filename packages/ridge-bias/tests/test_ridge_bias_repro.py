"""reproduce(): claim names and schema on tiny settings; the full quick run is marked slow."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from iclr25.core.registry import run_reproduction
from iclr25.core.results import read_report
from iclr25.ridge_bias import reproduce as rmod

CLAIMS = [
    "theory_matches_simulation",
    "mechanism/delta_matches_resolvent_trace",
    "s1/amplification_only_with_strong_lambda",
    "mechanism/s1/bias_share_matches_simulation",
    "s2/amplification_min_at_intermediate_lambda",
    "mechanism/s2/bias_share_matches_simulation",
    "s3/gap_persists_with_parameterization",
    "s3/peak_near_interpolation",
    "s3/peak_near_interpolation_m_sweep",
    "mechanism/s3/rp_gap_matches_simulation_at_large_m",
    "mechanism/s3/peak_is_variance_driven",
    "mechanism/s3/m_sweep_peak_is_variance_driven",
    "digits/theory_tracks_empirical_ordering",
    "mechanism/digits/gap_rank_correlation",
]


TINY = dict(val_lam=np.array([0.01, 1.0]), val_seeds=(3,), val_dims=(40,), s3_draws=1,
            digits_lam=np.array([0.01, 1.0]), digits_splits=2, digits_p2=(0.2,), gf_seeds=2,
            mech_seeds=3, rp_seeds=3)

TIMING_FIELDS = ("theory_seconds", "mc_seconds_per_seed", "mc_seconds_needed", "speedup")
"""Wall-clock fields of the validation records (``perf``): the only record fields that depend on the run."""


def _untimed(records: dict) -> dict:
    """The records without the wall-clock timing fields of ``validation_d<d>``'s ``perf``."""
    out = {}
    for k, r in records.items():
        if k.startswith("validation_d"):
            r = {**r, "perf": {f: v for f, v in r["perf"].items() if f not in TIMING_FIELDS}}
        out[k] = r
    return out


def _key(c, note: bool = False) -> tuple:
    """A claim's name, value (``repr``: NaN equals NaN) and verdict, and its note if asked."""
    return (c.name, repr(c.ours), c.holds) + ((c.note,) if note else ())


@pytest.fixture
def tiny(monkeypatch):
    """Tiny settings for every job and no PNGs (speed); yields the list of the figures it would draw."""
    monkeypatch.setattr(rmod, "_settings", lambda quick: TINY)
    plotted = []
    import iclr25.ridge_bias.plots as pmod

    monkeypatch.setattr(pmod, "plot_curves", lambda path, panels, **kw: plotted.append(Path(path).name))
    return plotted


def test_reproduce_smoke_tiny(tiny, tmp_path):
    report = run_reproduction("ridge-bias", rmod.reproduce, quick=True, out_dir=tmp_path, version="test", workers=1)
    assert [c.name for c in report.claims] == CLAIMS
    back = read_report(tmp_path)
    assert [c.holds for c in back.claims] == [c.holds for c in report.claims]
    for f in ("results.json", "results.md", "details.json", "performance.json"):
        assert (tmp_path / f).is_file()
    assert sorted(p.name for p in (tmp_path / "records").glob("*.json")) == sorted(
        f"{j.name}.json" for j in rmod.jobs(True))
    assert sorted(tiny) == ["digits.png", "gradient_flow.png", "s1_s2_add.png", "s3_rp.png", "theory_vs_mc_d40.png"]
    for c in report.claims:  # the claim record: kind, where in the paper, draws behind it, the figure that shows it
        assert c.paper_ref.endswith("direction only") and c.n_seeds >= 1 and c.plot in tiny
        assert c.kind == ("mechanism" if c.name.startswith("mechanism/") else "headline")
        assert "spec" not in c.paper
    # the theory-only claims do not depend on the tiny settings
    held = {c.name: c.holds for c in report.claims}
    assert held["s1/amplification_only_with_strong_lambda"] and held["s2/amplification_min_at_intermediate_lambda"]
    assert held["s3/peak_near_interpolation"] and held["s3/peak_near_interpolation_m_sweep"]
    assert held["mechanism/s3/peak_is_variance_driven"] and held["mechanism/s3/m_sweep_peak_is_variance_driven"]
    for c in report.claims:  # every mechanism claim is a measured number with a bound
        if c.name.startswith("mechanism/") and c.name != "mechanism/digits/gap_rank_correlation":  # 2 points: NaN
            assert np.isfinite(c.ours) and c.threshold is not None, c.name


def test_claims_are_a_pure_function_of_the_records(tiny, tmp_path):
    """Issue #48: the claims computed again from the records on disk equal the run's (no experiment runs);
    an undefined number is an explicit None with its reason, never a silent NaN in a record."""
    from iclr25.core.runner import load_records
    from iclr25.ridge_bias.claims import claims_from_records

    claims = rmod.reproduce(True, tmp_path, workers=1, quiet=True)
    again = claims_from_records(load_records(tmp_path, rmod.jobs(True)))
    assert [_key(c, note=True) for c in again] == [_key(c, note=True) for c in claims]
    dig = load_records(tmp_path)["digits"]
    assert dig["odd_trend_spearman"] == [None] and "3 lam" in dig["odd_trend_spearman_undefined"]


def test_runner_records_equal_for_one_and_two_workers(tiny, tmp_path):
    """Issue #48: the jobs give the same records in-process and in two spawned workers (compared without the
    wall-clock fields of the validation records' ``perf``: theory/MC seconds and the speed-up)."""
    from iclr25.core.runner import run_jobs

    js = rmod.jobs(True)
    assert len(js) >= 2
    a = run_jobs(js, tmp_path / "a", workers=1, quiet=True)
    b = run_jobs(js, tmp_path / "b", workers=2, quiet=True)
    assert b.workers == 2 and sorted(a.records) == sorted(j.name for j in js)
    assert _untimed(a.records) == _untimed(b.records)


def test_runner_resume_reuses_records_and_refuses_changed_settings(tiny, monkeypatch, tmp_path):
    """A run stopped after some jobs (missing records) resumes with only the missing jobs and the same claims;
    a resume whose settings changed is refused, naming the job and the setting."""
    first = rmod.reproduce(True, tmp_path, workers=1, quiet=True)
    for job in ("s3", "digits"):  # as if killed before these jobs finished
        (tmp_path / "records" / f"{job}.json").unlink()
    ran = []
    from iclr25.core import runner

    real = runner.run_jobs

    def spy(*a, **kw):
        res = real(*a, **kw)
        ran.append((sorted(res.ran), sorted(res.reused)))
        return res

    monkeypatch.setattr(runner, "run_jobs", spy)
    again = rmod.reproduce(True, tmp_path, workers=1, resume=True, quiet=True)
    assert ran[0][0] == ["digits", "s3"] and "validation_d40" in ran[0][1] and len(ran[0][1]) == 6
    assert [_key(c) for c in again] == [_key(c) for c in first]
    monkeypatch.setattr(rmod, "_settings", lambda quick: {**TINY, "digits_splits": 3})
    with pytest.raises(ValueError, match=r"digits.*splits|splits.*digits"):
        rmod.reproduce(True, tmp_path, workers=1, resume=True, quiet=True)


@pytest.mark.slow
def test_reproduce_quick_all_claims_hold(tmp_path):
    p = subprocess.run([sys.executable, "-m", "iclr25.ridge_bias", "reproduce", "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    report = read_report(Path(tmp_path))
    assert [c.name for c in report.claims] == CLAIMS
    assert all(c.holds for c in report.claims), [(c.name, c.ours) for c in report.claims if not c.holds]
