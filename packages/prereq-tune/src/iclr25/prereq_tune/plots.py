"""Figures of the reproduction (one panel each, error bars = seed standard deviation), written by
``reproduce`` into its results folder: ``factuality.png`` (C1), ``control.png`` (C2), ``memorization.png``
(C3 and the multi-version ablation). matplotlib is the ``[plot]`` extra, imported here only; without it one
warning names the install command and no figure is written.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .claims import PLOTS, version_value

__all__ = ["write_plots"]

log = logging.getLogger("iclr25.prereq_tune")
_FONT = 10          # pt; at 100 dpi every label stays >= 9 pt


def _bars(plt: Any, path: Path, title: str, labels: list[str], cols: list[list[float]], chance: float,
          colors: list[str]) -> None:
    import numpy as np

    a = np.asarray(cols, dtype=float)                # (methods, seeds)
    m = a.mean(1)
    sd = a.std(1, ddof=1) if a.shape[1] > 1 else None
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    x = np.arange(len(labels))
    ax.bar(x, m, yerr=sd, capsize=5, color=colors)
    for i, row in enumerate(a):                      # every seed as a dot
        ax.plot(np.full(row.size, x[i]), row, "k.", ms=6)
    ax.axhline(chance, ls=":", c="k", lw=1, label=f"chance {chance:.3f}")
    ax.set_xticks(x, labels, fontsize=_FONT)
    ax.set_ylabel("accuracy (greedy first answer token)", fontsize=_FONT)
    ax.set_title(f"{title} (mean ± sd over {a.shape[1]} seed(s))", fontsize=_FONT + 1)
    ax.tick_params(labelsize=_FONT)
    ax.legend(fontsize=_FONT)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_plots(out: str | Path, runs: list[dict[str, Any]]) -> list[str]:
    """Write :data:`~.claims.PLOTS` into ``out``; returns the file names written (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed, so no plot was written: pip install 'iclr25-prereq-tune[plot]'")
        return []
    out = Path(out)
    chance = runs[0]["chance"]
    col = lambda f: [float(f(r)) for r in runs]  # noqa: E731
    _bars(plt, out / PLOTS["factuality"], "C1: R_test QA, no knowledge LoRA",
          ["SFT_real", "SFT_fictitious", "Prereq single", "Prereq multi"],
          [col(lambda r, k=k: r[k]["real_test"]) for k in ("sft_real", "sft_fict", "single", "multi")], chance,
          ["grey", "tab:red", "tab:blue", "tab:green"])
    k1 = [k for k in runs[0]["multi"]["control"] if k.endswith("_v1")][0]
    k2 = [k for k in runs[0]["multi"]["control"] if k.endswith("_v2")][0]
    ctl = lambda k, u: col(lambda r: version_value(r["multi"]["control"][k], u))  # noqa: E731
    _bars(plt, out / PLOTS["control"], "C2: knowledge-controlled QA (fictitious)",
          ["Δknow¹ vs V1", "Δknow¹ vs V2", "Δknow² vs V2", "Δknow² vs V1"],
          [ctl(k1, 1), ctl(k1, 2), ctl(k2, 2), ctl(k2, 1)], chance, ["tab:green", "lightgrey", "tab:green", "lightgrey"])
    _bars(plt, out / PLOTS["memorization"], "C3: Δskill alone on fictitious training questions",
          ["SFT_fict (own)", "single (V1)", "multi (mean V)"],
          [col(lambda r: r["sft_fict"]["own_train"]), col(lambda r: r["single"]["fict_train_v1"]),
           col(lambda r: r["multi"]["fict_train_mean"])], chance, ["tab:red", "tab:blue", "tab:green"])
    return list(PLOTS.values())
