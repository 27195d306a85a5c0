"""The BT maximum-likelihood chain experiment (spec, CPU-scale reproduction item 2; numpy).

Options ``{dog, cat, bird}``; ``N`` comparisons of (dog, cat) with win probability ``p12`` and
``N`` of (cat, bird) with ``p23``; (dog, bird) is never compared (a tree design). BT is fitted by
maximum likelihood and the held-out ``p13 = sigmoid(s_dog - s_bird)`` is compared with the closed
form ``g(p12_hat, p23_hat)`` of the empirical proportions, over seeds.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import expit

from ._checks import check_probabilities
from .closed_form import bt_predict
from .mle import MLEExistenceWarning, fit_bt_counts, single_threaded_blas

__all__ = ["OPTIONS", "P23_GRID", "bt_mle_experiment", "summarise_by", "closed_form_job", "bt_mle_job", "dpo_tabular_job",
           "dpo_tiny_lm_job", "torch_missing"]

#: The paper's three options (Fig. 3 uses animals {dog, cat, bird}).
OPTIONS = ("dog", "cat", "bird")
#: The spec's grid of the varied training preference p_23.
P23_GRID = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95, 0.99)


def bt_mle_experiment(
    p12: float = 0.99,
    p23_grid: Sequence[float] = P23_GRID,
    n_values: Sequence[int] = (100, 1000, 10000),
    seeds: int = 20,
    *,
    l2_fallback: float = 1e-6,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Sample comparisons on the chain dog-cat-bird, fit BT by MLE, predict the held-out ``p13``.

    Args:
        p12: true ``P(dog > cat)``.
        p23_grid: true ``P(cat > bird)`` values.
        n_values: comparisons per trained edge.
        seeds: repetitions per (N, p23).
        l2_fallback: ridge used only when the unregularised MLE does not exist (an empirical
            proportion of exactly 0 or 1); such rows have ``mle_exists = False``.
        seed: base seed of the sampling.

    Returns:
        One dict per (N, p23, seed) with keys ``n, p12, p23, seed, p12_hat, p23_hat, mle_exists,
        p13_mle, p13_closed_form, p13_true`` and the fitted score gaps ``score_gap_12 = s_dog - s_cat``,
        ``score_gap_23 = s_cat - s_bird`` (Result 1: on a tree design they are the logits of the
        empirical proportions).

    Raises:
        ValueError: probabilities outside (0, 1), ``seeds < 1`` or ``n < 1``.
    """
    check_probabilities([p12, *p23_grid], "p12/p23_grid")
    if seeds < 1 or any(int(n) < 1 for n in n_values):
        raise ValueError("seeds and every N must be >= 1")
    rows = []
    with single_threaded_blas(), warnings.catch_warnings():
        warnings.simplefilter("ignore", MLEExistenceWarning)
        for n in n_values:
            for p23 in p23_grid:
                rng = np.random.default_rng([seed, int(n), int(round(p23 * 1e6))])
                w12 = rng.binomial(int(n), p12, size=seeds)
                w23 = rng.binomial(int(n), p23, size=seeds)
                for r in range(seeds):
                    W = np.zeros((3, 3))
                    W[0, 1], W[1, 0] = w12[r], n - w12[r]
                    W[1, 2], W[2, 1] = w23[r], n - w23[r]
                    exists = 0 < w12[r] < n and 0 < w23[r] < n
                    s = fit_bt_counts(W, l2=0.0 if exists else l2_fallback)
                    h12, h23 = w12[r] / n, w23[r] / n
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        closed = float(bt_predict(h12, h23))
                    rows.append(dict(n=int(n), p12=float(p12), p23=float(p23), seed=r, p12_hat=h12, p23_hat=h23,
                                     mle_exists=bool(exists), p13_mle=float(expit(s[0] - s[2])),
                                     p13_closed_form=closed, p13_true=float(bt_predict(p12, p23)),
                                     score_gap_12=float(s[0] - s[1]), score_gap_23=float(s[1] - s[2])))
    return rows


def summarise_by(rows: list[dict[str, Any]], keys: Sequence[str], value: str) -> list[dict[str, Any]]:
    """Group ``rows`` by ``keys`` and give mean, sd (ddof=1 when > 1 row) and count of ``value``."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(float(r[value]))
    out = []
    for key, vals in groups.items():
        v = np.asarray(vals)
        out.append({**dict(zip(keys, key)), "mean": float(v.mean()),
                    "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0, "count": int(v.size)})
    return out


# ---------------------------------------------------------------------------------------------------------
# jobs of the reproduction (iclr25.core.runner: fn(settings, seed, deps) -> JSON record)
# ---------------------------------------------------------------------------------------------------------

def closed_form_job(settings: dict[str, Any], seed: int | None, deps: dict) -> dict[str, Any]:
    """The closed forms' tables (Result 3 table, sensitive-region areas, max sensitivity, point values) and the
    closed forms vs torch autograd (``max_abs_diff`` ``None`` with the reason when torch is missing)."""
    import math

    from .closed_form import bt_sensitivity, max_sensitivity, sensitive_region_area

    p23 = np.array([0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 0.9])
    rec: dict[str, Any] = {
        "result3_table": {"p12": 0.99, "p23": p23.tolist(), "p13": bt_predict(0.99, p23).tolist()},
        "region_area": {str(lam): {"quad": sensitive_region_area(lam), "grid": sensitive_region_area(lam, "grid", grid_n=1000)}
                        for lam in (1, 2, 5, 10, 100)},
        "max_sensitivity": {str(a): float(max_sensitivity(a)[0]) for a in (0.5, 0.2, 0.1, 0.01)},
        "point_values": {f"{a},{b}": [float(bt_predict(a, b)), *map(float, bt_sensitivity(a, b))]
                         for a, b in ((0.01, 0.99), (0.001, 0.999), (0.01, 0.5), (0.99, 0.99), (0.5, 0.5))}}
    why = torch_missing()
    if why is None:
        from .crosscheck import check_closed_form

        err = check_closed_form()
        note = ("BT triple partials (both) and K-tuple PL partials (K = 3, 4) on the 7 x 7 grid "
                "{0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99}^2, autograd through a score model in float64.")
    else:
        err, note = math.nan, why
    rec["closed_form_vs_autograd"] = {"max_abs_diff": None if math.isnan(err) else float(err), "note": note}
    return rec


def bt_mle_job(settings: dict[str, Any], seed: int | None, deps: dict) -> dict[str, Any]:
    """BT MLE on the chain (p12 = 0.99, every p23 of the grid, each N, ``mle_seeds`` seeds): the fits' rows."""
    rows = bt_mle_experiment(0.99, P23_GRID, tuple(settings["mle_n"]), settings["mle_seeds"])
    return {"rows": [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in rows]}


def torch_missing() -> str | None:
    """Why the DPO experiments cannot run (torch/transformers missing), or ``None``."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        return f"not measured: {e.name} is not installed (pip install 'iclr25-pref-sensitivity[dpo]')"
    return None


def dpo_tabular_job(settings: dict[str, Any], seed: int | None, deps: dict) -> dict[str, Any]:
    """Tabular DPO on the chain for each p12 of ``settings["p12s"]`` (every p23 of the grid); ``rows`` is
    ``None`` with ``why`` when torch is missing."""
    why = torch_missing()
    if why is not None:
        return {"rows": None, "why": why}
    from .dpo import dpo_chain_experiment

    rows = []
    for p12 in settings["p12s"]:
        rows += dpo_chain_experiment(p12, P23_GRID, backend="tabular", n_pairs=settings["tab_pairs"])
    return {"rows": rows, "why": None}


def dpo_tiny_lm_job(settings: dict[str, Any], seed: int | None, deps: dict) -> dict[str, Any]:
    """Tiny GPT-2 DPO on the chain at one p12 over ``settings["grid"]`` (rows also appended to
    ``settings["out_file"]``); ``rows`` is ``None`` with ``why`` when torch is missing."""
    import time
    from pathlib import Path

    why = torch_missing()
    if why is not None:
        return {"rows": None, "why": why, "seconds": 0.0}
    import torch

    from .dpo import dpo_chain_experiment

    torch.set_num_threads(1)
    out_file = Path(settings["out_file"])
    if out_file.exists():
        out_file.unlink()
    t0 = time.perf_counter()
    rows = dpo_chain_experiment(settings["p12"], tuple(settings["grid"]), out_file=out_file, backend="tiny-gpt2",
                                steps=settings["steps"], seeds=settings["seeds"], n_pairs=settings["pairs"])
    return {"rows": rows, "why": None, "seconds": time.perf_counter() - t0}
