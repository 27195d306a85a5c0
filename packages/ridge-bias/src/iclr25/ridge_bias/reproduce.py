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

The experiments are jobs of the core runner (:mod:`iclr25.core.runner`; ``--workers``/``--resume``,
one record per job under ``out_dir/records/``): ``validation_d<d>`` per validation dimension,
``mech_delta``, ``s1_s2``, ``bias_share_s1``, ``bias_share_s2``, ``s3``, ``gradient_flow``, ``digits``
(bodies in :mod:`iclr25.ridge_bias.experiments`); the claims are a pure function of the records
(:mod:`iclr25.ridge_bias.claims`), the figures are drawn from them (:mod:`iclr25.ridge_bias.plots`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .claims import bias_shares, claims_from_records, validation_records
from .experiments import MATCHED_ACCURACY, SPEC_LAMBDAS, jsonable
from .parameterization import MECH_TOL, S3_M_FACTORS
from .plots import plot_reproduction

__all__ = ["reproduce", "jobs", "SPEC_LAMBDAS", "S3_M_FACTORS", "MECH_TOL", "MATCHED_ACCURACY"]

log = logging.getLogger("iclr25.ridge_bias")

_EXP = "iclr25.ridge_bias.experiments:"


def _settings(quick: bool) -> dict:
    if quick:
        return dict(val_lam=np.logspace(-3, 1, 5), val_seeds=(30,), val_dims=(200,), s3_draws=3,
                    digits_lam=np.logspace(-3, 1, 5), digits_splits=60, digits_p2=(0.5, 0.2), gf_seeds=10,
                    mech_seeds=30, rp_seeds=40)
    return dict(val_lam=np.logspace(-3, 1, 9), val_seeds=(40, 20), val_dims=(200, 800), s3_draws=10,
                digits_lam=np.logspace(-3, 1, 9), digits_splits=100, digits_p2=(0.5, 0.2, 0.1), gf_seeds=20,
                mech_seeds=40, rp_seeds=60)


def jobs(quick: bool) -> list[Job]:
    """The reproduction's jobs (no dependencies between them; every Monte-Carlo seed is fixed in the job's
    settings or body, so the job ``seed`` is ``None``)."""
    cfg = jsonable(_settings(quick))
    mech_d = int(cfg["val_dims"][0])
    js = [Job(f"validation_d{d}", _EXP + "validation_job",
              settings={"d": int(d), "lam": cfg["val_lam"], "seeds": int(k), "separate": i == 0})
          for i, (d, k) in enumerate(zip(cfg["val_dims"], cfg["val_seeds"]))]
    js += [Job("mech_delta", _EXP + "mech_delta_job", settings={"d": mech_d, "lam": cfg["val_lam"],
                                                                  "seeds": cfg["mech_seeds"]}),
           Job("s1_s2", _EXP + "s1_s2_job")]
    js += [Job(f"bias_share_{s}", _EXP + "bias_share_job", settings={"scenario": s, "d": mech_d,
                                                                      "seeds": cfg["mech_seeds"]})
           for s in ("s1", "s2")]
    js += [Job("s3", _EXP + "s3_job", settings={"draws": cfg["s3_draws"], "rp_seeds": cfg["rp_seeds"]}),
           Job("gradient_flow", _EXP + "gradient_flow_job", settings={"seeds": cfg["gf_seeds"]}),
           Job("digits", _EXP + "digits_job", settings={"lam": cfg["digits_lam"], "p2": cfg["digits_p2"],
                                                         "splits": cfg["digits_splits"]})]
    return js


def _details(records: dict[str, Any], quick: bool, timings: dict[str, float]) -> dict[str, Any]:
    """``details.json``: the records' numbers, arranged as before the migration to the runner."""
    vals = validation_records(records)
    s12 = dict(records["s1_s2"])
    s12["mechanism"] = {"d": records["bias_share_s1"]["d"]}
    for s in ("s1", "s2"):
        rec = records[f"bias_share_{s}"]
        share_th, share_mc = bias_shares(rec)
        s12["mechanism"][s] = {**{k: rec[k] for k in ("lam", "bias_mc", "var_mc", "bias_theory", "var_theory")},
                               "share_theory": share_th, "share_mc": share_mc}
    return {
        "quick": quick,
        "timings_s": timings,
        "validation": [{k: v[k] for k in ("d", "lam", "mean_rel_err", "max_z", "per_config", "theory", "mc_mean",
                                          "mc_sem")} for v in vals],
        "mechanism_delta": records["mech_delta"]["per_config"],
        "s1_s2": s12,
        "s3": records["s3"],
        "gradient_flow": records["gradient_flow"],
        "digits": records["digits"],
    }


def reproduce(quick: bool, out_dir: Path, *, threads: int | None = 1, workers: int | None = None,
              resume: bool = False, quiet: bool = False) -> list[Claim]:
    """Run the reproduction (module docstring) and return its claims.

    Args:
        quick: CPU-scale quick mode (``d = 200`` validation with 30 seeds and 5 ``lam``; under a
            minute on 2 cores) instead of the full run (``d = 200`` and ``800``, 9 ``lam``).
        out_dir: folder for ``records/``, ``details.json``, ``performance.json`` and PNG plots (created).
        threads: BLAS threads of each job (default 1: the matrices are small and oversubscribed
            OpenBLAS threads are orders of magnitude slower on shared machines); the CLI's
            ``--threads`` passes it.
        workers: processes the jobs run in (default: from the CPUs; 1 = in this process).
        resume: keep the jobs an interrupted run in ``out_dir`` finished (changed settings are refused).
        quiet: no progress bar.

    Raises:
        ModuleNotFoundError: scikit-learn (the ``[digits]`` extra) is missing.
        ValueError: ``--resume`` with changed settings (naming them).
    """
    import importlib.util

    from iclr25.core.runner import run_jobs

    if importlib.util.find_spec("sklearn") is None:  # before minutes of theory work, not after
        raise ModuleNotFoundError("claims (v) use scikit-learn's digits", name="sklearn")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res = run_jobs(jobs(quick), out, workers=workers, resume=resume, threads=threads,
                   desc="ridge-bias reproduce", quiet=True if quiet else None)
    records = res.records
    claims = claims_from_records(records)
    plot_reproduction(records, out)
    timings = dict(res.job_wall_seconds)
    (out / "details.json").write_text(json.dumps(jsonable(_details(records, quick, timings)), indent=1) + "\n",
                                      encoding="utf-8")
    (out / "performance.json").write_text(
        json.dumps([v["perf"] for v in validation_records(records)], indent=1) + "\n", encoding="utf-8")
    log.info("ridge-bias reproduce timings: %s", {k: round(v, 2) for k, v in timings.items()})
    return claims
