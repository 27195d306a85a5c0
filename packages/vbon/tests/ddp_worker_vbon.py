"""Worker for test_vbon_ddp.py: a few vBoN steps under ``torchrun --nproc_per_node 2`` on CPU (gloo).

Writes, per rank, the rollouts it drew, the synced gradient of its first update and its final weights.
"""

import json
import sys
from pathlib import Path

import torch


def reward(prompts, conts):
    pos, neg = ("good", "great", "fine", "lovely", "fun"), ("bad", "dull", "awful", "boring", "weak")
    return [sum(t in pos for t in (p + c).split()) - sum(t in neg for t in (p + c).split()) + 1e-3 * len(c)
            for p, c in zip(prompts, conts)]


def main(model_dir: str, out_dir: str) -> None:
    from accelerate import Accelerator
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from iclr25.vbon import RewardCDFCache, VBoNConfig, VBoNTrainer
    from iclr25.vbon.runtime import clone_policy

    torch.set_num_threads(1)
    out = Path(out_dir)
    acc = Accelerator(cpu=True)
    rank = acc.process_index
    ref = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompts = ["the movie", "a film is", "the plot", "very fun", "the cast and", "a story"]
    g = torch.Generator().manual_seed(123)
    cdf = RewardCDFCache.from_samples(prompts, torch.randn(len(prompts), 16, generator=g, dtype=torch.float64))
    cfg = VBoNConfig(n=4, steps=3, prompts_per_step=3, samples_per_prompt=2, max_new_tokens=6, lr=1e-2,
                     max_grad_norm=1e9, seed=0)
    tr = VBoNTrainer(clone_policy(ref), ref, tok, reward, prompts, cfg, cdf=cdf, accelerator=acc)
    rolls = []
    for step in range(cfg.steps):
        ro = tr.rollout()
        if step == 0:
            s = ro.samples
            torch.save({"input_ids": s.input_ids, "attention_mask": s.attention_mask, "position_ids": s.position_ids,
                        "response_mask": s.response_mask, "old": ro.old_logprobs, "adv": ro.advantages},
                       out / f"rollout0_rank{rank}.pt")
        loss = tr.update(ro)
        tr.step += 1
        if step == 0:
            grads = {n: p.grad.detach().clone().contiguous() for n, p in tr.unwrapped.named_parameters()}
            save_file(grads, str(out / f"grad0_rank{rank}.safetensors"))
        rolls.append({"prompts": ro.samples.prompts, "continuations": ro.samples.continuations,
                      "loss": float(loss)})
    acc.wait_for_everyone()
    save_file({n: p.detach().clone().contiguous() for n, p in tr.unwrapped.named_parameters()},
              str(out / f"weights_rank{rank}.safetensors"))
    (out / f"rollouts_rank{rank}.json").write_text(json.dumps({"world_size": acc.num_processes, "rolls": rolls}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
