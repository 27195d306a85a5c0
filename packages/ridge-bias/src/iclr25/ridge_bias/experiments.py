"""The reproduction's experiments as jobs of the core runner (:mod:`iclr25.core.runner`).

Each ``*_job(settings, seed, deps_records) -> record`` computes numbers only (no claims, no plots) and
returns a JSON-ready record: arrays become (nested) lists, an undefined number is ``None`` with a
``*_undefined`` field saying why. Every random draw is seeded from the settings (the Monte-Carlo seeds
are those of the pre-runner code), so the records do not depend on the number of workers; the only
fields that do are the wall-clock timings under ``validation``'s ``perf`` (``*seconds*`` and
``speedup``). The claims are computed from these records in :mod:`iclr25.ridge_bias.claims`, the
figures in :mod:`iclr25.ridge_bias.plots`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .digits import digits_experiment
from .disparity import disparity_metrics
from .parameterization import s3_experiment
from .random_projections import rp_risk_theory
from .scenarios import scenario
from .simulate import simulate_gradient_flow, simulate_ridge, simulate_ridge_decomposition, simulate_rp
from .theory import gradient_flow_risk_theory, ridge_risk_theory, separate_risk_theory

__all__ = ["SPEC_LAMBDAS", "MATCHED_ACCURACY", "FINE_LAMBDAS", "jsonable", "validation_job", "mech_delta_job",
           "bias_share_job", "s1_s2_job", "s3_job", "gradient_flow_job", "digits_job"]

SPEC_LAMBDAS = (1e-3, 1e-2, 0.1, 0.3, 1.0, 3.0)
"""The spec's ``lam`` grid for the S1/S2 ADD tables."""

FINE_LAMBDAS = 41
"""Points of the fine log grid ``[1e-3, 10]`` of the S1/S2 ADD curves."""

MATCHED_ACCURACY = 0.01
"""Relative precision at which Monte-Carlo is timed against the theory (the theory's own
finite-size accuracy at d = 200 is about 1%)."""

VALIDATION_CONFIGS = ("s1", "s2", "A", "B", "C")


def jsonable(o: Any) -> Any:
    """``o`` with arrays as lists and NumPy scalars as Python numbers (dict keys as ``str``)."""
    if isinstance(o, dict):
        return {str(k): jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    return o


def _nan_field(rec: dict[str, Any], key: str, why: str) -> None:
    """Replace a NaN number ``rec[key]`` (or NaN entries of a list) by ``None`` and say why in ``key_undefined``."""
    v = rec[key]
    if isinstance(v, list):
        if any(isinstance(x, float) and np.isnan(x) for x in v):
            rec[key] = [None if isinstance(x, float) and np.isnan(x) else x for x in v]
            rec[f"{key}_undefined"] = why
    elif isinstance(v, float) and np.isnan(v):
        rec[key] = None
        rec[f"{key}_undefined"] = why


# ----------------------------------------------------------------------------------------------
# (i) theory vs Monte-Carlo


def validation_job(settings: dict[str, Any], seed: int | None, deps: dict[str, Any]) -> dict[str, Any]:
    """Theory and MC group risks of the validation configurations at dimension ``settings["d"]`` (joint
    ridge on S1, S2, A, B, C; random-projection ridge on S1 at ``m = d/2, 3d/2``), and the timing of
    theory vs Monte-Carlo at :data:`MATCHED_ACCURACY` (``separate``: also fit the per-group models)."""
    d, seeds, separate = int(settings["d"]), int(settings["seeds"]), bool(settings["separate"])
    lam = np.asarray(settings["lam"], dtype=float)
    rows = {}
    t_theory = 0.0
    t_mc = 0.0
    for name in VALIDATION_CONFIGS:
        mix = scenario(name, d=d, n=2 * d)
        t0 = time.perf_counter()
        th = ridge_risk_theory(mix, lam).risk
        separate_risk_theory(mix, lam)  # timed: a complete EDD/ODD/ADD evaluation needs it
        t_theory += time.perf_counter() - t0
        t0 = time.perf_counter()
        mc = simulate_ridge(mix, lam, seeds, seed=d, separate=separate)
        t_mc += time.perf_counter() - t0
        rows[name] = dict(theory=th, mc=mc)
    mix = scenario("s1", d=d, n=2 * d)
    for m in (d // 2, 3 * d // 2):
        th = rp_risk_theory(mix, lam, m=m, seed=0).risk
        mc = simulate_rp(mix, lam, m, seeds, seed=d + 1, proj_seed=0, separate=False)
        rows[f"s1_rp_m{m}"] = dict(theory=th, mc=mc)
    rel = np.concatenate([np.abs(r["mc"]["risk_mean"] / r["theory"] - 1).ravel() for r in rows.values()])
    z = np.concatenate(
        [(np.abs(r["mc"]["risk_mean"] - r["theory"]) / r["mc"]["risk_sem"]).ravel() for r in rows.values()]
    )
    per_seed_rel_std = np.concatenate(
        [(r["mc"]["risk"].std(0, ddof=1) / r["theory"]).ravel() for k, r in rows.items() if "rp" not in k]
    )
    seeds_needed = int(np.ceil(np.max(per_seed_rel_std / MATCHED_ACCURACY) ** 2))
    t_per_seed = t_mc / seeds
    return jsonable(dict(
        d=d,
        seeds=seeds,
        lam=lam,
        mean_rel_err=float(rel.mean()),
        max_z=float(z.max()),
        n_points=int(sum(r["theory"].size for r in rows.values())),
        per_config={k: float(np.abs(r["mc"]["risk_mean"] / r["theory"] - 1).mean()) for k, r in rows.items()},
        theory={k: r["theory"] for k, r in rows.items()},
        mc_mean={k: r["mc"]["risk_mean"] for k, r in rows.items()},
        mc_sem={k: r["mc"]["risk_sem"] for k, r in rows.items()},
        perf=dict(
            d=d,
            grid_points=int(lam.size),
            configs=len(VALIDATION_CONFIGS),
            theory_seconds=t_theory,
            mc_seconds_per_seed=t_per_seed,
            matched_relative_precision=MATCHED_ACCURACY,
            mc_seeds_needed=seeds_needed,
            mc_seconds_needed=seeds_needed * t_per_seed,
            speedup=seeds_needed * t_per_seed / max(t_theory, 1e-9),
        ),
    ))


# ----------------------------------------------------------------------------------------------
# mechanisms: the intermediate quantities the headline claims rest on


def mech_delta_job(settings: dict[str, Any], seed: int | None, deps: dict[str, Any]) -> dict[str, Any]:
    """Fixed point ``delta_k`` vs the sampled resolvent trace on the five validation configs."""
    d, seeds = int(settings["d"]), int(settings["seeds"])
    lam = np.asarray(settings["lam"], dtype=float)
    per = {}
    for name in VALIDATION_CONFIGS:
        mix = scenario(name, d=d, n=2 * d)
        delta = ridge_risk_theory(mix, lam).delta  # [L, 2]
        mc = simulate_ridge_decomposition(mix, lam, seeds, seed=10 * d + 3)
        per[name] = dict(delta=delta, trace_mean=mc["trace_mean"], trace_sem=mc["trace_sem"],
                         rel_err=np.abs(mc["trace_mean"] / delta - 1.0))
    return jsonable({"d": d, "seeds": seeds, "lam": lam, "per_config": per})


def bias_share_job(settings: dict[str, Any], seed: int | None, deps: dict[str, Any]) -> dict[str, Any]:
    """Bias and variance terms of the joint ridge's group risks, theory and Monte-Carlo, on the spec's grid,
    and the theory's ADD there (scenario ``settings["scenario"]`` at ``d``, ``n = 2d``)."""
    name, d, seeds = str(settings["scenario"]), int(settings["d"]), int(settings["seeds"])
    lam = np.asarray(SPEC_LAMBDAS)
    mix = scenario(name, d=d, n=2 * d)
    th = ridge_risk_theory(mix, lam)
    mc = simulate_ridge_decomposition(mix, lam, seeds, seed=10 * d + (1 if name == "s1" else 2))
    return jsonable(dict(scenario=name, d=d, seeds=seeds, lam=lam, bias_theory=th.bias, var_theory=th.var,
                         bias_mc=mc["bias_mean"], var_mc=mc["var_mean"], add=disparity_metrics(mix, lam)["ADD"]))


def s1_s2_job(settings: dict[str, Any], seed: int | None, deps: dict[str, Any]) -> dict[str, Any]:
    """Theory ADD/ODD/EDD and group risks of S1 and S2 (d = 400, n = 800) on the spec's grid and a fine grid."""
    lam = np.asarray(SPEC_LAMBDAS)
    fine = np.logspace(-3, 1, FINE_LAMBDAS)
    keys = ("ADD", "ODD", "EDD", "R_joint", "R_sep")
    rec: dict[str, Any] = {"lam": lam, "fine_lam": fine}
    for name in ("s1", "s2"):
        coarse = disparity_metrics(scenario(name), lam)
        fine_m = disparity_metrics(scenario(name), fine)
        rec[name] = {k: coarse[k] for k in keys}
        rec[f"{name}_fine"] = {k: fine_m[k] for k in keys}
    return jsonable(rec)


# ----------------------------------------------------------------------------------------------
# (iii, iv) S3 random projections; gradient flow; (v) digits


def s3_job(settings: dict[str, Any], seed: int | None, deps: dict[str, Any]) -> dict[str, Any]:
    """The S3 random-projection experiment (:func:`iclr25.ridge_bias.parameterization.s3_experiment`)."""
    return jsonable(s3_experiment(int(settings["draws"]), int(settings["rp_seeds"])))


def gradient_flow_job(settings: dict[str, Any], seed: int | None, deps: dict[str, Any]) -> dict[str, Any]:
    """Gradient flow at time ``t`` vs ridge at ``lam = 1/t`` (S2, d = 200): theory and Monte-Carlo."""
    seeds = int(settings["seeds"])
    mix = scenario("s2", d=200, n=400)
    t = np.logspace(-1, 3, 9)
    th = gradient_flow_risk_theory(mix, t).risk
    ridge_mc = simulate_ridge(mix, 1.0 / t, seeds, seed=7, separate=False)
    gf_mc = simulate_gradient_flow(mix, t, seeds, seed=7, separate=False)
    return jsonable({"t": t, "seeds": seeds, "theory_lam_1_over_t": th, "gradient_flow_mc": gf_mc["risk_mean"],
                     "gradient_flow_mc_sem": gf_mc["risk_sem"], "ridge_mc": ridge_mc["risk_mean"],
                     "max_rel_gap_gf_vs_proxy": float(np.max(np.abs(gf_mc["risk_mean"] / th - 1)))})


DIGITS_FIELDS = ("lam", "p2", "theory", "empirical", "empirical_sem", "ordering_agreement", "odd_trend_spearman",
                 "gap_theory", "gap_empirical", "gap_sem", "resolved", "n_resolved", "n_unresolved",
                 "ordering_agreement_resolved", "splits", "resolve_z")


def digits_job(settings: dict[str, Any], seed: int | None, deps: dict[str, Any]) -> dict[str, Any]:
    """Colored digits: theory vs fitted ridge (:func:`iclr25.ridge_bias.digits.digits_experiment`, n_train=600)."""
    res = digits_experiment(np.asarray(settings["lam"], dtype=float), tuple(settings["p2"]), n_train=600,
                            splits=int(settings["splits"]), seed=0)
    rec = jsonable({k: res[k] for k in DIGITS_FIELDS})
    _nan_field(rec, "odd_trend_spearman", "a rank correlation over lam needs at least 3 lam values")
    _nan_field(rec, "ordering_agreement_resolved", "no (p2, lam) point is resolved at this number of splits")
    return rec
