"""``analyze``: a preference file in, a sensitive-region report (JSON + Markdown) and heat map out."""

from __future__ import annotations

import logging
from pathlib import Path

from .data import PreferenceData, load_preferences
from .mle import fit_bt_counts
from .regions import SensitivityReport, sensitive_triples, sensitive_tuples

__all__ = ["analyze_preferences", "analyze_file"]

log = logging.getLogger(__name__)


def analyze_preferences(data: PreferenceData, *, lam: float = 2.0, k: int = 2, l2: float = 0.0,
                        n_top: int = 20, maxiter: int = 200) -> tuple[SensitivityReport, dict]:
    """Report which triples (``k = 2``) or K-tuples (``k >= 3``) of ``data`` are sensitive.

    - ``scores``: used as they are (BT/PL log-strengths).
    - ``comparisons``: BT is fitted by maximum likelihood (``l2`` ridge; required when an item
      never wins or never loses) and its scores are scanned.
    - ``probabilities``: the table is scanned directly (``k = 2`` only); BT-consistency
      violations of observed ``p_ij`` are reported.

    Returns:
        ``(report, info)`` with ``info`` holding the scores used (if any), the input kind and, for
        comparisons, the BT fit's convergence (``info["fit"]``, also ``report.fit``; a fit that did
        not converge warns with :class:`~.mle.ConvergenceWarning` and is logged).

    Raises:
        ValueError: ``k >= 3`` with a probability table, and whatever the scans raise.
    """
    info: dict = {"kind": data.kind, "n_items": len(data.items)}
    if data.kind == "probabilities":
        if k != 2:
            raise ValueError("k >= 3 (K-tuples) needs per-item scores or comparisons, not a probability table")
        return sensitive_triples(matrix=data.matrix, lam=lam, items=data.items, n_top=n_top), info
    if data.kind == "comparisons":
        scores = fit_bt_counts(data.wins, l2=l2, items=data.items, maxiter=maxiter)
        info["n_comparisons"] = float(data.wins.sum())
        info["fit"] = scores.info.to_dict()
        if not scores.info.converged:
            log.warning("the BT fit did not converge (max |gradient| %.3g after %d iterations): the scanned "
                        "scores are not the MLE", scores.info.grad_norm, scores.info.iterations)
    else:
        scores = data.scores
    info["scores"] = {name: float(s) for name, s in zip(data.items, scores)}
    if k == 2:
        rep = sensitive_triples(scores=scores, lam=lam, items=data.items, n_top=n_top)
    else:
        rep = sensitive_tuples(scores, k, lam=lam, items=data.items, n_top=n_top)
    rep.fit = info.get("fit")
    return rep, info


def analyze_file(path: str | Path, out_dir: str | Path, *, lam: float = 2.0, k: int = 2, l2: float = 0.0,
                 n_top: int = 20, plot: bool = True, maxiter: int = 200) -> SensitivityReport:
    """Load ``path``, analyse it, write ``out_dir/sensitivity_report.{json,md}`` (+ ``heatmap.png``).

    Raises:
        FileNotFoundError, ValueError: see :func:`~.data.load_preferences` and :func:`analyze_preferences`.
    """
    data = load_preferences(path)
    rep, info = analyze_preferences(data, lam=lam, k=k, l2=l2, n_top=n_top, maxiter=maxiter)
    out = Path(out_dir)
    rep.save(out)
    if "scores" in info:
        import json

        (out / "scores.json").write_text(json.dumps(info["scores"], indent=2) + "\n", encoding="utf-8")
    if plot:
        from .plotting import plot_sensitivity_heatmap

        plot_sensitivity_heatmap(out / "heatmap.png", points=rep.points, lam=lam,
                                 title=f"{Path(path).name}: {rep.n_sensitive}/{rep.n_evaluated} sensitive (λ={lam:g})")
    return rep
