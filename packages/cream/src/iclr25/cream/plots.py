"""The reproduction's figure: per-round accuracy, gt-τ and C (mean ± sd over seeds) for every method
(needs the ``[plot]`` extra; without it one warning with the install command, no crash)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .repro_settings import LABEL, ReproSettings

__all__ = ["plot"]

log = logging.getLogger(__name__)


def plot(summary: dict[str, Any], settings: ReproSettings, path: Path, title: str = "") -> Path | None:
    """Per-round accuracy, gt-tau and C (mean ± sd over seeds) for every method."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("metrics.png not written: matplotlib is missing (pip install 'iclr25-cream[plot]')")
        return None
    T = settings.iterations
    plt.rcParams.update({"font.size": 10, "legend.fontsize": 9, "axes.titlesize": 10})
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    xs = np.arange(1, T + 2)
    for m in settings.methods:
        s = summary[m]
        for ax, key, x in ((axes[0], "accuracy", xs), (axes[1], "gt_tau", xs), (axes[2], "consistency", xs[:-1])):
            mu, sd = np.asarray(s[f"{key}_mean"]), np.asarray(s[f"{key}_sd"])
            ax.errorbar(x, mu, yerr=sd, marker="o", capsize=3, label=LABEL[m])
    axes[0].axhline(float(np.mean(summary["m0_accuracy"])), color="grey", ls=":", label="M0")
    axes[0].set(title="greedy test accuracy", xlabel="model M_k", xticks=xs)
    axes[1].set(title="gt-τ (self-reward vs true utility)", xlabel="model M_k", xticks=xs)
    axes[2].set(title="consistency C (round t uses M_t)", xlabel="round t", xticks=xs[:-1])
    axes[0].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
