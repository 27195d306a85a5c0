"""The reproduction's figures, drawn from the experiment records (needs the ``[plot]`` extra).

* ``detection.png`` — per attack, TPR and FPR (%) of AGPD (the default detector end to end, and Stage 3
  told the true target) beside Spectral Signatures and Activation Clustering: bars are seed means, error
  bars the seed standard deviation.
* ``target_z.png`` — Stage 2: the robust z of the true target (BadNets, Blended), the largest z on the
  clean model and class 0's z once a target is planted in it, per seed, against ``tau_z = e^2``.

Without matplotlib, :func:`write_plots` logs one warning with the install command and draws nothing.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from .claims import ATTACKS, DEFAULT, PLOT_DETECTION, PLOT_TARGET

__all__ = ["write_plots", "have_matplotlib"]

log = logging.getLogger("iclr25.agpd")
INSTALL = "pip install 'iclr25-agpd[plot]'"


def have_matplotlib() -> bool:
    """Whether matplotlib is importable (the ``[plot]`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _stat(vals: list) -> tuple[float, float]:
    a = np.asarray([np.nan if v is None else v for v in vals], dtype=float)
    a = a[np.isfinite(a)]
    if not a.size:
        return float("nan"), 0.0
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def _detection_rows(runs: list[dict]) -> dict[str, dict[str, list[float]]]:
    """``{attack: {arm: [value per seed]}}`` for TPR and FPR (keys ``<arm>|TPR``)."""
    rows: dict[str, dict[str, list[float]]] = {}
    for a in ATTACKS:
        if a not in runs[0]:
            continue
        E = [r[a] for r in runs]
        arms = {"AGPD": [e["agpd"][DEFAULT] for e in E],
                "AGPD Stage 3\n(true target)": [e["agpd"][DEFAULT].get("given_target") or {} for e in E],
                "Spectral": [e["baselines"]["spectral"] for e in E], "AC": [e["baselines"]["ac"] for e in E]}
        rows[a] = {f"{k}|{m}": [100.0 * x[m] for x in v if m in x] for k, v in arms.items() for m in ("TPR", "FPR")}
    return rows


def write_plots(runs: list[dict], out: str | Path, scale: str = "") -> list[str]:
    """Draw the figures of the records ``runs`` (one ``{attack: record}`` per seed) into ``out``.

    Returns:
        The file names written (relative to ``out``); empty without matplotlib (one warning).
    """
    if not have_matplotlib():
        log.warning("matplotlib is not installed: no plots (%s)", INSTALL)
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    written = []
    n = len(runs)
    rows = _detection_rows(runs)
    if rows:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=100)
        arms = ["AGPD", "AGPD Stage 3\n(true target)", "Spectral", "AC"]
        width = 0.8 / max(1, len(rows))
        for ax, metric in zip(axes, ("TPR", "FPR")):
            for i, (a, r) in enumerate(rows.items()):
                st = [_stat(r[f"{k}|{metric}"]) for k in arms]
                x = np.arange(len(arms)) + (i - (len(rows) - 1) / 2) * width
                ax.bar(x, [s[0] for s in st], width, yerr=[s[1] for s in st], capsize=3, label=a)
            ax.set_xticks(np.arange(len(arms)), arms, fontsize=9)
            ax.set_ylabel(f"{metric} (%)", fontsize=10)
            ax.tick_params(labelsize=9)
            if metric == "TPR":
                ax.axhline(90, color="gray", lw=0.8, ls="--")
                ax.set_ylim(0, 105)
            else:
                ax.axhline(2, color="gray", lw=0.8, ls="--")
            ax.set_title(f"{metric}: mean ± sd over {n} seed(s)", fontsize=10)
            ax.legend(fontsize=9)
        fig.suptitle(f"AGPD ({DEFAULT}) vs baselines{' — ' + scale if scale else ''}", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / PLOT_DETECTION)
        plt.close(fig)
        written.append(PLOT_DETECTION)
    groups: dict[str, list[float]] = {}
    for a in ATTACKS:
        if a in runs[0]:
            groups[f"{a}\ntarget z"] = [r[a]["agpd"][DEFAULT].get("target_z") for r in runs]
            m10 = [r[a]["agpd"].get("backdoorbench-m10") for r in runs]
            if m10[0] is not None:
                groups[f"{a}\ntarget z (m=10%)"] = [m.get("target_z") for m in m10]
    if "clean" in runs[0]:
        groups["clean\nmax z"] = [max((z for z in r["clean"]["agpd"][DEFAULT]["z"] if z is not None), default=None)
                                  for r in runs]
        pl = [r["clean"]["agpd"][DEFAULT].get("planted") for r in runs]
        if pl[0] is not None:
            groups["clean + planted\nclass 0 z"] = [p["z_target"] for p in pl]
    if groups:
        planted = {k: v for k, v in groups.items() if k.startswith("clean + planted")}
        main = {k: v for k, v in groups.items() if k not in planted}
        panels = [g for g in (main, planted) if g]
        fig, axes = plt.subplots(1, len(panels), figsize=(11 if len(panels) > 1 else 8, 4.2), dpi=100,
                                 gridspec_kw={"width_ratios": [len(g) for g in panels]}, squeeze=False)
        for ax, grp in zip(axes[0], panels):
            names = list(grp)
            st = [_stat(grp[k]) for k in names]
            x = np.arange(len(names))
            ax.bar(x, [s[0] if math.isfinite(s[0]) else 0.0 for s in st], 0.6, yerr=[s[1] for s in st], capsize=3,
                   color="tab:blue", alpha=0.6)
            for i, k in enumerate(names):
                v = [z for z in grp[k] if z is not None and math.isfinite(z)]
                ax.plot([i] * len(v), v, "ko", ms=4, label="one seed" if i == 0 else None)
            ax.axhline(math.e ** 2, color="tab:red", lw=1, ls="--", label=f"tau_z = e^2 = {math.e ** 2:.2f}")
            ax.set_xticks(x, names, fontsize=9)
            ax.set_ylim(min(0.0, ax.get_ylim()[0]), max(ax.get_ylim()[1], 1.15 * math.e ** 2))
            ax.tick_params(labelsize=9)
        axes[0][0].legend(fontsize=9, loc="upper left")
        axes[0][0].set_ylabel("robust z (layer where it is highest)", fontsize=10)
        axes[0][0].set_title(f"Stage 2 names a class iff z >= e^2 (bars: mean ± sd over {n} seed(s))", fontsize=10)
        if len(panels) > 1:
            axes[0][1].set_title("a certain target planted", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / PLOT_TARGET)
        plt.close(fig)
        written.append(PLOT_TARGET)
    return written
