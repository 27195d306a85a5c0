"""Diagnostic (not a benchmark): why the full preset's low-p_c bases miss the trap.

For each coverage-sweep base (seed 0: p_c 0.4 / 0.2 / 0.1 with 10 / 20 / 40 distractors) it splits the exact
mass of the 100 answers on the 400 full-preset test prompts into the first digit (the tens digit, which
needs the carry) and the second digit given the correct first digit (the units digit, which the data gives
with probability 1 after the correct tens digit and uniformly after a distractor digit).

Run: ``python packages/sharpening/benchmarks/diagnose_low_pc_bases.py`` (loads the cached bases, or
pre-trains each once, ~4 CPU-min); prints one JSON line per base. The README quotes its output.
"""

import json
from dataclasses import replace

import numpy as np
import torch

from iclr25.sharpening.base import cached_trap_base
from iclr25.sharpening.exact import enumerate_responses
from iclr25.sharpening.reproduce import ReproSettings
from iclr25.sharpening.task import TrapArithmeticTask


def main() -> None:
    torch.set_num_threads(1)
    st = ReproSettings.preset(False)
    for pc, nd in [(0.4, 10), (0.2, 20), (0.1, 40)]:
        task = TrapArithmeticTask(p_correct=pc, n_distractors=nd)
        _, test = task.split(st.n_train, st.n_test, seed=0)
        b = cached_trap_base(task, replace(st.base, seed=0), progress=False)
        lp = enumerate_responses(b.model, b.tokenizer, task.prompts(test), task.candidates).numpy()  # (B, 100)
        p = np.exp(lp).reshape(len(test), 10, 10)          # [prompt, first digit, second digit]
        c = task.correct_index(test)
        c1, u = c // 10, c % 10
        rows = np.arange(len(test))
        first = p.sum(2)                                   # first-digit mass (times P(EOS), ~1)
        dis_digits = (c1[:, None] + np.arange(1, nd // 10 + 1)) % 10
        carry = (test[:, 0] % 10 + test[:, 1] % 10) >= 10
        pu = p[rows, c1, u] / first[rows, c1]             # P(units | correct tens)
        r = {"p_c": pc, "n_distractors": nd,
             "mass_on_correct_tens": float(first[rows, c1].mean()), "data_mass_on_correct_tens": pc,
             "mass_on_distractor_tens": float(first[rows[:, None], dis_digits].sum(1).mean()), "data_distractor": 1 - pc,
             "mass_on_correct_tens_with_carry": float(first[rows, c1][carry].mean()),
             "p_units_given_correct_tens": float(pu.mean()), "data_p_units_given_correct_tens": 1.0,
             "argmax_correct": float(np.mean(lp.argmax(1) == c)), "mean_pstar": float(np.exp(lp[rows, c]).mean()),
             "final_loss_per_token": b.info["final_loss"],
             "entropy_floor_per_token": float(-(pc * np.log(pc) + (1 - pc) * np.log((1 - pc) / nd)) / 3),
             "missing_units_information_per_token": float(pc * np.log(10) / 3),
             "clean_units_examples_seen": int(pc * st.base.n_strings * st.base.epochs)}
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}), flush=True)


if __name__ == "__main__":
    main()
