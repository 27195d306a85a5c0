"""CPU-seconds of the full preset's work, reference path vs optimised path, from one run (issue #21:
"full run under 30 minutes on 2 cores").

The optimised path (``iclr25.seal.losses``): the output head and the log-softmax only on the response
positions (vocabularies >= 1024), torch's fused tanh-GELU (``fuse_gelu``), and one forward over D_safe's and D_ft's rows in a selector step with σ < 1. The reference
path (``reference_path()``, GPT-2's ``gelu_new`` modules as loaded): full ``(B, T, V)`` logits through core ``token_logprobs`` and two forwards.

For each task (synthetic N = 900, real-text N = 900) it times, in process CPU-seconds with one torch
thread, on the cached aligned base of seed 0: selector steps at σ = 1 and at σ < 1, SFT steps
(batch 32), and one ``evaluate_model``; both paths on the same batches. It then counts the steps of one
full-preset job (2 selectors × 10 epochs, every method's 5-epoch SFT, one evaluation per run + base)
and reports the estimated CPU-seconds per job and for the full preset (5 synthetic + 2 real jobs), and
the ratio reference / optimised. Means over the timed steps (no medians).

    python packages/seal/benchmarks/bench_fast_path.py [--steps 30] [--out bench.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time

import torch


def _cpu() -> float:
    return time.process_time()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps per component and path")
    ap.add_argument("--tasks", default="synthetic,real")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)

    from iclr25.seal.bilevel import train_selector
    from iclr25.seal.config import CPU_SELECTOR, CPU_SFT, BilevelConfig, SFTConfig
    from iclr25.seal.data import encode_pairs
    from iclr25.seal.experiment import evaluate_model
    from iclr25.seal.losses import fuse_gelu, reference_path
    from iclr25.seal.metrics import ProgrammaticJudge
    from iclr25.seal.reproduce import FULL
    from iclr25.seal.sft import sft
    from iclr25.seal.tasks import aligned_base, make_real_safety_task, make_synthetic_safety_task

    report: dict = {}
    for name in args.tasks.split(","):
        n = FULL["n_ft"] if name == "synthetic" else FULL["real_n_ft"]
        task = make_synthetic_safety_task(n, seed=0) if name == "synthetic" else make_real_safety_task(n, seed=0)
        base, tok, _ = aligned_base(task, 0)
        safe = encode_pairs(tok, task.safe, template=task.template, max_len=task.max_len, what="D_safe")
        ft = encode_pairs(tok, task.ft, template=task.template, max_len=task.max_len, what="D_ft")
        judge = ProgrammaticJudge(task.refusal_prefixes, task.compliance_markers)
        k = args.steps
        cfg1 = BilevelConfig(**{**CPU_SELECTOR, "max_len": task.max_len}, seed=0)
        cfg2 = BilevelConfig(**{**CPU_SELECTOR, "max_len": task.max_len, "sigma0": 0.97}, seed=0)
        scfg = SFTConfig(**{**CPU_SFT, "max_len": task.max_len, "seed": 0})

        def comp(fast: bool, base=base, tok=tok, task=task, safe=safe, ft=ft, judge=judge,
                 cfg1=cfg1, cfg2=cfg2, scfg=scfg, k=k) -> dict[str, float]:
            ctx = reference_path() if not fast else _null()
            out = {}
            with ctx:
                for key, fn in (
                    ("selector_sigma1", lambda m: train_selector(m, safe, ft, cfg1, stop_after_steps=k, progress=False)),
                    ("selector_sigma_lt1", lambda m: train_selector(m, safe, ft, cfg2, stop_after_steps=k, progress=False)),
                    ("sft", lambda m: sft(m, ft, scfg, stop_after_steps=k, progress=False)),
                ):
                    m = copy.deepcopy(base)
                    if fast:
                        fuse_gelu(m)
                    t0 = _cpu()
                    fn(m)
                    out[key] = (_cpu() - t0) / k
                m = copy.deepcopy(base)
                if fast:
                    fuse_gelu(m)
                t0 = _cpu()
                evaluate_model(m, tok, task, safe, judge)
                out["evaluate"] = _cpu() - t0
            return out

        comp(True)  # warm-up (allocator, lazy imports)
        ref, opt = comp(False), comp(True)
        # step counts of one full-preset job (experiment.run_task_seed)
        keeps = FULL["keeps"] if name == "synthetic" else (0.8,)
        n_safe, n_oracle = len(safe), sum(lab.startswith("benign") for lab in task.labels())
        sizes = [n, n_oracle, n + n_safe]
        for kp in keeps:
            kk = int(math.floor(kp * n))
            sizes += [kk] * 4 + [kk + n_safe]
        sft_steps = sum(scfg.epochs * math.ceil(s / scfg.batch_size) for s in sizes)
        per_epoch = math.ceil(n / cfg1.batch_size)
        counts = {"selector_sigma1": 2 * per_epoch, "selector_sigma_lt1": 2 * per_epoch * (cfg1.epochs - 1),
                  "sft": sft_steps, "evaluate": len(sizes) + 1}
        job = {p: sum(counts[c] * t[c] for c in counts) for p, t in (("reference", ref), ("optimised", opt))}
        report[name] = {"per_step_cpu_s": {"reference": ref, "optimised": opt}, "counts": counts,
                        "job_cpu_s": job, "ratio": job["reference"] / job["optimised"]}
        print(f"{name}: per step (CPU-s) ref {ref} / opt {opt}")
        print(f"{name}: one full-preset job ≈ {job['reference']:.0f} CPU-s reference, {job['optimised']:.0f} "
              f"optimised: {job['reference'] / job['optimised']:.2f}x")
    if {"synthetic", "real"} <= set(report):
        jobs = {"synthetic": len(FULL["seeds"]), "real": len(FULL["real_seeds"])}
        tot = {p: sum(jobs[t] * report[t]["job_cpu_s"][p] for t in jobs) for p in ("reference", "optimised")}
        report["full_preset_cpu_s"] = tot
        report["ratio"] = tot["reference"] / tot["optimised"]
        print(f"full preset (5 synthetic + 2 real jobs, base models cached) ≈ {tot['reference']:.0f} CPU-s "
              f"reference vs {tot['optimised']:.0f} optimised: {report['ratio']:.2f}x")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


if __name__ == "__main__":
    main()
