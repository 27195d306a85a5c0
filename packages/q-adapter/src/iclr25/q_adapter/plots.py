"""Figures of the reproduction (matplotlib, the ``[plot]`` extra, imported lazily).

* ``headline.png`` — left: each method's test pair accuracy at its validation-picked point; right:
  forgetting at matched validation accuracy, Q-Adapter vs DPO and vs SFT. Bars are seed means, error bars
  the seed standard deviation.
* ``tradeoff.png`` — forgetting vs validation accuracy along training (seed means at each checkpoint, error
  bars the seed sd), one line per method and learning rate.

Without matplotlib: one warning naming the install command, no figure, no error.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

__all__ = ["write_plots", "have_matplotlib"]

log = logging.getLogger(__name__)

_INSTALL = "pip install 'iclr25-q-adapter[plot]'"
_LABEL = {"q-adapter-code": "Q-Adapter (code loss)", "q-adapter-paper": "Q-Adapter (paper loss)", "dpo": "DPO",
          "sft": "SFT"}


def have_matplotlib() -> bool:
    """Whether matplotlib is importable (``pip install 'iclr25-q-adapter[plot]'``)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _sd(x) -> float:
    return float(np.std(x, ddof=1)) if len(x) > 1 else 0.0


def write_plots(raw: dict, out_dir: Path) -> list[Path]:
    """Write the figures of ``raw`` (:func:`iclr25.q_adapter.reproduce.claims_from_records`) into ``out_dir``;
    returns their paths (empty, with one warning, without matplotlib)."""
    out_dir = Path(out_dir)
    if not have_matplotlib():
        log.warning("matplotlib is not installed; no figures written (%s)", _INSTALL)
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10})
    base_nll = raw["base"]["general_nll"]
    methods = list(raw["tuned"])
    paths = []

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    accs = [[p["test_accuracy"] for p in raw["tuned"][m]] for m in methods]
    ax1.bar(range(len(methods)), [np.mean(a) for a in accs], yerr=[_sd(a) for a in accs], capsize=4,
            color="tab:blue")
    ax1.axhline(raw["base"]["pair_accuracy"], color="gray", ls="--", label="base")
    ax1.set_xticks(range(len(methods)), [_LABEL[m].replace(" (", "\n(") for m in methods])
    ax1.set_ylabel("test pair accuracy (validation-picked)")
    ax1.set_ylim(0.4, 1.0)
    ax1.legend(loc="upper left")
    keys = list(raw["matched"])
    xs = np.arange(len(keys))
    fa = [[x["forgetting_a"] for x in raw["matched"][k]] for k in keys]
    fb = [[x["forgetting_b"] for x in raw["matched"][k]] for k in keys]
    ax2.bar(xs - 0.2, [np.mean(v) for v in fa], 0.4, yerr=[_sd(v) for v in fa], capsize=4, label="Q-Adapter")
    ax2.bar(xs + 0.2, [np.mean(v) for v in fb], 0.4, yerr=[_sd(v) for v in fb], capsize=4, label="baseline")
    ax2.set_xticks(xs, [f"{k.split('|')[0].replace('q-adapter-', '')}\nvs {k.split('|')[1].upper()}" for k in keys])
    ax2.set_ylabel("forgetting at matched accuracy\n(NLL rise, nats/token)")
    ax2.axhline(0, color="black", lw=0.8)
    ax2.legend()
    n = len(raw["tuned"][methods[0]])
    fig.suptitle(f"Q-Adapter on DSP literature (mean ± sd over {n} seeds)")
    fig.tight_layout()
    paths.append(out_dir / "headline.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in methods:
        by_seed = raw["points"][m]
        seeds = list(by_seed)
        lrs = sorted({p["lr"] for p in by_seed[seeds[0]]})
        for lr in lrs:
            curves = [[p for p in by_seed[s] if p["lr"] == lr] for s in seeds]
            va = np.array([[p["val_accuracy"] for p in c] for c in curves])
            fg = np.array([[p["general_nll"] - base_nll for p in c] for c in curves])
            ax.errorbar(va.mean(0), fg.mean(0), xerr=va.std(0, ddof=1) if len(seeds) > 1 else None,
                        yerr=fg.std(0, ddof=1) if len(seeds) > 1 else None, marker="o", capsize=3,
                        label=_LABEL[m] + (f", lr {lr:g}" if len(lrs) > 1 else ""))
    ax.set_xlabel("validation pair accuracy")
    ax.set_ylabel("forgetting (NLL rise, nats/token)")
    ax.set_title("trade-off along training (checkpoints; mean ± sd over seeds)")
    ax.legend(fontsize=9)
    fig.tight_layout()
    paths.append(out_dir / "tradeoff.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths
