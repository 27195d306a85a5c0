"""CPU-scale reproduction of the sharpening paper's claims on the trap-arithmetic task (spec §4).

``reproduce(quick, out_dir, *, seeds=None, device="auto")`` -> list of :class:`iclr25.core.Claim`.

Quick: one cached base (seed 0) and 2 seeds for sampling and fine-tuning. Full: 3 seeds end to end (a base
per seed), N up to 32, the coverage sweep ``p_c in {0.4, 0.2, 0.1}``, XPO vs offline Eq. (8) at ``p_c = 0.1``
with 40 distractors, and the real-text likelihood-lift check of spec §4.3. The base's one-time
pre-training time is reported separately (``extra.base``) from the experiment's time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from iclr25.core import Claim

from .base import TrapBaseConfig
from .task import TrapArithmeticTask

__all__ = ["ReproSettings", "reproduce"]

log = logging.getLogger(__name__)
SLUG = "sharpening"


@dataclass(frozen=True)
class ReproSettings:
    """Sizes of the reproduction (the packaged presets ``quick`` / ``paper`` mirror them).

    Args:
        seeds: sampling / fine-tuning seeds (full: also the base's pre-training seed).
        base_per_seed: pre-train one base per seed (full) instead of one base (seed 0, quick).
        base: the base's pre-training config (its ``seed`` is replaced per seed when ``base_per_seed``).
        n_train, n_test: disjoint training / test prompts (spec §4.2: 1,000 / 400; quick 300 / 200).
        bon_ns: inference-time BoN sizes (spec: 1..32; quick 1..16).
        eval_samples: temperature-1 samples per test prompt for the sampling metrics.
        sft_n: BoN draws per training prompt for SFT-Sharpening (spec: 16).
        sft_epochs, sft_lr, sft_batch: SFT fine-tuning (full fine-tune of the tiny model).
        rlhf_betas: Eq. (8) KL coefficients (spec: 1, 0.5, 0.25).
        rlhf_epochs, rlhf_lr, rlhf_batch: Eq. (8) fine-tuning on one base pair per training prompt.
        coverage: run the coverage sweep (full).
        coverage_tasks: ``(p_c, n_distractors)`` of the sweep.
        coverage_draws: draws per prompt for the sweep (the smallest N reaching 90% is read off its prefixes).
        xpo: run XPO vs offline Eq. (8) (full).
        xpo_beta, xpo_alphas, xpo_iterations, xpo_prompts_per_iteration, xpo_steps_per_iteration: XPO;
            ``alpha`` is chosen on validation ``J_beta`` from ``xpo_alphas``.
        offline_pairs: offline Eq. (8) data sizes tried for the sample-count comparison.
        offline_steps: optimiser steps per offline run (the same budget for every size).
        realtext: run the real-text likelihood-lift check (spec §4.3; needs the vbon mirror).
        parallel_stages: on CPU with ``threads >= 2``, compute the stages (seeds, sweep, XPO, real text) in
            worker processes, longest first, instead of one after another (full). Every stage's RNG is
            seeded from its name, so the numbers equal a sequential run's (tested).
        sweep_warm_start: the coverage-sweep / XPO bases at p_c < 0.4 continue pre-training from the seed-0
            p_c = 0.4 base on their own task's strings (``TrapBaseConfig.init_from``; README deviation 10)
            instead of starting from scratch, where the units digit is supervised by only p_c of the strings.
    """

    seeds: tuple[int, ...] = (0, 1)
    base_per_seed: bool = False
    base: TrapBaseConfig = field(default_factory=TrapBaseConfig)
    n_train: int = 300
    n_test: int = 200
    bon_ns: tuple[int, ...] = (1, 2, 4, 8, 16)
    eval_samples: int = 4
    sft_n: int = 16
    sft_epochs: int = 4
    sft_lr: float = 1e-3
    sft_batch: int = 32
    rlhf_betas: tuple[float, ...] = (1.0, 0.5, 0.25)
    rlhf_epochs: int = 10
    rlhf_lr: float = 3e-4
    rlhf_batch: int = 32
    coverage: bool = False
    coverage_tasks: tuple[tuple[float, int], ...] = ((0.4, 10), (0.2, 20), (0.1, 40))
    coverage_draws: int = 64
    xpo: bool = False
    xpo_beta: float = 0.25
    xpo_alphas: tuple[float, ...] = (0.0, 0.05, 0.2)
    xpo_iterations: int = 12
    xpo_prompts_per_iteration: int = 16
    xpo_steps_per_iteration: int = 20
    offline_pairs: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
    offline_steps: int = 240
    realtext: bool = False
    sweep_warm_start: bool = False
    parallel_stages: bool = False

    @classmethod
    def preset(cls, quick: bool) -> ReproSettings:
        """The quick (2 seeds, one base) or full (3 seeds end to end, sweep, XPO, real text) preset."""
        if quick:
            return cls()
        return cls(seeds=(0, 1, 2), base_per_seed=True,
                   # Every full-preset base is trained to convergence against the known data distribution
                   # (README deviation 10): fresh strings every step until the exact validation
                   # KL(p_data || pi_base) <= 0.05 nats (an unlearned units digit costs p_c ln 10 = 0.92 / 0.46 /
                   # 0.23 nats at p_c 0.4 / 0.2 / 0.1), checked every 200 steps, cap 8,000 steps, lr halved when
                   # the KL stalls for 2 checks (constant lr 3e-3 stalled at ~0.15 on its own noise); fixed lengths
                   # (1,600 and 3,200 steps) each left some seed or p_c on the units-digit plateau.
                   # AdamW beta2 = 0.98 (0.999 left the 1,600-step seed-0 base without the trap).
                   # Recipe v3: the lr is held until the KL is below half the plateau (v2 decayed it on the
                   # plateau and froze the p_c 0.2 / 0.1 bases there), and the sweep's p_c < 0.4 bases continue
                   # from the seed-0 p_c 0.4 base (from scratch they stayed on the plateau for 8,000 steps).
                   base=TrapBaseConfig(beta2=0.98, stop_kl=0.05, max_steps=12_000, eval_every=200,
                                       plateau_patience=2, lr_hold_fraction=0.5),
                   n_train=1000, n_test=400,
                   bon_ns=(1, 2, 4, 8, 16, 32), coverage=True, xpo=True, realtext=True, sweep_warm_start=True,
                   parallel_stages=True)


# ----------------------------------------------------------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.t = {}

    def __call__(self, name: str):
        clock = self

        class _C:
            def __enter__(self):
                self.w, self.c = time.perf_counter(), time.process_time()

            def __exit__(self, *a):
                w, c = clock.t.get(name, (0.0, 0.0))
                clock.t[name] = (w + time.perf_counter() - self.w, c + time.process_time() - self.c)

        return _C()


def _ms(xs) -> tuple[float, float]:
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def _margin_claim(name: str, metric: str, ours: list[float], base: list[float], floor: float, paper: str,
                  what: str, *, higher: bool = True, unit: str = "", blocked: str = "") -> Claim:
    """ours vs baseline over seeds; margin = max(floor, 2 x sd of the paired gap)."""
    om, osd = _ms(ours)
    bm, bsd = _ms(base)
    gaps = (np.asarray(ours) - np.asarray(base)) * (1 if higher else -1)
    gm, gsd = _ms(gaps)
    margin = max(floor, 2 * gsd)
    note = (f"{what}. Mean ± sd over {len(ours)} seeds: ours {om:.4g} ± {osd:.2g}{unit}, baseline {bm:.4g} ± "
            f"{bsd:.2g}{unit}; gap {gm:.4g} ± {gsd:.2g} ({'more' if gm > 2 * gsd else 'not more'} than twice "
            f"the spread). Holds if the gap >= max({floor:g}, 2 sd) = {margin:.3g}.{blocked}")
    return Claim(name, metric, om, baseline=bm, higher_is_better=higher, margin=margin, paper=paper, note=note)


# ----------------------------------------------------------------------------------------------
def _bases(task: TrapArithmeticTask, cfg: TrapBaseConfig, device: str, clock: _Clock, infos: list,
           exclude: np.ndarray | None = None):
    from .base import cached_trap_base

    with clock("base"):
        b = cached_trap_base(task, cfg, progress=True, exclude=exclude)
    b.model.to(device)
    infos.append({"p_correct": task.p_correct, "n_distractors": task.n_distractors, "seed": cfg.seed,
                  "cached": b.info["cached"], "pretrain_seconds": b.info["pretrain_seconds"],
                  "pretrain_cpu_seconds": b.info["pretrain_cpu_seconds"], "recipe": b.info["recipe"],
                  "final_loss": b.info["final_loss"], "steps": b.info["steps"], "val_kl": b.info["val_kl"],
                  "converged": b.info["converged"], "stop_kl": cfg.stop_kl, "path": b.info["path"]})
    return b


def _sweep_cfg(st: ReproSettings, task: TrapArithmeticTask) -> TrapBaseConfig:
    """The seed-0 base config of a sweep / XPO task: warm-started from the seed-0 p_c = 0.4 base (which it
    trains first if missing) when ``st.sweep_warm_start`` and the task is not that base's own."""
    from .base import cached_trap_base

    cfg = replace(st.base, seed=0)
    main = TrapArithmeticTask()
    if not st.sweep_warm_start or task == main or cfg.stop_kl is None:
        return cfg
    _, test = main.split(st.n_train, st.n_test, seed=0)
    parent = cached_trap_base(main, cfg, progress=True, exclude=test)
    return replace(cfg, init_from=parent.info["path"])


def _base_plan(st: ReproSettings) -> list[list[tuple[TrapArithmeticTask, int]]]:
    """The bases a run needs, as chains that must run in order (a warm-started base after its parent);
    chains are independent of each other."""
    main = TrapArithmeticTask()
    seeds = sorted({s if st.base_per_seed else 0 for s in st.seeds})
    extra = []
    if st.coverage:
        extra += [TrapArithmeticTask(p_correct=pc, n_distractors=nd) for pc, nd in st.coverage_tasks]
    if st.xpo:
        extra.append(TrapArithmeticTask(p_correct=0.1, n_distractors=40))
    extra = [t for i, t in enumerate(extra) if t != main and t not in extra[:i]]
    chains = [[(main, s)] for s in seeds if s != 0]
    zero = ([(main, 0)] if (0 in seeds or (extra and st.sweep_warm_start)) else []) + [(t, 0) for t in extra]
    return ([zero] if zero else []) + chains


def _chain_cached(st: ReproSettings, chain) -> bool:
    """Whether every base of ``chain`` is in the user cache and serves its config (no model is loaded, no
    torch is imported: a run whose bases are all cached starts no worker)."""
    from .base import _kl_base_dir, _read_train, _reusable, cap_folders, validation_pairs

    main = TrapArithmeticTask()
    for task, seed in chain:
        _, test = task.split(st.n_train, st.n_test, seed=0)
        cfg = replace(st.base, seed=seed)
        if seed == 0 and st.sweep_warm_start and task != main:
            _, mtest = main.split(st.n_train, st.n_test, seed=0)
            parent = _kl_base_dir(main, cfg, validation_pairs(main, cfg.n_val, mtest), None)
            if not (parent / "config.json").is_file():
                return False
            cfg = replace(cfg, init_from=str(parent))
        folder = _kl_base_dir(task, cfg, validation_pairs(task, cfg.n_val, test), None)
        if not any(_reusable(_read_train(f, strict=False), cfg) for f in cap_folders(folder, cfg)):
            return False
    return True


def _worker_init(level: int) -> None:
    """Worker set-up: logging like the parent's, and (Linux) SIGTERM when the parent dies, so a killed run
    leaves no orphaned worker training on."""
    logging.basicConfig(level=level, format="%(asctime)s %(processName)s %(name)s: %(message)s")
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))   # PR_SET_PDEATHSIG
            if os.getppid() == 1:           # the parent died before prctl took effect
                os._exit(1)
        except OSError:
            pass


def _pretrain_chain(args) -> list[dict]:
    """Worker: train (or find cached) every base of one chain, one intra-op thread."""
    st, chain = args
    import torch

    from .base import cached_trap_base

    torch.set_num_threads(1)
    out = []
    for task, seed in chain:
        _, test = task.split(st.n_train, st.n_test, seed=0)
        cfg = _sweep_cfg(st, task) if seed == 0 else replace(st.base, seed=seed)
        b = cached_trap_base(task, cfg, progress=False, exclude=test)
        out.append({"p_correct": task.p_correct, "n_distractors": task.n_distractors, "seed": seed,
                    "steps": b.info["steps"], "val_kl": b.info["val_kl"], "converged": b.info["converged"],
                    "cached": b.info["cached"], "pretrain_seconds": b.info["pretrain_seconds"],
                    "pretrain_cpu_seconds": b.info["pretrain_cpu_seconds"], "path": b.info["path"]})
    return out


def pretrain_bases(st: ReproSettings, workers: int) -> list[dict]:
    """Pre-train the to-convergence bases of ``st`` that are not cached yet, ``workers`` chains at a time in
    separate processes (one intra-op thread each); the run then loads them from the user cache. With
    ``workers < 2``, or one chain, nothing is done here (the run trains each base when it first needs it).

    The workers are ``spawn``ed: a script that calls this (or :func:`reproduce` of the full preset) must
    guard its entry point with ``if __name__ == "__main__":`` (the ``iclr25-sharpening`` command does).

    Returns:
        One record per base trained or found (task, seed, steps, validation KL, converged, cached, CPU-s).
    """
    import concurrent.futures as cf
    import multiprocessing as mp

    if st.base.stop_kl is None:
        return []
    chains = _base_plan(st)
    # one chain and stages in this process: it trains each base when it first needs it. With parallel
    # stages even one chain is trained here first, or two stage workers would train the same base at once.
    if workers < 2 or (len(chains) < 2 and not st.parallel_stages):
        return []
    chains = [c for c in chains if not _chain_cached(st, c)]
    if len(chains) < 1:
        log.info("every base of the run is cached")
        return []
    # the longest chain first: it holds a worker for longest
    chains.sort(key=len, reverse=True)
    log.info("pre-training %d base chains in %d processes: %s", len(chains), min(workers, len(chains)),
             "; ".join(" -> ".join(f"p_c {t.p_correct:g}/seed {s}" for t, s in c) for c in chains))
    records: list[dict] = []
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(chains)), mp_context=mp.get_context("spawn"),
                                initializer=_worker_init, initargs=(logging.getLogger().getEffectiveLevel(),)) as ex:
        for f in cf.as_completed([ex.submit(_pretrain_chain, (st, c)) for c in chains]):
            for r in f.result():
                cpu = r["pretrain_cpu_seconds"]
                log.info("base p_c %g seed %d: %s, validation KL %.4f after %d steps (%s CPU-s)", r["p_correct"],
                         r["seed"], "cached" if r["cached"] else ("converged" if r["converged"] else "NOT converged"),
                         r["val_kl"], r["steps"], "not measured" if cpu is None else f"{cpu:.0f}")
                records.append(r)
    return records


def _base_conv(b) -> dict:
    """The base's recipe outcome, for the claims' notes."""
    return {"base_steps": b.info["steps"], "base_val_kl": b.info["val_kl"], "base_converged": b.info["converged"],
            "base_pretrain_cpu_s": b.info["pretrain_cpu_seconds"], "base_stop_kl": b.info.get("stop_kl")}


def _conv_text(ms: list[dict]) -> tuple[bool, str]:
    """(all converged, a note fragment) for base records carrying :func:`_base_conv`'s keys."""
    ok = all(m.get("base_converged") is not False for m in ms)
    parts = []
    for m in ms:
        if m.get("base_converged") is None:
            parts.append(f"fixed-length recipe, {m.get('base_steps')} steps, validation KL {m.get('base_val_kl', float('nan')):.4f}")
        else:
            parts.append(f"{'converged' if m['base_converged'] else 'NOT converged'}: validation KL "
                         f"{m['base_val_kl']:.4f} nats (stop at {m['base_stop_kl']:g}) after {m['base_steps']} steps, "
                         f"{m['base_pretrain_cpu_s']:.0f} CPU-s")
    return ok, "; ".join(parts)


def _base_eval(base, task, test, n_samples):
    from .evaluation import evaluate_on_trap
    from .exact import enumerate_responses

    lp = enumerate_responses(base.model, base.tokenizer, task.prompts(test), task.candidates)
    ev = evaluate_on_trap(base.model, base.model, base.tokenizer, task, test, lp, n_samples=n_samples)
    c = task.correct_index(test)
    ystar = lp.numpy().argmax(-1)
    pstar = np.exp(lp.numpy().max(-1))
    trap = float(np.mean((ystar == c) & (pstar < 0.5)))
    return lp, ev, {"trap_learned": trap, "mode_is_correct": float(np.mean(ystar == c)),
                    "mean_pstar": float(pstar.mean()), "pstar_below_half": float(np.mean(pstar < 0.5)),
                    "coverage": float(np.mean(1 / pstar)), **{f"base_{k}": v for k, v in ev.summary().items()}}


def _bon(base, task, test, base_lp, ns, clock):
    from .evaluation import bon_accuracy_curve, bon_law_correct, trap_correct
    from .exact import bon_success_probability
    from .rewards import LogLikelihood
    from .sampling import sample_responses

    with clock("bon"):
        s = sample_responses(base.model, base.tokenizer, task.prompts(test), max(ns), max_new_tokens=4,
                             batch_size=1024)
        scores = LogLikelihood(base.model, batch_size=2048)(s)
    correct = trap_correct(s, test)
    acc = bon_accuracy_curve(scores, correct, ns)
    from .bon import select_best

    sel_lp = {n: float(scores.numpy()[np.arange(len(test)), select_best(scores, n)].mean()) for n in ns}
    c = task.correct_index(test)
    lpn = base_lp.numpy()
    ystar = lpn.argmax(-1)
    pstar = np.exp(lpn.max(-1))
    law = {n: bon_law_correct(lpn, c, n) for n in ns}
    formula = {n: (ystar == c) * bon_success_probability(pstar, n) for n in ns}
    return {"accuracy": acc, "selected_logp": sel_lp, "law": {n: law[n].tolist() for n in ns},
            "formula_mean": {n: float(formula[n].mean()) for n in ns},
            "law_mean": {n: float(law[n].mean()) for n in ns}}


def _sft(base, task, train, test, base_lp, st: ReproSettings, seed: int, clock):
    from .evaluation import evaluate_on_trap
    from .sft import SFTConfig, sft_sharpen
    from .training import TrainConfig

    cfg = SFTConfig(n=st.sft_n, max_new_tokens=4, sample_batch_size=1024,
                    train=TrainConfig(epochs=st.sft_epochs, lr=st.sft_lr, batch_size=st.sft_batch, lora_r=0,
                                      max_grad_norm=1.0, seed=seed))
    with clock("sft"):
        res = sft_sharpen(base.model, base.tokenizer, task.prompts(train), cfg)
    ev = evaluate_on_trap(res.model, base.model, base.tokenizer, task, test, base_lp, n_samples=st.eval_samples)
    corpus_correct = float(np.mean([e["response"] == f"{a + b:02d}" for e, (a, b) in zip(res.corpus, train)]))
    return ev.summary() | {"corpus_correct": corpus_correct, "final_loss": res.history[-1]["loss"],
                           "samples": res.stats["samples_total"]}


def _rlhf(base, task, train, test, base_lp, st: ReproSettings, seed: int, clock):
    from .exact import enumerate_responses, tilted_optimum
    from .rlhf import RLHFConfig, rlhf_sharpen, sample_pairs
    from .training import TrainConfig

    with clock("rlhf"):
        pairs = sample_pairs(base.model, base.model, base.tokenizer, task.prompts(train), from_policy=False,
                             max_new_tokens=4, batch_size=1024)
    lpn = base_lp.numpy()
    ystar = lpn.argmax(-1)
    out = {"identical_pair_share": float(np.mean([p["identical"] for p in pairs])), "beta": {}}
    for beta in st.rlhf_betas:
        cfg = RLHFConfig(beta=beta, max_new_tokens=4, sample_batch_size=1024,
                         train=TrainConfig(epochs=st.rlhf_epochs, lr=st.rlhf_lr, batch_size=st.rlhf_batch,
                                           lora_r=0, max_grad_norm=1.0, seed=seed))
        with clock("rlhf"):
            res = rlhf_sharpen(base.model, base.tokenizer, task.prompts(train), cfg, pairs=pairs)
        lp = enumerate_responses(res.model, base.tokenizer, task.prompts(test), task.candidates).numpy()
        rows = np.arange(len(test))
        tilted = tilted_optimum(lpn, beta)[rows, ystar]
        out["beta"][beta] = {"mode_mass": float(np.exp(lp[rows, ystar]).mean()), "tilted": float(tilted.mean()),
                             "data_tilted": task.tilted_optimum_correct(beta),
                             "sharpened_fraction": float(np.mean(np.exp(lp[rows, ystar]) > 0.5)),
                             **_mass_split(lp, task, test), "final_loss": res.history[-1]["loss"]}
    out["base_split"] = _mass_split(lpn, task, test)
    return out


def _mass_split(lp: np.ndarray, task: TrapArithmeticTask, pairs: np.ndarray) -> dict:
    """Mean mass on the correct answer, on the distractors, on the other two-digit answers (which the data
    distribution never produces) and outside the 100 answers."""
    p = np.exp(lp)
    rows = np.arange(len(pairs))
    corr = p[rows, task.correct_index(pairs)]
    dis = p[rows[:, None], task.distractor_indices(pairs)].sum(1)
    return {"correct_mass": float(corr.mean()), "distractor_mass": float(dis.mean()),
            "unsupported_mass": float((p.sum(1) - corr - dis).mean()), "outside_mass": float((1 - p.sum(1)).mean())}

# ----------------------------------------------------------------------------------------------
_NUM_KEY = re.compile(r"-?\d+(\.\d+)?([eE]-?\d+)?")


def _numkeys(x):
    """Undo JSON's stringification of numeric dict keys (N, beta, p_c, alpha) when a stage is reloaded."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if isinstance(k, str) and _NUM_KEY.fullmatch(k):
                k = int(k) if re.fullmatch(r"-?\d+", k) else float(k)
            out[k] = _numkeys(v)
        return out
    if isinstance(x, list):
        return [_numkeys(v) for v in x]
    return x


class _Stages:
    """Finished stages of a reproduction (one seed, the coverage sweep, XPO, the real-text check), each in
    ``OUT/stages/<name>.json`` with the settings' hash, written atomically when the stage ends. With
    ``resume`` a stage whose file exists is reloaded instead of recomputed; a file from other settings, or
    one that is not valid JSON, raises ``ValueError`` naming it and the fix."""

    def __init__(self, out: Path, st: ReproSettings, resume: bool) -> None:
        self.dir = out / "stages"
        self.key = hashlib.sha256(json.dumps(_jsonable(asdict(st)), sort_keys=True).encode()).hexdigest()[:16]
        self.resume = resume
        self.reused: list[str] = []
        self.fresh: set[str] = set()      # computed in this run by worker processes (not "resumed")
        self.reused_wall = self.reused_cpu = self.fresh_cpu = self.fresh_base_wall = 0.0

    def exists(self, name: str) -> bool:
        """Whether ``name`` would be reloaded (``resume`` and its file is there)."""
        return self.resume and (self.dir / f"{name}.json").is_file()

    def load(self, name: str):
        p = self.dir / f"{name}.json"
        if not ((self.resume or name in self.fresh) and p.is_file()):
            return None
        try:
            d = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{p}: not a complete stage file ({e}); delete it to recompute that stage, or run "
                             "without --resume") from None
        if not isinstance(d, dict) or d.get("settings_key") != self.key or "data" not in d:
            raise ValueError(f"{p} was written by a reproduction with other settings (or is not a stage file); "
                             "use another --out, delete the folder's stages/, or run without --resume")
        if name not in self.fresh:
            log.info("resume: reusing finished stage %r from %s", name, p)
            self.reused.append(name)
        return _numkeys(d["data"])

    def save(self, name: str, data) -> None:
        from iclr25.core.checkpoint import atomic_write_text

        atomic_write_text(self.dir / f"{name}.json", json.dumps({"settings_key": self.key, "data": _jsonable(data)}) + "\n")


def _clock_since(clock: _Clock, before: dict) -> dict:
    return {k: [w - before.get(k, (0.0, 0.0))[0], c - before.get(k, (0.0, 0.0))[1]] for k, (w, c) in clock.t.items()
            if (w, c) != before.get(k)}


def _clock_add(clock: _Clock, spent: dict) -> None:
    for k, (w, c) in spent.items():
        w0, c0 = clock.t.get(k, (0.0, 0.0))
        clock.t[k] = (w0 + w, c0 + c)


def _stage_seed(name: str) -> int:
    """The RNG seed a stage starts from (a hash of its name)."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:7], 16)


def _staged(stages: _Stages, name: str, clock: _Clock, base_infos: list, fn):
    """Run ``fn()`` as stage ``name`` (or reload it): its result, its clock time and the bases it loaded."""
    d = stages.load(name)
    if d is not None:
        _clock_add(clock, d["clock"])
        base_infos.extend(d["base_infos"])
        if name in stages.fresh:       # computed by a worker of this run: its CPU counts, not its wall time
            stages.fresh_cpu += d["cpu_s"]
            stages.fresh_base_wall += d["clock"].get("base", [0.0, 0.0])[0]
            return d["result"], False
        stages.reused_wall += d["wall_s"]
        stages.reused_cpu += d["cpu_s"]
        return d["result"], True
    before, n0 = dict(clock.t), len(base_infos)
    w0, c0 = time.perf_counter(), time.process_time()
    from iclr25.core.seed import seed_everything

    seed_everything(_stage_seed(name))     # each stage's RNG from its name: the same in a worker process
    result = fn()
    stages.save(name, {"result": result, "clock": _clock_since(clock, before), "base_infos": base_infos[n0:],
                       "wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0})
    return result, False


def _stage_fns(st: ReproSettings, dev, clock: _Clock, base_infos: list, bases: dict) -> dict:
    """Stage name -> the function computing it (each seed, then the coverage sweep, XPO, real text), in the
    order of the run. ``bases`` caches the loaded seed bases across stages of one process."""
    import torch

    from iclr25.core.seed import seed_everything

    task = TrapArithmeticTask()
    train, test = task.split(st.n_train, st.n_test, seed=0)

    def seed_stage(s: int) -> dict:
        bseed = s if st.base_per_seed else 0
        if bseed not in bases:
            b = _bases(task, replace(st.base, seed=bseed), dev, clock, base_infos, exclude=test)
            with clock("base_eval"):
                seed_everything(10_000 + bseed)        # the base's evaluation samples: one RNG per base
                lp_, ev_, m_ = _base_eval(b, task, test, st.eval_samples)
                bases[bseed] = (b, lp_, ev_, {**m_, **_base_conv(b)})
        base, base_lp, base_ev, base_m = bases[bseed]
        seed_everything(1000 + s)
        torch.manual_seed(1000 + s)
        r = {"seed": s, "base_seed": bseed, "base": base_m}
        r["bon"] = _bon(base, task, test, base_lp, st.bon_ns, clock)
        r["sft"] = _sft(base, task, train, test, base_lp, st, s, clock)
        r["rlhf"] = _rlhf(base, task, train, test, base_lp, st, s, clock)
        return r

    def realtext_stage() -> dict:
        rt = _realtext(st, dev, clock)
        if rt.get("claim") is not None:
            rt["claim"] = asdict(rt["claim"])
        return rt

    fns = {f"seed{s}": (lambda s=s: seed_stage(s)) for s in st.seeds}
    if st.coverage:
        fns["coverage"] = lambda: _coverage_sweep(st, dev, clock, base_infos, bases)
    if st.xpo:
        fns["xpo"] = lambda: _xpo_vs_offline(st, dev, clock, base_infos)
    if st.realtext:
        fns["realtext"] = realtext_stage
    return fns


#: rough relative cost of the full preset's stages (longest first keeps both workers busy to the end)
_STAGE_COST = {"realtext": 3.0, "xpo": 2.5, "coverage": 0.6}


def _stage_job(args) -> str:
    """Worker: compute one stage and write ``OUT/stages/<name>.json`` (one intra-op thread)."""
    st, out, name = args
    import torch

    torch.set_num_threads(1)
    clock, base_infos = _Clock(), []
    _staged(_Stages(Path(out), st, resume=False), name, clock, base_infos,
            _stage_fns(st, "cpu", clock, base_infos, {})[name])
    return name


def _run_stages_parallel(st: ReproSettings, out: Path, names: list[str], workers: int) -> None:
    """Compute the stages ``names`` in ``workers`` processes (bases from the user cache, see
    :func:`pretrain_bases`); each writes its stage file, which the run then reads like a resumed stage
    (not listed as resumed; its CPU-seconds count, its wall time is this call's)."""
    import concurrent.futures as cf
    import multiprocessing as mp

    order = sorted(names, key=lambda n: -_STAGE_COST.get(n, 1.0))
    log.info("running %d stages in %d processes: %s", len(order), min(workers, len(order)), ", ".join(order))
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(order)), mp_context=mp.get_context("spawn"),
                                initializer=_worker_init, initargs=(logging.getLogger().getEffectiveLevel(),)) as ex:
        for f in cf.as_completed([ex.submit(_stage_job, (st, str(out), n)) for n in order]):
            log.info("stage %s done", f.result())


# ----------------------------------------------------------------------------------------------
def reproduce(quick: bool, out_dir: str | Path, *, seeds: tuple[int, ...] | None = None, device: str = "auto",
              settings: ReproSettings | None = None, resume: bool = False, threads: int | None = None) -> list[Claim]:
    """Run the reproduction and return its claims (see the module docstring and the package README).

    Args:
        quick: the quick preset (one cached base, 2 seeds) instead of the full CPU run.
        out_dir: writes ``metrics.json`` (every number per seed, timings, base pre-training info) and, with
            matplotlib installed, ``bon_accuracy.png``.
        seeds: override the preset's seeds.
        device: ``auto|cpu|cuda|...``.
        settings: override the preset entirely (tests use tiny settings).
        resume: reuse the finished stages under ``out_dir/stages/`` (each seed, the coverage sweep, XPO,
            the real-text check) that a run with the same settings wrote; the bases come from the user cache.
            Raises ``ValueError`` naming a stage file from other settings or a damaged one.
        threads: CPU processes for the full preset's base pre-training and stages (default: all cores; the
            bases form independent chains, see :func:`pretrain_bases`; the stages with ``parallel_stages``).
    """

    from iclr25.core.seed import choose_device

    st = settings or ReproSettings.preset(quick)
    if seeds is not None:
        st = replace(st, seeds=tuple(seeds))
    dev = choose_device(device)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clock = _Clock()
    t0, c0 = time.perf_counter(), time.process_time()
    prefetched: list[dict] = []
    if dev == "cpu":
        import resource

        ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        with clock("base_parallel"):
            prefetched = pretrain_bases(st, threads or os.cpu_count() or 1)
        ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        children_cpu = (ch1.ru_utime + ch1.ru_stime) - (ch0.ru_utime + ch0.ru_stime)
    task = TrapArithmeticTask()
    bases: dict[int, tuple] = {}
    base_infos: list[dict] = []
    runs = []
    stages = _Stages(out, st, resume)
    fns = _stage_fns(st, dev, clock, base_infos, bases)
    todo = [n for n in fns if not stages.exists(n)]
    n_proc = threads or os.cpu_count() or 1
    if st.parallel_stages and dev == "cpu" and n_proc >= 2 and len(todo) >= 2:
        with clock("stages_parallel"):
            _run_stages_parallel(st, out, todo, n_proc)
        stages.fresh.update(todo)

    for s in st.seeds:
        r, _ = _staged(stages, f"seed{s}", clock, base_infos, fns[f"seed{s}"])
        runs.append(r)
        log.info("seed %d: BoN@%d %.3f, SFT sample acc %.3f, greedy %.3f", s, max(st.bon_ns),
                 r["bon"]["accuracy"][max(st.bon_ns)], r["sft"]["sample_accuracy"], r["sft"]["greedy_accuracy"])
    claims = _claims(runs, st, task)
    extra: dict = {}
    if st.coverage:
        cov, _ = _staged(stages, "coverage", clock, base_infos, fns["coverage"])
        extra["coverage"] = cov
        claims.append(_coverage_claim(cov))
    if st.xpo:
        xr, _ = _staged(stages, "xpo", clock, base_infos, fns["xpo"])
        extra["xpo"] = xr
        claims.append(_xpo_claim(xr))
    if st.realtext:
        rt, _ = _staged(stages, "realtext", clock, base_infos, fns["realtext"])
        rt = dict(rt)
        if rt.get("claim") is not None:
            claims.append(Claim(**rt.pop("claim")))
        extra["realtext"] = rt
    timing = {k: {"wall_s": w, "cpu_s": c} for k, (w, c) in clock.t.items()}
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    wall, cpu = wall + stages.reused_wall, cpu + stages.reused_cpu     # reloaded stages count with their own time
    cpu += stages.fresh_cpu                                              # stages computed by this run's workers
    bw, bc = clock.t.get("base", (0.0, 0.0))
    # wall time excluded as base work: this process's own base loading / pre-training (workers' base time
    # overlapped the stages_parallel wall time, which counts as experiment) and the parallel pre-training
    bw += clock.t.get("base_parallel", (0.0, 0.0))[0] - stages.fresh_base_wall
    seen: set = set()
    base_infos = [i for i in base_infos if not (i["path"] in seen or seen.add(i["path"]))]
    metrics = {"settings": asdict(st), "device": dev, "runs": _jsonable(runs), "extra": _jsonable(extra),
               "base": base_infos, "timing": timing, "resumed_stages": stages.reused,
               "experiment_wall_s": wall - bw, "experiment_cpu_s": cpu - bc,
               "one_time_pretraining_s": sum(i["pretrain_seconds"] for i in base_infos if not i["cached"])
               + sum(r["pretrain_seconds"] for r in prefetched if not r["cached"]),
               "base_parallel": {"records": prefetched, "wall_s": clock.t.get("base_parallel", (0.0, 0.0))[0],
                                 "children_cpu_s": children_cpu if dev == "cpu" else 0.0}}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    _plot(runs, st, out)
    log.info("experiment %.1f s wall / %.1f s CPU (base loading/pre-training %.1f s wall excluded)",
             wall - bw, cpu - bc, bw)
    return claims


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return x


def _claims(runs: list[dict], st: ReproSettings, task: TrapArithmeticTask) -> list[Claim]:
    S = len(runs)
    conv_ok, conv_note = _conv_text([r["base"] for r in runs])
    # a base that hit the step cap without reaching the KL threshold is not a trained model of the data: scored 0
    trap = min(r["base"]["trap_learned"] if r["base"].get("base_converged") is not False else 0.0 for r in runs)
    blocked = "" if trap >= 0.9 else (" NOTE: base/trap_learned fails, so the learned base does not show the trap "
                                      "and this claim cannot be read.")
    nmax = max(st.bon_ns)
    claims = [Claim(
        "base/trap_learned", "fraction of test prompts: exact argmax = a+b and pi_base(a+b|x) < 1/2 (min over "
        "bases; 0 for a base that did not converge within its step cap)",
        trap, threshold=0.9, paper="diagnostic (spec §4.1: sequence mode correct, greedy wrong)",
        note=(f"Learned base(s) on {st.n_test} test prompts (min over bases): argmax correct on "
              f"{min(r['base']['mode_is_correct'] for r in runs):.3f}, mode mass < 1/2 on "
              f"{min(r['base']['pstar_below_half'] for r in runs):.3f}, mean pi_base(y*|x) "
              f"{np.mean([r['base']['mean_pstar'] for r in runs]):.3f} (data: {task.p_correct}), C_cov "
              f"{np.mean([r['base']['coverage'] for r in runs]):.3f} (data: {task.coverage_coefficient:g}). "
              "Exact argmax over all 100 answers + EOS (prefix-tree forward). Per base (seeds "
              f"{', '.join(str(r['base_seed']) for r in runs)}): trap fraction "
              f"{', '.join(format(r['base']['trap_learned'], '.3f') for r in runs)}; {conv_note}."
              + ("" if conv_ok else " FAILS because a base did not converge: its validation KL to the data "
                 "distribution stayed above the threshold at the step cap.")
              + ("" if trap >= 0.9 else " FAILS: none of the other claims can be read.")))]
    greedy = [r["base"]["base_greedy_accuracy"] for r in runs]
    claims.append(_margin_claim(
        "bon/beats_greedy", f"accuracy, BoN N={nmax} (log-likelihood self-reward) vs base greedy",
        [r["bon"]["accuracy"][nmax] for r in runs], greedy, 0.25, "Fig. 1 (trap task: ≈1 vs ≈0)",
        "Inference-time BoN on the base's own samples, scored by a forward pass", blocked=blocked))
    # coverage formula: measured BoN accuracy vs the exact BoN law of the learned base, pooled over seeds
    zs, parts = [], []
    for n in st.bon_ns:
        meas = np.mean([r["bon"]["accuracy"][n] for r in runs])
        q = np.array([r["bon"]["law"][n] for r in runs])              # (S, B)
        pred = q.mean()
        se = math.sqrt(float((q * (1 - q)).sum())) / q.size
        # se = 0: a deterministic prediction; a measured value off it cannot be given a finite z (NaN: fails)
        z = (meas - pred) / se if se > 0 else (0.0 if abs(meas - pred) < 1e-12 else math.nan)
        zs.append(abs(z))
        form = np.mean([r["bon"]["formula_mean"][n] for r in runs])
        parts.append(f"N={n}: {meas:.4f} vs {pred:.4f} (z {z:+.2f}; issue formula {form:.4f})")
    claims.append(Claim(
        "bon/matches_coverage_formula", f"max |z| over N in {list(st.bon_ns)}: measured BoN accuracy vs prediction",
        math.nan if any(math.isnan(z) for z in zs) else max(zs), threshold=3.0, higher_is_better=False,
        paper="Prop. C.1: miss probability (1 - p*)^N",
        note=("Prediction E_x[P(BoN returns a+b)] from the learned base's exact probabilities: (F+p)^N - F^N "
              "(spec §6.3), which equals the issue's 1{y*=a+b}(1-(1-p*)^N) wherever y* = a+b (shown beside it). "
              "z uses the exact Bernoulli variance, pooled over seeds. " + "; ".join(parts) + "." + blocked)))
    claims.append(_margin_claim(
        "mechanism/bon_likelihood_rises_with_n", f"mean log pi_base of the selected response, N={nmax} vs N=1 (nats)",
        [r["bon"]["selected_logp"][nmax] for r in runs], [r["bon"]["selected_logp"][1] for r in runs], 0.1,
        "spec §4.2: mean log pi_base of the selection increases with N",
        "BoN works by selecting higher-likelihood samples", unit=" nats", blocked=blocked))
    claims.append(_margin_claim(
        "sft/accuracy_lift_over_greedy", "temperature-1 sampling accuracy: SFT-sharpened vs base greedy",
        [r["sft"]["sample_accuracy"] for r in runs], greedy, 0.25,
        "Table 1 col. 1: +19.24% (Phi3.5-Mini MATH) ... +1.82% (GSM8K)",
        f"SFT-Sharpening with N={st.sft_n} BoN on {st.n_train} training prompts, {st.eval_samples} samples per "
        f"test prompt (exact expected accuracy "
        f"{np.mean([r['sft']['expected_accuracy'] for r in runs]):.3f}; base sampling "
        f"{np.mean([r['base']['base_sample_accuracy'] for r in runs]):.3f})", blocked=blocked))
    claims.append(_margin_claim(
        "sft/likelihood_lift_over_greedy", "mean log pi_base of generations: SFT-sharpened (T=1) vs base greedy (nats)",
        [r["sft"]["sample_logp_base"] for r in runs], [r["base"]["base_greedy_logp_base"] for r in runs], 0.25,
        "Table 1 col. 2: +48.33 (Phi3.5-Mini MATH) ... +1.49 (GSM8K)",
        "Sequence log-likelihood under the reference model (forward pass); responses are always 3 tokens "
        f"(mean length {np.mean([r['sft']['sample_length'] for r in runs]):.2f})", unit=" nats", blocked=blocked))
    claims.append(_margin_claim(
        "sft/greedy_flips", "greedy accuracy: SFT-sharpened vs base",
        [r["sft"]["greedy_accuracy"] for r in runs], greedy, 0.25,
        "Prop. 3.1: greedy returns y* once pi(y*|x) > 1/2", "Greedy decoding of the sharpened model", blocked=blocked))
    claims.append(_margin_claim(
        "mechanism/sharpened_fraction", "fraction of test prompts with pi(y*|x) > 1/2 (exact): SFT-sharpened vs base",
        [r["sft"]["sharpened_fraction"] for r in runs], [r["base"]["base_sharpened_fraction"] for r in runs], 0.25,
        "Def. 3.1 with delta = 1/2", "y* is the base's exact argmax; the sharpened model's mass on it "
        f"(mean {np.mean([r['sft']['mean_mode_mass'] for r in runs]):.3f} vs base "
        f"{np.mean([r['base']['base_mean_mode_mass'] for r in runs]):.3f})", blocked=blocked))
    gaps, parts = [], []
    for beta in st.rlhf_betas:
        mm = np.array([r["rlhf"]["beta"][beta]["mode_mass"] for r in runs])
        tt = np.array([r["rlhf"]["beta"][beta]["tilted"] for r in runs])
        gaps.append(abs(float(mm.mean() - tt.mean())))
        parts.append(f"beta={beta:g}: {mm.mean():.4f} ± {_ms(mm)[1]:.2g} vs {tt.mean():.4f} "
                     f"(data distribution {task.tilted_optimum_correct(beta):.4f})")
    ident = np.mean([r["rlhf"]["identical_pair_share"] for r in runs])
    split = "; ".join(
        f"beta={b:g}: correct {np.mean([r['rlhf']['beta'][b]['correct_mass'] for r in runs]):.3f}, distractors "
        f"{np.mean([r['rlhf']['beta'][b]['distractor_mass'] for r in runs]):.3f}, answers the data never gives "
        f"{np.mean([r['rlhf']['beta'][b]['unsupported_mass'] for r in runs]):.3f}, outside "
        f"{np.mean([r['rlhf']['beta'][b]['outside_mass'] for r in runs]):.3f}" for b in st.rlhf_betas)
    bs = runs[0]["rlhf"]["base_split"]
    split = (f"Mass split (base: correct {bs['correct_mass']:.3f}, distractors {bs['distractor_mass']:.3f}, never-given "
             f"answers {bs['unsupported_mass']:.3f}) -> {split}. Eq. (8) only constrains log-ratio differences of "
             "sampled responses, so the normalisation is not identified: mass pushed off the distractors can land on "
             "answers pi_base never samples, which no pair penalises.")
    claims.append(Claim(
        "rlhf/matches_tilted_optimum", "max over beta of |mean pi_hat(y*|x) - mean pi*_beta(y*|x)| (learned base)",
        max(gaps), threshold=0.1, higher_is_better=False, paper="Eq. (8) optimum pi_base^(1+1/beta)/Z",
        note=(f"Eq. (8) on one base pair per training prompt ({st.n_train} pairs, {100 * ident:.1f}% identical and "
              f"without signal), {S} seeds: " + "; ".join(parts) + ". " + split + blocked)))
    claims.append(_margin_claim(
        "mechanism/rlhf_pushes_down_distractors", f"mean mass on the distractors: Eq. (8) at beta={min(st.rlhf_betas):g} "
        "vs base", [r["rlhf"]["beta"][min(st.rlhf_betas)]["distractor_mass"] for r in runs],
        [r["rlhf"]["base_split"]["distractor_mass"] for r in runs], 0.1,
        "Eq. (8): log pi(y)/pi(y') -> (1+1/beta) log pi_base(y)/pi_base(y') on sampled pairs",
        "The part of the tilted optimum the pairs identify: sampled competitors of y* lose mass", higher=False,
        blocked=blocked))
    hi, lo = max(st.rlhf_betas), min(st.rlhf_betas)
    claims.append(_margin_claim(
        "rlhf/smaller_beta_sharper", f"mean pi_hat(y*|x): beta={lo:g} vs beta={hi:g}",
        [r["rlhf"]["beta"][lo]["mode_mass"] for r in runs], [r["rlhf"]["beta"][hi]["mode_mass"] for r in runs],
        0.05, "§1.4: pi*_beta concentrates on y* as beta -> 0", "Eq. (8) at two KL coefficients", blocked=blocked))
    return claims


# ----------------------------------------------------------------------------------------------
def _coverage_sweep(st: ReproSettings, dev, clock, base_infos, bases) -> dict:
    from .evaluation import trap_correct
    from .exact import enumerate_responses, required_samples
    from .rewards import LogLikelihood
    from .sampling import sample_responses

    out = {}
    for pc, nd in st.coverage_tasks:
        task = TrapArithmeticTask(p_correct=pc, n_distractors=nd)
        _, test = task.split(st.n_train, st.n_test, seed=0)
        if (pc, nd) == (0.4, 10) and 0 in bases:
            base = bases[0][0]
        else:
            base = _bases(task, _sweep_cfg(st, task), dev, clock, base_infos, exclude=test)
        with clock("coverage"):
            lp = enumerate_responses(base.model, base.tokenizer, task.prompts(test), task.candidates).numpy()
            s = sample_responses(base.model, base.tokenizer, task.prompts(test), st.coverage_draws,
                                 max_new_tokens=4, batch_size=2048)
            scores = LogLikelihood(base.model, batch_size=4096)(s)
        from .evaluation import bon_accuracy_curve

        correct = trap_correct(s, test)
        curve = bon_accuracy_curve(scores, correct, range(1, st.coverage_draws + 1))
        reach = next((n for n, a in curve.items() if a >= 0.9), None)
        pstar = np.exp(lp.max(-1))
        ccov = float(np.mean(1 / pstar))
        pred = float(math.log(10) * ccov)
        out[pc] = {"n_distractors": nd, "ccov": ccov, "mean_pstar": float(pstar.mean()),
                   "mode_is_correct": float(np.mean(lp.argmax(-1) == task.correct_index(test))),
                   "required_n": reach, "predicted_n": pred,
                   "predicted_n_mean_pstar": float(required_samples(pstar.mean(), 0.1)),
                   "ratio": (reach / pred) if reach else None, "curve": curve, **_base_conv(base)}
    return out


def _coverage_claim(cov: dict) -> Claim:
    worst, parts, draws, censored = 0.0, [], None, False
    conv_ok, conv_note = _conv_text([{**r, "base_p_c": pc} for pc, r in cov.items()])
    for pc, r in cov.items():
        draws = max(r["curve"]) if r.get("curve") else draws
        if r["ratio"]:
            worst = max(worst, abs(math.log2(r["ratio"])))
            measured = f"N={r['required_n']}"
        else:       # never reached 90% within the draws: censored; scored 10x the draws (as the XPO claim does)
            worst = max(worst, abs(math.log2(10 * draws / r["predicted_n"])))
            censored = True
            measured = (f"never reached 90% within {draws} draws (best accuracy {max(r['curve'].values()):.3f}; "
                        f"scored N = {10 * draws})")
        parts.append(f"p_c={pc}: measured {measured} vs ln(10)·C_cov = {r['predicted_n']:.1f} "
                     f"(C_cov {r['ccov']:.2f}, argmax correct on {r['mode_is_correct']:.3f})")
    return Claim("coverage/required_n_tracks_ccov", "max |log2(measured N / predicted N)| over p_c (<= 1: factor 2)",
                 worst, threshold=1.0, higher_is_better=False, paper="Prop. C.1: N >= ln(1/rho)/p* suffices",
                 note=("Smallest N at which likelihood-BoN reaches 90% accuracy, read off prefixes of 64 draws "
                       "per prompt, vs Prop. C.1's ln(1/rho)·E[1/p*] with rho = 0.1. " + "; ".join(parts) + ". "
                       "Bases (p_c " + ", ".join(f"{pc:g}" for pc in cov) + "): " + conv_note + "."
                       + ("" if conv_ok else " A base did not converge (validation KL above the threshold at its "
                          "step cap): Prop. C.1 is about the base's own coverage, so the comparison still reads, "
                          "but that base is not a trained model of its data.")
                       + (" A p_c whose BoN never reached 90% is scored N = 10x the draws (a censored value, "
                          "as in xpo/fewer_samples_than_offline)." if censored else "")))


def _sharpened_fraction(model, base_lp, task, test, tok) -> float:
    from .exact import enumerate_responses

    lp = enumerate_responses(model, tok, task.prompts(test), task.candidates).numpy()
    ystar = base_lp.argmax(-1)
    return float(np.mean(np.exp(lp[np.arange(len(test)), ystar]) > 0.5))


def _xpo_vs_offline(st: ReproSettings, dev, clock, base_infos) -> dict:
    import torch

    from .exact import enumerate_responses
    from .rlhf import RLHFConfig, rlhf_sharpen, sample_pairs
    from .training import TrainConfig

    task = TrapArithmeticTask(p_correct=0.1, n_distractors=40)
    train, test = task.split(st.n_train, st.n_test, seed=0)
    val = train[: max(32, len(train) // 10)]
    base = _bases(task, _sweep_cfg(st, task), dev, clock, base_infos, exclude=test)
    tok = base.tokenizer
    base_lp = enumerate_responses(base.model, tok, task.prompts(test), task.candidates).numpy()
    val_lp = enumerate_responses(base.model, tok, task.prompts(val), task.candidates).numpy()
    beta = st.xpo_beta
    out: dict = {"beta": beta, "offline": {}, "xpo": {}, **_base_conv(base)}
    train_cfg = TrainConfig(epochs=1, lr=st.rlhf_lr, batch_size=st.rlhf_batch, lora_r=0, max_grad_norm=1.0, seed=0)
    # offline Eq. (8): the same optimiser budget for every data size
    with clock("xpo"):
        torch.manual_seed(0)
        pool = sample_pairs(base.model, base.model, tok, task.prompts(train), from_policy=False, max_new_tokens=4,
                            batch_size=2048)
        for n in st.offline_pairs:
            pairs = pool[:n] if n <= len(pool) else pool
            epochs = max(1, math.ceil(st.offline_steps * st.rlhf_batch / max(1, len(pairs))))
            cfg = RLHFConfig(beta=beta, max_new_tokens=4, sample_batch_size=2048,
                             train=replace(train_cfg, epochs=epochs))
            res = rlhf_sharpen(base.model, tok, task.prompts(train), cfg, pairs=pairs)
            out["offline"][n] = {"samples": 2 * len(pairs), "sharpened": _sharpened_fraction(res.model, base_lp, task, test, tok)}

        def j_exact(policy) -> float:
            lp = enumerate_responses(policy, tok, task.prompts(val), task.candidates).numpy()
            p = np.exp(lp)
            return float((p * (val_lp - beta * (lp - val_lp))).sum(-1).mean())

        for alpha in st.xpo_alphas:
            curve = []
            cfg = RLHFConfig(beta=beta, algo="xpo", alpha=alpha, iterations=st.xpo_iterations,
                             prompts_per_iteration=st.xpo_prompts_per_iteration,
                             steps_per_iteration=st.xpo_steps_per_iteration, max_new_tokens=4, sample_batch_size=2048,
                             train=train_cfg)
            torch.manual_seed(0)
            res = rlhf_sharpen(base.model, tok, task.prompts(train), cfg, j_beta=j_exact,
                               on_iteration=lambda t, pol, m, c=curve: c.append(
                                   (t, m, _sharpened_fraction(pol, base_lp, task, test, tok))))
            out["xpo"][alpha] = {"curve": curve, "best_j": res.stats["best_j_beta"],
                                 "best_iteration": res.stats["best_iteration"]}
    return out


def _first(curve, key=0.9):
    return next((m for m, f in curve if f >= key), None)


def _xpo_claim(xr: dict) -> Claim:
    off = sorted((v["samples"], v["sharpened"]) for v in xr["offline"].values())
    off_n = _first(off)
    alpha = max(xr["xpo"], key=lambda a: xr["xpo"][a]["best_j"])
    xc = [(m, f) for _, m, f in xr["xpo"][alpha]["curve"]]
    xpo_n = _first(xc)
    big = 10 * max([m for m, _ in off] + [m for m, _ in xc])
    # XPO that never sharpens 90% did nothing measurable: +inf never holds (written as null), even
    # when offline is censored too (both scored 10x would tie and "hold" at margin 0)
    ours = float(xpo_n) if xpo_n is not None else math.inf
    base = float(off_n) if off_n is not None else float(big)
    note = (f"p_c = 0.1, 40 distractors, beta = {xr['beta']}; samples = responses drawn (2 per pair). XPO alpha = "
            f"{alpha} chosen on validation J_beta from {sorted(xr['xpo'])}. Offline (samples, sharpened fraction): "
            + ", ".join(f"({m}, {f:.2f})" for m, f in off) + "; XPO: " + ", ".join(f"({m}, {f:.2f})" for m, f in xc)
            + ("" if off_n is not None else f". Offline never reached 90%: scored {big} (10x the largest budget).")
            + ("" if xpo_n is not None else ". XPO never reached 90%: ours = inf, so the claim does not hold.")
            + " The spec expects XPO to need fewer samples but does not guarantee it at this scale."
            + (" Base: " + _conv_text([xr])[1] + "." if "base_converged" in xr else ""))
    return Claim("xpo/fewer_samples_than_offline", "samples drawn to sharpen 90% of test prompts (pi(y*|x) > 1/2)",
                 ours, baseline=base, higher_is_better=False, margin=0.0, paper="Thm 4.3 vs Thm 4.2 (no C_cov)",
                 note=note)


def _realtext(st: ReproSettings, dev, clock) -> dict:
    """Spec §4.3: SFT-Sharpening (N = 16) on a tiny movie-snippet LM raises the reference log-likelihood of
    the model's own temperature-1 samples; response lengths reported beside the likelihoods."""
    from .realtext import realtext_likelihood_lift

    with clock("realtext"):
        try:
            r = realtext_likelihood_lift(seeds=st.seeds, device=dev)
        except FileNotFoundError as e:
            log.warning("real-text check skipped: %s", e)
            return {"skipped": str(e)}
    return r


def _plot(runs, st, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.info("matplotlib not installed (extra [plot]): no bon_accuracy.png")
        return
    ns = list(st.bon_ns)
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    acc = np.array([[r["bon"]["accuracy"][n] for n in ns] for r in runs])
    law = np.array([[r["bon"]["law_mean"][n] for n in ns] for r in runs])
    ax.errorbar(ns, acc.mean(0), yerr=acc.std(0), marker="o", label="BoN (measured)")
    ax.plot(ns, law.mean(0), "k--", label="exact law of the learned base")
    ax.axhline(np.mean([r["base"]["base_greedy_accuracy"] for r in runs]), color="r", ls=":", label="base greedy")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N")
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "bon_accuracy.png", dpi=120)
    plt.close(fig)
