"""Benchmark: the cost of CREAM's consistency over SRLM, and batched reward scoring.

Run once on the quick toy model (seed 0's M0 and M1, cached by ``reproduce --quick``)::

    python packages/cream/benchmarks/bench_cream.py [--repeats 5] [--threads 1]

Two ratios, each from one run, with means over ``--repeats`` alternating repetitions:

1. wall time of one CREAM round (sample, reward under the current *and previous* models,
   consistency, DPO) over one SRLM round (sample, reward, DPO) on the same prompts and model —
   target at most 1.5x (the extra cost is one more scoring pass);
2. batched reward scoring (one forward pass per batch of sequences) over scoring one sequence at a
   time, on the same round's responses — target at least 5x.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    from iclr25.core.lm import GenerationConfig, TransformersGenerator
    from iclr25.core.threads import set_threads
    from iclr25.cream import AdditionTask, CreamConfig, sample_responses, score_responses, self_rewarding_loop
    from iclr25.cream.toy import toy_models

    set_threads(args.threads)
    task = AdditionTask(seed=args.seed)
    ms = toy_models(task, progress=False)
    m0, m1, tok = ms["m0"], ms["m1"], ms["tokenizer"]
    prompts = task.unlabeled_splits()[:1]

    def one_round(method: str) -> float:
        cfg = CreamConfig.toy(method=method, iterations=1, seed=args.seed,
                              measure_consistency=method != "srlm")  # SRLM: no previous-model pass
        t = time.perf_counter()
        self_rewarding_loop(m0, tok, prompts, cfg, sft_model=m1, progress=False, device="cpu")
        return time.perf_counter() - t

    one_round("dyn")  # warm-up (imports, allocator)
    t_cream, t_srlm = [], []
    for _ in range(args.repeats):
        t_cream.append(one_round("dyn"))
        t_srlm.append(one_round("srlm"))

    # scoring: the round's N x prompts responses, batched vs one at a time (no deduplication)
    cfg = CreamConfig.toy(seed=args.seed)
    samples = sample_responses(TransformersGenerator(m1, tok, batch_size=2048), prompts[0], cfg.n_samples,
                               GenerationConfig(max_new_tokens=2, temperature=1.0, seed=1))
    P = [s.prompt for s in samples for _ in s.responses]
    R = [r for s in samples for r in s.responses]
    t_batch, t_single = [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        a = score_responses(m1, tok, P, R, batch_size=512, dedupe=False)
        t_batch.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = score_responses(m1, tok, P, R, batch_size=1, dedupe=False)
        t_single.append(time.perf_counter() - t)
    assert torch.allclose(a, b, atol=1e-4), "batched and one-at-a-time scores differ"
    out = {
        "prompts": len(prompts[0]), "responses": len(P), "threads": args.threads, "repeats": args.repeats,
        "cream_round_s_mean": float(np.mean(t_cream)), "srlm_round_s_mean": float(np.mean(t_srlm)),
        "round_ratio_cream_over_srlm": float(np.mean(t_cream) / np.mean(t_srlm)),
        "score_batched_s_mean": float(np.mean(t_batch)), "score_single_s_mean": float(np.mean(t_single)),
        "scoring_speedup_batched": float(np.mean(t_single) / np.mean(t_batch)),
    }
    print(json.dumps(out, indent=2))
    print(f"CREAM/SRLM round time {out['round_ratio_cream_over_srlm']:.2f}x (target <= 1.5x); batched scoring "
          f"{out['scoring_speedup_batched']:.1f}x faster than one at a time (target >= 5x)")


if __name__ == "__main__":
    main()
