"""Benchmark: batched vs naive vote path of the smoothed classifier (issue #26).

One interleaved run over 200 texts at K = 20, n = 2 (tiny encoder d = 64, 2 layers, H = 1):

* batched: a text's n randomised variants in one padded batch, the lower layers computed once, the
  top-H layers evaluated for the K stacked parameter copies at once (``TinyClassifier.predict_proba_copies``);
* naive: one full forward per copy and variant (copy written into the model in place, batch of 1).

Both paths see the same variants; the votes must be identical. Also reported: texts/s, the memory of
the K top-H deltas, and the share of a text's FRS time spent in the MCTS search (I = 32).

    python packages/frs/benchmarks/bench_votes.py [--texts 200] [--k 20] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=200)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--n-random", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    from iclr25.frs import MCTSFuzzer, TinyClassifier, Vocab, sample_parameter_copies
    from iclr25.frs.models import TorchTextClassifier
    from iclr25.frs.randomize import randomize_variants, token_probabilities

    texts = None
    try:
        from iclr25.frs import load_dataset, tokenize

        texts = tokenize(load_dataset("sst2", "test").texts)[: a.texts]
        source = "SST-2 test sentences"
    except FileNotFoundError:
        rng = np.random.default_rng(0)
        words = [f"w{i}" for i in range(2000)]
        texts = [list(rng.choice(words, size=rng.integers(8, 40))) for _ in range(a.texts)]
        source = "synthetic texts (no mirror)"
    vocab = Vocab.build(texts, min_count=1)
    clf = TinyClassifier.create(vocab, 2, d_model=64, n_heads=4, d_ff=128, n_layers=2,
                                max_len=max(len(t) for t in texts) + 1, seed=0, device=a.device)
    copies = sample_parameter_copies(clf, k=a.k, sigma=0.01, top_layers=1, seed=0)
    fuzzer = MCTSFuzzer(clf.predict_proba, max_span=3, iterations=a.iterations, seed=0, mask_token=clf.mask_token)
    rng = np.random.default_rng(1)
    t_b = t_n = t_m = 0.0
    same = True
    # warm-up
    clf.predict_proba_copies(texts[:2], copies)
    TorchTextClassifier.predict_proba_copies(clf, [texts[0]], copies)
    for i, t in enumerate(texts):
        s0 = time.perf_counter()
        seg = fuzzer.search(t)
        t_m += time.perf_counter() - s0
        probs, _ = token_probabilities(len(t), seg, 0.9, 0.3)
        variants, _ = randomize_variants(t, probs, a.n_random, clf.mask_token, rng)
        order = ("b", "n") if i % 2 == 0 else ("n", "b")  # interleaved
        for which in order:
            s0 = time.perf_counter()
            if which == "b":
                vb = clf.predict_proba_copies(variants, copies).argmax(-1)
                t_b += time.perf_counter() - s0
            else:
                vn = np.zeros((a.k, len(variants)), dtype=int)
                with copies.applied(clf) as apply:
                    for k in range(a.k):
                        apply(k)
                        for j, v in enumerate(variants):
                            vn[k, j] = int(clf.predict_proba([v]).argmax(-1)[0])
                t_n += time.perf_counter() - s0
        same &= bool((vb == vn).all())
    n = len(texts)
    res = {
        "texts": n, "source": source, "k": a.k, "n_random": a.n_random, "device": a.device, "threads": a.threads,
        "batched_s": t_b, "naive_s": t_n, "ratio_naive_over_batched": t_n / t_b,
        "batched_texts_per_s": n / t_b, "naive_texts_per_s": n / t_n,
        "batched_ms_per_text_mean": 1000 * t_b / n, "naive_ms_per_text_mean": 1000 * t_n / n,
        "copy_delta_bytes": copies.nbytes, "copy_params": copies.num_parameters,
        "model_params": sum(p.numel() for p in clf.module.parameters()),
        "mcts_s": t_m, "mcts_share_of_frs_time": t_m / (t_m + t_b), "identical_votes": same,
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(res, indent=2))
    print(f"batched vote path {res['ratio_naive_over_batched']:.1f}x faster than naive ({res['batched_texts_per_s']:.0f} vs "
          f"{res['naive_texts_per_s']:.1f} texts/s, K={a.k}, n={a.n_random}); copies {copies.nbytes / 2**20:.2f} MiB; "
          f"MCTS {100 * res['mcts_share_of_frs_time']:.0f}% of FRS time; identical votes: {same}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    assert same, "batched and naive votes differ"
    assert res["ratio_naive_over_batched"] >= 5, "target: batched path >= 5x faster"


if __name__ == "__main__":
    main()
