"""The reproduction's figures (needs the ``[plot]`` extra; without it one warning with the install command).

* ``probes_by_encoder.png``: QoR z-MSE, logic-probability MAE and gate-equivalence AUC of the four encoders
  (mean ± sd over pre-training seeds; three panels);
* ``mechanism_vga.png``: masked-gate reconstruction (MGM vs input masking vs random init) and the VGA CE with
  paired / shuffled / zero text (two panels);
* ``pretrain_loss.png``: the pre-training loss curves.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .claims import HEADLINE_PLOT, MECHANISM_PLOT
from .pools import ENCODERS

__all__ = ["have_matplotlib", "write_plots"]

log = logging.getLogger("iclr25.mgvga")
_INSTALL = 'pip install "iclr25-mgvga[plot]"'
_LABEL = {"mgm": "MGM", "graphmae": "GraphMAE", "mgvga": "MGVGA", "scratch": "random"}


def have_matplotlib() -> bool:
    """Whether matplotlib is importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _bars(ax, labels, values, ylabel: str, title: str) -> None:
    vals = [np.asarray([np.nan if v is None else v for v in vs], float) for vs in values]
    ax.bar(range(len(labels)), [np.nanmean(v) for v in vals],
           yerr=[np.nanstd(v, ddof=1) if np.isfinite(v).sum() > 1 else 0.0 for v in vals], capsize=4, color="#4c72b0")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=9, rotation=15)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.tick_params(labelsize=9)


def write_plots(runs: list[dict], histories: dict, out: str | Path) -> list[str]:
    """Write the PNGs into ``out``; returns their names ([] with a warning when matplotlib is missing)."""
    if not have_matplotlib():
        log.warning("matplotlib is not installed; no plots written (%s)", _INSTALL)
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    n = len(runs)
    labels = [_LABEL[k] for k in ENCODERS]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
    _bars(axes[0], labels, [[float(np.mean(r["qor"][k]["per_seed"])) for r in runs] for k in ENCODERS],
          "z-MSE (lower better)", "QoR, leave-one-design-out")
    _bars(axes[1], labels, [[r["gate_lp"][k]["mae"] for r in runs] for k in ENCODERS], "MAE (lower better)",
          "logic probability")
    _bars(axes[2], labels, [[r["gate_eq"][k]["auc_pooled"] for r in runs] for k in ENCODERS], "ROC-AUC",
          "gate-level equivalence")
    fig.suptitle(f"Probes by encoder ({n} pre-training seeds, ± sd)", fontsize=11)
    fig.tight_layout()
    fig.savefig(out / HEADLINE_PLOT, dpi=100)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    mk = [("mgm", "MGM\n(latent)"), ("graphmae", "GraphMAE\n(input)"), ("scratch_latent", "random\n(latent)"),
          ("scratch_input", "random\n(input)"), ("majority", "majority")]
    _bars(axes[0], [b for _, b in mk], [[r["mechanism"][k] for r in runs] for k, _ in mk], "accuracy",
          "masked-gate type, own decoder")
    ck = [("paired", "paired"), ("shuffled", "shuffled"), ("zero", "zero")]
    _bars(axes[1], [b for _, b in ck], [[r["vga_ce"][k] for r in runs] for k, _ in ck], "CE (nats, lower better)",
          "VGA masked-type CE by text")
    fig.suptitle(f"Mechanisms ({n} pre-training seeds, ± sd)", fontsize=11)
    fig.tight_layout()
    fig.savefig(out / MECHANISM_PLOT, dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for k, h in histories.items():
        ax.plot([r["step"] for r in h], [r["loss"] for r in h], label=k)
    ax.set_xlabel("step", fontsize=10)
    ax.set_ylabel("pre-training loss", fontsize=10)
    ax.legend(fontsize=9, ncol=2)
    ax.tick_params(labelsize=10)
    fig.tight_layout()
    fig.savefig(out / "pretrain_loss.png", dpi=100)
    plt.close(fig)
    return [HEADLINE_PLOT, MECHANISM_PLOT, "pretrain_loss.png"]
