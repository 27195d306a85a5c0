"""Benchmark: one skill-training step with a frozen knowledge LoRA active vs a plain single-LoRA SFT
step on the same rows (issue #23 target: ratio <= 1.3), and rows forwarded per counted row (ours 1,
the official all-versions sampler V). The frozen knowledge LoRA runs two ways: stacked in PEFT (the
default and the official code's forward) and merged (``knowledge_forward="merged"``: folded into
copies of the base weights once per adapter, only the skill LoRA active).

    python packages/prereq-tune/benchmarks/bench_skill_step.py --repeats 3 --out bench.json

All arms run on the same spec-sized GPT-2 (3 layers, d 96) and the same V = 3 quick-world skill
rows (batch 64), tokenised once outside the timing; each arm trains ``--epochs`` epochs, interleaved
over ``--repeats``; a run's seconds per optimiser step include its set-up (frozen-tensor hashing
before and after, the merged weights); the ratio is of the mean seconds per step (means and medians
reported), wall and CPU (``time.process_time``) both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    import torch

    from iclr25.core.lm import tiny_causal_lm
    from iclr25.prereq_tune import (
        TINY_FORMAT,
        TrainArgs,
        add_knowledge_adapter,
        add_skill_adapter,
        make_world,
        skill_examples,
        train_skill_adapter,
        world_tokenizer,
    )
    from iclr25.prereq_tune.lora import KNOWLEDGE_TINY, SKILL_TINY

    torch.set_num_threads(a.threads)
    world = make_world(200, 100, 3, seed=0)
    tok = world_tokenizer(world)
    base = tiny_causal_lm(vocab_size=len(tok), n_positions=32, n_embd=96, n_layer=3, n_head=4, seed=0,
                          eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    m = base
    for v in (1, 2, 3):
        m = add_knowledge_adapter(m, f"know_v{v}", KNOWLEDGE_TINY)
    ex = skill_examples(world, "fictitious")
    ex1 = skill_examples(world, "fictitious", 1)
    args = TrainArgs(epochs=a.epochs, lr=2e-3, batch_size=64, max_length=32)
    # tokenised once, outside the timing (the arms tokenise 900 vs 300 rows; the step is what is compared)
    from iclr25.prereq_tune.data import encode_completions

    enc, enc1 = (encode_completions(tok, e, TINY_FORMAT, max_length=32) for e in (ex, ex1))
    t = {"prereq_routed": [], "prereq_routed_merged": [], "plain_sft": [], "official_all_versions": []}
    cpu = {arm: [] for arm in t}
    ratio_rows = {}
    for rep in range(a.repeats):
        for arm in t:
            name = f"s_{arm}_{rep}"
            m = add_skill_adapter(m, name, SKILL_TINY)
            t0, c0 = time.perf_counter(), time.process_time()
            if arm == "plain_sft":
                r = train_skill_adapter(m, tok, ex1, (), args, skill=name, fmt=TINY_FORMAT, quiet=True, encoded=enc1)
            else:
                r = train_skill_adapter(m, tok, ex, ["know_v1", "know_v2", "know_v3"], args, skill=name,
                                        sampler="all_versions" if arm == "official_all_versions" else "routed",
                                        knowledge_forward="merged" if arm == "prereq_routed_merged" else "stacked",
                                        fmt=TINY_FORMAT, quiet=True, encoded=enc)
            t[arm].append((time.perf_counter() - t0) / r.steps)
            cpu[arm].append((time.process_time() - c0) / r.steps)
            ratio_rows[arm] = r.rows_forwarded / r.rows_counted
            m.delete_adapter(name)
    res = {arm: {"mean_s_per_step": statistics.mean(v), "median_s_per_step": statistics.median(v), "runs": v,
                 "mean_cpu_s_per_step": statistics.mean(cpu[arm]), "cpu_runs": cpu[arm]} for arm, v in t.items()}
    res["cpu_ratio_prereq_over_plain_mean"] = (res["prereq_routed"]["mean_cpu_s_per_step"]
                                               / res["plain_sft"]["mean_cpu_s_per_step"])
    res["cpu_ratio_prereq_merged_over_plain_mean"] = (res["prereq_routed_merged"]["mean_cpu_s_per_step"]
                                                      / res["plain_sft"]["mean_cpu_s_per_step"])
    res["ratio_prereq_over_plain_mean"] = res["prereq_routed"]["mean_s_per_step"] / res["plain_sft"]["mean_s_per_step"]
    res["ratio_prereq_over_plain_median"] = (res["prereq_routed"]["median_s_per_step"]
                                             / res["plain_sft"]["median_s_per_step"])
    res["ratio_prereq_merged_over_plain_mean"] = (res["prereq_routed_merged"]["mean_s_per_step"]
                                                  / res["plain_sft"]["mean_s_per_step"])
    res["ratio_prereq_merged_over_plain_median"] = (res["prereq_routed_merged"]["median_s_per_step"]
                                                    / res["plain_sft"]["median_s_per_step"])
    res["ratio_official_over_plain_mean"] = (res["official_all_versions"]["mean_s_per_step"]
                                             / res["plain_sft"]["mean_s_per_step"])
    res["rows_forwarded_per_counted_row"] = ratio_rows
    res["target"] = "ratio over plain SFT (mean) <= 1.3"
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    print(f"bench_skill_step: Prereq-Tune step / plain SFT step = {res['ratio_prereq_over_plain_mean']:.2f} stacked, "
          f"{res['ratio_prereq_merged_over_plain_mean']:.2f} merged (means), "
          f"rows forwarded per counted row: ours {ratio_rows['prereq_routed']:.0f}, official "
          f"{ratio_rows['official_all_versions']:.0f}")


if __name__ == "__main__":
    main()
