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

import json
import logging
import time
from pathlib import Path

import numpy as np

from iclr25.core.results import Claim

from .digits import _spearman, digits_experiment
from .disparity import disparity_metrics
from .parameterization import MECH_TOL, S3_M_FACTORS, s3_experiment
from .plots import plot_curves
from .random_projections import rp_risk_theory
from .scenarios import scenario
from .simulate import simulate_gradient_flow, simulate_ridge, simulate_ridge_decomposition, simulate_rp
from .theory import (
    gradient_flow_risk_theory,
    ridge_risk_theory,
    separate_risk_theory,
)

__all__ = ["reproduce", "SPEC_LAMBDAS", "S3_M_FACTORS", "MECH_TOL"]

log = logging.getLogger("iclr25.ridge_bias")

SPEC_LAMBDAS = (1e-3, 1e-2, 0.1, 0.3, 1.0, 3.0)
"""The spec's ``lam`` grid for the S1/S2 ADD tables."""

MATCHED_ACCURACY = 0.01
"""Relative precision at which Monte-Carlo is timed against the theory (the theory's own
finite-size accuracy at d = 200 is about 1%)."""





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
        "regularisation of the deterministic equivalent)",
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
        "(R_s ~ B_s + V_s)",
        note=f"lam = {fmt(lam)}; theory bias share group 1: {fmt(share_th[:, 0])}, group 2: {fmt(share_th[:, 1])}; "
        f"MC group 1: {fmt(share_mc[:, 0])}, group 2: {fmt(share_mc[:, 1])}; ADD (theory, d={d}): {fmt(add)} "
        f"({what}). MC bias and variance are exact given each input draw (noiseless-label fit; "
        f"expectation over label noise).",
    )
    return claim, dict(lam=lam, share_theory=share_th, share_mc=share_mc, bias_mc=mc["bias_mean"],
                       var_mc=mc["var_mean"], bias_theory=th.bias, var_theory=th.var)


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
            paper="bias amplification (ADD>1) appears only with strong regularisation [paper figs; ADD from the paper's equations: "
            "0.106, 0.296, 0.514, 0.766, 1.191, 1.323]",
            note=f"ADD(lam) at lam = {fmt(lam)}: {fmt(add1)}; ADD crosses 1 at lam ~ {crossing:.3g} (fine grid).",
        ),
        Claim(
            name="s2/amplification_min_at_intermediate_lambda",
            metric="min(ADD(lam_min), ADD(lam_max)) vs the smallest interior ADD, S2 theory (d=400, n=800)",
            ours=ends,
            baseline=interior,
            threshold=1.0,
            higher_is_better=True,
            paper="an optimal lam minimises bias amplification [paper claim (ii); ADD from the paper's equations: 1.192, "
            "1.138, 0.964, 0.899, 0.899, 1.053]",
            note=f"ADD(lam) at lam = {fmt(lam)}: {fmt(add2)}; ADD minimal at lam ~ {argmin_fine:.3g} on a "
            f"41-point grid (min {float(s2f['ADD'].min()):.3f}); amplified (ADD>1) at both ends.",
        ),
    ]
    plot_curves(out / "s1_s2_add.png", [
        dict(x=fine, xlabel="lambda", ylabel="ADD = ODD/EDD", title="S1 (difficulty via covariance)", hline=1.0,
             curves=[{"y": s1f["ADD"], "label": "theory"}],
             points=[{"x": lam, "y": add1, "label": "lambda grid"}]),
        dict(x=fine, xlabel="lambda", ylabel="ADD = ODD/EDD", title="S2 (concept shift, p2=0.2)", hline=1.0,
             curves=[{"y": s2f["ADD"], "label": "theory"}],
             points=[{"x": lam, "y": add2, "label": "lambda grid"}]),
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



# What each claim is and where the paper says it: the paper is figure-based (no tables), so every claim is
# "direction only"; ``plot`` is the figure that shows it. ``n_seeds``: Monte-Carlo draws / splits behind the
# claim (1 for a closed-form-only claim).
_META = {
    "theory_matches_simulation": ("headline", "claim (i), theory-vs-simulation figures, direction only", "theory_vs_mc_d{d}.png"),
    "mechanism/delta_matches_resolvent_trace": ("mechanism", "Sec. 3 fixed point (delta_k), direction only", "theory_vs_mc_d{d}.png"),
    "s1/amplification_only_with_strong_lambda": ("headline", "claim (ii), ADD-vs-lambda figure (S1), direction only", "s1_s2_add.png"),
    "mechanism/s1/bias_share_matches_simulation": ("mechanism", "bias-variance decomposition, direction only", "s1_s2_add.png"),
    "s2/amplification_min_at_intermediate_lambda": ("headline", "claim (ii), ADD-vs-lambda figure (S2), direction only", "s1_s2_add.png"),
    "mechanism/s2/bias_share_matches_simulation": ("mechanism", "bias-variance decomposition, direction only", "s1_s2_add.png"),
    "s3/gap_persists_with_parameterization": ("headline", "claim (iii), ODD-vs-m figure, direction only", "s3_rp.png"),
    "s3/peak_near_interpolation": ("headline", "claim (iv), interpolation peaks, direction only", "s3_rp.png"),
    "s3/peak_near_interpolation_m_sweep": ("headline", "claim (iv), interpolation peaks, direction only", "s3_rp.png"),
    "mechanism/s3/rp_gap_matches_simulation_at_large_m": ("mechanism", "claim (iii) rests on the RP theory, direction only", "s3_rp.png"),
    "mechanism/s3/peak_is_variance_driven": ("mechanism", "claim (iv) mechanism, direction only", "s3_rp.png"),
    "mechanism/s3/m_sweep_peak_is_variance_driven": ("mechanism", "claim (iv) mechanism, direction only", "s3_rp.png"),
    "digits/theory_tracks_empirical_ordering": ("headline", "claim (v), Colored MNIST figure, direction only", "digits.png"),
    "mechanism/digits/gap_rank_correlation": ("mechanism", "claim (v) rests on it, direction only", "digits.png"),
}


def _with_meta(c: Claim, d: int, n_seeds: dict[str, int]) -> Claim:
    """Fill the claim record's kind / paper_ref / plot / n_seeds from :data:`_META` (an unknown claim name is a
    bug: raise)."""
    import dataclasses

    kind, ref, plot = _META[c.name]
    return dataclasses.replace(c, kind=kind, paper_ref=ref, plot=plot.format(d=d), n_seeds=n_seeds.get(c.name, 1))


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
                paper="theory curves match simulations [paper claim (i)]; bound: <= 3% at d=200, <= 1.5% at d=800",
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
        c, s3 = s3_experiment(out, cfg["s3_draws"], cfg["rp_seeds"])
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
    draws = {"theory_matches_simulation": int(min(cfg["val_seeds"])),  # Monte-Carlo draws (closed form: 1)
             "mechanism/delta_matches_resolvent_trace": cfg["mech_seeds"],
             "mechanism/s1/bias_share_matches_simulation": cfg["mech_seeds"],
             "mechanism/s2/bias_share_matches_simulation": cfg["mech_seeds"],
             "s3/gap_persists_with_parameterization": cfg["s3_draws"], "s3/peak_near_interpolation_m_sweep": cfg["s3_draws"],
             "mechanism/s3/m_sweep_peak_is_variance_driven": cfg["s3_draws"],
             "mechanism/s3/rp_gap_matches_simulation_at_large_m": cfg["rp_seeds"],
             "digits/theory_tracks_empirical_ordering": cfg["digits_splits"],
             "mechanism/digits/gap_rank_correlation": cfg["digits_splits"]}
    return [_with_meta(c, int(cfg["val_dims"][0]), draws) for c in claims]
