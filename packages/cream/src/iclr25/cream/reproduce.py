"""CPU-scale reproduction of CREAM's claims on the addition task (spec §4; issue #20).

Per seed: M0 and M1 (cached), then T = 3 rounds of SRLM (C = 1), CREAM-avg, CREAM-dyn and
oracle-reward DPO from the same M1, with the same samples seed and data order for every method and
the fixed base M0 as reward reference. Accuracy is greedy exact match on the 200 test prompts.

Quick: seeds 0 and 1. Full: seeds 0-4, plus T = 4, the harder regime (N = 8 at temperature 1.2)
and the ``previous``-reference ablation as tables. Seeds run in parallel worker processes (one
thread each). Writes ``metrics.json`` (everything per seed and round), ``tables.md`` and
``metrics.png`` next to ``results.json``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from iclr25.core.results import Claim

__all__ = ["ReproSettings", "QUICK", "FULL", "reproduce", "run_seed", "compare", "checkpoint_path", "load_checkpoint"]

log = logging.getLogger(__name__)

METHODS = ("srlm", "avg", "dyn", "oracle")
LABEL = {"srlm": "SRLM", "avg": "CREAM-avg", "dyn": "CREAM-dyn", "oracle": "oracle DPO"}
ACC_MARGIN = 1 / 200  # "greater" on the 200-prompt test set: at least one more prompt right


@dataclass(frozen=True)
class ReproSettings:
    """Scale of a reproduction run.

    Attributes:
        seeds: seeds (each its own split, corpus, M0, M1 and sampling).
        methods: methods run from each M1.
        iterations: T.
        n_samples, temperature: N and the sampling temperature.
        reward_reference: ``base`` (default) or ``previous``.
        long_stage_epochs, long_stage_lr: the separate long DPO stage on the round-1 pairs (SRLM
            vs CREAM-avg from M1) that runs long enough for the margins to reach the bound
            ``logit(C)`` (the loop's one-epoch stages do not; ``0`` epochs: skip).
        m0_steps, sft_epochs: shrink M0/M1 training (tests only; ``None`` = the spec's recipe).
        n_operand, n_test, n_seed: the task's size (tests only; spec: 30, 200, 120).
        workers: worker processes (seeds in parallel).
    """

    seeds: tuple[int, ...] = (0, 1)
    methods: tuple[str, ...] = METHODS
    iterations: int = 3
    n_samples: int = 5
    temperature: float = 1.0
    reward_reference: str = "base"
    long_stage_epochs: int = 60
    long_stage_lr: float = 1e-3
    m0_steps: int | None = None
    sft_epochs: float | None = None
    n_operand: int = 30
    n_test: int = 200
    n_seed: int = 120
    workers: int = 2


QUICK = ReproSettings()
FULL = ReproSettings(seeds=(0, 1, 2, 3, 4))
#: extra regimes of the full run (tables, no claims)
FULL_REGIMES = {
    "previous reference": dict(reward_reference="previous", methods=("srlm", "avg", "dyn"), long_stage_epochs=0),
    "T=4": dict(iterations=4, long_stage_epochs=0),
    "hard (N=8, temperature 1.2)": dict(n_samples=8, temperature=1.2, long_stage_epochs=0),
}


def _logit(c: float) -> float:
    c = min(max(c, 1e-6), 1 - 1e-6)
    return math.log(c / (1 - c))


def run_seed(seed: int, settings: ReproSettings, device: str = "cpu", cache: str | None = None,
             progress: bool = False) -> dict[str, Any]:
    """Everything of one seed: M0/M1 metrics, each method's per-round reports, the long-stage
    margins. JSON-ready."""
    import copy

    import torch

    from iclr25.core.seed import seed_everything

    from .config import CreamConfig
    from .evaluate import ToyEvaluator
    from .loop import self_rewarding_loop
    from .toy import AdditionTask, toy_models
    from .training import train_dpo

    torch.set_num_threads(1)
    import logging as _logging

    if not _logging.getLogger().handlers:  # a spawned worker: same log format as the parent
        from iclr25.core.progress import configure_logging

        configure_logging(os.environ.get("ICLR25_QUIET") == "1")
    seed_everything(seed)
    t0 = time.perf_counter()
    task = AdditionTask(seed=seed, iterations=settings.iterations, n_operand=settings.n_operand,
                        n_test=settings.n_test, n_seed=settings.n_seed)
    ms = toy_models(task, cache=cache, m0_steps=settings.m0_steps, sft_epochs=settings.sft_epochs,
                    progress=progress)
    tok = ms["tokenizer"]
    m0, m1 = ms["m0"].to(device), ms["m1"].to(device)
    ev = ToyEvaluator(task, tok, n_samples=settings.n_samples, temperature=settings.temperature)
    out: dict[str, Any] = {"seed": seed, "m0_seconds": ms["m0_seconds"], "m1_seconds": ms["m1_seconds"],
                           "methods": {}}
    t_setup = time.perf_counter() - t0
    captured: dict[str, Any] = {}
    for method in settings.methods:
        t1 = time.perf_counter()
        cfg = CreamConfig.toy(method=method, seed=seed, iterations=settings.iterations,
                              n_samples=settings.n_samples, temperature=settings.temperature,
                              reward_reference=settings.reward_reference)

        def grab(rep, model, pairs, method=method):
            if rep.iteration == 1 and method == "srlm":
                captured["pairs"] = pairs
                captured["c_avg"] = rep.consistency["mean"] if rep.consistency else None

        reps = self_rewarding_loop(m0, tok, task.unlabeled_splits(), cfg, sft_model=m1, evaluator=ev,
                                   utility=task.utility, progress=progress, device=device, on_round=grab)
        out["m0"] = reps[0].base_metrics
        out["m1"] = reps[0].start_metrics
        out["methods"][method] = {"reports": [r.to_dict() for r in reps], "seconds": time.perf_counter() - t1}
    if settings.long_stage_epochs and "pairs" in captured and captured["c_avg"] is not None:
        t1 = time.perf_counter()
        c = captured["c_avg"]
        long: dict[str, Any] = {"epochs": settings.long_stage_epochs, "c_avg": c, "logit_c": _logit(c)}
        cfg = CreamConfig.toy(seed=seed, epochs=float(settings.long_stage_epochs), lr=settings.long_stage_lr
                              ).dpo_train(round_index=1, device=device)
        for name, w in (("srlm", 1.0), ("avg", c)):
            res = train_dpo(copy.deepcopy(m1), tok, captured["pairs"], cfg, c=[w] * len(captured["pairs"]),
                            progress=progress)
            long[name] = {"final_margin_mean": res.final_margin_mean,
                          "margin_by_epoch": _margin_by_epoch(res.history)}
        long["seconds"] = time.perf_counter() - t1
        out["long_stage"] = long
    out["seconds"] = time.perf_counter() - t0
    out["setup_seconds"] = t_setup
    return out


def _margin_by_epoch(history: list[dict[str, float]]) -> list[float]:
    by: dict[int, list[float]] = {}
    for h in history:
        by.setdefault(int(h["epoch"]), []).append(h["margin"])
    return [float(np.mean(by[e])) for e in sorted(by)]


def _run_all(settings: ReproSettings, device: str, progress: bool) -> list[dict[str, Any]]:
    """:func:`run_seed` for every seed of ``settings`` (no checkpoints)."""
    done = _run_jobs([("main", settings, s) for s in settings.seeds], device, progress)
    return [done[("main", s)] for s in settings.seeds]


def _regime_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "main"


def _checkpoint_settings(settings: ReproSettings) -> dict[str, Any]:
    """What a seed's result depends on (the seed list and the worker count do not matter)."""
    d = {k: v for k, v in asdict(settings).items() if k not in ("seeds", "workers")}
    return json.loads(json.dumps(d))


def checkpoint_path(ckpt_dir: str | Path, regime: str, seed: int) -> Path:
    """``ckpt_dir/<regime>/seed<k>.json``: one finished (regime, seed) of a reproduction."""
    return Path(ckpt_dir) / _regime_key(regime) / f"seed{int(seed)}.json"


def load_checkpoint(path: str | Path, settings: ReproSettings) -> dict[str, Any]:
    """A per-seed result saved by :func:`run_pipeline`.

    Raises:
        ValueError: the file is not valid JSON (torn or corrupt), lacks ``settings``/``result``,
            or was written with other settings (naming the file and what to do).
    """
    p = Path(path)
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{p}: corrupt or torn reproduction checkpoint ({e}); delete it to rerun that seed") from None
    if not isinstance(d, dict) or not isinstance(d.get("result"), dict) or "settings" not in d:
        raise ValueError(f"{p}: not a reproduction checkpoint (needs 'settings' and 'result'); delete it to rerun "
                         "that seed")
    want = _checkpoint_settings(settings)
    if d["settings"] != want:
        diff = sorted(k for k in set(want) | set(d["settings"]) if want.get(k) != d["settings"].get(k))
        raise ValueError(f"{p}: saved with other settings (differing: {', '.join(diff)}); use another --out or "
                         "delete the checkpoints folder")
    return d["result"]


def _save_checkpoint(path: Path, settings: ReproSettings, result: dict[str, Any]) -> None:
    from iclr25.core.checkpoint import atomic_write_text

    # atomic: a crash leaves the old file or none, never a torn one
    atomic_write_text(path, json.dumps({"settings": _checkpoint_settings(settings), "result": result}, allow_nan=False))


def _run_jobs(jobs: list[tuple[str, ReproSettings, int]], device: str, progress: bool, *,
              ckpt_dir: Path | None = None, resume: bool = False,
              on_done: Callable[[dict[tuple[str, int], dict[str, Any]]], None] | None = None,
              ) -> dict[tuple[str, int], dict[str, Any]]:
    """Run ``(regime, settings, seed)`` jobs, in order, over ``settings.workers`` spawned worker
    processes (one thread each). Every result is made plain JSON (so a resumed run computes from
    the same values as an uninterrupted one) and, with ``ckpt_dir``, saved when it ends;
    ``resume`` reuses saved results (:func:`load_checkpoint`); ``on_done(results so far)`` is
    called after each job."""
    from iclr25.core.progress import progress as bar_of
    from iclr25.core.runinfo import to_jsonable

    done: dict[tuple[str, int], dict[str, Any]] = {}
    todo = []
    for regime, s, seed in jobs:
        path = checkpoint_path(ckpt_dir, regime, seed) if ckpt_dir is not None else None
        if resume and path is not None and path.is_file():
            done[(regime, seed)] = load_checkpoint(path, s)
            log.info("%s seed %d: reusing %s", regime, seed, path)
        else:
            todo.append((regime, s, seed, path))

    def finish(regime: str, s: ReproSettings, seed: int, path: Path | None, res: dict[str, Any]) -> None:
        res = json.loads(json.dumps(to_jsonable(res), allow_nan=False))
        if path is not None:
            _save_checkpoint(path, s, res)
        done[(regime, seed)] = res
        if on_done is not None:
            on_done(done)

    if not todo:
        return done
    workers = min(todo[0][1].workers, len(todo))
    bar = bar_of(total=len(todo), desc="cream seeds", unit="seed", quiet=None if progress else True)
    if workers <= 1 or device.startswith("cuda"):
        for regime, s, seed, path in todo:
            finish(regime, s, seed, path, run_seed(seed, s, device))
            bar.update(1)
        bar.close()
        return done
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    env_threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            futs = {pool.submit(run_seed, seed, s, device): (regime, s, seed, path) for regime, s, seed, path in todo}
            for f in as_completed(futs):
                finish(*futs[f], f.result())
                bar.update(1)
    finally:
        bar.close()
        if env_threads is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env_threads
    return done


# ---------------------------------------------------------------------------------------------
# statistics


def compare(ours: list[float], base: list[float], *, higher_is_better: bool = True) -> dict[str, Any]:
    """Mean ± sd over seeds of two paired per-seed series, the per-seed differences (ours - base),
    wins (seeds where ours is better), and whether the mean gap exceeds the spread (the sd of the
    per-seed differences)."""
    o, b = np.asarray(ours, float), np.asarray(base, float)
    d = o - b
    sd = lambda x: float(x.std(ddof=1)) if len(x) > 1 else 0.0  # noqa: E731
    better = d > 0 if higher_is_better else d < 0
    return {"ours_mean": float(o.mean()), "ours_sd": sd(o), "baseline_mean": float(b.mean()), "baseline_sd": sd(b),
            "diffs": [float(x) for x in d], "diff_mean": float(d.mean()), "diff_sd": sd(d),
            "wins": int(better.sum()), "n": int(len(d)),
            "gap_exceeds_spread": bool(abs(d.mean()) > sd(d)) if len(d) > 1 else False}


def _note(c: dict[str, Any], what: str, fmt: str = ".3f") -> str:
    diffs = ", ".join(f"{x:+{fmt}}" for x in c["diffs"])
    return (f"{what}: ours {c['ours_mean']:{fmt}} ± {c['ours_sd']:{fmt}} vs baseline {c['baseline_mean']:{fmt}} ± "
            f"{c['baseline_sd']:{fmt}} (mean ± sd over {c['n']} seeds); per-seed diff [{diffs}], wins "
            f"{c['wins']}/{c['n']}; mean gap {c['diff_mean']:+{fmt}} vs spread (sd of diffs) {c['diff_sd']:{fmt}}: "
            f"{'exceeds' if c['gap_exceeds_spread'] else 'within the spread'}")


def _series(results: list[dict[str, Any]], method: str, key: str) -> np.ndarray:
    """``(seeds, T+1)``: metric ``key`` of M1..M_{T+1} (accuracy, gt_tau) per seed."""
    rows = []
    for r in results:
        reps = r["methods"][method]["reports"]
        rows.append([reps[0]["start_metrics"][key]] + [x["metrics"][key] for x in reps])
    return np.asarray(rows, float)


def _consistency(results: list[dict[str, Any]], method: str) -> np.ndarray:
    """``(seeds, T)``: mean C_j per round."""
    return np.asarray([[x["consistency"]["mean"] if x["consistency"] else np.nan
                        for x in r["methods"][method]["reports"]] for r in results], float)


def summarize(results: list[dict[str, Any]], settings: ReproSettings) -> dict[str, Any]:
    """Per-method per-round mean and sd of accuracy, gt-tau and C."""
    out: dict[str, Any] = {}
    for m in settings.methods:
        acc, gt, c = _series(results, m, "accuracy"), _series(results, m, "gt_tau"), _consistency(results, m)
        sd = (lambda x: x.std(0, ddof=1).tolist()) if len(results) > 1 else (lambda x: [0.0] * x.shape[1])
        out[m] = {"accuracy_mean": acc.mean(0).tolist(), "accuracy_sd": sd(acc), "gt_tau_mean": gt.mean(0).tolist(),
                  "gt_tau_sd": sd(gt), "consistency_mean": c.mean(0).tolist(), "consistency_sd": sd(c),
                  "accuracy": acc.tolist(), "gt_tau": gt.tolist(), "consistency": c.tolist()}
    m0 = np.asarray([r["m0"]["accuracy"] for r in results])
    out["m0_accuracy"] = m0.tolist()
    return out


def table(summary: dict[str, Any], settings: ReproSettings, title: str) -> str:
    """Markdown: accuracy per model (mean ± sd), gt-tau at the last model and C per round."""
    T = settings.iterations
    head = ["method"] + [f"M{k + 1}" for k in range(T + 1)] + [f"gt-τ M{T + 1}"] + [f"C r{t + 1}" for t in range(T)]
    lines = [f"**{title}** (greedy test accuracy, mean ± sd over {len(summary['m0_accuracy'])} seeds; "
             f"M0 {np.mean(summary['m0_accuracy']):.3f})", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in settings.methods:
        s = summary[m]
        cells = [LABEL[m]] + [f"{a:.3f} ± {d:.3f}" for a, d in zip(s["accuracy_mean"], s["accuracy_sd"])]
        cells.append(f"{s['gt_tau_mean'][-1]:.3f} ± {s['gt_tau_sd'][-1]:.3f}")
        cells += [f"{c:.3f}" if np.isfinite(c) else "—" for c in s["consistency_mean"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def claims_from(results: list[dict[str, Any]], settings: ReproSettings) -> tuple[list[Claim], dict[str, Any]]:
    """The issue's claims from per-seed results (``holds`` computed from the numbers)."""
    T = settings.iterations
    last = f"M{T + 1}"
    comps: dict[str, Any] = {}
    claims: list[Claim] = []
    m0 = [r["m0"]["accuracy"] for r in results]
    m1 = [r["m1"]["accuracy"] for r in results]
    acc = {m: _series(results, m, "accuracy") for m in settings.methods}
    gt = {m: _series(results, m, "gt_tau") for m in settings.methods}
    cons = {m: _consistency(results, m) for m in settings.methods}
    n = len(results)

    def add(name, metric, ours, base, *, hib=True, margin=0.0, threshold=None, paper="", what="", extra="",
            fmt=".3f"):
        c = compare(ours, base, higher_is_better=hib)
        comps[name] = c
        note = _note(c, what, fmt) + (f". {extra}" if extra else "")
        claims.append(Claim(name, metric=metric, ours=c["ours_mean"], baseline=c["baseline_mean"], threshold=threshold,
                            higher_is_better=hib, margin=margin, paper=paper, note=note))

    add("sft/m1_gt_m0", "greedy test accuracy, M1 (SFT) vs M0", m1, m0, margin=0.1,
        paper="precondition (prototype: M0 0.38-0.62, M1 0.68-0.83)", what="M1 vs M0",
        extra="If M1 learnt nothing over M0, self-rewarding has nothing to amplify; the loop warns then")
    if "srlm" in acc:
        add("drift/srlm_declines", f"SRLM greedy test accuracy, {last} vs M1 (lower = decline)",
            acc["srlm"][:, -1], acc["srlm"][:, 0], hib=False, margin=ACC_MARGIN,
            paper="SRLM gains diminish or reverse (prototype 0.76 -> 0.54)", what=f"SRLM {last} vs M1")
    for m, proto in (("dyn", "0.74 vs 0.54"), ("avg", "0.61 vs 0.54")):
        if m in acc and "srlm" in acc:
            add(f"accuracy/cream_{m}_gt_srlm", f"greedy test accuracy at {last}, {LABEL[m]} vs SRLM", acc[m][:, -1],
                acc["srlm"][:, -1], margin=ACC_MARGIN, paper=f"CREAM > SRLM (prototype {proto})",
                what=f"{LABEL[m]} vs SRLM at {last}")
    if "dyn" in acc:
        add("accuracy/cream_gain_over_sft", f"greedy test accuracy, CREAM-dyn {last} vs M1", acc["dyn"][:, -1],
            acc["dyn"][:, 0], margin=ACC_MARGIN, paper="CREAM improves M1 -> M4 (the prototype: not at this scale)",
            what=f"CREAM-dyn {last} vs M1",
            extra="See diagnostic/oracle_gain_over_sft for the ceiling of DPO at this scale")
    if "oracle" in acc:
        add("diagnostic/oracle_gain_over_sft", f"greedy test accuracy, oracle-ranked DPO {last} vs M1",
            acc["oracle"][:, -1], acc["oracle"][:, 0], margin=ACC_MARGIN,
            paper="upper bound: DPO on truly ranked pairs (prototype 0.68 -> 0.76, 1 seed)",
            what=f"oracle DPO {last} vs M1",
            extra="Whether DPO on correctly ranked (best, worst) pairs can beat M1 here at all")
    if "dyn" in gt and "srlm" in gt:
        add("mechanism/gt_tau_cream_gt_srlm", f"mean Kendall tau-b (self-reward vs true utility) at {last}, "
            "CREAM-dyn vs SRLM", gt["dyn"][:, -1], gt["srlm"][:, -1], paper="self-reward stays closer to the truth "
            "(prototype 0.39 vs 0.25)", what=f"gt-tau at {last}",
            extra=f"{settings.n_samples} samples per test prompt from each model, reward log pi - log pi_0")
    if "avg" in acc and "srlm" in acc:
        h_avg = [r["methods"]["avg"]["reports"][0]["dpo"]["final_margin_mean"] for r in results]
        h_srlm = [r["methods"]["srlm"]["reports"][0]["dpo"]["final_margin_mean"] for r in results]
        cs = [r["methods"]["avg"]["reports"][0]["consistency"]["mean"] for r in results]
        thr = float(np.mean([_logit(c) + 0.5 for c in cs]))
        add("mechanism/margin_bounded_by_c", "mean DPO margin h on the training pairs after DPO stage 1, CREAM-avg vs "
            "SRLM (lower is better)", h_avg, h_srlm, hib=False, threshold=thr,
            paper="soft label bounds the margin near logit(C)", what="stage-1 margin", fmt=".4f",
            extra=f"threshold = mean over seeds of logit(C)+0.5 = {thr:.3f} (C = {np.mean(cs):.3f}); SRLM's margin "
                  f"{'exceeds' if np.mean(h_srlm) > thr else 'stays below'} it, so the bound is "
                  f"{'binding' if np.mean(h_srlm) > thr else 'not reached in one stage at this scale'}")
        longs = [r.get("long_stage") for r in results]
        if all(longs):
            la = [x["avg"]["final_margin_mean"] for x in longs]
            ls = [x["srlm"]["final_margin_mean"] for x in longs]
            thr2 = float(np.mean([x["logit_c"] + 0.5 for x in longs]))
            add("mechanism/margin_bound_long_stage", f"mean DPO margin h after a {longs[0]['epochs']}-epoch stage "
                f"(lr {settings.long_stage_lr:g}) on the same round-1 pairs from M1, CREAM-avg vs SRLM (lower is better)",
                la, ls, hib=False, threshold=thr2,
                paper="h* = logit(C) for CREAM; DPO's margin keeps growing", what="long-stage margin", fmt=".3f",
                extra=f"threshold mean logit(C)+0.5 = {thr2:.3f}; SRLM's margin "
                      f"{'exceeds' if np.mean(ls) > thr2 else 'stays below'} it")
    if "dyn" in cons and "srlm" in cons and T >= 2:
        cd = np.nanmean(cons["dyn"][:, 1:], axis=1)
        cb = np.nanmean(cons["srlm"][:, 1:], axis=1)
        add("consistency/cream_gt_srlm", f"mean consistency C over rounds 2-{T}, CREAM-dyn vs SRLM", cd, cb,
            paper="CREAM raises rewarding consistency (third-party quote: ~0.73 -> ~0.92)", what="C rounds 2+",
            extra="prototype: similar C (~0.9-0.97) for every method")
    return claims, {"comparisons": comps, "n_seeds": n}


def plot(summary: dict[str, Any], settings: ReproSettings, path: Path, title: str = "") -> Path | None:
    """Per-round accuracy, gt-tau and C (mean ± sd over seeds) for every method."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("metrics.png not written: matplotlib is missing (pip install 'iclr25-cream[plot]')")
        return None
    T = settings.iterations
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    xs = np.arange(1, T + 2)
    for m in settings.methods:
        s = summary[m]
        for ax, key, x in ((axes[0], "accuracy", xs), (axes[1], "gt_tau", xs), (axes[2], "consistency", xs[:-1])):
            mu, sd = np.asarray(s[f"{key}_mean"]), np.asarray(s[f"{key}_sd"])
            ax.plot(x, mu, marker="o", label=LABEL[m])
            ax.fill_between(x, mu - sd, mu + sd, alpha=0.15)
    axes[0].axhline(float(np.mean(summary["m0_accuracy"])), color="grey", ls=":", label="M0")
    axes[0].set(title="greedy test accuracy", xlabel="model M_k", xticks=xs)
    axes[1].set(title="gt-τ (self-reward vs true utility)", xlabel="model M_k", xticks=xs)
    axes[2].set(title="consistency C (round t uses M_t)", xlabel="round t", xticks=xs[:-1])
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def reproduce(quick: bool = True, out_dir: str | Path = "results/cream", *, seeds: list[int] | None = None,
              device: str = "auto", resume: bool = False, regimes: tuple[str, ...] | None = None) -> list[Claim]:
    """Run the reproduction and return the claims (``metrics.json``, ``tables.md``, ``metrics.png``
    written to ``out_dir``; every finished (regime, seed) to ``out_dir/checkpoints``).

    Args:
        quick: seeds (0, 1) and the main regime only; else seeds 0-4 plus the extra regimes.
        out_dir: output folder.
        seeds: override the seeds.
        device: ``auto`` (CPU for this toy: it is faster than a GPU at this size), ``cpu`` or ``cuda``.
        resume: reuse the per-seed results already saved in ``out_dir/checkpoints``.
        regimes: the full run's extra regimes to run (names of ``FULL_REGIMES`` or their folder
            names, e.g. ``previous-reference``, ``t-4``, ``hard-n-8-temperature-1-2``; ``None``: all;
            ``()``: none).

    Raises:
        ValueError: fewer than 2 seeds; an unknown regime, or regimes with ``quick``; with
            ``resume``, a corrupt checkpoint or one saved with other settings.
    """
    base = QUICK if quick else FULL
    if seeds is not None:
        if len(seeds) < 2:
            raise ValueError("the reproduction needs at least 2 seeds (claims report a spread across seeds)")
        base = replace(base, seeds=tuple(int(s) for s in seeds))
    dev = "cpu" if device == "auto" else device
    if quick and regimes:
        raise ValueError("regimes belong to the full run; drop --quick or --regimes")
    return run_pipeline(base, out_dir, device=dev, regimes=not quick, resume=resume,
                        only=None if quick else regimes)


def select_regimes(names: tuple[str, ...] | None) -> dict[str, dict[str, Any]]:
    """The ``FULL_REGIMES`` entries named (by name or folder name) in ``names``, in their order
    (``None``: all). Raises ``ValueError`` naming an unknown regime and the known ones."""
    if names is None:
        return dict(FULL_REGIMES)
    keys = {_regime_key(n): n for n in FULL_REGIMES}
    want = set()
    for n in names:
        k = n if n in FULL_REGIMES else keys.get(_regime_key(n))
        if k is None:
            raise ValueError(f"unknown regime {n!r}; known: {', '.join(sorted(keys))}")
        want.add(k)
    return {n: o for n, o in FULL_REGIMES.items() if n in want}


def _write_outputs(out: Path, metrics: dict[str, Any], tables: list[str]) -> None:
    from iclr25.core.runinfo import to_jsonable

    (out / "metrics.json").write_text(json.dumps(to_jsonable(metrics), indent=1, allow_nan=False) + "\n")
    (out / "tables.md").write_text("\n\n".join(tables) + "\n")


def _regime_jobs(settings: dict[str, ReproSettings], seeds: tuple[int, ...]) -> list[tuple[str, ReproSettings, int]]:
    """The extra regimes' jobs: all seeds of the first regime (the ``previous``-reference ablation),
    then the other regimes two seeds at a time in turn, so that a run stopped early has a spread
    (two seeds) for as many regimes as possible."""
    names = list(settings)
    if not names:
        return []
    jobs = [(names[0], settings[names[0]], s) for s in seeds]
    for i in range(0, len(seeds), 2):
        jobs += [(n, settings[n], s) for n in names[1:] for s in seeds[i:i + 2]]
    return jobs


def run_pipeline(base: ReproSettings, out_dir: str | Path, *, device: str = "cpu", regimes: bool = False,
                 progress: bool | None = None, resume: bool = False,
                 only: tuple[str, ...] | None = None) -> list[Claim]:
    """:func:`reproduce` at explicit settings (``regimes``: also the full run's extra regimes, or
    those named in ``only``).

    Every (regime, seed) is one job of a single worker pool, the main regime's seeds first, then the
    extra regimes (:func:`_regime_jobs`; the pool never idles between regimes, and a seed's M0/M1 are
    cached by its main job before any regime needs them). With ``regimes``, ``metrics.json``
    and ``tables.md`` are written as soon as the main regime is done, and again at the end."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "checkpoints"
    if progress is None:
        progress = os.environ.get("ICLR25_QUIET") != "1"
    t0 = time.perf_counter()
    settings = {name: replace(base, **over) for name, over in select_regimes(only).items()} if regimes else {}
    jobs = [("main", base, s) for s in base.seeds] + _regime_jobs(settings, base.seeds)
    state: dict[str, Any] = {}

    def main_outputs(done: dict[tuple[str, int], dict[str, Any]]) -> None:
        results = [done[("main", s)] for s in base.seeds]
        summary = summarize(results, base)
        claims, extra = claims_from(results, base)
        tables = [table(summary, base, f"main: T={base.iterations}, N={base.n_samples}, temperature "
                                       f"{base.temperature}, fixed base reference")]
        metrics: dict[str, Any] = {"settings": asdict(base), "summary": summary, **extra, "per_seed": results,
                                   "pretrain_seconds": {"m0": [r["m0_seconds"] for r in results],
                                                        "m1": [r["m1_seconds"] for r in results]}, "regimes": {},
                                   "seconds_main": time.perf_counter() - t0}
        plot(summary, base, out / "metrics.png", "CREAM on the addition task (main regime)")
        state.update(claims=claims, metrics=metrics, tables=tables)
        if regimes:
            _write_outputs(out, metrics, tables)

    def on_done(done: dict[tuple[str, int], dict[str, Any]]) -> None:
        if "claims" not in state and all(("main", s) in done for s in base.seeds):
            main_outputs(done)

    done = _run_jobs(jobs, device, progress, ckpt_dir=ckpt, resume=resume, on_done=on_done)
    on_done(done)
    metrics, tables = state["metrics"], state["tables"]
    for k, name in enumerate(settings):
        s = settings[name]
        res = [done[(name, seed)] for seed in base.seeds]
        summ = summarize(res, s)
        cl, ex = claims_from(res, s)
        metrics["regimes"][name] = {"settings": asdict(s), "summary": summ, **ex,
                                    "claims": [c.to_dict() for c in cl], "per_seed": res}
        tables.append(table(summ, s, name))
        plot(summ, s, out / f"metrics_regime{k + 1}.png", f"CREAM on the addition task: {name}")
    metrics["seconds"] = time.perf_counter() - t0
    _write_outputs(out, metrics, tables)
    pre = float(np.mean(np.add(metrics["pretrain_seconds"]["m0"], metrics["pretrain_seconds"]["m1"])))
    log.info("cream reproduction: %.1f s wall (one-time M0/M1 pre-training, 0 when cached: %.1f s per seed, "
             "seeds in parallel)", metrics["seconds"], pre)
    return state["claims"]
