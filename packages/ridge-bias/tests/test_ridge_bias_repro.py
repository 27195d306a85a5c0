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


def test_reproduce_smoke_tiny(monkeypatch, tmp_path):
    tiny = dict(val_lam=np.array([0.01, 1.0]), val_seeds=(3,), val_dims=(40,), s3_draws=1,
                digits_lam=np.array([0.01, 1.0]), digits_splits=2, digits_p2=(0.2,), gf_seeds=2,
                mech_seeds=3, rp_seeds=3)
    monkeypatch.setattr(rmod, "_settings", lambda quick: tiny)
    plotted = []
    monkeypatch.setattr(rmod, "plot_curves", lambda path, panels, **kw: (plotted.append(Path(path).name),
                                                                         Path(path).write_bytes(b"")))  # speed
    report = run_reproduction("ridge-bias", rmod.reproduce, quick=True, out_dir=tmp_path, version="test")
    assert [c.name for c in report.claims] == CLAIMS
    back = read_report(tmp_path)
    assert [c.holds for c in back.claims] == [c.holds for c in report.claims]
    for f in ("results.json", "results.md", "details.json", "performance.json"):
        assert (tmp_path / f).is_file()
    assert sorted(plotted) == ["digits.png", "gradient_flow.png", "s1_s2_add.png", "s3_rp.png", "theory_vs_mc_d40.png"]
    # each plotted claim names its PNG, so the report page shows the plot right under it
    plots = {c.name: c.plot for c in back.claims}
    assert plots["theory_matches_simulation"] == "theory_vs_mc_d40.png"
    assert plots["s1/amplification_only_with_strong_lambda"] == plots["s2/amplification_min_at_intermediate_lambda"] \
        == "s1_s2_add.png"
    assert {plots[n] for n in CLAIMS if "s3/" in n} == {"s3_rp.png"}
    assert {plots[n] for n in CLAIMS if "digits/" in n} == {"digits.png"}
    assert plots["mechanism/s1/bias_share_matches_simulation"] == plots["mechanism/delta_matches_resolvent_trace"] == ""
    # the theory-only claims do not depend on the tiny settings
    held = {c.name: c.holds for c in report.claims}
    assert held["s1/amplification_only_with_strong_lambda"] and held["s2/amplification_min_at_intermediate_lambda"]
    assert held["s3/peak_near_interpolation"] and held["s3/peak_near_interpolation_m_sweep"]
    assert held["mechanism/s3/peak_is_variance_driven"] and held["mechanism/s3/m_sweep_peak_is_variance_driven"]
    for c in report.claims:  # every mechanism claim is a measured number with a bound
        if c.name.startswith("mechanism/") and c.name != "mechanism/digits/gap_rank_correlation":  # 2 points: NaN
            assert np.isfinite(c.ours) and c.threshold is not None, c.name


@pytest.mark.slow
def test_reproduce_quick_all_claims_hold(tmp_path):
    p = subprocess.run([sys.executable, "-m", "iclr25.ridge_bias", "reproduce", "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    report = read_report(Path(tmp_path))
    assert [c.name for c in report.claims] == CLAIMS
    assert all(c.holds for c in report.claims), [(c.name, c.ours) for c in report.claims if not c.holds]
