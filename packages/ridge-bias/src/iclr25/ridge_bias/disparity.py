"""The disparity metrics of a two-group mixture (EDD / ODD / ADD) from the closed-form group risks.

Lives apart from :mod:`.theory` because it dispatches to both the ridge theory (:mod:`.theory`) and the
random-projection theory (:mod:`.random_projections`, which builds on :mod:`.theory`): keeping it here keeps
the imports one-way (theory <- random_projections <- disparity).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from .random_projections import rp_risk_theory
from .theory import MixtureSpec, _as_lam, ridge_risk_theory

__all__ = ["disparity_metrics"]


def disparity_metrics(
    mix: MixtureSpec,
    lam: float | Sequence[float] | np.ndarray,
    *,
    model: Literal["ridge", "rp", "gradient_flow"] = "ridge",
    m: int | None = None,
    seed: int = 0,
    draws: int = 1,
    risk: Literal["excess", "noisy"] = "excess",
    add: Literal["ratio", "difference"] = "ratio",
    edd_samples: Literal["group", "full"] = "group",
) -> dict[str, np.ndarray]:
    """The paper's disparity metrics for a two-group mixture, over a ``lam`` grid.

    ``EDD = |R_2(f_hat_2) - R_1(f_hat_1)|`` (separately trained models),
    ``ODD = |R_2(f_hat) - R_1(f_hat)|`` (joint model), ``ADD = ODD / EDD`` (``"ratio"``; ``> 1`` is
    bias amplification; NaN where ``EDD`` vanishes to rounding, e.g. two identical groups) or
    ``ODD - EDD`` (``"difference"``).

    Args:
        mix: a two-group mixture.
        lam: penalty ``> 0`` or grid ``[L]``; for ``model="gradient_flow"`` this is ``1/t``.
        model: ``"ridge"``, ``"rp"`` (random projections with ``m`` features, seed ``seed``; the
            separate models use the same ``S``; ``draws > 1`` averages risks over that many seeded
            projections) or ``"gradient_flow"`` (``lam = 1/t`` proxy).
        risk: ``"excess"`` (default, ``E_s``) or ``"noisy"`` (``E_s + sigma_s^2``).
        add: ``"ratio"`` (default) or ``"difference"``.
        edd_samples: see :func:`separate_risk_theory`.

    Returns:
        dict with ``lam [L]``, ``R_joint [L, 2]``, ``R_sep [L, 2]``, ``EDD``, ``ODD``, ``ADD`` ``[L]``
        and ``minority_bias [L]`` (``R_2(f_hat) - R_1(f_hat)``, signed); the ``L`` axis is dropped
        for a scalar ``lam``.

    Raises:
        ValueError: ``mix`` does not have two groups, bad option strings, ``model="rp"`` without ``m``.
    """
    if mix.K != 2:
        raise ValueError(f"disparity_metrics: needs a two-group mixture, got {mix.K} group(s)")
    for name, val, allowed in (
        ("risk", risk, ("excess", "noisy")),
        ("add", add, ("ratio", "difference")),
        ("model", model, ("ridge", "rp", "gradient_flow")),
        ("edd_samples", edd_samples, ("group", "full")),
    ):
        if val not in allowed:
            raise ValueError(f"disparity_metrics: {name}={val!r}; choose from {allowed}")
    lam_arr, scalar = _as_lam(lam)
    key = "noisy_risk" if risk == "noisy" else "risk"
    if model == "rp":
        if m is None:
            raise ValueError("disparity_metrics: model='rp' needs the number of random features m")
        joint = rp_risk_theory(mix, lam_arr, m=m, seed=seed, draws=draws)[key]
        sep = np.empty_like(joint)
        for s in range(2):
            sub = mix.separate(s, None if edd_samples == "group" else mix.n)
            sep[:, s] = rp_risk_theory(sub, lam_arr, m=m, seed=seed, draws=draws)[key][:, 0]
    else:
        joint = ridge_risk_theory(mix, lam_arr)[key]
        sep = np.empty_like(joint)
        for s in range(2):
            sub = mix.separate(s, None if edd_samples == "group" else mix.n)
            sep[:, s] = ridge_risk_theory(sub, lam_arr)[key][:, 0]
    odd = np.abs(joint[:, 1] - joint[:, 0])
    edd = np.abs(sep[:, 1] - sep[:, 0])
    if add == "ratio":  # undefined (NaN) when the separate models' risks coincide (EDD ~ 0)
        tiny = 1e-10 * np.maximum(np.abs(sep).max(-1), np.abs(joint).max(-1))
        with np.errstate(divide="ignore", invalid="ignore"):
            addv = np.where(edd > tiny, odd / np.where(edd > tiny, edd, 1.0), np.nan)
    else:
        addv = odd - edd
    out = {
        "lam": lam_arr,
        "R_joint": joint,
        "R_sep": sep,
        "EDD": edd,
        "ODD": odd,
        "ADD": addv,
        "minority_bias": joint[:, 1] - joint[:, 0],
    }
    return {k: v[0] for k, v in out.items()} if scalar else out
