"""Recipe selection for the full preset's trap bases (not a benchmark of the method): pre-train one base with a
candidate recipe on a held-out seed (not a claim seed), measure its CPU cost, and check it the way
``base/trap_learned`` does (exact argmax over the 100 answers = a+b and pi_base(a+b|x) < 1/2 on the full
preset's 400 test prompts), plus the units-digit split of ``diagnose_low_pc_bases.py``.

Run (one base per call, single-threaded, cached in the user cache like every trap base):
``python packages/sharpening/benchmarks/select_base_recipe.py --p-c 0.1 --distractors 40 --seed 100 --batch 64``
prints one JSON line. The README's deviation list quotes the output.
"""

import argparse
import json
import time
from dataclasses import replace

import numpy as np
import torch

from iclr25.sharpening.base import cached_trap_base
from iclr25.sharpening.exact import enumerate_responses
from iclr25.sharpening.reproduce import ReproSettings
from iclr25.sharpening.task import TrapArithmeticTask


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--p-c", type=float, default=0.1)
    ap.add_argument("--distractors", type=int, default=40)
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--batch", type=int, default=None, help="batch size (default: the full preset's)")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--n-strings", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    st = ReproSettings.preset(False)
    over = {k: v for k, v in {"batch_size": a.batch, "epochs": a.epochs, "n_strings": a.n_strings,
                              "lr": a.lr}.items() if v is not None}
    cfg = replace(st.base, seed=a.seed, **over)
    task = TrapArithmeticTask(p_correct=a.p_c, n_distractors=a.distractors)
    _, test = task.split(st.n_train, st.n_test, seed=0)
    c0, w0 = time.process_time(), time.perf_counter()
    b = cached_trap_base(task, cfg, progress=False)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    lp = enumerate_responses(b.model, b.tokenizer, task.prompts(test), task.candidates).numpy()  # (B, 100)
    c = task.correct_index(test)
    rows = np.arange(len(test))
    p = np.exp(lp).reshape(len(test), 10, 10)
    first = p.sum(2)
    pstar = np.exp(lp.max(1))
    r = {"p_c": a.p_c, "n_distractors": a.distractors, "seed": a.seed, "batch_size": cfg.batch_size,
         "steps": cfg.steps, "lr": cfg.lr, "beta2": cfg.beta2, "n_strings": cfg.n_strings, "epochs": cfg.epochs,
         "cached": b.info["cached"], "pretrain_cpu_s": cpu if not b.info["cached"] else None,
         "pretrain_wall_s": b.info["pretrain_seconds"], "load_wall_s": wall,
         "trap_learned": float(np.mean((lp.argmax(1) == c) & (pstar < 0.5))),
         "argmax_correct": float(np.mean(lp.argmax(1) == c)), "mean_pstar_correct": float(np.exp(lp[rows, c]).mean()),
         "mass_on_correct_tens": float(first[rows, c // 10].mean()),
         "p_units_given_correct_tens": float((p[rows, c // 10, c % 10] / first[rows, c // 10]).mean()),
         "final_loss_per_token": b.info["final_loss"]}
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}), flush=True)


if __name__ == "__main__":
    main()
