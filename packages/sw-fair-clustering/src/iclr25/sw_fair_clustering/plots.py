"""The reproduction's figure: each arm's mean over seeds with the seed standard deviation as error bars.

``cost_ratios.png`` has three panels: the end-to-end fair-cost ratio ``fcost(W, C) / fcost(W, C_offline)``
on the real windows (SW-coreset, colour-stratified uniform, uniform), the same ratio on the drift stream
(SW, uniform, insertion-only), and the share of infeasible exactly-fair summary LPs at the smallest size.
matplotlib is the ``[plot]`` extra; without it the figure is skipped with one warning naming the command.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

__all__ = ["plot_cost_ratios"]

log = logging.getLogger("iclr25.sw_fair_clustering")


def _mean_sd(per_seed: Mapping) -> tuple[float, float]:
    v = np.asarray([x for x in per_seed.values() if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return math.nan, 0.0
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def plot_cost_ratios(path: Path, panels: Mapping[str, Mapping[str, Mapping]]) -> Path | None:
    """Write the bar chart ``path``: ``panels`` maps a panel title to ``{arm: {seed: value}}``.

    Returns the path, or ``None`` when matplotlib is missing (logged once with the install command).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed; skipping %s (pip install 'iclr25-sw-fair-clustering[plot]')",
                    path)
        return None
    colours = {"sw": "#1f77b4", "stratified": "#2ca02c", "uniform": "#ff7f0e", "insertion": "#9467bd"}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.0 * len(panels), 3.8), squeeze=False)
    for ax, (title, arms) in zip(axes[0], panels.items()):
        names = list(arms)
        stats = [_mean_sd(arms[a]) for a in names]
        x = np.arange(len(names))
        ax.bar(x, [m for m, _ in stats], yerr=[s for _, s in stats], capsize=4,
               color=[colours.get(a, "0.5") for a in names])
        n = max((len(v) for v in arms.values()), default=0)
        ax.set_xticks(x, names, fontsize=10)
        ax.set_title(title, fontsize=11)
        ax.tick_params(axis="y", labelsize=9)
        if "ratio" in title:
            ax.axhline(1.0, color="k", lw=0.8)
            lo = min(m - s for m, s in stats if math.isfinite(m)) if any(math.isfinite(m) for m, _ in stats) else 1
            ax.set_ylim(max(0.0, min(0.98, lo - 0.01)), None)
        ax.set_xlabel(f"mean ± sd over {n} seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
