"""PNG plots of theory curves with Monte-Carlo points and error bars (needs the ``[plot]`` extra)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["have_matplotlib", "plot_curves"]

log = logging.getLogger("iclr25.ridge_bias")


def have_matplotlib() -> bool:
    """Whether matplotlib is importable (``pip install iclr25-ridge-bias[plot]``)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_curves(
    path: str | Path,
    panels: Sequence[Mapping],
    *,
    title: str = "",
) -> Path | None:
    """Draw one row of panels and save a PNG.

    Args:
        path: output file (``.png``).
        panels: one mapping per panel with ``x [L]``, ``xlabel``, ``ylabel``, ``curves`` (a list of
            ``{"y": [L], "label": str}``, drawn as lines), optional ``points`` (a list of
            ``{"x": [P], "y": [P], "err": [P] or None, "label": str}``, drawn as error bars),
            optional ``logx`` (default True), ``logy`` (default False), ``hline`` (a y value).
        title: figure title.

    Returns:
        The path written, or ``None`` (with a log message) when matplotlib is missing.
    """
    if not have_matplotlib():
        log.warning("matplotlib is not installed; skipping %s (pip install 'iclr25-ridge-bias[plot]')", path)
        return None
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False)
    for ax, pan in zip(axes[0], panels):
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        x = np.asarray(pan["x"], dtype=float)
        for i, c in enumerate(pan.get("curves", [])):
            ax.plot(x, np.asarray(c["y"], dtype=float), "-", color=colors[i % len(colors)], label=c.get("label"))
        for i, pnt in enumerate(pan.get("points", [])):
            err = pnt.get("err")
            ax.errorbar(
                np.asarray(pnt["x"], dtype=float),
                np.asarray(pnt["y"], dtype=float),
                yerr=None if err is None else np.asarray(err, dtype=float),
                fmt="o",
                ms=4,
                capsize=2,
                color=colors[i % len(colors)],
                label=pnt.get("label"),
            )
        if pan.get("hline") is not None:
            ax.axhline(float(pan["hline"]), color="gray", lw=0.8, ls="--")
        if pan.get("logx", True):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        if pan.get("logy", False):
            ax.set_yscale("log")
        ax.set_xlabel(pan.get("xlabel", ""))
        ax.set_ylabel(pan.get("ylabel", ""))
        if pan.get("title"):
            ax.set_title(pan["title"], fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
