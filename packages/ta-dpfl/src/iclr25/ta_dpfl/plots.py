"""The reproduction's figures (needs the ``[plot]`` extra: ``pip install "iclr25-ta-dpfl[plot]"``).

* ``accuracy.png`` — final test accuracy of every method, mean ± sd over seeds, one panel per setting
  (the accuracy claims and the time-order mechanism);
* ``curves.png`` — test accuracy per round, mean over seeds with a ± sd band, one panel per setting;
* ``rates.png`` — ``Σ_t q_t`` per client, TA vs IDP, one panel per setting (the total-rate mechanism).

matplotlib is imported only when a figure is drawn; without it :func:`write_plots` logs one warning with
the install command and returns no files.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["have_matplotlib", "write_plots", "INSTALL_HINT"]

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "iclr25-ta-dpfl[plot]"'
METHOD_ORDER = ("dpfedavg", "idp", "ta", "ta-reverse", "ta-spend-first")


def have_matplotlib() -> bool:
    """Whether matplotlib is importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _runs(results: Sequence[dict[str, Any]], setting: str, method: str) -> list[dict[str, Any]]:
    return sorted((r for r in results if r["setting"] == setting and r["method"] == method), key=lambda r: r["seed"])


def write_plots(results: Sequence[dict[str, Any]], out: str | Path) -> dict[str, str]:
    """Draw the figures from the kept runs (each method at its chosen step size, every seed) into ``out``.

    Returns:
        ``{"accuracy": "accuracy.png", "curves": "curves.png", "rates": "rates.png"}`` (names relative to
        ``out``; ``rates`` only when the runs carry their rates), or ``{}`` without matplotlib (one warning).
    """
    if not have_matplotlib():
        log.warning("matplotlib is not installed: no figures in %s (%s)", out, INSTALL_HINT)
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = list(dict.fromkeys(r["setting"] for r in results))[:3]
    names: dict[str, str] = {}
    w = min(11.5, 4.2 * len(settings) + 0.5)

    fig, axes = plt.subplots(1, len(settings), figsize=(w, 4.0), squeeze=False)
    for ax, st in zip(axes[0], settings):
        ms = [m for m in METHOD_ORDER if _runs(results, st, m)]
        acc = [np.array([r["final_accuracy"] for r in _runs(results, st, m)], dtype=float) for m in ms]
        n = min(len(a) for a in acc) if acc else 0
        ax.bar(range(len(ms)), [a.mean() for a in acc], yerr=[a.std(ddof=1) if len(a) > 1 else 0.0 for a in acc],
               capsize=4, color=["tab:gray", "tab:blue", "tab:red", "tab:orange", "tab:purple"][:len(ms)])
        lo = min(a.min() for a in acc) if acc else 0.0
        hi = max(a.max() for a in acc) if acc else 1.0
        ax.set_ylim(max(0.0, lo - 0.05), min(1.0, hi + 0.03))
        ax.set_xticks(range(len(ms)))
        ax.set_xticklabels(ms, rotation=30, ha="right", fontsize=9)
        ax.set_ylabel("final test accuracy", fontsize=10)
        ax.set_title(f"{st}: mean ± sd over {n} seed(s)", fontsize=10)
        ax.tick_params(axis="y", labelsize=9)
    fig.tight_layout()
    fig.savefig(out / "accuracy.png", dpi=100)
    plt.close(fig)
    names["accuracy"] = "accuracy.png"

    fig, axes = plt.subplots(1, len(settings), figsize=(w, 4.0), squeeze=False)
    for ax, st in zip(axes[0], settings):
        for m in METHOD_ORDER:
            curves = [r["accuracy_per_round"] for r in _runs(results, st, m)]
            if not curves:
                continue
            c = np.array(curves, dtype=float)
            x = np.arange(1, c.shape[1] + 1)
            mu, sd = c.mean(0), (c.std(0, ddof=1) if c.shape[0] > 1 else np.zeros(c.shape[1]))
            ax.plot(x, mu, label=m)
            ax.fill_between(x, mu - sd, mu + sd, alpha=0.2)
        ax.set_xlabel("round", fontsize=10)
        ax.set_ylabel("global test accuracy", fontsize=10)
        ax.set_title(f"{st} (band: ± sd over seeds)", fontsize=10)
        ax.legend(fontsize=9)
        ax.tick_params(labelsize=9)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=100)
    plt.close(fig)
    names["curves"] = "curves.png"

    have_rates = [st for st in settings if all(_runs(results, st, m) and _runs(results, st, m)[0].get("rates")
                                               for m in ("ta", "idp"))]
    if have_rates:
        fig, axes = plt.subplots(1, len(have_rates), figsize=(min(11.5, 4.2 * len(have_rates) + 0.5), 4.0),
                                 squeeze=False)
        for ax, st in zip(axes[0], have_rates):
            for m, col, off in (("idp", "tab:blue", -0.2), ("ta", "tab:red", 0.2)):
                r = _runs(results, st, m)[0]
                sq = [float(np.sum(q)) for q in r["rates"]]
                ax.bar(np.arange(len(sq)) + off, sq, width=0.4, color=col, label=f"{m} (seed {r['seed']})")
            eps = _runs(results, st, "ta")[0]["epsilon_budget"]
            ax.set_xticks(range(len(eps)))
            ax.set_xticklabels([f"ε={e:g}" for e in eps], rotation=90, fontsize=9)
            ax.set_ylabel("Σ_t q_t (client's total sampling rate)", fontsize=10)
            ax.set_title(st, fontsize=10)
            ax.legend(fontsize=9)
            ax.tick_params(axis="y", labelsize=9)
        fig.tight_layout()
        fig.savefig(out / "rates.png", dpi=100)
        plt.close(fig)
        names["rates"] = "rates.png"
    return names
