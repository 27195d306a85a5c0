"""PNG plots of theory curves with Monte-Carlo points and error bars (needs the ``[plot]`` extra)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["have_matplotlib", "plot_curves", "plot_reproduction"]

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


# ----------------------------------------------------------------------------------------------
# the reproduction's figures, drawn from the runner's records (iclr25.ridge_bias.experiments)


def _validation_figure(val: dict[str, Any], out: Path) -> None:
    lam = np.asarray(val["lam"])
    panels = []
    for name in ("s1", "s2", "C"):
        th, mean, sem = (np.asarray(val[k][name]) for k in ("theory", "mc_mean", "mc_sem"))
        panels.append(dict(
            x=lam, xlabel="lambda", ylabel="excess group risk", title=f"{name} (d={val['d']})",
            curves=[{"y": th[:, k], "label": f"theory R{k + 1}(joint)"} for k in range(2)],
            points=[{"x": lam, "y": mean[:, k], "err": sem[:, k], "label": f"MC R{k + 1}"} for k in range(2)],
        ))
    plot_curves(out / f"theory_vs_mc_d{val['d']}.png", panels, title="Theory (lines) vs Monte-Carlo (points, ±1 s.e.)")


def _s1_s2_figure(rec: dict[str, Any], out: Path) -> None:
    lam, fine = np.asarray(rec["lam"]), np.asarray(rec["fine_lam"])
    s1f, s2f = ({k: np.asarray(v) for k, v in rec[n].items()} for n in ("s1_fine", "s2_fine"))
    plot_curves(out / "s1_s2_add.png", [
        dict(x=fine, xlabel="lambda", ylabel="ADD = ODD/EDD", title="S1 (difficulty via covariance)", hline=1.0,
             curves=[{"y": s1f["ADD"], "label": "theory"}],
             points=[{"x": lam, "y": np.asarray(rec["s1"]["ADD"]), "label": "lambda grid"}]),
        dict(x=fine, xlabel="lambda", ylabel="ADD = ODD/EDD", title="S2 (concept shift, p2=0.2)", hline=1.0,
             curves=[{"y": s2f["ADD"], "label": "theory"}],
             points=[{"x": lam, "y": np.asarray(rec["s2"]["ADD"]), "label": "lambda grid"}]),
        dict(x=fine, xlabel="lambda", ylabel="excess risk", title="S2 group risks",
             curves=[{"y": s2f["R_joint"][:, 0], "label": "R1 joint"}, {"y": s2f["R_joint"][:, 1], "label": "R2 joint"},
                     {"y": s2f["R_sep"][:, 0], "label": "R1 separate"}, {"y": s2f["R_sep"][:, 1], "label": "R2 separate"}],
             logy=True),
    ])


def _s3_figure(rec: dict[str, Any], out: Path) -> None:
    ms, odd, ns = np.asarray(rec["m"]), np.asarray(rec["odd"]), np.asarray(rec["ns"])
    m_sweep, odd_m = np.asarray(rec["m_sweep"]), np.asarray(rec["m_sweep_odd"])
    d, n, n_m = rec["d"], rec["n"], rec["m_sweep_n"]
    plot_curves(out / "s3_rp.png", [
        dict(x=ms, xlabel="m (random features)", ylabel="ODD", title=f"S3: ODD vs m (d={d}, n={n})",
             hline=rec["odd_ridge"], curves=[{"y": odd.mean(0), "label": "RP theory (mean over S)"}],
             points=[{"x": ms, "y": odd.mean(0), "err": odd.std(0), "label": "±1 sd over S"}]),
        dict(x=ns, xlabel="n (samples)", ylabel="ODD", title="S3: ODD vs n (peaks at n = min(m, d))",
             curves=[{"y": np.asarray(o), "label": f"RP m={m}"} for m, o in zip(rec["n_sweep_m"], rec["n_sweep_odd"])],
             logy=True),
        dict(x=m_sweep, xlabel="m (random features)", ylabel="ODD", title=f"S3: ODD vs m at n = {n_m} (peak at m = n)",
             curves=[{"y": odd_m.mean(0), "label": "RP theory (mean over S)"}], logx=True),
    ])


def _gradient_flow_figure(rec: dict[str, Any], out: Path) -> None:
    t, th = np.asarray(rec["t"]), np.asarray(rec["theory_lam_1_over_t"])
    mean, sem = np.asarray(rec["gradient_flow_mc"]), np.asarray(rec["gradient_flow_mc_sem"])
    plot_curves(out / "gradient_flow.png", [
        dict(x=t, xlabel="training time t (= 1/lambda)", ylabel="excess group risk",
             title="S2 (d=200): gradient flow vs ridge",
             curves=[{"y": th[:, k], "label": f"ridge theory R{k + 1} at lam=1/t"} for k in range(2)],
             points=[{"x": t, "y": mean[:, k], "err": sem[:, k], "label": f"gradient flow MC R{k + 1}"}
                     for k in range(2)]),
    ])


def _digits_figure(res: dict[str, Any], out: Path) -> None:
    lam = np.asarray(res["lam"])
    th, emp, sem = (np.asarray(res[k]) for k in ("theory", "empirical", "empirical_sem"))
    panels = [dict(
        x=lam, xlabel="lambda", ylabel="test MSE (noisy labels)", title=f"colored digits, p2={p2:g}",
        curves=[{"y": th[j, :, k], "label": f"theory group {k + 1}"} for k in range(2)],
        points=[{"x": lam, "y": emp[j, :, k], "err": sem[j, :, k], "label": f"ridge group {k + 1}"} for k in range(2)],
    ) for j, p2 in enumerate(res["p2"])]
    plot_curves(out / "digits.png", panels, title="Colored digits: theory (lines) vs fitted ridge (points)")


def plot_reproduction(records: Mapping[str, Any], out: str | Path) -> None:
    """The reproduction's PNGs in ``out`` from its records: ``theory_vs_mc_d<d>.png`` per validation job,
    ``s1_s2_add.png``, ``s3_rp.png``, ``gradient_flow.png``, ``digits.png``."""
    out = Path(out)
    for name, rec in records.items():
        if name.startswith("validation_d"):
            _validation_figure(rec, out)
    _s1_s2_figure(records["s1_s2"], out)
    _s3_figure(records["s3"], out)
    _gradient_flow_figure(records["gradient_flow"], out)
    _digits_figure(records["digits"], out)
