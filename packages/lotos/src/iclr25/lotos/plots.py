"""The reproduction's figure: the three arms side by side, mean ± seed sd.

``arms.png``: two panels, the within-ensemble transfer rate (lower is better for LOTOS) and the black-box
robust accuracy of the ensemble (higher is better), for ``orig``, ``clip`` (C = 1) and ``lotos``, with the
seed standard deviation as error bars. matplotlib is the ``[plot]`` extra; without it the figure is skipped
with one warning naming the install command.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["plot_arms"]

log = logging.getLogger(__name__)

_PANELS = (("mean_transfer", "within-ensemble transfer rate (%)"),
           ("blackbox_robust_acc", "black-box robust accuracy (%)"))


def _stats(v: Sequence[float | None]) -> tuple[float, float]:
    a = np.asarray([x for x in v if x is not None and math.isfinite(x)], dtype=float)
    if a.size == 0:
        return math.nan, 0.0
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def plot_arms(path: Path, vals: Mapping[str, Mapping[str, Sequence[float | None]]]) -> Path | None:
    """Write ``path`` from ``vals[arm][metric] = per-seed values``; ``None`` (and a warning) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed; skipping %s (pip install 'iclr25-lotos[plot]')", path)
        return None
    arms = [a for a in ("orig", "clip", "lotos") if a in vals]
    colours = {"orig": "#7f7f7f", "clip": "#ff7f0e", "lotos": "#1f77b4"}
    fig, axes = plt.subplots(1, len(_PANELS), figsize=(8.5, 3.6))
    n = max(len(vals[a].get("mean_transfer", [])) for a in arms)
    for ax, (key, label) in zip(axes, _PANELS):
        st = [_stats(vals[a].get(key, [])) for a in arms]
        x = np.arange(len(arms))
        ax.bar(x, [m for m, _ in st], yerr=[s for _, s in st], capsize=4, color=[colours[a] for a in arms])
        ax.set_xticks(x, arms, fontsize=10)
        ax.set_title(label, fontsize=11)
        ax.tick_params(axis="y", labelsize=9)
        ax.set_xlabel(f"mean ± sd over {n} seed(s)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
