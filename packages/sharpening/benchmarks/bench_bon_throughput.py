"""BoN throughput (prompts/s) on the quick trap base, N = 16: batched vs one sample at a time.

Batched: all B x N draws in batched ``generate`` calls (``sample_responses``) and scored in batched teacher-forced
forwards (``LogLikelihood``) — what ``best_of_n`` does. Sequential: for each prompt, N times: one ``generate`` call
for one response and one forward to score it. Both select the same way (first-index argmax). One run; the
figure is the ratio of mean throughputs over ``--repeats`` timings of each.

    python packages/sharpening/benchmarks/bench_bon_throughput.py [--prompts 64] [--n 16] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=64, help="prompts in the batched timing")
    ap.add_argument("--sequential-prompts", type=int, default=8, help="prompts in the sequential timing")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import numpy as np
    import torch

    from iclr25.core.threads import set_threads
    from iclr25.sharpening import LogLikelihood, TrapArithmeticTask, best_of_n, cached_trap_base, select_best
    from iclr25.sharpening.rewards import score_sequences
    from iclr25.sharpening.sampling import sample_responses

    set_threads(args.threads)
    task = TrapArithmeticTask()
    base = cached_trap_base(task)
    model, tok = base.model, base.tokenizer
    _, test = task.split(300, 200, seed=0)
    prompts = task.prompts(test)

    def batched(ps):
        res = best_of_n(model, tok, ps, args.n, LogLikelihood(model, batch_size=4096), max_new_tokens=4,
                        batch_size=4096)
        return res.best

    def sequential(ps):
        best = []
        for p in ps:
            scores, texts = [], []
            for _ in range(args.n):
                s = sample_responses(model, tok, [p], 1, max_new_tokens=4, batch_size=1)
                scores.append(float(score_sequences(model, s.input_ids, s.attention_mask, s.response_mask)[0]))
                texts.append(s.responses[0][0])
            best.append(texts[int(select_best(np.array([scores]))[0])])
        return best

    def rate(fn, ps):
        out = []
        for _ in range(args.repeats):
            torch.manual_seed(0)
            t = time.perf_counter()
            fn(ps)
            out.append(len(ps) / (time.perf_counter() - t))
        return float(np.mean(out)), float(np.std(out))

    batched(prompts[:4])          # warm-up
    b_mean, b_sd = rate(batched, prompts[:args.prompts])
    s_mean, s_sd = rate(sequential, prompts[:args.sequential_prompts])
    res = {"n": args.n, "threads": args.threads, "batched_prompts_per_s": b_mean, "batched_sd": b_sd,
           "sequential_prompts_per_s": s_mean, "sequential_sd": s_sd, "speedup": b_mean / s_mean,
           "batched_prompts": args.prompts, "sequential_prompts": args.sequential_prompts, "repeats": args.repeats}
    print(json.dumps(res, indent=2))
    print(f"BoN N={args.n}: batched {b_mean:.1f} prompts/s vs one at a time {s_mean:.2f} prompts/s -> "
          f"{b_mean / s_mean:.0f}x (target >= 10x)")


if __name__ == "__main__":
    main()
