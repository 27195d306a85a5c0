"""Benchmark: the reproduction's optimised path vs the straightforward one, stage by stage, on the
quick world's M0-sized model (one run; CPU seconds by ``time.process_time``, wall too).

    python packages/prereq-tune/benchmarks/bench_fast_path.py --repeats 2 --out bench_fast.json

Arms (the same rows, seeds and recipe; tokenisation outside the timing):

* straightforward: GPT-2's five-op ``gelu_new``, PEFT ``set_adapter`` on every loss computation,
  the stacked knowledge + skill forward, one evaluation pass per (adapter stack, answer version);
* optimised (``ReproSettings.fast``): the fused GELU kernel (:func:`fuse_gelu`), no-op activations
  skipped, the merged knowledge forward, one evaluation pass per adapter stack scored against every
  version.

Stages timed: ``--know-steps`` knowledge-LoRA steps (batch 64 statements), a multi-version skill LoRA
over 3 frozen knowledge LoRAs (``--skill-epochs`` subject-epochs, batch 64), and the Table-2 control
evaluation (2 knowledge adapters x 3 answer versions on the 300 fictitious training questions).
Arms are interleaved over ``--repeats``; ratios are of the mean CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--know-epochs", type=float, default=3.0)
    ap.add_argument("--skill-epochs", type=float, default=6.0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    import torch
    from transformers.activations import ACT2FN

    import iclr25.prereq_tune.knowledge_stage as K
    import iclr25.prereq_tune.skill_stage as T
    from iclr25.core.lm import tiny_causal_lm
    from iclr25.prereq_tune import (
        TINY_FORMAT,
        add_knowledge_adapter,
        add_skill_adapter,
        knowledge_corpus,
        make_world,
        qa_items,
        skill_examples,
        train_knowledge_adapter,
        train_skill_adapter,
        world_tokenizer,
    )
    from iclr25.prereq_tune.evaluation import first_token_accuracy, first_token_predictions, qa_accuracy
    from iclr25.prereq_tune.training import KNOWLEDGE_ARGS_TINY, SKILL_ARGS_TINY

    torch.set_num_threads(1)
    world = make_world(200, 100, 3, seed=0)
    tok = world_tokenizer(world)
    fast_activate = T._activate

    def slow_activate(model, names, roles, where):
        model.base_model.set_adapter(list(names))
        roles.apply()
        roles.check(where)

    def build(fast: bool):
        m = tiny_causal_lm(vocab_size=len(tok), n_positions=32, n_embd=96, n_layer=3, n_head=4, seed=0,
                           eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id).eval()
        for b in m.transformer.h:
            b.mlp.act = ACT2FN["gelu_pytorch_tanh" if fast else "gelu_new"]
        for v in (1, 2, 3):
            torch.manual_seed(v)
            m = add_knowledge_adapter(m, f"know_v{v}")
            with torch.no_grad():
                for n, p in m.named_parameters():
                    if f".know_v{v}." in n:
                        p.normal_(0, 0.05)
        return m

    know_texts = knowledge_corpus(world, 1)
    skill_rows = skill_examples(world, "fictitious")
    fq = {v: qa_items(world, "fictitious", v) for v in (1, 2, 3)}
    res: dict[str, dict[str, list[float]]] = {k: {"know": [], "skill": [], "eval": []} for k in ("straight", "fast")}
    for rep in range(a.repeats):
        for arm in ("straight", "fast"):
            fast = arm == "fast"
            T._activate = K._activate = fast_activate if fast else slow_activate
            m = build(fast)
            m = add_knowledge_adapter(m, "know_bench")
            c = time.process_time()
            train_knowledge_adapter(m, tok, "know_bench", know_texts, replace(KNOWLEDGE_ARGS_TINY, epochs=a.know_epochs, seed=rep),
                                    quiet=True)
            res[arm]["know"].append(time.process_time() - c)
            m = add_skill_adapter(m, "skill")
            c = time.process_time()
            train_skill_adapter(m, tok, skill_rows, ["know_v1", "know_v2", "know_v3"],
                                replace(SKILL_ARGS_TINY, epochs=a.skill_epochs, seed=rep), fmt=TINY_FORMAT, quiet=True,
                                knowledge_forward="merged" if fast else "stacked")
            res[arm]["skill"].append(time.process_time() - c)
            c = time.process_time()
            accs = []
            for k in ("know_v1", "know_v2"):
                if fast:
                    pred = first_token_predictions(m, tok, [TINY_FORMAT.render_prompt(it.question) for it in fq[1]],
                                                   adapters=[k, "skill"])
                    accs += [first_token_accuracy(tok, pred, [it.answers for it in fq[u]], TINY_FORMAT) for u in fq]
                else:
                    accs += [qa_accuracy(m, tok, fq[u], adapters=[k, "skill"], fmt=TINY_FORMAT) for u in fq]
            res[arm]["eval"].append(time.process_time() - c)
            print(rep, arm, {k: round(v[-1], 2) for k, v in res[arm].items()}, "control accs", [round(x, 3) for x in accs],
                  flush=True)
    T._activate = K._activate = fast_activate
    mean = statistics.fmean
    out = {"cpu_seconds_mean": {arm: {k: mean(v) for k, v in d.items()} for arm, d in res.items()},
           "cpu_seconds_all": res,
           "ratio_fast_over_straight": {k: mean(res["fast"][k]) / mean(res["straight"][k]) for k in ("know", "skill", "eval")},
           "ratio_total": sum(mean(v) for v in res["fast"].values()) / sum(mean(v) for v in res["straight"].values()),
           "settings": vars(a)}
    print(json.dumps({k: out[k] for k in ("cpu_seconds_mean", "ratio_fast_over_straight", "ratio_total")}, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
