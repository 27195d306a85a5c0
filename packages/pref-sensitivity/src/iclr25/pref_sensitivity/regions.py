"""Which triples / K-tuples of a preference model fall in the sensitive region (numpy).

Point these at a fitted reward model's per-item scores (BT/PL log-strengths) or at a table of
pairwise preference probabilities. For every unordered pair ``{i, j}`` and pivot ``k`` (BT) or
shared context ``C`` of ``K - 1`` items (K-tuple PL), the held-out ``p_ij`` implied through the
pivot is ``g(p_ik, p_kj)`` and its sensitivities are Result 2 of the spec. A triple is
*sensitive at level lambda* when ``max(d p_ij / d p_ik, d p_ij / d p_kj) > lambda``.

The scans work in logit (score-difference) space: with ``u = logit p_ik`` (``s_i - s_k`` for
scores) and ``v = logit p_kj``, ``d p_ij / d p_ik = sigma'(u + v) / sigma'(u)``, and both
partials are computed as logarithms, ``log sigma'(x) = log sigma(x) + log sigma(-x)``. Extreme
score gaps therefore give exact (log-)partials instead of the 0/0 of probability space; partials
beyond the float range are reported through their ``log10`` (the plain value is then ``None``).
A NaN anywhere in a scan is an error that names the combination.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit, logit, logsumexp

from ._checks import EPS, check_lam, check_probabilities, check_scores
from .closed_form import log_bt_partials, log_dsigmoid

__all__ = [
    "SensitivityReport",
    "check_preference_matrix",
    "scores_to_matrix",
    "sensitive_triples",
    "sensitive_tuples",
    "log_bt_partials",
    "log_dsigmoid",
]

_CHUNK = 2_000_000  # entries per vectorised block


@dataclass
class SensitivityReport:
    """Summary of a sensitive-region scan.

    Attributes:
        source: ``"scores"``, ``"matrix"`` or ``"tuples"``.
        lam: the threshold ``lambda``.
        k: tuple size (2 for BT triples).
        n_items: number of options.
        items: option names (``str``), index order.
        n_evaluated: number of (pair, pivot/context) combinations evaluated.
        n_sensitive: how many have ``max partial > lam``.
        fraction_sensitive: ``n_sensitive / n_evaluated``.
        n_amplifying: how many have ``max partial > 1`` (a change is amplified).
        max_sensitivity: the largest partial found (``None`` when it exceeds the float range;
            see ``max_log10_sensitivity``).
        max_log10_sensitivity: ``log10`` of the largest partial (always finite).
        pivot_counts: ``{item: count}`` how often each item is the pivot (or in the context) of a
            sensitive combination — dominant items show up here.
        top: the ``n_top`` most sensitive combinations, most sensitive first, as dicts with keys
            ``i, k, j`` (names; ``k`` is a ``+``-joined context for tuples), ``p_ik, p_kj``,
            ``p_ij_implied``, ``p_ij_observed`` (matrix input, else None), ``d_pij_d_pik``,
            ``d_pij_d_pkj`` (``None`` beyond the float range), ``log10_d_pij_d_pik``,
            ``log10_d_pij_d_pkj``, ``bt_violation`` (``|logit p_ij - logit p_ik - logit p_kj|`` when
            ``p_ij`` is observed).
        max_bt_violation: largest ``bt_violation`` (matrix input; 0 for a BT-consistent table).
        points: up to 5000 sampled ``(p_ik, p_kj)`` pairs for plotting, ``(m, 2)``.
        fit: for comparisons input, the BT fit's :class:`~.mle.FitInfo` as a dict (converged,
            iterations, grad_norm, message, ...); ``None`` otherwise.
    """

    source: str
    lam: float
    k: int
    n_items: int
    items: list[str]
    n_evaluated: int = 0
    n_sensitive: int = 0
    fraction_sensitive: float = 0.0
    n_amplifying: int = 0
    max_sensitivity: float | None = 0.0
    max_log10_sensitivity: float = float("-inf")
    pivot_counts: dict[str, int] = field(default_factory=dict)
    top: list[dict[str, Any]] = field(default_factory=list)
    max_bt_violation: float | None = None
    points: np.ndarray | None = None
    fit: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``points`` as a list of pairs)."""
        d = asdict(self)
        d["points"] = None if self.points is None else self.points.tolist()
        return d

    def to_markdown(self, n_rows: int = 15) -> str:
        """A short Markdown report: summary line, the most sensitive combinations, the pivots."""
        what = "triples (i, pivot k, j)" if self.source != "tuples" else f"{self.k}-tuples (i, context C, j)"
        lines = [
            f"# Preference sensitivity report ({self.source})",
            "",
            f"{self.n_items} items; {self.n_evaluated} {what} evaluated; "
            f"**{self.n_sensitive} ({100 * self.fraction_sensitive:.3g}%) sensitive** at lambda = {self.lam:g} "
            f"(max partial of p_ij > lambda); {self.n_amplifying} amplify changes (partial > 1); "
            f"largest partial {_fmt_partial(self.max_sensitivity, self.max_log10_sensitivity)}.",
        ]
        if self.fit is not None:
            f = self.fit
            lines.append(f"BT maximum-likelihood fit: {'converged' if f['converged'] else '**did not converge**'} "
                         f"({f['iterations']} {f['method']} iterations, max |gradient| {f['grad_norm']:.2g}; "
                         f"{f['message']}).")
        if self.max_bt_violation is not None:
            lines.append(f"Largest BT-consistency violation |logit p_ij - logit p_ik - logit p_kj| = "
                         f"{self.max_bt_violation:.4g}.")
        if self.top:
            lines += ["", "| i | k | j | p_ik | p_kj | p_ij implied | p_ij observed | dp_ij/dp_ik | dp_ij/dp_kj |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for r in self.top[:n_rows]:
                obs = "" if r["p_ij_observed"] is None else f"{r['p_ij_observed']:.4g}"
                lines.append(f"| {r['i']} | {r['k']} | {r['j']} | {r['p_ik']:.4g} | {r['p_kj']:.4g} | "
                             f"{r['p_ij_implied']:.4g} | {obs} | "
                             f"{_fmt_partial(r['d_pij_d_pik'], r['log10_d_pij_d_pik'])} | "
                             f"{_fmt_partial(r['d_pij_d_pkj'], r['log10_d_pij_d_pkj'])} |")
        piv = sorted(((c, n) for n, c in self.pivot_counts.items() if c), reverse=True)[:10]
        if piv:
            lines += ["", "Items most often the pivot of a sensitive combination: "
                      + ", ".join(f"{n} ({c})" for c, n in piv) + "."]
        return "\n".join(lines) + "\n"

    def save(self, out_dir: str | Path, stem: str = "sensitivity_report") -> Path:
        """Write ``<stem>.json`` and ``<stem>.md`` into ``out_dir``; returns the JSON path."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        p = out / f"{stem}.json"
        p.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        (out / f"{stem}.md").write_text(self.to_markdown(), encoding="utf-8")
        return p


def _fmt_partial(value: float | None, log10: float) -> str:
    if value is not None:
        return f"{value:.4g}"
    return f"1e{log10:.1f}"


_LN10 = math.log(10.0)
_MAX_LN = math.log(np.finfo(np.float64).max)


def _exp_or_none(ln: float) -> float | None:
    return float(math.exp(ln)) if ln < _MAX_LN else None


def _names(items: Sequence[str] | None, n: int) -> list[str]:
    if items is None:
        return [str(i) for i in range(n)]
    names = [str(x) for x in items]
    if len(names) != n:
        raise ValueError(f"items: got {len(names)} names for {n} options")
    if len(set(names)) != n:
        dup = sorted({x for x in names if names.count(x) > 1})
        raise ValueError(f"items: duplicate names {dup}")
    return names


def check_preference_matrix(P, *, tol: float = 1e-6, eps: float = EPS,
                            items: Sequence[str] | None = None) -> np.ndarray:
    """Validate a table of pairwise preference probabilities ``P[i, j] = P(i > j)``.

    Missing entries are NaN; ``P[j, i]`` is filled from ``1 - P[i, j]``. The diagonal is ignored
    (must be NaN or 0.5).

    Args:
        P: ``(n, n)`` float, entries in [0, 1] or NaN.
        tol: allowed ``|P[i, j] + P[j, i] - 1|`` when both are given.
        eps: clipping margin for entries exactly 0 or 1 (warning).
        items: names used in error messages.

    Returns:
        ``(n, n)`` float64 matrix with the complement filled in and NaN on the diagonal.

    Raises:
        ValueError: not square / fewer than 3 options, a value outside [0, 1], an inconsistent pair
            (``P[i, j] + P[j, i] != 1``), a diagonal entry other than 0.5, or an option with no
            comparison at all (its name is given).
    """
    A = np.array(P, dtype=np.float64, copy=True)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"preference matrix must be square (n, n), got shape {A.shape}")
    n = A.shape[0]
    names = _names(items, n)
    if n < 3:
        raise ValueError(f"need at least 3 options to form a triple, got {n}")
    diag = np.diag(A)
    bad = ~np.isnan(diag) & (np.abs(diag - 0.5) > tol)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"preference matrix: diagonal entry P[{names[i]}, {names[i]}] = {diag[i]}; "
                         "an option against itself must be NaN (or 0.5)")
    np.fill_diagonal(A, np.nan)
    A = check_probabilities(A, "preference matrix", eps=eps, allow_nan=True)
    both = ~np.isnan(A) & ~np.isnan(A.T)
    incons = both & (np.abs(A + A.T - 1.0) > tol)
    if incons.any():
        i, j = (int(x) for x in np.argwhere(incons)[0])
        raise ValueError(
            f"inconsistent preference table: P({names[i]} > {names[j]}) = {A[i, j]:.6g} and "
            f"P({names[j]} > {names[i]}) = {A[j, i]:.6g} do not sum to 1; give one direction only "
            "or make them complementary"
        )
    A = np.where(np.isnan(A), 1.0 - A.T, A)
    np.fill_diagonal(A, np.nan)
    empty = np.isnan(A).all(axis=1)
    if empty.any():
        i = int(np.argmax(empty))
        raise ValueError(f"option {names[i]!r} has no comparison with any other option; "
                         "drop it or add preferences involving it")
    return A


def scores_to_matrix(scores) -> np.ndarray:
    """BT preference matrix ``P[i, j] = sigmoid(s_i - s_j)`` from ``(n,)`` scores (NaN diagonal)."""
    s = check_scores(scores)
    P = expit(s[:, None] - s[None, :])
    np.fill_diagonal(P, np.nan)
    return P


class _Scan:
    """Accumulates statistics and the top rows over vectorised blocks."""

    def __init__(self, lam: float, n_top: int, names: list[str], rng: np.random.Generator):
        self.lam, self.n_top, self.names = lam, n_top, names
        self.log_lam = math.log(lam)
        n_items = len(names)
        self.n_eval = self.n_sens = self.n_amp = 0
        self.max_log = float("-inf")
        self.max_viol: float | None = None
        self.pivot = np.zeros(n_items, dtype=np.int64)
        self.rows: list[tuple] = []
        self.pts: list[np.ndarray] = []
        self.rng = rng

    def add(self, u, v, i, kk, j, obs=None, pivot_members=None, k_name=None):
        """u, v: (m,) logits of p_ik and p_kj (score differences); i, j: (m,) item ids; kk: (m,)
        pivot ids (int) or context ids; obs: (m,) observed p_ij or None."""
        if u.size == 0:
            return
        la, lb = log_bt_partials(u, v)
        lm = np.maximum(la, lb)
        bad = ~np.isfinite(lm)
        if bad.any():
            t = int(np.argmax(bad))
            name = k_name(kk[t]) if k_name is not None else kk[t]
            raise ValueError(f"sensitivity scan: the partials of (i={self.names[int(i[t])]}, k={name}, "
                             f"j={self.names[int(j[t])]}) are not finite (logit p_ik = {float(u[t])}, logit p_kj = "
                             f"{float(v[t])}); the scores are too large to compare")
        sens = lm > self.log_lam
        self.n_eval += u.size
        self.n_sens += int(sens.sum())
        self.n_amp += int((lm > 0).sum())
        self.max_log = max(self.max_log, float(lm.max()))
        if pivot_members is None:
            self.pivot += np.bincount(kk[sens], minlength=self.pivot.size)
        else:
            self.pivot += np.bincount(pivot_members(kk[sens]), minlength=self.pivot.size)
        viol = None
        if obs is not None:
            have = ~np.isnan(obs)
            viol = np.full(u.shape, np.nan)
            viol[have] = np.abs(logit(obs[have]) - u[have] - v[have])
            if have.any():
                vmax = float(viol[have].max())
                self.max_viol = vmax if self.max_viol is None else max(self.max_viol, vmax)
        take = min(self.n_top, lm.size)
        idx = np.argpartition(-lm, take - 1)[:take]
        for t in idx:
            self.rows.append((float(lm[t]), int(i[t]), kk[t], int(j[t]), float(expit(u[t])), float(expit(v[t])),
                              float(expit(u[t] + v[t])),
                              None if obs is None or np.isnan(obs[t]) else float(obs[t]),
                              float(la[t]), float(lb[t]),
                              None if viol is None or np.isnan(viol[t]) else float(viol[t])))
        self.rows.sort(key=lambda r: -r[0])
        del self.rows[self.n_top:]
        keep = min(u.size, 5000)
        sel = self.rng.choice(u.size, keep, replace=False) if u.size > keep else np.arange(u.size)
        self.pts.append(np.stack([expit(u[sel]), expit(v[sel])], 1))

    def report(self, source, k, names, k_name) -> SensitivityReport:
        pts = np.concatenate(self.pts) if self.pts else np.zeros((0, 2))
        if len(pts) > 5000:
            pts = pts[self.rng.choice(len(pts), 5000, replace=False)]
        top = [dict(i=names[r[1]], k=k_name(r[2]), j=names[r[3]], p_ik=r[4], p_kj=r[5], p_ij_implied=r[6],
                    p_ij_observed=r[7], d_pij_d_pik=_exp_or_none(r[8]), d_pij_d_pkj=_exp_or_none(r[9]),
                    log10_d_pij_d_pik=r[8] / _LN10, log10_d_pij_d_pkj=r[9] / _LN10, bt_violation=r[10])
               for r in self.rows]
        return SensitivityReport(
            source=source, lam=float(self.lam), k=k, n_items=len(names), items=list(names),
            n_evaluated=self.n_eval, n_sensitive=self.n_sens,
            fraction_sensitive=self.n_sens / self.n_eval if self.n_eval else 0.0,
            n_amplifying=self.n_amp,
            max_sensitivity=_exp_or_none(self.max_log) if self.n_eval else 0.0,
            max_log10_sensitivity=self.max_log / _LN10,
            pivot_counts={names[t]: int(c) for t, c in enumerate(self.pivot)},
            top=top, max_bt_violation=self.max_viol, points=pts,
        )


def sensitive_triples(
    *,
    scores=None,
    matrix=None,
    lam: float = 2.0,
    items: Sequence[str] | None = None,
    n_top: int = 20,
    seed: int = 0,
) -> SensitivityReport:
    """Scan every unordered pair ``{i, j}`` and pivot ``k`` for sensitivity of the implied ``p_ij``.

    Give exactly one of ``scores`` (a fitted BT/PL reward model: per-item log-strengths, the
    matrix is ``sigmoid(s_i - s_j)``) or ``matrix`` (observed/estimated pairwise probabilities;
    triples whose ``p_ik`` or ``p_kj`` is missing are skipped, and where ``p_ij`` is observed the
    BT-consistency violation is reported).

    Args:
        scores: ``(n,)`` float.
        matrix: ``(n, n)`` float ``P[i, j] = P(i > j)``, NaN = not compared (see
            :func:`check_preference_matrix`).
        lam: threshold ``lambda > 0`` on ``max(d p_ij/d p_ik, d p_ij/d p_kj)``.
        items: ``n`` option names (default ``"0".."n-1"``).
        n_top: how many of the most sensitive triples to list.
        seed: seed of the subsample of points kept for plotting.

    Returns:
        :class:`SensitivityReport` over ``n (n-1) (n-2) / 2`` triples (fewer when entries are missing).

    Raises:
        ValueError: both or neither input, bad probabilities/scores (see the checkers), ``lam <= 0``, or
            a matrix in which no two compared pairs share an item (no triple to evaluate).
    """
    lam = check_lam(lam)
    if (scores is None) == (matrix is None):
        raise ValueError("give exactly one of scores= (per-item) or matrix= (pairwise probabilities)")
    if scores is not None:
        s = check_scores(scores)
        if s.size < 3:
            raise ValueError(f"need at least 3 options to form a triple, got {s.size}")
        X, P, obs_given, source = s[:, None] - s[None, :], None, False, "scores"
    else:
        P, obs_given, source = check_preference_matrix(matrix, items=items), True, "matrix"
        with np.errstate(divide="ignore", invalid="ignore"):
            X = logit(P)
    n = X.shape[0]
    names = _names(items, n)
    scan = _Scan(lam, n_top, names, np.random.default_rng(seed))
    iu, ju = np.triu_indices(n, 1)
    ks = np.arange(n)
    step = max(1, _CHUNK // n)
    for s0 in range(0, iu.size, step):
        i = np.repeat(iu[s0:s0 + step], n)
        j = np.repeat(ju[s0:s0 + step], n)
        k = np.tile(ks, min(step, iu.size - s0))
        keep = (k != i) & (k != j)
        i, j, k = i[keep], j[keep], k[keep]
        u, v = X[i, k], X[k, j]
        ok = ~np.isnan(u) & ~np.isnan(v)
        i, j, k, u, v = i[ok], j[ok], k[ok], u[ok], v[ok]
        scan.add(u, v, i, k, j, obs=P[i, j] if obs_given else None, k_name=lambda t: names[t])
    if obs_given and scan.n_eval == 0:
        n_pairs = int((~np.isnan(X[iu, ju]) | ~np.isnan(X[ju, iu])).sum())
        raise ValueError(f"no triple of items can be evaluated: none has two compared pairs through a shared "
                         f"item (p_ik and p_kj); the {n_pairs} compared pairs of {n} items share no item, so "
                         "no p_ij is implied; give pairs that chain (i-k and k-j)")
    return scan.report(source, 2, names, lambda t: names[t])


def sensitive_tuples(
    scores,
    k: int,
    *,
    lam: float = 2.0,
    items: Sequence[str] | None = None,
    n_top: int = 20,
    max_evaluations: int = 20_000_000,
    seed: int = 0,
) -> SensitivityReport:
    """Scan K-tuple (Plackett-Luce top-1) designs: pairs ``{i, j}`` compared through a shared context.

    For every unordered pair ``{i, j}`` and context ``C`` of ``k - 1`` other items, the known
    preferences are ``q_A = q(i | {i} u C)`` and ``q_B = q(j | {j} u C)``; the implied ``p_ij =
    g(q_A, 1 - q_B)`` and its partials are Result 2 with ``a = q_A`` and ``b = 1 - q_B`` (the
    report's ``p_ik``, ``p_kj`` columns hold ``a`` and ``b``; partials are magnitudes). ``k = 2``
    reproduces :func:`sensitive_triples` on the same scores.

    Args:
        scores: ``(n,)`` float log-strengths.
        k: tuple size ``K >= 2`` (``K - 1 <= n - 2``).
        lam, items, n_top, seed: as in :func:`sensitive_triples`.
        max_evaluations: refuse scans larger than this many (pair, context) combinations.

    Returns:
        :class:`SensitivityReport` with ``source="tuples"``.

    Raises:
        ValueError: bad scores, ``k`` out of range, or a scan over ``max_evaluations``.
    """
    lam = check_lam(lam)
    s = check_scores(scores)
    n = s.size
    names = _names(items, n)
    if not 2 <= k <= n - 1:
        raise ValueError(f"k must be in [2, n-1] = [2, {n - 1}] for n={n} options, got {k}")
    total = math.comb(n, 2) * math.comb(n - 2, k - 1)
    if total > max_evaluations:
        raise ValueError(f"{total} (pair, context) combinations for n={n}, k={k} exceed max_evaluations="
                         f"{max_evaluations}; raise it or scan a subset of items")
    ctx = np.array(list(itertools.combinations(range(n), k - 1)), dtype=np.int64)  # (c, k-1)
    lw = logsumexp(s[ctx], axis=1)  # log W_C
    member = np.zeros((len(ctx), n), dtype=bool)
    member[np.arange(len(ctx))[:, None], ctx] = True
    scan = _Scan(lam, n_top, names, np.random.default_rng(seed))
    iu, ju = np.triu_indices(n, 1)
    c_ids = np.arange(len(ctx))
    step = max(1, _CHUNK // len(ctx))
    for s0 in range(0, iu.size, step):
        m = min(step, iu.size - s0)
        i = np.repeat(iu[s0:s0 + m], len(ctx))
        j = np.repeat(ju[s0:s0 + m], len(ctx))
        c = np.tile(c_ids, m)
        keep = ~member[c, i] & ~member[c, j]
        i, j, c = i[keep], j[keep], c[keep]
        u = s[i] - lw[c]  # logit q_A
        v = lw[c] - s[j]  # logit (1 - q_B)
        scan.add(u, v, i, c, j, pivot_members=lambda cs: ctx[cs].ravel(),
                 k_name=lambda t: "+".join(names[x] for x in ctx[t]))
    return scan.report("tuples", k, names, lambda t: "+".join(names[x] for x in ctx[t]))
