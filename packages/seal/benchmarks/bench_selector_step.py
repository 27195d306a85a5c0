"""Time of one SEAL selector-training step over one plain SFT step on the same fine-tuning batches.

The selector step covers a safe batch plus a fine-tuning batch, the model update on
σ·L_s + (1−σ)·mean(w·ℓ) and the selector update (issue #21: target <= 2.5x). Both loops are the
package's own (``train_selector`` and ``sft``), run on the same model, the same D_ft, the same batch
size and the same number of optimiser steps; the ratio is of mean seconds per step over the timed
runs (one warm-up run each is discarded). σ < 1 (the general step: D_ft enters the model step) and
σ = 1 (the first epoch of the official schedule: D_ft is only scored) are both reported.

    python packages/seal/benchmarks/bench_selector_step.py [--size tiny|small] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=("tiny", "small"), default="tiny",
                    help="tiny: the reproduction's GPT-2 (d=96, 3 layers); small: d=256, 6 layers")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from iclr25.core.lm import tiny_causal_lm
    from iclr25.seal import (
        BilevelConfig,
        SFTConfig,
        encode_pairs,
        make_synthetic_safety_task,
        sft,
        train_selector,
    )
    from iclr25.seal.tasks import word_tokenizer

    task = make_synthetic_safety_task(450, seed=0)
    tok = word_tokenizer(task.vocab_texts)
    safe = encode_pairs(tok, task.safe, template=task.template, max_len=40)
    ft = encode_pairs(tok, task.ft, template=task.template, max_len=40)
    dims = dict(n_layer=3, n_embd=96, n_head=4) if args.size == "tiny" else dict(n_layer=6, n_embd=256, n_head=8)
    base = tiny_causal_lm(vocab_size=len(tok), n_positions=40, eos_token_id=tok.eos_token_id,
                          pad_token_id=tok.pad_token_id, **dims)
    b = args.batch_size
    steps = -(-len(ft) // b)

    def timed(fn) -> list[float]:
        fn()  # warm-up
        out = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) / steps)
        return out

    def selector(sigma: float):
        cfg = BilevelConfig(sigma0=sigma, sigma_decay=0.0, epochs=1, batch_size=b, lr_model=1e-3, lr_selector=0.1,
                            selector_optimizer="sgd", max_len=40)
        return lambda: train_selector(copy.deepcopy(base).train(), safe, ft, cfg, progress=False)

    plain = timed(lambda: sft(copy.deepcopy(base).train(), ft, SFTConfig(epochs=1, lr=1e-3, batch_size=b, max_len=40),
                              progress=False))
    res = {"size": args.size, "parameters": sum(p.numel() for p in base.parameters()), "batch_size": b,
           "steps_per_run": steps, "repeats": args.repeats, "threads": args.threads,
           "sft_step_s_mean": statistics.mean(plain)}
    for name, sigma in (("sigma_0.9", 0.9), ("sigma_1.0", 1.0)):
        t = timed(selector(sigma))
        res[f"selector_step_s_mean_{name}"] = statistics.mean(t)
        res[f"ratio_{name}"] = statistics.mean(t) / statistics.mean(plain)
        res[f"ratio_median_{name}"] = statistics.median(t) / statistics.median(plain)
    res["target"] = 2.5
    print(json.dumps(res, indent=1))
    print(f"selector step / SFT step: {res['ratio_sigma_0.9']:.2f}x at σ<1, {res['ratio_sigma_1.0']:.2f}x at σ=1 "
          f"(target <= 2.5x; {args.size} model, batch {b}, mean of {args.repeats} runs of {steps} steps)")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
