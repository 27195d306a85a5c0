"""The reproduction's figures (needs the ``[plot]`` extra; without it one warning with the install command).

* ``offline_pair_wga.png``: worst-group and average accuracy of every method on the offline pair (mean ± sd over
  encoder seeds, headline ρ);
* ``synthetic_wga.png``: the same on the synthetic paper-model (κ = 0);
* ``tie_star_share.png``: TIE*'s share of TIE's WGA gain vs the zero-shot attribute accuracy â (σ sweep).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["have_matplotlib", "write_plots"]

log = logging.getLogger("iclr25.tie")
_INSTALL = 'pip install "iclr25-tie[plot]"'


def have_matplotlib() -> bool:
    """Whether matplotlib is importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _sd(v) -> float:
    a = np.asarray(list(v), float)
    return float(a.std(ddof=1)) if a.size > 1 else 0.0


def _grouped(ax, labels, wga, avg, title: str) -> None:
    x = np.arange(len(labels))
    for off, vals, name in ((-0.2, wga, "worst group"), (0.2, avg, "average")):
        ax.bar(x + off, [100 * np.mean(v) for v in vals], 0.4, yerr=[100 * _sd(v) for v in vals], capsize=4,
               label=name)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=10)
    ax.set_ylabel("accuracy (%)", fontsize=10)
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=9, loc="lower right")
    ax.tick_params(labelsize=10)


def write_plots(off: list[dict[str, Any]], syn: dict[str, Any], out: str | Path, *, headline_rho: float,
                share_fn) -> list[str]:
    """Write the three PNGs into ``out``; returns their names ([] with a warning when matplotlib is missing)."""
    if not have_matplotlib():
        log.warning("matplotlib is not installed; no plots written (%s)", _INSTALL)
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .evaluate import LABELS, METHODS

    out = Path(out)
    head = [r for r in off if r["rho"] == headline_rho]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    _grouped(ax, [LABELS[m] for m in METHODS], [[r["superclass"][m]["worst_group"] for r in head] for m in METHODS],
             [[r["superclass"][m]["average"] for r in head] for m in METHODS],
             f"Offline pair, ρ = {headline_rho}, superclass × colour ({len(head)} seeds, ± sd)")
    fig.tight_layout()
    fig.savefig(out / "offline_pair_wga.png", dpi=100)
    plt.close(fig)

    runs = syn["settings"]["default"]
    ms = ["zero_shot", "tie", "tie_star", "projection", "oracle"]
    labels = [LABELS.get(m, "oracle v*") for m in ms]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    _grouped(ax, labels, [[r[m]["worst_group"] for r in runs] for m in ms], [[r[m]["average"] for r in runs] for m in ms],
             f"Synthetic paper-model, κ = 0 ({len(runs)} seeds, ± sd)")
    fig.tight_layout()
    fig.savefig(out / "synthetic_wga.png", dpi=100)
    plt.close(fig)

    sw = syn["sweep"]
    acc = [float(np.mean([r["a_hat_accuracy"] for r in e["runs"]])) for e in sw]
    sh = [[share_fn(r) for r in e["runs"]] for e in sw]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.errorbar(acc, [np.mean(s) for s in sh], yerr=[_sd(s) for s in sh], marker="o", capsize=4)
    ax.set_xlabel("zero-shot attribute accuracy â", fontsize=10)
    ax.set_ylabel("TIE*'s share of TIE's WGA gain", fontsize=10)
    ax.set_title(f"TIE* vs attribute inference (σ sweep, {len(sw[0]['runs'])} seeds, ± sd)", fontsize=11)
    ax.invert_xaxis()
    ax.tick_params(labelsize=10)
    fig.tight_layout()
    fig.savefig(out / "tie_star_share.png", dpi=100)
    plt.close(fig)
    return ["offline_pair_wga.png", "synthetic_wga.png", "tie_star_share.png"]
