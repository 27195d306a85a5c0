"""The reproduction's figures, from the aggregated per-seed numbers (needs the ``[plot]`` extra).

* ``arms.png`` — per arm (none, uniform, FRS, FTR only (σ = 0), BMPS only): ASR on the triggered texts and
  CA on the clean texts; and the MCTS trigger hit rate beside a random segment of equal length.
* ``radius.png`` — certified radius on triggered texts: FRS at ω_H (conditional on the trigger lying in
  T(x')), FRS at ω_L (no location assumption: like for like) and uniform at ω_M; and the empirical radius of
  FRS and uniform.

Bars are seed means, error bars the seed standard deviation. Without matplotlib, :func:`write_plots` logs
one warning with the install command and draws nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .claims import ARM_ORDER, PLOT_ARMS, PLOT_RADIUS

__all__ = ["write_plots", "have_matplotlib"]

log = logging.getLogger("iclr25.frs")
INSTALL = "pip install 'iclr25-frs[plot]'"


def have_matplotlib() -> bool:
    """Whether matplotlib is importable (the ``[plot]`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _ms(agg: dict, arm: str, key: str) -> tuple[float, float]:
    e = agg.get(arm, {}).get(key)
    if not e:
        return float("nan"), 0.0
    sd = e.get("sd", 0.0)
    return float(e["mean"]), float(sd) if sd is not None and np.isfinite(sd) else 0.0


def _bars(ax, labels, stats, ylabel, title, color="tab:blue"):
    x = np.arange(len(labels))
    ax.bar(x, [m for m, _ in stats], 0.6, yerr=[s for _, s in stats], capsize=3, color=color, alpha=0.8)
    ax.set_xticks(x, labels, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.set_title(title, fontsize=10)
    ax.tick_params(labelsize=9)


def write_plots(agg: dict, out: str | Path, n_seeds: int, scale: str = "") -> list[str]:
    """Draw ``arms.png`` and ``radius.png`` from the aggregate (:func:`iclr25.frs.claims.aggregate`) into ``out``.

    Returns:
        The file names written (relative to ``out``); empty without matplotlib (one warning).
    """
    if not have_matplotlib():
        log.warning("matplotlib is not installed: no plots (%s)", INSTALL)
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    labels = {"none": "none", "uniform": "uniform\nω_M", "frs": "FRS", "ftr-only": "FTR only\n(σ = 0)",
              "bmps-only": "BMPS\nonly"}
    arms = [a for a in ARM_ORDER if a in agg]
    fig, axes = plt.subplots(1, 3, figsize=(12, 4), dpi=100)
    _bars(axes[0], [labels[a] for a in arms], [_ms(agg, a, "ASR") for a in arms], "ASR (%)",
          "ASR on triggered texts (lower = better)", "tab:red")
    _bars(axes[1], [labels[a] for a in arms], [_ms(agg, a, "CA") for a in arms], "CA (%)", "clean accuracy")
    _bars(axes[2], ["MCTS T(x')", "random segment"],
          [_ms(agg, "frs", "hit_rate"), _ms(agg, "frs", "random_segment_hit_rate")], "share of triggered texts",
          "trigger inside the segment", "tab:green")
    axes[2].axhline(0.8, color="gray", lw=0.8, ls="--")
    fig.suptitle(f"FRS arms: mean ± sd over {n_seeds} smoothing seed(s){' — ' + scale if scale else ''}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / PLOT_ARMS)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    _bars(axes[0], ["FRS at ω_H\n(trigger in T(x'))", "FRS at ω_L\n(no assumption)", "uniform\nat ω_M"],
          [_ms(agg, "frs", "mean_radius_triggered"), _ms(agg, "frs", "mean_radius_unconditional_triggered"),
           _ms(agg, "uniform", "mean_radius_triggered")], "mean certified radius (fraction of L)",
          "certified radius, triggered texts")
    _bars(axes[1], ["FRS", "uniform"], [_ms(agg, "frs", "empirical_radius"), _ms(agg, "uniform", "empirical_radius")],
          "mean empirical radius (fraction of tokens)", "empirical radius, clean texts", "tab:purple")
    fig.suptitle(f"radii: mean ± sd over {n_seeds} smoothing seed(s)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / PLOT_RADIUS)
    plt.close(fig)
    return [PLOT_ARMS, PLOT_RADIUS]
