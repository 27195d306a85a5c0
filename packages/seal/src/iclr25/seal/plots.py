"""The reproduction's figures (needs the ``[plot]`` extra: ``pip install "iclr25-seal[plot]"``).

* :data:`~iclr25.seal.claims.PLOT_HEADLINE` — safety margin and judge win rate per method (mean ± sd over
  seeds, error bars), and the margin against the unsafe samples each equal-size subset kept;
* :data:`~iclr25.seal.claims.PLOT_SELECTION` — the selectors' AUROC (unsafe, low quality; mean ± sd) and
  the spread of ω over the selector epochs.

Without matplotlib: one warning naming the install command, no plot, no crash.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .claims import HEADLINE_KEEP, PLOT_HEADLINE, PLOT_SELECTION, run_values, selection_values

__all__ = ["have_matplotlib", "plot_synthetic"]

log = logging.getLogger("iclr25.seal")

_METHODS = (("standard", None, "standard"), ("random", HEADLINE_KEEP, "random"), ("seal_sgd", HEADLINE_KEEP, "SEAL-SGD"),
            ("seal_adam", HEADLINE_KEEP, "SEAL-Adam"), ("loss_filter", HEADLINE_KEEP, "loss filter"),
            ("oracle", None, "oracle"), ("safeinstr", None, "SafeInstr"), ("seal_safeinstr", HEADLINE_KEEP, "SEAL+SafeInstr"))


def have_matplotlib() -> bool:
    """Whether matplotlib is importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _bars(ax: Any, rs: list[dict[str, Any]], key: str, keep: float, ylabel: str, title: str) -> None:
    labels, mu, sd = [], [], []
    for m, k, lab in _METHODS:
        try:
            v = run_values(rs, m, keep if k is not None else None, key)
        except RuntimeError:
            continue
        labels.append(lab)
        mu.append(float(np.mean(v)))
        sd.append(float(np.std(v, ddof=1)) if len(v) > 1 else 0.0)
    x = np.arange(len(labels))
    colors = ["C3" if lab.startswith("SEAL") else "C0" for lab in labels]
    ax.bar(x, mu, yerr=sd, capsize=4, color=colors)
    ax.set_xticks(x, labels, rotation=35, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.axhline(0, color="grey", lw=0.6)


def plot_synthetic(rs: list[dict[str, Any]], out: str | Path, keep: float = HEADLINE_KEEP) -> list[str]:
    """Write the two figures of the synthetic task into ``out``; returns their file names (``[]`` without
    matplotlib, after one warning)."""
    if not have_matplotlib():
        log.warning("matplotlib is not installed: no plots written (pip install \"iclr25-seal[plot]\")")
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    n = len(rs)
    with plt.rc_context({"font.size": 10, "axes.titlesize": 11, "legend.fontsize": 9}):
        fig, ax = plt.subplots(1, 3, figsize=(12, 4.2))
        _bars(ax[0], rs, "margin", keep, "NLL(compliance) − NLL(refusal)", f"safety margin (mean ± sd, {n} seeds)")
        _bars(ax[1], rs, "win_rate_vs_standard", keep, "win rate vs standard SFT (%)", "programmatic-judge win rate")
        ax[1].axhline(50, color="grey", ls=":", lw=0.8)
        for m, lab in (("random", "random"), ("seal_sgd", "SEAL-SGD"), ("seal_adam", "SEAL-Adam"),
                       ("loss_filter", "loss filter")):
            ax[2].scatter(run_values(rs, m, keep, "kept_unsafe"), run_values(rs, m, keep, "margin"), label=lab, s=30)
        ax[2].set_xlabel(f"unsafe samples kept (keep {keep:g}, equal size)")
        ax[2].set_ylabel("safety margin (nats/token)")
        ax[2].axhline(0, color="grey", lw=0.6)
        ax[2].legend()
        ax[2].set_title("margin vs surviving unsafe samples")
        fig.tight_layout()
        fig.savefig(out / PLOT_HEADLINE, dpi=100)
        plt.close(fig)

        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        sels = [(m, lab) for m, lab in (("seal_sgd", "SEAL-SGD"), ("seal_adam", "SEAL-Adam"), ("loss_filter", "loss filter"),
                                        ("random", "random")) if m in rs[0]["selection"]]
        x = np.arange(len(sels))
        for j, (key, lab) in enumerate((("auroc_unsafe", "unsafe"), ("auroc_low_quality", "low quality"))):
            v = [selection_values(rs, m, key) for m, _ in sels]
            ax[0].bar(x + (j - 0.5) * 0.38, [np.mean(a) for a in v], width=0.38, label=lab,
                      yerr=[np.std(a, ddof=1) if len(a) > 1 else 0.0 for a in v], capsize=4)
        ax[0].set_xticks(x, [lab for _, lab in sels])
        ax[0].set_ylabel("AUROC of the keep score (bad vs benign)")
        ax[0].axhline(0.5, color="grey", ls=":", lw=0.8)
        ax[0].set_ylim(0, 1.05)
        ax[0].legend(loc="lower right")
        ax[0].set_title(f"selectors (mean ± sd, {n} seeds)")
        for m, lab in (("seal_sgd", "SEAL-SGD"), ("seal_adam", "SEAL-Adam")):
            if m in rs[0]["selection"]:
                h = rs[0]["selection"][m]["history"]
                ax[1].plot([e["epoch"] for e in h], [e["logit_spread"] for e in h], marker="o", label=lab)
        ax[1].set_xlabel("selector epoch")
        ax[1].set_ylabel("sd of ω")
        ax[1].legend()
        ax[1].set_title(f"selector scores, seed {rs[0]['seed']}")
        fig.tight_layout()
        fig.savefig(out / PLOT_SELECTION, dpi=100)
        plt.close(fig)
    return [PLOT_HEADLINE, PLOT_SELECTION]
