"""The reproduction's figures, from the runner's records (needs the ``[plot]`` extra; without it one warning).

* ``bandit_regret.png``: regret vs N_P of every bandit arm at its validated hyperparameter (mean ± s.e.);
* ``tinylm_reward.png``: mean true reward of every tiny-LM arm at its validated length (mean ± s.e.);
* ``gridworld_return.png``: normalised return of every gridworld arm (mean ± s.e.).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from .claims import BANDIT_PLOT, GRID_PLOT, LM_PLOT

__all__ = ["have_matplotlib", "write_plots"]

log = logging.getLogger("iclr25.aihf")
_INSTALL = 'pip install "iclr25-aihf[plot]"'


def have_matplotlib() -> bool:
    """Whether matplotlib is importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _ms(x) -> tuple[float, float]:
    a = np.asarray(x, float)
    return float(a.mean()), (float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0)


def _bars(ax, labels, values, ylabel: str, title: str) -> None:
    ms = [_ms(v) for v in values]
    ax.bar(range(len(labels)), [m for m, _ in ms], yerr=[s for _, s in ms], capsize=4, color="#4c72b0")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=10)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.set_title(title, fontsize=11)
    ax.tick_params(labelsize=10)


def write_plots(records: dict, settings: dict, out: str | Path) -> list[str]:
    """Write the three PNGs into ``out``; returns their names ([] with a warning when matplotlib is missing)."""
    if not have_matplotlib():
        log.warning("matplotlib is not installed; no plots written (%s)", _INSTALL)
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .claims import _LABEL, _LM_LABEL

    out = Path(out)
    bt = records["bandit_test"]["tuned"]
    cells = sorted((c for c in bt if c.startswith("perfect/")), key=lambda c: int(c.split("/")[1]))
    nps = [int(c.split("/")[1]) for c in cells]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for k, arm in enumerate(bt[cells[0]]):
        ys = [_ms(bt[c][arm]) for c in cells]
        x = [n * (1 + 0.04 * (k - 2.5)) for n in nps]  # small offsets so the error bars do not overlap
        ax.errorbar(x, [y[0] for y in ys], yerr=[y[1] for y in ys], label=_LABEL[arm], marker="o", capsize=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("preference pairs N_P", fontsize=10)
    ax.set_ylabel("regret J(pi*) - J(pi)", fontsize=10)
    ax.set_title(f"Bandit, validated hyperparameters ({len(settings['bandit_seeds'])} seeds, ± s.e.)", fontsize=11)
    ax.legend(fontsize=9)
    ax.tick_params(labelsize=10)
    fig.tight_layout()
    fig.savefig(out / BANDIT_PLOT, dpi=100)
    plt.close(fig)

    seeds = [records[f"tinylm_seed{s}"] for s in settings["lm_seeds"]]
    n_p = min(seeds[0], key=int)
    arms = [m for m in seeds[0][n_p] if m != "demo_reward"]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    _bars(ax, [f"{_LM_LABEL[m]}\n({seeds[0][n_p][m]['passes']} passes)" for m in arms],
          [[s[n_p][m]["reward"] for s in seeds] for m in arms], "mean true reward (256 samples)",
          f"Tiny LM, {n_p} pairs, validated lengths ({len(seeds)} seeds, ± s.e.)")
    fig.tight_layout()
    fig.savefig(out / LM_PLOT, dpi=100)
    plt.close(fig)

    gw = records["gridworld"]["return"]
    k = min(gw, key=int)
    arms = ["rlhf", "aihf", "irl", "sft", "sft-rlhf"]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    _bars(ax, [_LABEL[a] if a != "sft" else "SFT (table)" for a in arms], [gw[k][a] for a in arms],
          "normalised true return", f"Gridworld, N_P = {k} ({len(gw[k]['aihf'])} seeds, ± s.e.)")
    fig.tight_layout()
    fig.savefig(out / GRID_PLOT, dpi=100)
    plt.close(fig)
    return [BANDIT_PLOT, LM_PLOT, GRID_PLOT]
