"""The ``iclr25-pref-sensitivity`` command line (subcommands built from :mod:`.config` with tyro)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import (
    AnalyzeConfig,
    AreaConfig,
    DemoConfig,
    DPOConfig,
    HeatmapConfig,
    RealDataConfig,
    ReproduceConfig,
    TableConfig,
)

PROG = "iclr25-pref-sensitivity"
log = logging.getLogger("iclr25.pref_sensitivity")


def _analyze(cfg: AnalyzeConfig) -> int:
    from .analyze import analyze_file

    rep = analyze_file(cfg.input, cfg.out, lam=cfg.lam, k=cfg.k, l2=cfg.l2, n_top=cfg.n_top, plot=cfg.plot,
                       maxiter=cfg.maxiter)
    print(rep.to_markdown(n_rows=10))
    fit = getattr(rep, "fit", None)
    if fit is not None:
        state = "converged" if fit["converged"] else "DID NOT CONVERGE"
        print(f"BT fit: {state} in {fit['iterations']} {fit['method']} iterations, max |gradient| "
              f"{fit['grad_norm']:.2g} ({fit['message']})")
    print(f"{rep.n_sensitive}/{rep.n_evaluated} combinations sensitive at lambda={cfg.lam:g} "
          f"({100 * rep.fraction_sensitive:.3g}%); report in {cfg.out}/sensitivity_report.md")
    return 0


def _table(cfg: TableConfig) -> int:
    import numpy as np

    from .closed_form import bt_predict, bt_sensitivity

    a, b = np.asarray(cfg.p_ik, float), np.asarray(cfg.p_kj, float)
    if a.size != b.size and 1 not in (a.size, b.size):
        raise ValueError(f"give as many --p-kj as --p-ik values (or one of either); got {a.size} and {b.size}")
    p = bt_predict(a, b)
    da, db = bt_sensitivity(a, b)
    a, b = np.broadcast_arrays(a, b)
    print("| p_ik | p_kj | p_ij | dp_ij/dp_ik | dp_ij/dp_kj |\n|---|---|---|---|---|")
    for row in zip(a, b, p, da, db):
        print("| " + " | ".join(f"{x:.6g}" for x in row) + " |")
    return 0


def _area(cfg: AreaConfig) -> int:
    from .closed_form import sensitive_region_area

    print("| lambda | A(lambda) |\n|---|---|")
    for lam in cfg.lam:
        print(f"| {lam:g} | {sensitive_region_area(lam, cfg.method):.6g} |")
    return 0


def _heatmap(cfg: HeatmapConfig) -> int:
    from .plotting import plot_sensitivity_heatmap

    out = cfg.out
    if out.suffix.lower() == ".png":  # 0.1 took a file name; a folder is the convention now
        log.warning("heatmap --out %s: pass a folder (the PNG is written as <out>/heatmap.png); "
                    "a .png path still works in this release", out)
        target = out
    else:
        target = out / "heatmap.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    path = plot_sensitivity_heatmap(target, lam=cfg.lam if cfg.boundary else None)
    print(f"wrote {path}")
    return 0


def _demo(cfg: DemoConfig) -> int:
    import numpy as np

    from .closed_form import bt_predict, bt_sensitivity
    from .experiments import bt_mle_experiment

    grid = [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 0.9]
    print(f"Options dog, cat, bird. Train on P(dog > cat) = {cfg.p12:g} and P(cat > bird) = p23; "
          "(dog, bird) is never compared.\n")
    rows = bt_mle_experiment(cfg.p12, grid, (cfg.n,), seeds=5)
    print(f"| p23 | BT p13 (closed form) | dp13/dp23 | BT MLE p13, N={cfg.n} (5 seeds: mean ± sd) |\n|---|---|---|---|")
    for p in grid:
        v = [r["p13_mle"] for r in rows if r["p23"] == p]
        print(f"| {p:g} | {float(bt_predict(cfg.p12, p)):.4f} | {float(bt_sensitivity(cfg.p12, p)[1]):.4g} | "
              f"{np.mean(v):.4f} ± {np.std(v, ddof=1):.4f} |")
    print("\nA few points of p23 near 0 move the never-trained p13 across most of [0, 1].")
    return 0


def _dpo(cfg: DPOConfig) -> int:
    try:
        import torch
    except ImportError:
        raise ValueError("the dpo command needs torch: pip install 'iclr25-pref-sensitivity[dpo]'") from None
    from iclr25.core.runinfo import write_run_files
    from iclr25.core.seed import choose_device

    from .dpo import check_sweep_resume, dpo_chain_experiment, sweep_settings
    from .plotting import plot_chain_curves

    if cfg.threads is None and cfg.backend != "hf":
        torch.set_num_threads(1)  # tiny models: one thread is faster than two on a shared machine
    if cfg.resume:  # refuse changed settings before config.json is rewritten with them
        check_sweep_resume(cfg.out / "sweep.jsonl", cfg.backend, sweep_settings(
            cfg.backend, beta=cfg.beta, n_pairs=cfg.n_pairs, sampling=cfg.sampling, steps=cfg.steps, lr=cfg.lr,
            batch_size=cfg.batch_size, model_name=cfg.model, prompt=cfg.prompt, options=cfg.options))
    write_run_files(cfg.out, config=cfg)
    rows = dpo_chain_experiment(cfg.p12, cfg.p23, backend=cfg.backend, beta=cfg.beta, n_pairs=cfg.n_pairs,
                                seeds=cfg.seeds, sampling=cfg.sampling, steps=cfg.steps, lr=cfg.lr,
                                batch_size=cfg.batch_size, model_name=cfg.model, prompt=cfg.prompt,
                                options=cfg.options, device=choose_device(cfg.device),
                                out_file=cfg.out / "sweep.jsonl", resume=cfg.resume,
                                checkpoint_every=cfg.checkpoint_every, progress=not cfg.quiet)
    import numpy as np

    from .closed_form import bt_predict

    ps = sorted({r["p23"] for r in rows})
    mean = [float(np.mean([r["p13_implied"] for r in rows if r["p23"] == p])) for p in ps]
    print("| p23 | implied p13 (mean over seeds) | BT g(p12_hat, p23_hat) |\n|---|---|---|")
    for p, m in zip(ps, mean):
        print(f"| {p:g} | {m:.4f} | {np.mean([r['p13_bt'] for r in rows if r['p23'] == p]):.4f} |")
    plot_chain_curves(cfg.out / "sweep.png", {f"DPO ({cfg.backend}), p12={cfg.p12:g}": (ps, mean, None),
                                              f"BT g({cfg.p12:g}, p23)": (ps, bt_predict(cfg.p12, ps), None)})
    print(f"{len(rows)} points; results in {cfg.out}/sweep.jsonl and sweep.png")
    return 0


def _realdata(cfg: RealDataConfig) -> int:
    from .realdata import hh_reward_sensitivity

    res = []
    print("| l2 | held-out pairwise acc. | reward sd | dominant pairs | " +
          " | ".join(f"sensitive triples, λ={lam:g}" for lam in cfg.lam) + " |")
    print("|---" * (4 + len(cfg.lam)) + "|")
    for l2 in cfg.l2:
        r = hh_reward_sensitivity(cfg.lam, l2=l2, n_responses=cfg.n_responses, path=cfg.path)
        r["l2"] = l2
        res.append(r)
        print(f"| {l2:g} | {r['heldout_accuracy']:.3f} | {r['reward_sd']:.3f} | {r['fraction_dominant_pairs']:.4f} | "
              + " | ".join(f"{v:.4f}" for v in r["by_lambda"].values()) + " |")
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "realdata.json").write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    print(f"{len(res)} reward models; results in {cfg.out}/realdata.json")
    return 0


COMMANDS: dict[str, Command] = {
    "analyze": Command(AnalyzeConfig, _analyze, "sensitive triples/K-tuples of a preference file: report + heat map", uses_device=False),
    "table": Command(TableConfig, _table, "closed-form p_ij and its partials for given p_ik, p_kj", uses_device=False),
    "area": Command(AreaConfig, _area, "measure A(lambda) of the sensitive region", uses_device=False),
    "heatmap": Command(HeatmapConfig, _heatmap, "heat map PNG of dp_ij/dp_ik over (0,1)^2", uses_device=False),
    "demo": Command(DemoConfig, _demo, "the dog/cat/bird example in seconds", uses_device=False),
    "dpo": Command(DPOConfig, _dpo, "DPO sweep (tabular / tiny GPT-2 / Hugging Face model), resumable"),
    "realdata": Command(RealDataConfig, _realdata, "optional: sensitive-triple fraction of a BT reward on HH-RLHF"),
    "reproduce": reproduce_command("pref-sensitivity", "iclr25.pref_sensitivity.reproduce:reproduce", __version__,
                                   config=ReproduceConfig,
                                   help="reproduce the paper's claims (results.json/.md, PNGs)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-pref-sensitivity``; returns the exit code."""
    return run_cli(PROG, "Sensitivity of Bradley-Terry / Plackett-Luce preference models to dominant "
                   "preferences (Xu & Kankanhalli, ICLR 2025).", COMMANDS, argv, version=__version__)


