"""The reproduction's figures (matplotlib, the ``[plot]`` extra, imported only here and only when called).

Each figure shows mean ± sd over the seeds (error bars), at most 3 panels, text >= 9 pt, <= 12 in wide.
Without matplotlib :func:`write_plots` logs one warning with the install command and writes nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .claims import BON_PLOT, RLHF_PLOT, SHARPEN_PLOT
from .settings import ReproSettings

__all__ = ["write_plots", "plot_bon", "plot_sharpening", "plot_rlhf"]

log = logging.getLogger(__name__)

_INSTALL = 'pip install "iclr25-sharpening[plot]"'


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "legend.fontsize": 9, "xtick.labelsize": 9,
                         "ytick.labelsize": 9})
    return plt


def _msd(a) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=float)
    return a.mean(0), (a.std(0, ddof=1) if a.shape[0] > 1 else np.zeros(a.shape[1:]))


def plot_bon(runs: list[dict], st: ReproSettings, path: Path) -> None:
    """BoN accuracy vs N (mean ± sd over seeds) against the exact BoN law of the learned base and greedy."""
    plt = _plt()
    ns = list(st.bon_ns)
    acc_m, acc_s = _msd([[r["bon"]["accuracy"][n] for n in ns] for r in runs])
    law_m, _ = _msd([[r["bon"]["law_mean"][n] for n in ns] for r in runs])
    g_m, g_s = _msd([[r["base"]["base_greedy_accuracy"]] for r in runs])
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.errorbar(ns, acc_m, yerr=acc_s, marker="o", capsize=3, label="likelihood BoN (measured)")
    ax.plot(ns, law_m, "k--", label="exact BoN law of the base")
    ax.errorbar([ns[0], ns[-1]], [g_m[0]] * 2, yerr=[g_s[0]] * 2, color="r", ls=":", capsize=3, label="base greedy")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (samples per prompt)")
    ax.set_ylabel("accuracy (test prompts)")
    ax.set_title(f"Inference-time BoN, {len(runs)} seeds (mean ± sd)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_sharpening(runs: list[dict], st: ReproSettings, path: Path) -> None:
    """Accuracy and exact sharpened fraction: base (greedy / T=1) vs BoN@N vs SFT-sharpened (mean ± sd)."""
    plt = _plt()
    nmax = max(st.bon_ns)
    acc = {"base greedy": [r["base"]["base_greedy_accuracy"] for r in runs],
           "base T=1": [r["base"]["base_sample_accuracy"] for r in runs],
           f"BoN N={nmax}": [r["bon"]["accuracy"][nmax] for r in runs],
           "SFT T=1": [r["sft"]["sample_accuracy"] for r in runs],
           "SFT greedy": [r["sft"]["greedy_accuracy"] for r in runs]}
    frac = {"base": [r["base"]["base_sharpened_fraction"] for r in runs],
            "SFT-sharpened": [r["sft"]["sharpened_fraction"] for r in runs]}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [5, 2]})
    for ax, d, title in ((axes[0], acc, "accuracy"), (axes[1], frac, "fraction with pi(y*|x) > 1/2")):
        m = [np.mean(v) for v in d.values()]
        s = [np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in d.values()]
        ax.bar(range(len(d)), m, yerr=s, capsize=4, color="tab:blue", alpha=0.8)
        ax.set_xticks(range(len(d)), list(d), rotation=20, ha="right")
        ax.set_ylim(0, 1.05)
        ax.set_title(title)
    fig.suptitle(f"SFT-Sharpening (N={st.sft_n}), {len(runs)} seeds, mean ± sd", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_rlhf(runs: list[dict], st: ReproSettings, path: Path) -> None:
    """Eq. (8): mass on y* per beta (mean ± sd) vs the tilted optimum of the learned base, and the mass split."""
    plt = _plt()
    betas = sorted(st.rlhf_betas, reverse=True)
    mm = np.array([[r["rlhf"]["beta"][b]["mode_mass"] for b in betas] for r in runs])
    tt = np.array([[r["rlhf"]["beta"][b]["tilted"] for b in betas] for r in runs])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    x = np.arange(len(betas))
    m, s = _msd(mm)
    axes[0].errorbar(x, m, yerr=s, marker="o", capsize=4, label="Eq. (8) fit")
    axes[0].plot(x, tt.mean(0), "k--", marker="x", label="tilted optimum of the base")
    axes[0].set_xticks(x, [f"beta={b:g}" for b in betas])
    axes[0].set_ylabel("mean pi(y*|x)")
    axes[0].set_ylim(0, 1.05)
    axes[0].legend(loc="lower right")
    axes[0].set_title("mass on the base's mode")
    keys = ("correct_mass", "distractor_mass", "unsupported_mass")
    labels = ("correct", "distractors", "never-given")
    cols = ["base"] + [f"beta={b:g}" for b in betas]
    vals = np.array([[[r["rlhf"]["base_split"][k] for k in keys]] + [[r["rlhf"]["beta"][b][k] for k in keys]
                                                                     for b in betas] for r in runs])  # (S, C, K)
    vm, vs = _msd(vals)
    w = 0.25
    for j, lab in enumerate(labels):
        axes[1].bar(np.arange(len(cols)) + (j - 1) * w, vm[:, j], w, yerr=vs[:, j], capsize=3, label=lab)
    axes[1].set_xticks(np.arange(len(cols)), cols)
    axes[1].set_ylim(0, 1.05)
    axes[1].legend(loc="upper left")
    axes[1].set_title("mass split (mean over test prompts)")
    k = runs[0]["rlhf"]["pairs_per_prompt"]
    fig.suptitle(f"RLHF-Sharpening, {k} pairs per prompt, {len(runs)} seeds, mean ± sd", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_plots(runs: list[dict], st: ReproSettings, out: Path) -> list[str]:
    """Write :data:`~.claims.BON_PLOT`, :data:`~.claims.SHARPEN_PLOT` and :data:`~.claims.RLHF_PLOT` into
    ``out``; returns the file names written (none, with one warning, without matplotlib)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log.warning("matplotlib is not installed: no plots written (%s)", _INSTALL)
        return []
    out = Path(out)
    plot_bon(runs, st, out / BON_PLOT)
    plot_sharpening(runs, st, out / SHARPEN_PLOT)
    plot_rlhf(runs, st, out / RLHF_PLOT)
    return [BON_PLOT, SHARPEN_PLOT, RLHF_PLOT]
