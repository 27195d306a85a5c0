"""Small helpers the claim builders share (mean ± sd, the paired-gap claim, base-convergence notes).

Numpy and the core's ``Claim`` only: :mod:`.claims` and :mod:`.realtext` both build on it (no cycle).
"""

from __future__ import annotations

import re

import numpy as np

from iclr25.core import Claim

__all__ = ["ms", "margin_claim", "conv_text", "base_conv", "numkeys", "jsonable"]


def ms(xs) -> tuple[float, float]:
    """Mean and sample sd (0 for one value)."""
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def margin_claim(name: str, metric: str, ours: list[float], base: list[float], floor: float, paper: str, what: str, *,
                 higher: bool = True, unit: str = "", blocked: str = "", kind: str = "", paper_value: float | None = None,
                 paper_ref: str = "", plot: str = "") -> Claim:
    """ours vs baseline over seeds; margin = max(floor, 2 x sd of the paired gap); ``spread`` = that sd."""
    om, osd = ms(ours)
    bm, bsd = ms(base)
    gaps = (np.asarray(ours, dtype=float) - np.asarray(base, dtype=float)) * (1 if higher else -1)
    gm, gsd = ms(gaps)
    margin = max(floor, 2 * gsd)
    note = (f"{what}. Mean ± sd over {len(ours)} seeds: ours {om:.4g} ± {osd:.2g}{unit}, baseline {bm:.4g} ± "
            f"{bsd:.2g}{unit}; gap {gm:.4g} ± {gsd:.2g} ({'more' if gm > 2 * gsd else 'not more'} than twice "
            f"the spread). Holds if the gap >= max({floor:g}, 2 sd) = {margin:.3g}.{blocked}")
    return Claim(name, metric, om, baseline=bm, higher_is_better=higher, margin=margin, paper=paper, note=note,
                 kind=kind, paper_value=paper_value, paper_ref=paper_ref,
                 spread=gsd if len(ours) > 1 else None, n_seeds=len(ours), plot=plot)


def base_conv(info: dict) -> dict:
    """The base's recipe outcome (from a base record / ``TrapBase.info``), for the claims' notes."""
    return {"base_steps": info["steps"], "base_val_kl": info["val_kl"], "base_converged": info["converged"],
            "base_pretrain_cpu_s": info["pretrain_cpu_seconds"], "base_stop_kl": info.get("stop_kl"),
            "base_shipped": bool(info.get("shipped", False))}


def conv_text(ms_: list[dict]) -> tuple[bool, str]:
    """(all converged, a note fragment) for records carrying :func:`base_conv`'s keys."""
    ok = all(m.get("base_converged") is not False for m in ms_)
    parts = []
    for m in ms_:
        if m.get("base_converged") is None:
            parts.append(f"fixed-length recipe, {m.get('base_steps')} steps, validation KL "
                         f"{m.get('base_val_kl', float('nan')):.4f}")
        else:
            cpu = m.get("base_pretrain_cpu_s")
            parts.append(f"{'shipped base, ' if m.get('base_shipped') else ''}"
                         f"{'converged' if m['base_converged'] else 'NOT converged'}: validation KL "
                         f"{m['base_val_kl']:.4f} nats (stop at {m['base_stop_kl']:g}) after {m['base_steps']} steps, "
                         + ("CPU-s not measured" if cpu is None else f"{cpu:.0f} CPU-s"))
    return ok, "; ".join(parts)


_NUM_KEY = re.compile(r"-?\d+(\.\d+)?([eE]-?\d+)?")


def numkeys(x):
    """Undo JSON's stringification of numeric dict keys (N, beta, p_c, alpha) in a record."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if isinstance(k, str) and _NUM_KEY.fullmatch(k):
                k = int(k) if re.fullmatch(r"-?\d+", k) else float(k)
            out[k] = numkeys(v)
        return out
    if isinstance(x, list):
        return [numkeys(v) for v in x]
    return x


def jsonable(x):
    """A record for the runner: dict keys as strings (N, beta), numpy scalars as Python numbers."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    return x
