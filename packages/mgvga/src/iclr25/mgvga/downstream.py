"""Downstream tasks with frozen embeddings: QoR prediction (graph + recipe) and circuit-level
logic-equivalence identification (spec Sec. 1.7, 4.3, 4.4)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Batch, Data

from .circuit import Circuit
from .model import MGVGAEncoder, QoRHead

__all__ = ["recipe_features", "embed_graphs", "hand_features", "zscore_labels", "qor_lodo", "equivalence_scores", "roc_auc"]

log = logging.getLogger("iclr25.mgvga")


@torch.no_grad()
def embed_graphs(encoder: MGVGAEncoder, graphs: Sequence[Data], batch_size: int = 8) -> torch.Tensor:
    """Mean-pooled embeddings Float[n, d] of ``graphs`` (PyG batches of ``batch_size``).

    Raises:
        ValueError: no graph given.
    """
    if len(graphs) == 0:
        raise ValueError("embed_graphs: no graph given")
    out = []
    for i in range(0, len(graphs), batch_size):
        out.append(encoder.embed_graph(Batch.from_data_list(list(graphs[i : i + batch_size]))))
    return torch.cat(out)


def hand_features(c: Circuit, g: Data) -> torch.Tensor:
    """Float[5] ``log1p`` of (#PI, #PO, #AND, levels, #NOT) — the hand-feature QoR baseline."""
    n_not = int((g.x == 3).sum())
    return torch.log1p(torch.tensor([c.num_pis, c.num_pos, c.num_ands, c.levels, n_not], dtype=torch.float32))


def zscore_labels(y: np.ndarray, min_std: float = 1e-6) -> tuple[np.ndarray, float, float]:
    """Per-design z-scores with population std floored at ``min_std`` (no NaN for constant labels)."""
    mu, sd = float(y.mean()), float(y.std())
    sd = max(sd, min_std)
    return (y - mu) / sd, mu, sd


def _fit_predict(emb_tr, rec_tr, y_tr, emb_te, rec_te, *, use_graph: bool, seed: int, epochs: int, lr: float):
    torch.manual_seed(seed)
    head = QoRHead(emb_tr.shape[1], use_graph=use_graph)
    opt = torch.optim.Adam(head.parameters(), lr=lr, weight_decay=1e-4)
    for _ in range(epochs):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(head(emb_tr, rec_tr), y_tr)
        loss.backward()
        opt.step()
    head.eval()
    with torch.no_grad():
        return head(emb_te, rec_te)


def recipe_features(rec: torch.Tensor, n_ops: int = 7) -> torch.Tensor:
    """Float[B, n_ops + steps·n_ops]: op counts and position-wise one-hot of Long[B, steps] recipes."""
    oh = torch.nn.functional.one_hot(rec, n_ops).float()
    return torch.cat([oh.sum(1), oh.flatten(1)], 1)


RIDGE_ALPHAS = (1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)


def _ridge_solve(X: torch.Tensor, y: torch.Tensor, alphas) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Standardise X, centre y and solve ridge for each alpha (penalty alpha · n_rows · 1e-3)."""
    mu, sd = X.mean(0), X.std(0).clamp_min(1e-6)
    Z = (X - mu) / sd
    ym = y.mean()
    G = Z.T @ Z
    b = Z.T @ (y - ym)
    eye = torch.eye(G.shape[0], dtype=G.dtype)
    out = []
    for a in alphas:
        w = torch.linalg.solve(G + a * Z.shape[0] * 1e-3 * eye, b)
        out.append((w, mu, sd, ym))
    return out


def _fit_predict_ridge(emb_tr, rec_tr, y_tr, emb_te, rec_te, *, use_graph: bool, groups: torch.Tensor | None = None,
                       alphas=RIDGE_ALPHAS, inner_folds: int = 3):
    """Ridge on recipe one-hots (+ embedding and embedding × op-count interactions); the penalty is
    chosen from ``alphas`` by grouped inner CV over the *training* designs (``groups``)."""

    def feats(e, r):
        f = recipe_features(r)
        if not use_graph:
            return f
        counts = f[:, :7]
        return torch.cat([f, e, (e[:, :, None] * counts[:, None, :]).flatten(1)], 1)

    Xtr, Xte = feats(emb_tr, rec_tr).double(), feats(emb_te, rec_te).double()
    y = y_tr.double()
    alphas = list(alphas)
    if groups is not None and len(alphas) > 1:
        ug = torch.unique(groups)
        fold_of = {int(g): i % inner_folds for i, g in enumerate(ug.tolist())}
        fid = torch.tensor([fold_of[int(g)] for g in groups.tolist()])
        err = torch.zeros(len(alphas), dtype=torch.float64)
        for f in range(inner_folds):
            te = fid == f
            if te.all() or not te.any():
                continue
            for i, (w, mu, sd, ym) in enumerate(_ridge_solve(Xtr[~te], y[~te], alphas)):
                err[i] += (((Xtr[te] - mu) / sd @ w + ym - y[te]) ** 2).sum()
        alphas = [alphas[int(err.argmin())]]
    w, mu, sd, ym = _ridge_solve(Xtr, y, alphas[:1])[0]
    return ((Xte - mu) / sd @ w + ym).float()


def qor_lodo(design_emb: dict[str, torch.Tensor], labels: dict[str, tuple], recipes: np.ndarray,
             designs: Sequence[str], *, seeds: Sequence[int] = (0,), epochs: int = 150, lr: float = 3e-3,
             max_recipes: int | None = None, use_graph: bool = True, head: str = "mlp",
             emb_dims: int | None = None) -> dict:
    """Leave-one-design-out QoR prediction on per-design z-scored AND counts.

    Args:
        design_emb: ``{design: Float[d]}`` frozen graph embedding of each start AIG (standardised
            across designs before use).
        labels: :func:`iclr25.mgvga.data.qor_labels` output. recipes: int64[1500, 20].
        designs: the designs to use (folds). max_recipes: a random subset of k labelled recipes
            per design, drawn per seed (z-scores always use all labelled recipes).
        head: ``"mlp"`` (:class:`QoRHead`, Adam, full batch, ``epochs``) or ``"ridge"`` (closed-form
            ridge on recipe one-hots, the embedding and embedding × op-count interactions, penalty
            chosen by 3-fold grouped CV over the training designs of each fold;
            deterministic given the recipe subset).
        emb_dims: keep the first k principal components of the (standardised) embeddings.

    Returns:
        ``{"mse": mean over seeds of the fold-averaged MSE, "mse_std": std over seeds,
        "spearman": mean within-design Spearman ρ over the folds where it is defined (``None`` if
        none), "spearman_undefined": count, "per_seed": [...], "per_design": {d: mse},
        "excluded": {design: reason}}``.

    Raises:
        ValueError: fewer than 2 designs (after excluding constant-label ones), naming them; an
            unknown ``head``; non-finite embeddings; ``max_recipes < 2``; ``emb_dims < 1``.
    """
    if head not in ("mlp", "ridge"):
        raise ValueError(f"head must be 'mlp' or 'ridge', got {head!r}")
    if max_recipes is not None and max_recipes < 2:
        raise ValueError(f"max_recipes={max_recipes}: the head needs >= 2 labelled recipes per design")
    if emb_dims is not None and emb_dims < 1:
        raise ValueError(f"emb_dims={emb_dims} must be >= 1 (None keeps every dimension)")
    excluded = {}
    for d in designs:
        a = labels[d][2]
        if len(a) < 2 or float(np.std(a)) <= 1e-9:
            excluded[d] = f"constant QoR label ({len(a)} recipes, all {a[0] if len(a) else '-'} ANDs)"
            log.warning("QoR probe: design %s excluded: %s", d, excluded[d])
    designs = [d for d in designs if d not in excluded]
    if len(designs) < 2:
        raise ValueError(f"leave-one-design-out needs at least 2 designs with non-constant labels, got {designs}"
                         + (f" (excluded: {excluded})" if excluded else ""))
    E = torch.stack([design_emb[d] for d in designs]).float()
    if not torch.isfinite(E).all():
        raise ValueError("qor_lodo: design embeddings contain NaN/inf")
    E = (E - E.mean(0)) / (E.std(0) + 1e-6)
    if emb_dims is not None and emb_dims < E.shape[1]:
        U, S, _ = torch.linalg.svd(E, full_matrices=False)
        E = U[:, :emb_dims] * S[:emb_dims] / (S[:emb_dims].pow(2).mean().sqrt() + 1e-9)
    per_seed, rhos, per_design = [], [], {d: [] for d in designs}
    n_rho_undef = 0
    for s in seeds:
        rng = np.random.default_rng(s)
        rows = {}
        for i, d in enumerate(designs):
            _, rid, ands = labels[d]
            # z-scores use all labelled recipes of the design; seed s draws the recipe subset
            z, _, _ = zscore_labels(ands)
            sel = np.arange(len(rid))
            if max_recipes is not None and max_recipes < len(rid):
                sel = np.sort(rng.choice(len(rid), max_recipes, replace=False))
            rows[d] = (E[i], torch.as_tensor(recipes[rid[sel]]), torch.as_tensor(z[sel], dtype=torch.float32))
        mses = []
        for d in designs:
            tr = [k for k in designs if k != d]
            emb_tr = torch.cat([rows[k][0].expand(len(rows[k][2]), -1) for k in tr])
            rec_tr = torch.cat([rows[k][1] for k in tr])
            y_tr = torch.cat([rows[k][2] for k in tr])
            groups = torch.cat([torch.full((len(rows[k][2]),), j) for j, k in enumerate(tr)])
            e, r, y = rows[d]
            if head == "ridge":
                pred = _fit_predict_ridge(emb_tr, rec_tr, y_tr, e.expand(len(y), -1), r, use_graph=use_graph,
                                          groups=groups)
            elif head == "mlp":
                pred = _fit_predict(emb_tr, rec_tr, y_tr, e.expand(len(y), -1), r, use_graph=use_graph, seed=s,
                                    epochs=epochs, lr=lr)
            m = float(((pred - y) ** 2).mean())
            mses.append(m)
            per_design[d].append(m)
            if float(y.std()) > 0 and float(pred.std()) > 0:
                rhos.append(float(spearmanr(pred.numpy(), y.numpy()).statistic))
            else:
                n_rho_undef += 1
        per_seed.append(float(np.mean(mses)))
    if n_rho_undef:
        log.warning("QoR probe: Spearman rho undefined (constant prediction or label on the test recipes) in %d of "
                    "%d folds; averaged over the rest", n_rho_undef, n_rho_undef + len(rhos))
    return {"mse": float(np.mean(per_seed)), "mse_std": float(np.std(per_seed)), "per_seed": per_seed,
            "spearman": float(np.mean(rhos)) if rhos else None, "spearman_undefined": n_rho_undef,
            "per_design": {d: float(np.mean(v)) for d, v in per_design.items()}, "excluded": excluded}


def roc_auc(y: Sequence[int], score: Sequence[float], *, what: str = "pairs") -> float | None:
    """ROC-AUC (``sklearn``) of binary labels ``y`` against ``score``.

    Returns:
        the AUC, or ``None`` (JSON ``null``) with a warning naming ``what`` and the reason when it is
        undefined (no pair, or only one class present).

    Raises:
        ValueError: non-finite scores or lengths that differ.
    """
    y, score = np.asarray(y), np.asarray(score, dtype=np.float64)
    if y.shape != score.shape:
        raise ValueError(f"{what}: {y.shape[0]} labels but {score.shape[0]} scores")
    if y.size == 0:
        log.warning("%s: ROC-AUC undefined (no pair); reported as null", what)
        return None
    if y.min() == y.max():
        log.warning("%s: ROC-AUC undefined (only %s pairs, %d of them); reported as null", what,
                    "positive" if y.min() == 1 else "negative", y.size)
        return None
    if not np.isfinite(score).all():
        raise ValueError(f"{what}: similarity scores contain NaN/inf")
    return float(roc_auc_score(y, score))


def equivalence_scores(emb_base: torch.Tensor, emb_var: torch.Tensor) -> np.ndarray:
    """Cosine similarity float64[P] between paired rows of Float[P, d] embeddings."""
    return torch.nn.functional.cosine_similarity(emb_base, emb_var, dim=-1).double().numpy()
