"""PNG figures (matplotlib, Agg backend): the sensitivity heat map and the chain-experiment curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["plot_sensitivity_heatmap", "plot_chain_curves", "have_matplotlib"]


def have_matplotlib() -> bool:
    """Whether matplotlib (the ``[plot]`` extra: ``pip install "iclr25-pref-sensitivity[plot]"``) is importable."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_sensitivity_heatmap(path: str | Path, *, points: np.ndarray | None = None, lam: float | None = None,
                             n: int = 400, title: str | None = None) -> Path:
    """Heat map of ``d p_ij / d p_ik`` over ``(p_ik, p_kj) in (0, 1)^2`` (log colour scale).

    Bright at the corners ``(0, 1)`` and ``(1, 0)``: the pivot dominates (or is dominated by) both.

    Args:
        path: output PNG path (parent folders are created).
        points: optional ``(m, 2)`` ``(p_ik, p_kj)`` pairs to overlay (e.g. a report's ``points``).
        lam: draw the boundaries of the sensitive region: ``d p_ij / d p_ik = lam`` (solid) and
            ``max(d p_ij / d p_ik, d p_ij / d p_kj) = lam`` (dashed; the criterion of the reports).
        n: grid resolution per axis.
        title: figure title.

    Returns:
        The written path.
    """
    from matplotlib.colors import LogNorm

    plt = _plt()
    u = (np.arange(n) + 0.5) / n
    A, B = np.meshgrid(u, u, indexing="xy")  # A: x = p_ik, B: y = p_kj
    D = A * B + (1 - A) * (1 - B)
    S = B * (1 - B) / (D * D)
    fig, ax = plt.subplots(figsize=(5.6, 4.8), dpi=110)
    im = ax.pcolormesh(u, u, S, norm=LogNorm(vmin=max(S.min(), 1e-3), vmax=S.max()), cmap="magma",
                       shading="auto", rasterized=True)
    fig.colorbar(im, ax=ax, label=r"$\partial p_{ij} / \partial p_{ik}$")
    if lam is not None:
        cs = ax.contour(u, u, S, levels=[lam], colors="cyan", linewidths=1.0)
        ax.clabel(cs, fmt={lam: f"λ={lam:g}"}, fontsize=8)
        either = np.maximum(S, A * (1 - A) / (D * D))
        ax.contour(u, u, either, levels=[lam], colors="cyan", linewidths=0.8, linestyles="--")
    if points is not None and len(points):
        p = np.asarray(points)
        ax.scatter(p[:, 0], p[:, 1], s=6, c="white", edgecolors="black", linewidths=0.3, alpha=0.8,
                   label=f"{len(p)} triples")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel(r"$p_{ik} = P(i \succ k)$")
    ax.set_ylabel(r"$p_{kj} = P(k \succ j)$")
    ax.set_title(title or "Sensitivity of the implied $p_{ij}$ (Bradley-Terry)")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def plot_chain_curves(path: str | Path, curves: Mapping[str, tuple[Sequence[float], Sequence[float],
                                                                  Sequence[float] | None]],
                      *, title: str = "Held-out preference vs training preference") -> Path:
    """Plot ``p13`` against ``p23`` for several runs.

    Args:
        path: output PNG.
        curves: ``label -> (p23, p13_mean, p13_sd or None)``.
        title: figure title.

    Returns:
        The written path.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 4.2), dpi=110)
    for label, (x, y, sd) in curves.items():
        x, y = np.asarray(x), np.asarray(y)
        dense = x.size > 20  # reference curves (closed form): dashed, no markers
        ax.plot(x, y, ls="--" if dense else "-", marker=None if dense else "o", ms=3, label=label)
        if sd is not None:
            sd = np.asarray(sd)
            ax.fill_between(x, y - sd, y + sd, alpha=0.2)
    ax.set_xscale("log")
    ax.set_xlabel(r"training preference $p_{23} = P(\mathrm{cat} \succ \mathrm{bird})$")
    ax.set_ylabel(r"held-out $p_{13} = P(\mathrm{dog} \succ \mathrm{bird})$")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
