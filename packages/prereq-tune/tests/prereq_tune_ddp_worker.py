"""Worker for test_prereq_tune_ddp.py: multi-version skill training under ``torchrun --nproc_per_node 2``
on CPU (gloo) through ``accelerate.Accelerator``, with two frozen, non-trivial knowledge LoRAs.

Writes, per rank: the rows each micro-batch forwarded and the adapters active for it, the synced gradient
of the first optimiser step, the final skill weights and the hashes of every frozen tensor.
"""

import json
import sys
from pathlib import Path

import torch

ARGS = dict(epochs=2, lr=5e-3, batch_size=4, max_length=32, max_grad_norm=0.0, seed=3)


def build():
    """The same model on every rank: a tiny GPT-2 with know_statement_v1/v2 (random, frozen) and a skill LoRA."""
    from iclr25.core.lm import tiny_causal_lm
    from iclr25.prereq_tune import make_world, world_tokenizer
    from iclr25.prereq_tune.lora import (
        KNOWLEDGE_TINY,
        SKILL_TINY,
        adapter_parameters,
        add_knowledge_adapter,
        add_skill_adapter,
    )

    world = make_world(20, 10, 2, seed=0)
    tok = world_tokenizer(world)
    m = tiny_causal_lm(vocab_size=len(tok), n_positions=32, n_embd=96, n_layer=3, n_head=4, seed=0,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(1)
    for v in (1, 2):
        m = add_knowledge_adapter(m, f"know_statement_v{v}", KNOWLEDGE_TINY)
        with torch.no_grad():
            for p in adapter_parameters(m, f"know_statement_v{v}").values():
                p.normal_(0, 0.05)
    m = add_skill_adapter(m, "skill", SKILL_TINY)
    with torch.no_grad():   # a non-zero B so the first step's gradient reaches both LoRA factors
        for p in adapter_parameters(m, "skill").values():
            p.normal_(0, 0.02)
    return world, tok, m.eval()


def main(out_dir: str) -> None:
    from accelerate import Accelerator
    from safetensors.torch import save_file

    import iclr25.prereq_tune.training as T
    from iclr25.prereq_tune import skill_examples
    from iclr25.prereq_tune.data import EncodedRows
    from iclr25.prereq_tune.lora import adapter_parameters, tensor_hashes
    from iclr25.prereq_tune.world import TINY_FORMAT

    torch.set_num_threads(1)
    out = Path(out_dir)
    acc = Accelerator(cpu=True)
    rank = acc.process_index
    world, tok, model = build()
    names = {id(p): n for n, p in model.named_parameters()}
    batches: list[dict] = []
    orig_batch, orig_loss, orig_step = EncodedRows.batch, T.completion_loss, torch.optim.AdamW.step

    def batch(self, idx):
        batches.append({"rows": [int(i) for i in idx]})
        return orig_batch(self, idx)

    def loss(model_, ids, att, lab, **kw):
        batches[-1]["active"] = list(model_.base_model.active_adapter)
        return orig_loss(model_, ids, att, lab, **kw)

    grads: dict[str, torch.Tensor] = {}

    def step(self, *a, **k):  # the gradient the optimiser sees (after accelerate's reduce), first step only
        if not grads:
            for g in self.param_groups:
                for p in g["params"]:
                    grads[names[id(p)]] = p.grad.detach().clone().contiguous()
        return orig_step(self, *a, **k)

    EncodedRows.batch, T.completion_loss, torch.optim.AdamW.step = batch, loss, step
    before = tensor_hashes(model, exclude=["skill"])
    r = T.train_skill_adapter(model, tok, skill_examples(world, "fictitious"), ["know_statement_v1", "know_statement_v2"],
                              T.TrainArgs(**ARGS), skill="skill", multi_version=True, fmt=TINY_FORMAT,
                              accelerator=acc, quiet=True)
    acc.wait_for_everyone()
    save_file(grads, str(out / f"grad0_rank{rank}.safetensors"))
    save_file({n: p.detach().clone().contiguous() for n, p in adapter_parameters(model, "skill").items()},
              str(out / f"skill_rank{rank}.safetensors"))
    (out / f"run_rank{rank}.json").write_text(json.dumps({
        "world_size": acc.num_processes, "batches": batches, "steps": r.steps, "draws": r.draws,
        "frozen_before": before, "frozen_after": tensor_hashes(model, exclude=["skill"])}))


if __name__ == "__main__":
    main(sys.argv[1])
