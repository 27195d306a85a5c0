"""Transferability (Definition 3.2), black-box robust accuracy and the cross-gain mechanism check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn

from .attacks import pgd_linf
from .clip import spectral_layers
from .loss import matched_layers

__all__ = [
    "transfer_rate",
    "predict",
    "TransferResult",
    "transferability_matrix",
    "black_box_robust_accuracy",
    "cross_gain_matrix",
    "mean_off_diagonal",
    "layer_sigmas",
    "make_attack",
    "evaluate_ensemble",
    "surrogate_examples",
]

Attack = Callable[[nn.Module, Tensor, Tensor], Tensor]


def make_attack(eps: float = 0.04, steps: int = 50, step_size: float | None = None, seed: int = 0) -> Attack:
    """A PGD-ℓ∞ attack ``(model, x, y) -> x_adv`` with fixed settings and a seeded random start."""
    gen = torch.Generator().manual_seed(seed)
    return partial(pgd_linf, eps=eps, steps=steps, step_size=step_size, generator=gen)


def transfer_rate(src_correct: Tensor, src_fooled: Tensor, tgt_correct: Tensor, tgt_fooled: Tensor
                  ) -> tuple[float, int]:
    """Empirical transferability rate of Definition 3.2.

    ``T(F→G) = P[G(A_F(x)) ≠ y | F(x) = y, G(x) = y, F(A_F(x)) ≠ y]``.

    Args:
        src_correct: ``(B,)`` bool, ``F(x) = y``.
        src_fooled: ``(B,)`` bool, ``F(A_F(x)) ≠ y``.
        tgt_correct: ``(B,)`` bool, ``G(x) = y``.
        tgt_fooled: ``(B,)`` bool, ``G(A_F(x)) ≠ y`` (the source's adversarial examples).

    Returns:
        ``(rate in [0, 1] or NaN when no point is eligible, number of eligible points)``.
    """
    elig = src_correct.bool() & tgt_correct.bool() & src_fooled.bool()
    n = int(elig.sum())
    if n == 0:
        return float("nan"), 0
    return float((tgt_fooled.bool() & elig).sum()) / n, n


@torch.no_grad()
def predict(model: nn.Module, x: Tensor, batch_size: int = 1000) -> Tensor:
    """``argmax`` predictions ``(B,)`` int64 of ``model`` in eval mode (mode restored)."""
    was = model.training
    model.eval()
    try:
        return torch.cat([model(x[i:i + batch_size]).argmax(-1) for i in range(0, x.shape[0], batch_size)])
    finally:
        model.train(was)


@dataclass
class TransferResult:
    """Output of :func:`transferability_matrix`.

    Attributes:
        T: ``(N, N)`` float; ``T[a, b]`` = transfer rate from member ``a`` (source) to ``b``;
            diagonal = self-fool rate of ``a`` among its correctly classified points.
        counts: ``(N, N)`` int, eligible points per entry.
        clean_acc: ``(N,)`` clean accuracy of each member.
        robust_acc: ``(N,)`` individual robust accuracy = ``1 − T[a, a]``.
    """

    T: Tensor
    counts: Tensor
    clean_acc: Tensor
    robust_acc: Tensor

    @property
    def mean_transfer(self) -> float:
        """Mean off-diagonal transferability rate (ordered pairs)."""
        return mean_off_diagonal(self.T)


def transferability_matrix(models: Sequence[nn.Module], x: Tensor, y: Tensor, attack: Attack | None = None,
                           **attack_kwargs) -> TransferResult:
    """White-box within-ensemble transferability (code: ``evaltrans_correct``).

    Each member ``a`` is attacked on its own (``attack(models[a], x, y)``); ``T[a, b]`` is the
    Def. 3.2 rate of those examples on member ``b``.

    Args:
        models: ``N ≥ 2`` members.
        x: ``(B, C, H, W)`` float in ``[0, 1]``; y: ``(B,)`` int64.
        attack: ``(model, x, y) -> x_adv``; default :func:`make_attack` ``(**attack_kwargs)``.

    Raises:
        ValueError: fewer than 2 models.
    """
    if len(models) < 2:
        raise ValueError(f"transferability needs at least 2 models, got {len(models)}")
    attack = attack or make_attack(**attack_kwargs)
    n = len(models)
    correct = torch.stack([predict(m, x) == y for m in models])  # (N, B)
    T = torch.zeros(n, n)
    C = torch.zeros(n, n, dtype=torch.long)
    for a in range(n):
        x_adv = attack(models[a], x, y)
        fooled = torch.stack([predict(m, x_adv) != y for m in models])
        for b in range(n):
            if a == b:
                n_ok = int(correct[a].sum())
                T[a, a] = float((fooled[a] & correct[a]).sum()) / n_ok if n_ok else float("nan")
                C[a, a] = n_ok
            else:
                T[a, b], C[a, b] = transfer_rate(correct[a], fooled[a], correct[b], fooled[b])
    return TransferResult(T, C, correct.float().mean(1), 1 - torch.diagonal(T))


def black_box_robust_accuracy(surrogates: Sequence[nn.Module], target: nn.Module, x: Tensor, y: Tensor,
                              attack: Attack | None = None, *, x_advs: Sequence[Tensor] | None = None,
                              **attack_kwargs) -> tuple[float, float, list[float]]:
    """Black-box robust accuracy of ``target`` against independently trained ``surrogates``.

    Each surrogate is attacked separately; its robust accuracy is ``1 − T(surrogate → target)``
    (Def. 3.2: restricted to points both classify correctly and whose adversarial example fools the
    surrogate). Returns ``(mean, std, per-surrogate)`` over surrogates (as the code prints).
    ``x_advs`` (one tensor per surrogate) reuses adversarial examples computed before (e.g. when
    several target ensembles are evaluated against the same surrogates).

    Raises:
        ValueError: no surrogate given, or ``x_advs`` of the wrong length.
    """
    if x_advs is not None and len(x_advs) != len(surrogates):
        raise ValueError(f"x_advs has {len(x_advs)} entries for {len(surrogates)} surrogates")
    if len(surrogates) == 0:
        raise ValueError("black_box_robust_accuracy needs at least one surrogate model")
    attack = attack or make_attack(**attack_kwargs)
    tgt_correct = predict(target, x) == y
    accs = []
    for i, s in enumerate(surrogates):
        s_correct = predict(s, x) == y
        x_adv = x_advs[i] if x_advs is not None else attack(s, x, y)
        rate, _ = transfer_rate(s_correct, predict(s, x_adv) != y, tgt_correct, predict(target, x_adv) != y)
        accs.append(1.0 - rate)
    t = torch.tensor(accs)
    return float(t.mean()), float(t.std(unbiased=False)) if len(accs) > 1 else 0.0, accs


@torch.no_grad()
def cross_gain_matrix(models: Sequence[nn.Module], layers: str = "conv") -> Tensor:
    """Cross gains ``G[j, a, b] = ‖A_a^(j) v_b^(j)‖`` (``(L, N, N)`` float) from the stored top vectors.

    The diagonal is each layer's own ``σ_1`` estimate. After LOTOS training the off-diagonal
    entries should be ≲ ``mal``; in a ``clip`` ensemble they are typically closer to ``C``.

    Raises:
        ValueError: see :func:`~iclr25.lotos.loss.matched_layers`, or uninitialised vectors.
    """
    per_model = matched_layers(models, layers)
    n, L = len(models), len(per_model[0])
    G = torch.zeros(L, n, n)
    for j in range(L):
        if not all(p[j].initialized for p in per_model):
            raise ValueError(f"layer {j}: singular vectors not initialised (no training forward yet)")
        for a in range(n):
            for b in range(n):
                v = per_model[b][j].V[:1]
                G[j, a, b] = per_model[a][j].op(v).norm() / v.norm()
    return G


def mean_off_diagonal(M: Tensor) -> float:
    """Mean of the off-diagonal entries of ``(..., N, N)`` (NaNs ignored)."""
    n = M.shape[-1]
    mask = ~torch.eye(n, dtype=torch.bool).expand(M.shape)
    vals = M[mask]
    vals = vals[~torch.isnan(vals)]
    return float(vals.mean()) if vals.numel() else float("nan")


@torch.no_grad()
def layer_sigmas(model: nn.Module, layers: str = "all") -> list[float]:
    """The tracked ``σ_1`` of each wrapped layer of ``model`` (module order)."""
    return [float(m.sigma[0]) for m in spectral_layers(model, layers)]


def evaluate_ensemble(models: Sequence[nn.Module], x: Tensor, y: Tensor, surrogates: Sequence[nn.Module] = (),
                      *, eps: float = 0.04, steps: int = 50, step_size: float | None = None, seed: int = 0,
                      refresh_iters: int = 20, surrogate_adv: Sequence[Tensor] | None = None) -> dict:
    """All metrics of one trained ensemble (used by ``evaluate`` and ``reproduce``).

    Returns a JSON-ready dict (rates and accuracies in %): ``clean_acc_members``, ``clean_acc_ensemble``,
    ``transfer_matrix``, ``mean_transfer``, ``robust_acc_members``, ``mean_robust_acc``,
    ``blackbox_robust_acc`` / ``_std`` / ``_per_surrogate`` (when surrogates are given),
    ``cross_gain`` (``(L, N, N)``) / ``mean_cross_gain`` and ``sigma`` (per member and layer) when the
    members have ``SpectralClip`` layers. ``surrogate_adv``: precomputed adversarial examples of
    the surrogates (see :func:`surrogate_examples`).
    """
    from .clip import refresh_vectors
    from .models import Ensemble

    models = list(models)
    ens = Ensemble(models)
    res: dict = {}
    tr = transferability_matrix(models, x, y, make_attack(eps, steps, step_size, seed))
    res["clean_acc_members"] = (100 * tr.clean_acc).tolist()
    res["clean_acc_ensemble"] = 100 * float((predict(ens, x) == y).float().mean())
    res["transfer_matrix"] = (100 * tr.T).tolist()
    res["transfer_counts"] = tr.counts.tolist()
    res["mean_transfer"] = 100 * tr.mean_transfer
    res["robust_acc_members"] = (100 * tr.robust_acc).tolist()
    res["mean_robust_acc"] = 100 * float(tr.robust_acc.nanmean())
    if surrogates:
        m, s, per = black_box_robust_accuracy(list(surrogates), ens, x, y,
                                              make_attack(eps, steps, step_size, seed + 1), x_advs=surrogate_adv)
        res["blackbox_robust_acc"], res["blackbox_robust_acc_std"] = 100 * m, 100 * s
        res["blackbox_robust_acc_per_surrogate"] = [100 * a for a in per]
    if spectral_layers(models[0], "all"):
        for mdl in models:
            refresh_vectors(mdl, refresh_iters)
        G = cross_gain_matrix(models, "conv")
        res["cross_gain"] = G.tolist()
        res["mean_cross_gain"] = mean_off_diagonal(G)
        res["sigma"] = [layer_sigmas(mdl, "all") for mdl in models]
    return res


def surrogate_examples(surrogates: Sequence[nn.Module], x: Tensor, y: Tensor, *, eps: float = 0.04,
                       steps: int = 50, step_size: float | None = None, seed: int = 0) -> list[Tensor]:
    """Adversarial examples of each surrogate, exactly as :func:`evaluate_ensemble` would craft them
    (same seeded random start), to share between several target ensembles."""
    attack = make_attack(eps, steps, step_size, seed + 1)
    return [attack(s, x, y) for s in surrogates]
