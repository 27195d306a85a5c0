"""Claim (iii)-(iv) on scenario S3: the random-projection (parameterisation) experiment.

The ODD of random-projection ridge as the number of random features ``m`` grows (it tends to the
classical-ridge gap instead of vanishing), the sample-size and ``m`` sweeps whose ODD peaks at the
interpolation thresholds, the Monte-Carlo check of the RP theory at the largest ``m``, and the share of
the peak carried by the variance term. :func:`s3_experiment` returns its claims and details and writes
``s3_rp.png``; :mod:`.reproduce` runs it with the rest.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr25.core.results import Claim

from .plots import plot_curves
from .random_projections import projected_mixture, projection_matrix, rp_risk_theory
from .scenarios import scenario
from .simulate import simulate_rp
from .theory import MixtureSpec, ridge_risk_theory

__all__ = ["s3_experiment", "S3_M_FACTORS", "MECH_TOL"]

S3_M_FACTORS = (0.25, 0.5, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0)
"""``m / d`` of the spec's S3 table (m = 25 ... 1600 at d = 100)."""

MECH_TOL = dict(delta=0.01, bias_share=0.03, rp_gap=0.1, variance_share=0.5, gap_rank=0.5)
"""Bounds of the mechanism claims, fixed before measuring: the fixed point is a trace (finite-size
error ``O(1/n)``, ~0.3% at ``n = 400``, bound 1%); the bias share is a fraction, bounded like claim
(i) (3 points); the RP Monte-Carlo ODD at ``d = 100`` has ~3% standard error (bound 10% ~ 3 s.e.);
the variance share and the rank correlation must be at least a majority / moderate (0.5)."""


def _variance_share(res, rho: np.ndarray | None = None) -> float:
    """Share of the ODD ``|R_2 - R_1|`` carried by the variance term: ``|dV| / (|dB| + |dV|)``."""
    dB = abs(float(np.diff(res.bias + (0.0 if rho is None else rho))[0]))
    dV = abs(float(np.diff(res.var)[0]))
    return dV / (dB + dV) if dB + dV > 0 else float("nan")


def s3_experiment(out: Path, draws: int, rp_seeds: int = 40) -> tuple[list[Claim], dict]:
    mix = scenario("s3")
    d, n, lam = mix.d, int(mix.n), 1e-3
    ms = [int(round(f * d)) for f in S3_M_FACTORS]
    ridge = ridge_risk_theory(mix, lam).risk
    odd_ridge = float(abs(ridge[1] - ridge[0]))
    odd = np.empty((draws, len(ms)))
    for j, m in enumerate(ms):
        for s in range(draws):
            r = rp_risk_theory(mix, lam, m=m, seed=s).risk
            odd[s, j] = abs(r[1] - r[0])
    ratio = float(odd[:, -1].mean() / odd_ridge)
    # sample-size sweep: the ODD peaks where the number of samples reaches the feature rank min(m, d)
    ns = np.unique(np.round(np.geomspace(d / 5, 8 * d, 97)))
    peaks, curves, vshare, vshare_far = {}, [], {}, {}
    for m in (d // 2, 2 * d):
        mz, rho = projected_mixture(mix, projection_matrix(m, d, 0))
        rs = [ridge_risk_theory(MixtureSpec(mz.groups, mz.proportions, nn), lam) for nn in ns]
        o = np.array([abs(np.diff(r.risk + rho)[0]) for r in rs])
        peaks[m] = float(ns[np.argmax(o)])
        vshare[m] = _variance_share(rs[int(np.argmax(o))], rho)
        vshare_far[m] = _variance_share(rs[-1], rho)
        curves.append({"y": o, "label": f"RP m={m}"})
    dev = max(abs(peaks[m] / min(m, d) - 1.0) for m in peaks)
    # m-sweep (the paper's form of claim iv): n = d/2 < d, so the features interpolate at m = n
    n_m = d // 2
    mix_m = MixtureSpec(mix.groups, mix.proportions, float(n_m))
    m_sweep = np.unique(np.round(np.geomspace(d / 5, 4 * d, 41))).astype(int)
    res_m = [[rp_risk_theory(mix_m, lam, m=int(m), seed=s) for m in m_sweep] for s in range(draws)]
    odd_m = np.array([[abs(np.diff(r.risk)[0]) for r in row] for row in res_m])
    j_peak = int(np.argmax(odd_m.mean(0)))
    m_peak = float(m_sweep[j_peak])
    vshare_m = [_variance_share(row[j_peak]) for row in res_m]  # rp bias already includes rho
    vshare_m_far = [_variance_share(row[-1]) for row in res_m]
    # Monte-Carlo of RP ridge at the largest m: the theory the gap claim extrapolates with
    rp_mc = simulate_rp(mix, np.array([lam]), ms[-1], rp_seeds, seed=1000 + d, proj_seed=0, separate=False)
    rp_th = float(odd[0, -1])
    rp_rel = abs(float(rp_mc["ODD_mean"][0]) / rp_th - 1.0)
    m_peaks = [int(m_sweep[np.argmax(o)]) for o in odd_m]
    dev_m = abs(m_peak / n_m - 1.0)
    fmt = lambda a: ", ".join(f"{v:.4g}" for v in a)  # noqa: E731
    claims = [
        Claim(
            name="s3/gap_persists_with_parameterization",
            metric=f"ODD(m={ms[-1]}) / ODD(classical ridge), RP theory, S3 (d={d}, n={n}, lam=1e-3), mean of {draws} S draws",
            ours=ratio,
            threshold=0.9,
            higher_is_better=True,
            paper="minority-group disparities do not vanish with more parameters [paper claim (iii); from the paper's "
            "equations: ODD(m) -> 0.0703]",
            note=f"ODD(m) for m = {ms}: {fmt(odd.mean(0))} (mean of {draws} S draws); classical ridge "
            f"ODD = {odd_ridge:.4f}. The values at m < d depend on the S draw (the single draw seed 0: 0.929, 0.827, "
            f"0.184 at m = 25, 50, 100).",
        ),
        Claim(
            name="s3/peak_near_interpolation",
            metric="max over m in {d/2, 2d} of abs(n_peak / min(m, d) - 1), ODD vs sample size n, RP theory (S3, lam=1e-3)",
            ours=float(dev),
            threshold=0.2,
            higher_is_better=False,
            paper="phase-transition-like behaviour near interpolation thresholds (m ~ n, d ~ n, m ~ d) [paper claim (iv)]",
            note=f"ODD(n) peaks at n = {peaks[d // 2]:.0f} for m = {d // 2} (threshold m = n) and at n = "
            f"{peaks[2 * d]:.0f} for m = {2 * d} (threshold d = n); in the m-sweep at n = {n} the ODD drops "
            f"steeply until m ~ d and is flat beyond (kink at m = d, see s3_rp.png). The m-sweep form of "
            f"the claim is s3/peak_near_interpolation_m_sweep.",
        ),
        Claim(
            name="s3/peak_near_interpolation_m_sweep",
            metric=f"abs(m_peak / n - 1), ODD vs number of random features m at n = {n_m} = d/2, RP theory "
            f"(S3, lam=1e-3, mean of {draws} S draws)",
            ours=float(dev_m),
            threshold=0.2,
            higher_is_better=False,
            paper="phase-transition-like behaviour near interpolation thresholds (m ~ n) [paper claim (iv)]",
            note=f"over m in [{m_sweep[0]}, {m_sweep[-1]}] (41 values) the mean ODD peaks at m = {m_peak:.0f} "
            f"(per S draw: {m_peaks}); peak ODD {odd_m.mean(0).max():.3f} vs {odd_m.mean(0)[-1]:.3f} at "
            f"m = {m_sweep[-1]}. At the scenario's own n = {n} > d the features never interpolate (rank "
            f"min(m, d) <= d < n), which is why the sample-size sweep above exists.",
        ),
        Claim(
            name="mechanism/s3/rp_gap_matches_simulation_at_large_m",
            metric=f"abs(ODD_MC / ODD_theory - 1), RP ridge at m={ms[-1]} (S draw 0; d={d}, n={n}, lam=1e-3, "
            f"{rp_seeds} Monte-Carlo draws)",
            ours=rp_rel,
            threshold=MECH_TOL["rp_gap"],
            higher_is_better=False,
            paper="as m grows the random-projection model tends to classical ridge, whose gap is non-zero "
            "[claim (iii) rests on the RP theory at large m]",
            note=f"MC ODD {float(rp_mc['ODD_mean'][0]):.4f} ± {float(rp_mc['ODD_sem'][0]):.4f} (s.e.) vs RP theory "
            f"{rp_th:.4f} and classical-ridge theory {odd_ridge:.4f}; z = "
            f"{abs(float(rp_mc['ODD_mean'][0]) - rp_th) / float(rp_mc['ODD_sem'][0]):.2f}.",
        ),
        Claim(
            name="mechanism/s3/peak_is_variance_driven",
            metric="min over m in {d/2, 2d} of |V_2 - V_1| / (|B_2 - B_1| + |V_2 - V_1|) at the ODD peak of the "
            "sample-size sweep (RP theory, S3, lam=1e-3)",
            ours=float(min(vshare.values())),
            threshold=MECH_TOL["variance_share"],
            higher_is_better=True,
            paper="the interpolation peak is the variance blow-up of the (near-)interpolating fit [claim (iv)]",
            note="variance share at the peak: " + ", ".join(f"m={m}: {v:.3f}" for m, v in vshare.items())
            + f"; at n = {ns[-1]:.0f} (far from it): " + ", ".join(f"m={m}: {v:.3f}" for m, v in vshare_far.items())
            + ". The approximation error rho_k of m < d acts as label noise, so it enters the variance term.",
        ),
        Claim(
            name="mechanism/s3/m_sweep_peak_is_variance_driven",
            metric=f"mean over S draws of |V_2 - V_1| / (|B_2 - B_1| + |V_2 - V_1|) at the ODD peak of the m-sweep "
            f"(n = {n_m}, RP theory, S3, lam=1e-3, {draws} S draws)",
            ours=float(np.mean(vshare_m)),
            threshold=MECH_TOL["variance_share"],
            higher_is_better=True,
            paper="the interpolation peak is the variance blow-up of the (near-)interpolating fit [claim (iv)]",
            note=f"at m = {m_peak:.0f}, per draw: {', '.join(f'{v:.3f}' for v in vshare_m)}; at m = {m_sweep[-1]}: "
            f"{', '.join(f'{v:.3f}' for v in vshare_m_far)}.",
        ),
    ]
    plot_curves(out / "s3_rp.png", [
        dict(x=np.asarray(ms), xlabel="m (random features)", ylabel="ODD", title=f"S3: ODD vs m (d={d}, n={n})",
             hline=odd_ridge, curves=[{"y": odd.mean(0), "label": "RP theory (mean over S)"}],
             points=[{"x": np.asarray(ms), "y": odd.mean(0), "err": odd.std(0), "label": "±1 sd over S"}]),
        dict(x=ns, xlabel="n (samples)", ylabel="ODD", title="S3: ODD vs n (peaks at n = min(m, d))",
             curves=curves, logy=True),
        dict(x=m_sweep, xlabel="m (random features)", ylabel="ODD", title=f"S3: ODD vs m at n = {n_m} (peak at m = n)",
             curves=[{"y": odd_m.mean(0), "label": "RP theory (mean over S)"}], logx=True),
    ])
    details = {"m": ms, "odd_mean": odd.mean(0), "odd_sd": odd.std(0), "odd_ridge": odd_ridge, "n_peaks": peaks,
               "m_sweep": {"n": n_m, "m": m_sweep, "odd_mean": odd_m.mean(0), "m_peak": m_peak, "per_draw": m_peaks,
                           "variance_share_at_peak": vshare_m},
               "variance_share_at_n_peak": vshare, "rp_mc_large_m": {"m": ms[-1], "odd_mc": rp_mc["ODD_mean"],
                                                                     "odd_sem": rp_mc["ODD_sem"], "odd_theory": rp_th}}
    return claims, details


# ----------------------------------------------------------------------------------------------
# baseline: gradient flow at t = 1/lam
