"""Figures of the reproduction (matplotlib, the ``[plot]`` extra, imported lazily).

* ``win_rate_vs_kl.png`` — win rate against a fresh reference sample vs KL(policy || ref) for vBoN, RLHF and
  inference-time BoN (analytic KL); error bars: the win rates' standard errors (one training seed).
* ``inference_cost.png`` — left: BoN's win rate vs N (N = 1 is 1/2 exactly) with vBoN's win rate and the N
  where BoN matches it; right: time per batch of BoN vs N and of vBoN (one sample).

Without matplotlib: one warning naming the install command, no figure, no error.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .bon import bon_kl

__all__ = ["write_plots", "have_matplotlib"]

log = logging.getLogger(__name__)

_INSTALL = "pip install 'iclr25-vbon[plot]'"


def have_matplotlib() -> bool:
    """Whether matplotlib is importable (``pip install 'iclr25-vbon[plot]'``)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_plots(results: dict, bon_rows: dict, tp: dict, ns, betas, bounds, out_dir: Path) -> list[Path]:
    """Write both figures into ``out_dir``; returns their paths (empty, with one warning, without matplotlib)."""
    out_dir = Path(out_dir)
    if not have_matplotlib():
        log.warning("matplotlib is not installed; no figures written (%s)", _INSTALL)
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10})
    paths = []
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for b in bounds:
        rs = [results[f"vbon-{b}-N{n}"] for n in ns]
        ax.errorbar([r["kl"] for r in rs], [r["win_rate"] for r in rs], yerr=[r["win_rate_se"] for r in rs],
                    fmt="o-", capsize=3, label=f"vBoN ({b}), N={list(ns)}")
    rs = sorted((results[f"rlhf-beta{x:g}"] for x in betas), key=lambda r: r["kl"])
    ax.errorbar([r["kl"] for r in rs], [r["win_rate"] for r in rs], yerr=[r["win_rate_se"] for r in rs], fmt="s--",
                capsize=3, label="RLHF (raw reward)")
    ax.errorbar([bon_kl(n) for n in bon_rows], [r["win_rate"] for r in bon_rows.values()],
                yerr=[r["se"] for r in bon_rows.values()], fmt="^:", capsize=3, label="BoN (KL analytic)")
    ax.set_xlabel("KL(policy || ref) (nats)")
    ax.set_ylabel("win rate vs reference sample")
    ax.set_title("win rate vs KL (± s.e., one training seed)")
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "win_rate_vs_kl.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    mc = tp["matched"]
    top = results[f"vbon-{bounds[0]}-N{max(ns)}"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    bn = sorted(bon_rows)
    a1.errorbar([1, *bn], [0.5, *(bon_rows[n]["win_rate"] for n in bn)], yerr=[0, *(bon_rows[n]["se"] for n in bn)],
                fmt="^-", capsize=3, label="BoN (measured; N=1 exact)")
    a1.axhline(top["win_rate"], color="tab:red", label=f"vBoN N={max(ns)}")
    a1.axhspan(top["win_rate"] - top["win_rate_se"], top["win_rate"] + top["win_rate_se"], color="tab:red", alpha=0.15)
    a1.axvline(mc["n_match"], color="gray", ls="--", label=f"matched N = {mc['n_match']:.2f}")
    a1.set_xscale("log", base=2)
    a1.set_xlabel("BoN samples N")
    a1.set_ylabel("win rate vs reference sample")
    a1.legend(fontsize=9)
    tb = {int(k): v for k, v in tp["bon_s"].items()}
    a2.plot(sorted(tb), [tb[n] for n in sorted(tb)], "^-", label="BoN (N samples + scoring)")
    a2.axhline(tp["vbon_s"], color="tab:red", label="vBoN (1 sample)")
    a2.axvline(mc["n_match"], color="gray", ls="--",
               label=f"BoN at matched N: {mc['ratio']:.2f}±{mc['ratio_se']:.2f}x vBoN")
    a2.set_xscale("log", base=2)
    a2.set_xlabel("BoN samples N")
    a2.set_ylabel(f"seconds per batch of {tp['prompts']} prompts")
    a2.legend(fontsize=9)
    fig.suptitle("inference cost at matched win rate")
    fig.tight_layout()
    paths.append(out_dir / "inference_cost.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths
