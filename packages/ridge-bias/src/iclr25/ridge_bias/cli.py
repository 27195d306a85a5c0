"""Console script ``iclr25-ridge-bias``: ``theory``, ``simulate``, ``digits-demo``, ``reproduce``."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import DigitsConfig, ReproduceConfig, SimulateConfig, TheoryConfig

log = logging.getLogger("iclr25.ridge_bias")


def _finite_or_none(o):
    """``o`` with every NaN/inf float replaced by None (JSON has no NaN: ``ADD`` is NaN where ``EDD`` = 0)."""
    if isinstance(o, dict):
        return {k: _finite_or_none(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite_or_none(v) for v in o]
    if isinstance(o, float) and not np.isfinite(o):
        return None
    return o


def _write_json(path: Path, obj) -> None:
    """Strict JSON (non-finite numbers as null), readable by jq and JavaScript."""
    path.write_text(json.dumps(_finite_or_none(obj), indent=1, allow_nan=False))


def _threads(n: int | None):
    """BLAS limit for the command (the core's --threads handling; ``None``: leave as is)."""
    from iclr25.core.threads import limited_threads

    return limited_threads(n)


def load_mixture_file(path: Path, n: float | None = None, p2: float | None = None):
    """Read a two-group mixture from an ``.npz`` (see :class:`.config.TheoryConfig.mixture_file`).

    Raises:
        ValueError: a missing file or array, naming it.
    """
    import zipfile

    from .theory import GroupSpec, MixtureSpec

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"mixture_file: {p} does not exist")
    if not zipfile.is_zipfile(p):
        head = p.read_bytes()[:6]
        kind = "a single .npy array" if head == b"\x93NUMPY" else "not a NumPy .npz archive (a zip of .npy arrays)"
        raise ValueError(f"mixture_file {p}: the file is {kind}; write one with "
                         "numpy.savez(path, cov1=..., cov2=..., teacher1=..., teacher2=...)")
    try:
        z = np.load(p, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise ValueError(f"mixture_file {p}: not a readable .npz archive ({e})") from None
    with z:
        missing = [k for k in ("cov1", "cov2", "teacher1", "teacher2") if k not in z]
        if missing:
            raise ValueError(f"mixture_file {p}: missing array(s) {missing}; needs cov1, cov2, teacher1, teacher2")
        arrs = {}
        for k in ("cov1", "cov2", "teacher1", "teacher2", "noise_var", "proportions", "n"):
            if k in z:
                try:
                    arrs[k] = np.asarray(z[k], dtype=float)
                except (TypeError, ValueError) as e:
                    raise ValueError(f"mixture_file {p}: array {k!r} is not numeric ({e})") from None
    noise = arrs.get("noise_var", np.zeros(2))
    if noise.ndim == 0:  # one noise variance for both groups
        noise = np.full(2, float(noise))
    if noise.shape != (2,):
        raise ValueError(f"mixture_file {p}: noise_var has shape {noise.shape}; give one value per group (2,) or "
                         "a scalar")
    props = arrs.get("proportions", np.array([0.5, 0.5]))
    if props.shape != (2,):
        raise ValueError(f"mixture_file {p}: proportions has shape {props.shape}; give one value per group (2,)")
    nn = None
    if "n" in arrs:
        if arrs["n"].size != 1:
            raise ValueError(f"mixture_file {p}: n has shape {arrs['n'].shape}; give one number of training samples")
        nn = float(arrs["n"].reshape(()))
    g = (GroupSpec(arrs["cov1"], arrs["teacher1"], float(noise[0])),
         GroupSpec(arrs["cov2"], arrs["teacher2"], float(noise[1])))
    if p2 is not None:
        props = np.array([1 - p2, p2])
    n = n if n is not None else (nn if nn is not None else 2.0 * g[0].dim)
    return MixtureSpec(g, tuple(props), n)


def _mixture(cfg: TheoryConfig):
    from .scenarios import scenario

    if cfg.mixture_file is not None:
        return load_mixture_file(cfg.mixture_file, cfg.n, cfg.p2)
    return scenario(cfg.scenario, cfg.d, cfg.n, p2=cfg.p2)  # n as given: rounding first turned 0.5 into 'got 0'


def _grid(cfg: TheoryConfig) -> np.ndarray:
    """The lambda grid; for gradient flow ``--t-grid`` gives ``lam = 1/t``."""
    from .theory import _as_lam

    if cfg.t_grid:
        if cfg.model != "gradient_flow":
            raise ValueError("--t-grid needs --model gradient_flow")
        return 1.0 / _as_lam(cfg.t_grid, "t_grid", time=True)[0]
    return _as_lam(cfg.lam_grid, "lam_grid")[0]


def _table(header: list[str], rows: list[list[float]]) -> str:
    lines = ["  ".join(f"{h:>11}" for h in header)]
    lines += ["  ".join(f"{v:>11.5g}" for v in r) for r in rows]
    return "\n".join(lines)


def _theory_metrics(cfg: TheoryConfig, mix, lam: np.ndarray, m: int | None = None) -> dict:
    from .disparity import disparity_metrics

    m = cfg.m if m is None else m
    if cfg.model == "rp" and m is None:
        raise ValueError("model=rp needs --m (the number of random features) or --m-grid")
    if cfg.model != "rp" and (m is not None or cfg.draws != 1):
        raise ValueError(f"--m/--draws are for --model rp; model={cfg.model} would ignore them")
    return disparity_metrics(mix, lam, model=cfg.model, m=m, seed=cfg.seed, draws=cfg.draws, risk=cfg.risk,
                             add=cfg.add, edd_samples=cfg.edd_samples)


def _theory_sweep(cfg: TheoryConfig, mix, lam: np.ndarray, name: str) -> int:
    """Table/JSON/plot of the metrics over ``m`` (``--m-grid``) or the minority share (``--p2-grid``)."""
    from .plots import plot_curves
    from .theory import MixtureSpec

    if name == "m":
        vals = [int(m) for m in cfg.m_grid]
        runs = [(mix, m) for m in vals]
        xlabel, logx = "m (random features)", True
    else:
        vals = [float(p) for p in cfg.p2_grid]
        bad = [p for p in vals if not 0 < p < 1]
        if bad:
            raise ValueError(f"p2_grid: each minority share must be in (0, 1), got {bad}")
        runs = [(MixtureSpec(mix.groups, (1 - p, p), mix.n), None) for p in vals]
        xlabel, logx = "p2 (minority share)", False
    t0 = time.perf_counter()
    mets = [_theory_metrics(cfg, mx, lam, m) for mx, m in runs]
    secs = time.perf_counter() - t0
    rows = [[v, lam[i], *met["R_joint"][i], met["ODD"][i], met["EDD"][i], met["ADD"][i]]
            for v, met in zip(vals, mets) for i in range(lam.size)]
    print(_table([name, "lam", "R1_joint", "R2_joint", "ODD", "EDD", "ADD"], rows))
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = ("R_joint", "R_sep", "ODD", "EDD", "ADD", "minority_bias")
    _write_json(out / "theory.json", {
        "config": _cfg_dict(cfg), "seconds": secs, name: vals, "lam": lam.tolist(),
        **{k: [np.asarray(met[k]).tolist() for met in mets] for k in keys}})
    if cfg.plot:
        odd = np.array([met["ODD"] for met in mets])  # [V, L]
        add = np.array([met["ADD"] for met in mets])
        plot_curves(out / "theory.png", [
            dict(x=vals, xlabel=xlabel, ylabel="ODD", title=f"disparity vs {name}", logx=logx,
                 curves=[{"y": odd[:, i], "label": f"lam={lam[i]:g}"} for i in range(lam.size)]),
            dict(x=vals, xlabel=xlabel, ylabel="ADD", title=f"amplification vs {name}", logx=logx,
                 hline=1.0 if cfg.add == "ratio" else 0.0,
                 curves=[{"y": add[:, i], "label": f"lam={lam[i]:g}"} for i in range(lam.size)]),
        ])
    print(f"theory: {len(vals)} x {lam.size} grid points in {secs:.2f} s; wrote {out / 'theory.json'}")
    return 0


def cmd_theory(cfg: TheoryConfig) -> int:
    from .plots import plot_curves

    with _threads(cfg.threads):
        mix = _mixture(cfg)
        lam = _grid(cfg)
        if cfg.m_grid and cfg.p2_grid:
            raise ValueError("give --m-grid or --p2-grid, not both")
        if cfg.m_grid:
            if cfg.model != "rp":
                raise ValueError("--m-grid needs --model rp")
            return _theory_sweep(cfg, mix, lam, "m")
        if cfg.p2_grid:
            return _theory_sweep(cfg, mix, lam, "p2")
        t0 = time.perf_counter()
        met = _theory_metrics(cfg, mix, lam)
        secs = time.perf_counter() - t0
    xname = "t" if cfg.model == "gradient_flow" else "lam"
    x = 1.0 / lam if cfg.model == "gradient_flow" else lam
    print(_table([xname, "R1_joint", "R2_joint", "R1_sep", "R2_sep", "ODD", "EDD", "ADD"],
                 [[x[i], *met["R_joint"][i], *met["R_sep"][i], met["ODD"][i], met["EDD"][i], met["ADD"][i]]
                  for i in range(lam.size)]))
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "theory.json", {"config": _cfg_dict(cfg), "seconds": secs,
                                                 **{k: np.asarray(v).tolist() for k, v in met.items()}})
    if cfg.plot:
        plot_curves(out / "theory.png", [
            dict(x=x, xlabel=xname, ylabel=f"{cfg.risk} risk", title=f"{cfg.model}: group risks",
                 curves=[{"y": met["R_joint"][:, k], "label": f"R{k + 1} joint"} for k in range(2)]
                 + [{"y": met["R_sep"][:, k], "label": f"R{k + 1} separate"} for k in range(2)]),
            dict(x=x, xlabel=xname, ylabel="ADD", title="amplification", hline=1.0 if cfg.add == "ratio" else 0.0,
                 curves=[{"y": met["ADD"], "label": f"ADD ({cfg.add})"}]),
        ])
    print(f"theory: {lam.size} grid points in {secs * 1e3:.1f} ms; wrote {out / 'theory.json'}")
    return 0


def cmd_simulate(cfg: SimulateConfig) -> int:
    from .plots import plot_curves
    from .simulate import simulate_gradient_flow, simulate_ridge, simulate_rp

    with _threads(cfg.threads):
        mix = _mixture(cfg)
        lam = _grid(cfg)
        met = _theory_metrics(cfg, mix, lam)
        t0 = time.perf_counter()
        if cfg.model == "ridge":
            mc = simulate_ridge(mix, lam, cfg.mc_draws, seed=cfg.mc_seed, progress=not cfg.quiet)
        elif cfg.model == "rp":
            mc = simulate_rp(mix, lam, cfg.m, cfg.mc_draws, seed=cfg.mc_seed, proj_seed=cfg.seed,
                             progress=not cfg.quiet)
        else:
            mc = simulate_gradient_flow(mix, 1.0 / lam, cfg.mc_draws, seed=cfg.mc_seed, progress=not cfg.quiet)
        secs = time.perf_counter() - t0
    key = "noisy_risk_mean" if cfg.risk == "noisy" else "risk_mean"
    mcr, sem = mc[key], mc["risk_sem"]
    x = 1.0 / lam if cfg.model == "gradient_flow" else lam
    xname = "t" if cfg.model == "gradient_flow" else "lam"
    print(_table([xname, "R1_theory", "R1_MC", "R1_sem", "R2_theory", "R2_MC", "R2_sem"],
                 [[x[i], met["R_joint"][i, 0], mcr[i, 0], sem[i, 0], met["R_joint"][i, 1], mcr[i, 1], sem[i, 1]]
                  for i in range(lam.size)]))
    rel = float(np.mean(np.abs(mcr / met["R_joint"] - 1)))
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "simulate.json", {
        "config": _cfg_dict(cfg), "seconds": secs, "mean_rel_err": rel, "lam": lam.tolist(),
        "theory": met["R_joint"].tolist(), "mc_mean": mcr.tolist(), "mc_sem": sem.tolist(),
        "mc_sep_mean": mc["sep_mean"].tolist(), "theory_sep": met["R_sep"].tolist()})
    if cfg.plot:
        plot_curves(out / "simulate.png", [dict(
            x=x, xlabel=xname, ylabel=f"{cfg.risk} risk", title=f"{cfg.model}: theory vs MC ({cfg.mc_draws} draws)",
            curves=[{"y": met["R_joint"][:, k], "label": f"theory R{k + 1}"} for k in range(2)],
            points=[{"x": x, "y": mcr[:, k], "err": sem[:, k], "label": f"MC R{k + 1}"} for k in range(2)])])
    print(f"simulate: {cfg.mc_draws} draws in {secs:.1f} s; mean |MC/theory - 1| = {rel:.4f}; wrote {out / 'simulate.json'}")
    return 0


def cmd_digits(cfg: DigitsConfig) -> int:
    from .digits import digits_experiment
    from .plots import plot_curves

    with _threads(cfg.threads):
        res = digits_experiment(cfg.lam_grid, cfg.p2_values, cfg.n_train, cfg.splits, cfg.seed)
    lam = res["lam"]
    for j, p2 in enumerate(res["p2"]):
        print(f"p2 = {p2:g}")
        print(_table(["lam", "R1_theory", "R1_ridge", "R2_theory", "R2_ridge"],
                     [[lam[i], res["theory"][j, i, 0], res["empirical"][j, i, 0], res["theory"][j, i, 1],
                       res["empirical"][j, i, 1]] for i in range(lam.size)]))
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "digits.json", {k: np.asarray(v).tolist() for k, v in res.items()})
    if cfg.plot:
        plot_curves(out / "digits.png", [dict(
            x=lam, xlabel="lambda", ylabel="test MSE", title=f"p2={p2:g}",
            curves=[{"y": res["theory"][j, :, k], "label": f"theory g{k + 1}"} for k in range(2)],
            points=[{"x": lam, "y": res["empirical"][j, :, k], "err": res["empirical_sem"][j, :, k],
                     "label": f"ridge g{k + 1}"} for k in range(2)]) for j, p2 in enumerate(res["p2"])])
    print(f"digits: ordering agreement {res['ordering_agreement_resolved']:.2f} over the {res['n_resolved']} "
          f"resolved points ({res['n_unresolved']} unresolved within {res['resolve_z']:g} s.e.); "
          f"wrote {out / 'digits.json'}")
    return 0


def _cfg_dict(cfg) -> dict:
    from dataclasses import asdict

    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-ridge-bias``; returns the exit code."""
    return run_cli(
        "iclr25-ridge-bias",
        "An Effective Theory of Bias Amplification (ICLR 2025): group-wise test errors and ODD/EDD/ADD "
        "of ridge, random-projection ridge and gradient flow, theory vs Monte-Carlo.",
        {
            "theory": Command(TheoryConfig, cmd_theory, "theory curves (group risks, ODD/EDD/ADD) over a lambda grid"),
            "simulate": Command(SimulateConfig, cmd_simulate, "Monte-Carlo group risks next to the theory",
                                deprecated={"--seeds": "--mc-draws", "--no-progress": "--quiet"}),
            "digits-demo": Command(DigitsConfig, cmd_digits, "colored-digits: theory vs fitted ridge"),
            "reproduce": reproduce_command("ridge-bias", "iclr25.ridge_bias.reproduce:reproduce", __version__,
                                           config=ReproduceConfig,
                                           help="reproduce the paper's claims (--quick: about a minute)"),
        },
        argv,
        version=__version__,
    )
