"""The reproduction's figures (needs the ``[plot]`` extra: ``pip install "iclr25-wm-transfer[plot]"``).

* ``evasion.png`` — evasion rate of every attack row (transfer per m, matched post-processing, random
  ±a noise, white-box), mean ± sd over the surrogate subsets: the headline claims.
* ``mechanism.png`` — three panels: surrogate bit accuracy on their inverse-decode targets (transfer vs
  random ±a noise of equal ℓ∞), SSIM of the same two, and the lower-tail share of the white-box attack
  with the ε-stop vs run to full inversion.

matplotlib is imported only when a figure is drawn; without it :func:`write_plots` logs one warning with
the install command and returns no files.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["have_matplotlib", "write_plots", "EVASION_PNG", "MECHANISM_PNG", "INSTALL_HINT"]

log = logging.getLogger(__name__)

EVASION_PNG = "evasion.png"
MECHANISM_PNG = "mechanism.png"
INSTALL_HINT = 'pip install "iclr25-wm-transfer[plot]"'


def have_matplotlib() -> bool:
    """Whether matplotlib is importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _ms(rows: Sequence[dict[str, Any]], key: str) -> tuple[float, float]:
    v = [float(r[key]) for r in rows if r.get(key) is not None and math.isfinite(float(r[key]))]
    if not v:
        return float("nan"), 0.0
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return m, sd


def _bars(ax, labels: list[str], vals: list[tuple[float, float]], ylabel: str, title: str, colors: list[str]) -> None:
    xs = list(range(len(labels)))
    ax.bar(xs, [m for m, _ in vals], yerr=[s for _, s in vals], capsize=4, color=colors)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=9)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="y", labelsize=9)


def write_plots(comp: dict[str, Any], out: str | Path) -> dict[str, str]:
    """Draw the figures of one target's comparison (the robust target's) into ``out``.

    Returns:
        ``{"evasion": "evasion.png", "mechanism": "mechanism.png"}`` (names relative to ``out``), or ``{}``
        when matplotlib is missing (one warning naming :data:`INSTALL_HINT`).
    """
    if not have_matplotlib():
        log.warning("matplotlib is not installed: no figures in %s (%s)", out, INSTALL_HINT)
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n_sub = len(next(iter(comp["transfer"].values())))
    labels, vals, colors = [], [], []
    for m, rows in sorted(comp["transfer"].items(), key=lambda kv: int(kv[0])):
        labels.append(f"transfer m={m}")
        vals.append(_ms(rows, "evasion_rate"))
        colors.append("tab:red")
    for kind, rows in comp.get("postprocess", {}).items():
        labels.append(f"{kind} (matched SSIM)")
        vals.append(_ms(rows, "evasion_rate"))
        colors.append("tab:gray")
    if comp.get("random_noise"):
        labels.append("random ±a (equal ℓ∞)")
        vals.append(_ms(comp["random_noise"], "evasion_rate"))
        colors.append("tab:olive")
    for name, lab in (("whitebox", "white-box"), ("whitebox_eps0", "white-box ε=0")):
        if name in comp:
            labels.append(lab)
            vals.append(_ms([comp[name]], "evasion_rate"))
            colors.append("tab:blue")
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    _bars(ax, labels, vals, "evasion rate (detected images)",
          f"Evasion of the robust target, mean ± sd over {n_sub} surrogate subsets", colors)
    ax.set_ylim(0, 1.05)
    fig.tight_layout()
    fig.savefig(out / EVASION_PNG, dpi=100)
    plt.close(fig)

    m_hi = str(max(int(k) for k in comp["transfer"]))
    tr, rn = comp["transfer"][m_hi], comp.get("random_noise", [])
    fig, axes = plt.subplots(1, 3, figsize=(11.5, 4.0))
    _bars(axes[0], [f"transfer m={m_hi}", "random ±a"], [_ms(tr, "surrogate_bit_acc"), _ms(rn, "surrogate_bit_acc")],
          "surrogate bit acc. vs inverse targets", "Surrogates read the inverse bits", ["tab:red", "tab:olive"])
    axes[0].set_ylim(0, 1.05)
    _bars(axes[1], [f"transfer m={m_hi}", "random ±a"], [_ms(tr, "ssim"), _ms(rn, "ssim")], "SSIM(x_adv, x_w)",
          "Quality at equal ℓ∞", ["tab:red", "tab:olive"])
    axes[1].set_ylim(0, 1.05)
    lt = [_ms([comp[k]], "lower_tail_rate_after") for k in ("whitebox", "whitebox_eps0") if k in comp]
    _bars(axes[2], ["white-box ε-stop", "white-box ε=0"][:len(lt)], lt, "share caught by the lower tail",
          "The ε-stop avoids the lower tail", ["tab:blue", "tab:cyan"])
    axes[2].set_ylim(0, 1.05)
    fig.tight_layout()
    fig.savefig(out / MECHANISM_PNG, dpi=100)
    plt.close(fig)
    return {"evasion": EVASION_PNG, "mechanism": MECHANISM_PNG}
