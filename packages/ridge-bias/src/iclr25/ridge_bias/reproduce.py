"""Reproduction of the paper's qualitative claims (i)-(v) on the spec's scenarios.

``reproduce(quick, out_dir)`` returns the claims

* ``theory_matches_simulation`` -- (i) mean relative error of theory vs Monte-Carlo group risks
  (joint ridge on S1, S2, A, B, C and random-projection ridge on S1 with ``m = d/2, 3d/2``) at
  ``d = 200`` <= 3% (full run: also ``d = 800`` <= 1.5%);
* ``s1/amplification_only_with_strong_lambda`` -- ADD > 1 only at strong regularisation (S1);
* ``s2/amplification_min_at_intermediate_lambda`` -- (ii) ADD amplified at both ends of the
  ``lam`` grid, smallest at an intermediate ``lam`` (S2);
* ``s3/gap_persists_with_parameterization`` -- (iii) the random-projection ODD at ``m = 16 d``
  stays at the classical-ridge value instead of vanishing (S3);
* ``s3/peak_near_interpolation`` -- (iv) the ODD peaks at the interpolation threshold
  ``n = min(m, d)`` (S3, sample-size sweep at ``m = d/2`` and ``m = 2d``);
* ``s3/peak_near_interpolation_m_sweep`` -- (iv) as the paper states it: sweeping the number of
  random features ``m`` at ``n = d/2``, the ODD peaks at ``m = n``;
* ``digits/theory_tracks_empirical_ordering`` -- (v) on colored digits the theory orders the two
  groups' test errors as the fitted ridge does;

and beside each headline a ``mechanism/`` claim on the intermediate quantity it rests on, measured
by Monte-Carlo (or read off the theory's own decomposition) against the closed form:

* ``mechanism/delta_matches_resolvent_trace`` -- the fixed point ``delta_k = tr(Sigma_k Q)/n``
  (effective regularisation) vs the sampled ``tr(Sigma_k (Sigma_hat + lam I)^{-1})/n``;
* ``mechanism/s1/bias_share_matches_simulation``, ``mechanism/s2/bias_share_matches_simulation``
  -- the bias share ``B_s / (B_s + V_s)`` of each group's joint risk, theory vs Monte-Carlo bias
  and variance terms (the split the ADD's lambda-trend rests on);
* ``mechanism/s3/rp_gap_matches_simulation_at_large_m`` -- the RP theory's ODD at ``m = 16 d``
  vs Monte-Carlo of RP ridge;
* ``mechanism/s3/peak_is_variance_driven``, ``mechanism/s3/m_sweep_peak_is_variance_driven`` --
  the share of the ODD carried by the variance term at the interpolation peaks;
* ``mechanism/digits/gap_rank_correlation`` -- rank correlation of the theory's and the fitted
  ridge's gap ``R_2 - R_1`` over all ``(p2, lam)`` points;

and writes ``details.json``, ``performance.json`` (theory vs Monte-Carlo time at matched
accuracy) and PNG plots into ``out_dir``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

import numpy as np

from iclr25.core.results import Claim

from .digits import _spearman, digits_experiment
from .plots import plot_curves
from .random_projections import projected_mixture, projection_matrix, rp_risk_theory
from .scenarios import scenario
from .simulate import simulate_gradient_flow, simulate_ridge, simulate_ridge_decomposition, simulate_rp
from .theory import (
    MixtureSpec,
    disparity_metrics,
    gradient_flow_risk_theory,
    ridge_risk_theory,
    separate_risk_theory,
)

__all__ = ["reproduce", "SPEC_LAMBDAS", "S3_M_FACTORS"]

log = logging.getLogger("iclr25.ridge_bias")

SPEC_LAMBDAS = (1e-3, 1e-2, 0.1, 0.3, 1.0, 3.0)
"""The spec's ``lam`` grid for the S1/S2 ADD tables."""
S3_M_FACTORS = (0.25, 0.5, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0)
"""``m / d`` of the spec's S3 table (m = 25 ... 1600 at d = 100)."""
MATCHED_ACCURACY = 0.01
"""Relative precision at which Monte-Carlo is timed against the theory (the theory's own
finite-size accuracy at d = 200 is about 1%)."""


MECH_TOL = dict(delta=0.01, bias_share=0.03, rp_gap=0.1, variance_share=0.5, gap_rank=0.5)
"""Bounds of the mechanism claims, fixed before measuring: the fixed point is a trace (finite-size
error ``O(1/n)``, ~0.3% at ``n = 400``, bound 1%); the bias share is a fraction, bounded like claim
(i) (3 points); the RP Monte-Carlo ODD at ``d = 100`` has ~3% standard error (bound 10% ~ 3 s.e.);
the variance share and the rank correlation must be at least a majority / moderate (0.5)."""


def _settings(quick: bool) -> dict:
    if quick:
        return dict(val_lam=np.logspace(-3, 1, 5), val_seeds=(30,), val_dims=(200,), s3_draws=3,
                    digits_lam=np.logspace(-3, 1, 5), digits_splits=60, digits_p2=(0.5, 0.2), gf_seeds=10,
                    mech_seeds=30, rp_seeds=40)
    return dict(val_lam=np.logspace(-3, 1, 9), val_seeds=(40, 20), val_dims=(200, 800), s3_draws=10,
                digits_lam=np.logspace(-3, 1, 9), digits_splits=100, digits_p2=(0.5, 0.2, 0.1), gf_seeds=20,
                mech_seeds=40, rp_seeds=60)


# ----------------------------------------------------------------------------------------------
# (i) theory vs Monte-Carlo


def _validation(d: int, lam: np.ndarray, seeds: int, separate: bool = True) -> dict:
    """Theory and MC group risks for the validation configurations at dimension ``d`` (``separate``:
    also fit the per-group models, used for the timing of a complete EDD/ODD/ADD evaluation)."""
    rows = {}
    t_theory = 0.0
    t_mc = 0.0
    for name in ("s1", "s2", "A", "B", "C"):
        mix = scenario(name, d=d, n=2 * d)
        t0 = time.perf_counter()
        th = ridge_risk_theory(mix, lam).risk
        th_sep = separate_risk_theory(mix, lam)
        t_theory += time.perf_counter() - t0
        t0 = time.perf_counter()
        mc = simulate_ridge(mix, lam, seeds, seed=d, separate=separate)
        t_mc += time.perf_counter() - t0
        rows[name] = dict(theory=th, theory_sep=th_sep, mc=mc)
    mix = scenario("s1", d=d, n=2 * d)
    for m in (d // 2, 3 * d // 2):
        t0 = time.perf_counter()
        th = rp_risk_theory(mix, lam, m=m, seed=0).risk
        t_rp = time.perf_counter() - t0
        mc = simulate_rp(mix, lam, m, seeds, seed=d + 1, proj_seed=0, separate=False)
        rows[f"s1_rp_m{m}"] = dict(theory=th, mc=mc, t_theory=t_rp)
    rel = np.concatenate([np.abs(r["mc"]["risk_mean"] / r["theory"] - 1).ravel() for r in rows.values()])
    z = np.concatenate(
        [(np.abs(r["mc"]["risk_mean"] - r["theory"]) / r["mc"]["risk_sem"]).ravel() for r in rows.values()]
    )
    per_seed_rel_std = np.concatenate(
        [(r["mc"]["risk"].std(0, ddof=1) / r["theory"]).ravel() for k, r in rows.items() if "rp" not in k]
    )
    seeds_needed = int(np.ceil(np.max(per_seed_rel_std / MATCHED_ACCURACY) ** 2))
    t_per_seed = t_mc / seeds
    return dict(
        d=d,
        seeds=seeds,
        rows=rows,
        mean_rel_err=float(rel.mean()),
        max_z=float(z.max()),
        per_config={k: float(np.abs(r["mc"]["risk_mean"] / r["theory"] - 1).mean()) for k, r in rows.items()},
        perf=dict(
            d=d,
            grid_points=int(lam.size),
            configs=5,
            theory_seconds=t_theory,
            mc_seconds_per_seed=t_per_seed,
            matched_relative_precision=MATCHED_ACCURACY,
            mc_seeds_needed=seeds_needed,
            mc_seconds_needed=seeds_needed * t_per_seed,
            speedup=seeds_needed * t_per_seed / max(t_theory, 1e-9),
        ),
    )


def _plot_validation(val: dict, lam: np.ndarray, out: Path) -> None:
    panels = []
    for name in ("s1", "s2", "C"):
        r = val["rows"][name]
        panels.append(dict(
            x=lam, xlabel="lambda", ylabel="excess group risk", title=f"{name} (d={val['d']})",
            curves=[{"y": r["theory"][:, k], "label": f"theory R{k + 1}(joint)"} for k in range(2)],
            points=[{"x": lam, "y": r["mc"]["risk_mean"][:, k], "err": r["mc"]["risk_sem"][:, k],
                     "label": f"MC R{k + 1}"} for k in range(2)],
        ))
    plot_curves(out / f"theory_vs_mc_d{val['d']}.png", panels, title="Theory (lines) vs Monte-Carlo (points, ±1 s.e.)")


# ----------------------------------------------------------------------------------------------
# mechanism claims: the intermediate quantities the headline claims rest on


def _mech_delta(d: int, lam: np.ndarray, seeds: int) -> tuple[Claim, dict]:
    """Fixed point ``delta_k`` vs the sampled resolvent trace on the five validation configs."""
    rel, per = [], {}
    for name in ("s1", "s2", "A", "B", "C"):
        mix = scenario(name, d=d, n=2 * d)
        delta = ridge_risk_theory(mix, lam).delta  # [L, 2]
        mc = simulate_ridge_decomposition(mix, lam, seeds, seed=10 * d + 3)
        r = np.abs(mc["trace_mean"] / delta - 1.0)
        rel.append(r.ravel())
        per[name] = dict(delta=delta, trace_mean=mc["trace_mean"], trace_sem=mc["trace_sem"], rel_err=float(r.mean()))
    rel = np.concatenate(rel)
    claim = Claim(
        name="mechanism/delta_matches_resolvent_trace",
        metric=f"mean abs(tr(Sigma_k (Sigma_hat + lam I)^-1)/n / delta_k - 1) over S1, S2, A, B, C, both groups, "
        f"{lam.size} lam (d={d}, n={2 * d}, {seeds} draws)",
        ours=float(rel.mean()),
        threshold=MECH_TOL["delta"],
        higher_is_better=False,
        paper="the group risks are functions of the fixed-point scalars delta_1, delta_2 (the effective "
        "regularisation of the deterministic equivalent; spec 'First order')",
        note=f"max {rel.max():.4f}; per config: " + ", ".join(f"{k} {v['rel_err']:.4f}" for k, v in per.items())
        + ". The theory's delta is the trace's deterministic equivalent; its error shrinks as O(1/n).",
    )
    return claim, per


def _mech_bias_share(name: str, d: int, seeds: int) -> tuple[Claim, dict]:
    """Bias share ``B_s / (B_s + V_s)`` of the joint risk, theory vs Monte-Carlo, on the spec's grid."""
    lam = np.asarray(SPEC_LAMBDAS)
    mix = scenario(name, d=d, n=2 * d)
    th = ridge_risk_theory(mix, lam)
    mc = simulate_ridge_decomposition(mix, lam, seeds, seed=10 * d + (1 if name == "s1" else 2))
    share_th = th.bias / (th.bias + th.var)
    share_mc = mc["bias_mean"] / (mc["bias_mean"] + mc["var_mean"])
    err = np.abs(share_mc - share_th)
    add = disparity_metrics(mix, lam)["ADD"]
    fmt = lambda a: ", ".join(f"{v:.3f}" for v in a)  # noqa: E731
    what = ("ADD > 1 only at lam >= 1, where the joint risk is bias-dominated" if name == "s1"
            else "ADD is smallest at intermediate lam")
    claim = Claim(
        name=f"mechanism/{name}/bias_share_matches_simulation",
        metric=f"max over lam, groups of abs(bias share MC - theory), share = B_s / (B_s + V_s) of the joint "
        f"ridge's group risk, {name.upper()} (d={d}, n={2 * d}, {seeds} draws)",
        ours=float(err.max()),
        threshold=MECH_TOL["bias_share"],
        higher_is_better=False,
        paper="the paper explains amplification through the bias-variance decomposition of the group risks "
        "(spec: R_s ~ B_s + V_s)",
        note=f"lam = {fmt(lam)}; theory bias share group 1: {fmt(share_th[:, 0])}, group 2: {fmt(share_th[:, 1])}; "
        f"MC group 1: {fmt(share_mc[:, 0])}, group 2: {fmt(share_mc[:, 1])}; ADD (theory, d={d}): {fmt(add)} "
        f"({what}). MC bias and variance are exact given each input draw (noiseless-label fit; "
        f"expectation over label noise).",
    )
    return claim, dict(lam=lam, share_theory=share_th, share_mc=share_mc, bias_mc=mc["bias_mean"],
                       var_mc=mc["var_mean"], bias_theory=th.bias, var_theory=th.var)


def _variance_share(res, rho: np.ndarray | None = None) -> float:
    """Share of the ODD ``|R_2 - R_1|`` carried by the variance term: ``|dV| / (|dB| + |dV|)``."""
    dB = abs(float(np.diff(res.bias + (0.0 if rho is None else rho))[0]))
    dV = abs(float(np.diff(res.var)[0]))
    return dV / (dB + dV) if dB + dV > 0 else float("nan")


# ----------------------------------------------------------------------------------------------
# (ii) S1/S2 ADD over lambda


def _s1_s2(out: Path) -> tuple[list[Claim], dict]:
    lam = np.asarray(SPEC_LAMBDAS)
    fine = np.logspace(-3, 1, 41)
    s1 = disparity_metrics(scenario("s1"), lam)
    s2 = disparity_metrics(scenario("s2"), lam)
    s1f = disparity_metrics(scenario("s1"), fine)
    s2f = disparity_metrics(scenario("s2"), fine)
    add1, add2 = s1["ADD"], s2["ADD"]
    strong, weak = lam >= 1.0, lam <= 0.3
    margin1 = min(float(add1[strong].min() - 1.0), float(1.0 - add1[weak].max()))
    crossing = float(fine[np.argmax(s1f["ADD"] > 1.0)]) if np.any(s1f["ADD"] > 1.0) else float("nan")
    ends = float(min(add2[0], add2[-1]))
    interior = float(add2[1:-1].min())
    argmin_fine = float(fine[np.argmin(s2f["ADD"])])
    fmt = lambda a: ", ".join(f"{v:.3f}" for v in a)  # noqa: E731
    claims = [
        Claim(
            name="s1/amplification_only_with_strong_lambda",
            metric="min(min_{lam>=1} ADD - 1, 1 - max_{lam<=0.3} ADD), S1 theory (d=400, n=800)",
            ours=margin1,
            threshold=0.0,
            higher_is_better=True,
            paper="bias amplification (ADD>1) appears only with strong regularisation [paper figs; spec S1: "
            "ADD = 0.106, 0.296, 0.514, 0.766, 1.191, 1.323]",
            note=f"ADD(lam) at lam = {fmt(lam)}: {fmt(add1)}; ADD crosses 1 at lam ~ {crossing:.3g} (fine grid).",
        ),
        Claim(
            name="s2/amplification_min_at_intermediate_lambda",
            metric="min(ADD(lam_min), ADD(lam_max)) vs the smallest interior ADD, S2 theory (d=400, n=800)",
            ours=ends,
            baseline=interior,
            threshold=1.0,
            higher_is_better=True,
            paper="an optimal lam minimises bias amplification [paper claim (ii); spec S2: ADD = 1.192, 1.138, "
            "0.964, 0.899, 0.899, 1.053]",
            note=f"ADD(lam) at lam = {fmt(lam)}: {fmt(add2)}; ADD minimal at lam ~ {argmin_fine:.3g} on a "
            f"41-point grid (min {float(s2f['ADD'].min()):.3f}); amplified (ADD>1) at both ends.",
        ),
    ]
    plot_curves(out / "s1_s2_add.png", [
        dict(x=fine, xlabel="lambda", ylabel="ADD = ODD/EDD", title="S1 (difficulty via covariance)", hline=1.0,
             curves=[{"y": s1f["ADD"], "label": "theory"}],
             points=[{"x": lam, "y": add1, "label": "spec grid"}]),
        dict(x=fine, xlabel="lambda", ylabel="ADD = ODD/EDD", title="S2 (concept shift, p2=0.2)", hline=1.0,
             curves=[{"y": s2f["ADD"], "label": "theory"}],
             points=[{"x": lam, "y": add2, "label": "spec grid"}]),
        dict(x=fine, xlabel="lambda", ylabel="excess risk", title="S2 group risks",
             curves=[{"y": s2f["R_joint"][:, 0], "label": "R1 joint"}, {"y": s2f["R_joint"][:, 1], "label": "R2 joint"},
                     {"y": s2f["R_sep"][:, 0], "label": "R1 separate"}, {"y": s2f["R_sep"][:, 1], "label": "R2 separate"}],
             logy=True),
    ])
    details = {"lam": lam, "s1": {k: s1[k] for k in ("ADD", "ODD", "EDD", "R_joint", "R_sep")},
               "s2": {k: s2[k] for k in ("ADD", "ODD", "EDD", "R_joint", "R_sep")}}
    return claims, details


# ----------------------------------------------------------------------------------------------
# (iii, iv) S3 random projections


def _s3(out: Path, draws: int, rp_seeds: int = 40) -> tuple[list[Claim], dict]:
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
            paper="minority-group disparities do not vanish with more parameters [paper claim (iii); spec S3: "
            "ODD(m) -> 0.0703]",
            note=f"ODD(m) for m = {ms}: {fmt(odd.mean(0))} (mean of {draws} S draws); classical ridge "
            f"ODD = {odd_ridge:.4f}. The values at m < d depend on the S draw (spec's single draw: 0.929, 0.827, "
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


def _gradient_flow(out: Path, seeds: int) -> dict:
    mix = scenario("s2", d=200, n=400)
    t = np.logspace(-1, 3, 9)
    th = gradient_flow_risk_theory(mix, t).risk
    ridge_mc = simulate_ridge(mix, 1.0 / t, seeds, seed=7, separate=False)
    gf_mc = simulate_gradient_flow(mix, t, seeds, seed=7, separate=False)
    plot_curves(out / "gradient_flow.png", [
        dict(x=t, xlabel="training time t (= 1/lambda)", ylabel="excess group risk", title="S2 (d=200): gradient flow vs ridge",
             curves=[{"y": th[:, k], "label": f"ridge theory R{k + 1} at lam=1/t"} for k in range(2)],
             points=[{"x": t, "y": gf_mc["risk_mean"][:, k], "err": gf_mc["risk_sem"][:, k],
                      "label": f"gradient flow MC R{k + 1}"} for k in range(2)]),
    ])
    return {"t": t, "theory_lam_1_over_t": th, "gradient_flow_mc": gf_mc["risk_mean"],
            "ridge_mc": ridge_mc["risk_mean"],
            "max_rel_gap_gf_vs_proxy": float(np.max(np.abs(gf_mc["risk_mean"] / th - 1)))}


# ----------------------------------------------------------------------------------------------
# digits


def _digits(out: Path, lam: np.ndarray, splits: int, p2s: tuple) -> tuple[list[Claim], dict]:
    res = digits_experiment(lam, p2s, n_train=600, splits=splits, seed=0)
    gt, ge, se, rs = res["gap_theory"], res["gap_empirical"], res["gap_sem"], res["resolved"]
    rows = "; ".join(
        f"p2={p2:g}, lam={lam[i]:.3g}: theory {gt[j, i]:+.4f}, ridge {ge[j, i]:+.4f} ± {se[j, i]:.4f}"
        f"{'' if rs[j, i] else ' (unresolved)'}"
        for j, p2 in enumerate(res["p2"]) for i in range(lam.size))
    n_res, n_all = res["n_resolved"], rs.size
    claim = Claim(
        name="digits/theory_tracks_empirical_ordering",
        metric="fraction of the resolved (p2, lam) points where theory and fitted ridge agree on the sign of "
        f"R2 - R1 (colored digits, noisy test MSE; resolved: |empirical gap| >= {res['resolve_z']:g} s.e.)",
        ours=res["ordering_agreement_resolved"],
        threshold=0.8,
        higher_is_better=True,
        paper="theory agrees with empirical observations on Colored MNIST [paper claim (v)]",
        note=f"{n_res} of {n_all} points resolved, {res['n_unresolved']} unresolved (their sign is within noise and "
        f"not counted; agreement over all points {res['ordering_agreement']:.2f}). Gap R2 - R1 per point, "
        f"ridge mean ± s.e. over {splits} paired splits: {rows}. Substitute data: sklearn digits coloured "
        f"(1,.5,0)/(.5,1,0), n_train=600; Spearman rank correlation of ODD(lam) theory vs empirical per p2: "
        f"{', '.join(f'{v:.2f}' for v in res['odd_trend_spearman'])}."
        + ("" if n_res else " No point is resolved: the claim cannot be decided at this number of splits."),
    )
    rho = _spearman(gt.ravel(), ge.ravel()) if gt.size > 2 else float("nan")
    mech = Claim(
        name="mechanism/digits/gap_rank_correlation",
        metric="Spearman rank correlation of the gap R2 - R1, theory (plug-in group covariances/teachers) vs "
        f"fitted ridge, over all {gt.size} (p2, lam) points",
        ours=rho,
        threshold=MECH_TOL["gap_rank"],
        higher_is_better=True,
        paper="the theory, fed the data's group statistics, predicts the group gap of the trained model "
        "[claim (v) rests on it]",
        note=f"theory gaps: {', '.join(f'{v:+.4f}' for v in gt.ravel())}; ridge: "
        f"{', '.join(f'{v:+.4f}' for v in ge.ravel())} (order: p2 major, lam minor)."
        + ("" if gt.size > 2 else " A rank correlation needs at least 3 points: not decided."),
    )
    panels = []
    for j, p2 in enumerate(res["p2"]):
        panels.append(dict(
            x=lam, xlabel="lambda", ylabel="test MSE (noisy labels)", title=f"colored digits, p2={p2:g}",
            curves=[{"y": res["theory"][j, :, k], "label": f"theory group {k + 1}"} for k in range(2)],
            points=[{"x": lam, "y": res["empirical"][j, :, k], "err": res["empirical_sem"][j, :, k],
                     "label": f"ridge group {k + 1}"} for k in range(2)],
        ))
    plot_curves(out / "digits.png", panels, title="Colored digits: theory (lines) vs fitted ridge (points)")
    return [claim, mech], res


# ----------------------------------------------------------------------------------------------


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    return o


def reproduce(quick: bool, out_dir: Path, *, threads: int | None = 1) -> list[Claim]:
    """Run the reproduction (module docstring) and return its claims.

    Args:
        quick: CPU-scale quick mode (``d = 200`` validation with 30 seeds and 5 ``lam``; under a
            minute on 2 cores) instead of the full run (``d = 200`` and ``800``, 9 ``lam``).
        out_dir: folder for ``details.json``, ``performance.json`` and PNG plots (created).
        threads: BLAS threads during the run.

    BLAS threads are limited to ``threads`` (default 1: the matrices are small and oversubscribed
    OpenBLAS threads are orders of magnitude slower on shared machines); the CLI's ``--threads``
    passes it.
    """
    import importlib.util

    from iclr25.core.threads import limited_threads

    if importlib.util.find_spec("sklearn") is None:  # before minutes of theory work, not after
        raise ModuleNotFoundError("claims (v) use scikit-learn's digits", name="sklearn")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _settings(quick)
    timings: dict[str, float] = {}
    with limited_threads(threads):
        t0 = time.perf_counter()
        vals = [_validation(d, cfg["val_lam"], k, separate=i == 0)
                for i, (d, k) in enumerate(zip(cfg["val_dims"], cfg["val_seeds"]))]
        for v in vals:
            _plot_validation(v, cfg["val_lam"], out)
        timings["validation"] = time.perf_counter() - t0
        err = [v["mean_rel_err"] for v in vals]
        dims = [v["d"] for v in vals]
        if len(vals) == 1:
            ours, metric = err[0], f"mean abs(MC/theory - 1) of group risks at d={dims[0]}"
        else:  # full: d=200 must be <= 3% and d=800 <= 1.5%, i.e. 2 x err(800) <= 3%
            ours = max(err[0], 2.0 * err[1])
            metric = f"max(mean abs(MC/theory - 1) at d={dims[0]}, 2 x the same at d={dims[1]})"
        perf = vals[0]["perf"]
        claims = [
            Claim(
                name="theory_matches_simulation",
                metric=metric,
                ours=ours,
                threshold=0.03,
                higher_is_better=False,
                paper="theory curves match simulations [paper claim (i)]; spec: <= 3% at d=200, <= 1.5% at d=800",
                note="; ".join(
                    f"d={v['d']}: mean rel. err {v['mean_rel_err']:.4f}, max |z| {v['max_z']:.2f} over "
                    f"{sum(r['theory'].size for r in v['rows'].values())} points ({v['seeds']} seeds)"
                    for v in vals
                )
                + f". Theory is {perf['speedup']:.0f}x faster than Monte-Carlo at matched {MATCHED_ACCURACY:.0%} "
                f"relative precision ({perf['mc_seeds_needed']} seeds needed; performance.json).",
            )
        ]
        mech_d = int(cfg["val_dims"][0])
        t0 = time.perf_counter()
        c, mech_delta = _mech_delta(mech_d, cfg["val_lam"], cfg["mech_seeds"])
        claims.append(c)
        timings["mechanism_delta"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        c, s12 = _s1_s2(out)
        claims.append(c[0])
        c1, m1 = _mech_bias_share("s1", mech_d, cfg["mech_seeds"])
        claims.append(c1)
        claims.append(c[1])
        c2, m2 = _mech_bias_share("s2", mech_d, cfg["mech_seeds"])
        claims.append(c2)
        s12["mechanism"] = {"d": mech_d, "s1": m1, "s2": m2}
        c, s3 = _s3(out, cfg["s3_draws"], cfg["rp_seeds"])
        claims += c
        timings["synthetic"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        gf = _gradient_flow(out, cfg["gf_seeds"])
        timings["gradient_flow"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        c, dig = _digits(out, cfg["digits_lam"], cfg["digits_splits"], cfg["digits_p2"])
        claims += c
        timings["digits"] = time.perf_counter() - t0
    details = {
        "quick": quick,
        "timings_s": timings,
        "validation": [
            {"d": v["d"], "lam": cfg["val_lam"], "mean_rel_err": v["mean_rel_err"], "max_z": v["max_z"],
             "per_config": v["per_config"],
             "theory": {k: r["theory"] for k, r in v["rows"].items()},
             "mc_mean": {k: r["mc"]["risk_mean"] for k, r in v["rows"].items()},
             "mc_sem": {k: r["mc"]["risk_sem"] for k, r in v["rows"].items()}}
            for v in vals
        ],
        "mechanism_delta": mech_delta,
        "s1_s2": s12,
        "s3": s3,
        "gradient_flow": gf,
        "digits": {k: dig[k] for k in ("lam", "p2", "theory", "empirical", "empirical_sem",
                                       "ordering_agreement", "odd_trend_spearman", "gap_theory",
                                       "gap_empirical", "gap_sem", "resolved", "n_resolved", "n_unresolved",
                                       "ordering_agreement_resolved", "splits")},
    }
    (out / "details.json").write_text(json.dumps(_jsonable(details), indent=1) + "\n", encoding="utf-8")
    (out / "performance.json").write_text(
        json.dumps(_jsonable([v["perf"] for v in vals]), indent=1) + "\n", encoding="utf-8"
    )
    log.info("ridge-bias reproduce timings: %s", {k: round(v, 2) for k, v in timings.items()})
    return _with_plots(claims, out, f"theory_vs_mc_d{dims[0]}.png")


def _with_plots(claims: list[Claim], out: Path, validation_png: str) -> list[Claim]:
    """Each claim with the PNG that shows it (when written), so the report page puts the plot right
    under the claim instead of in a list at the end of the package."""
    def png(name: str) -> str:
        if name == "theory_matches_simulation":
            return validation_png
        if name.startswith(("s1/", "s2/")):  # the ADD curves (not the bias shares of mechanism/s1, s2)
            return "s1_s2_add.png"
        group = name.removeprefix("mechanism/").split("/")[0]
        return {"s3": "s3_rp.png", "digits": "digits.png"}.get(group, "")

    return [dataclasses.replace(c, plot=p) if (p := png(c.name)) and (out / p).is_file() else c for c in claims]
