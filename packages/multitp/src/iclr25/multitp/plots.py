"""Radar plots of six-dimension preferences (extra ``[plot]``: matplotlib)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .spec import CATEGORIES, DIMENSIONS

__all__ = ["radar_plot", "reproduction_plot"]


def radar_plot(model_by_lang: Mapping[str, Any], human_by_lang: Mapping[str, Mapping[str, float]] | None,
               path: str | Path, *, title: str = "", max_panels: int = 12) -> Path:
    """One polar panel per language: the model's P (points, undefined dimensions left out) and the human
    vector (line). Writes a PNG.

    Raises:
        ImportError: matplotlib is missing (``pip install 'iclr25-multitp[plot]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(f"radar plots need matplotlib: pip install 'iclr25-multitp[plot]' ({e})") from None
    langs = list(model_by_lang)[:max_panels]
    cols = min(4, len(langs)) or 1
    rows = int(np.ceil(len(langs) / cols)) or 1
    ang = np.linspace(0, 2 * np.pi, len(CATEGORIES), endpoint=False)
    fig, axes = plt.subplots(rows, cols, subplot_kw={"polar": True}, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(langs):]:
        ax.set_visible(False)
    for ax, lang in zip(axes.flat, langs):
        p = model_by_lang[lang]
        p = getattr(p, "preferences", p)
        vals = np.array([np.nan if p[c] is None else float(p[c]) for c in CATEGORIES])
        if human_by_lang is not None and lang in human_by_lang:
            h = np.array([human_by_lang[lang][c] for c in CATEGORIES])
            ax.plot(np.r_[ang, ang[:1]], np.r_[h, h[:1]], "-", color="tab:blue", lw=1.5, label="human")
        ok = ~np.isnan(vals)
        ax.plot(ang[ok], vals[ok], "o", color="tab:red", ms=4, label="model")
        ax.set_xticks(ang)
        ax.set_xticklabels([d.replace("No. Characters", "No. chars") for d in DIMENSIONS], fontsize=7)
        ax.set_ylim(0, 100)
        ax.set_yticks([25, 50, 75])
        ax.tick_params(axis="y", labelsize=6)
        ax.set_title(lang, fontsize=10)
    axes.flat[0].legend(loc="lower left", fontsize=6, bbox_to_anchor=(-0.3, -0.3))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def reproduction_plot(model_by_lang: Mapping[str, Any], human_by_lang: Mapping[str, Mapping[str, float]],
                      path: str | Path) -> bool:
    """The reproduction's radar plot (the human-like scripted agent vs the human vectors); ``False`` with a
    warning when matplotlib is missing (extra ``[plot]``)."""
    import logging

    try:
        radar_plot(model_by_lang, human_by_lang, path, title="human-like scripted agent (points) vs human (line)")
    except ImportError as e:
        logging.getLogger("iclr25.multitp").warning("radar plot skipped: %s", e)
        return False
    return Path(path).is_file()
