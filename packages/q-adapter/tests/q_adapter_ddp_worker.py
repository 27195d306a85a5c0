"""Worker for test_q_adapter_ddp.py: a few Q-Adapter steps on synthetic pairs, run as one process
or under ``torchrun --nproc_per_node 2`` (gloo on CPU). Writes ``OUT/rank{r}.pt`` with the pair
indices this rank trained on, the logged (global) losses and the final LoRA weights."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from iclr25.core.lm import byte_tokenizer, tiny_causal_lm
from iclr25.q_adapter import PreferencePair, QAdapterConfig, QAdapterModel, tokenize_pairs
from iclr25.q_adapter.baseline import LoRAPolicy
from iclr25.q_adapter.trainer import PreferenceTrainer, TrainerConfig


def main(out: str, batch_size: int, steps: int, method: str) -> None:
    torch.set_num_threads(1)
    tok = byte_tokenizer()
    words = ["rain", "sun", "sea", "moon", "wind", "snow", "fire", "stone", "tree", "river", "cloud", "night"]
    pairs = [PreferencePair(f"Q{i}: tell me of the {w}.\n", f"The {w} sings softly {'la ' * (i % 4)}",
                            f"{w} no{'!' * (1 + i % 3)}") for i, w in enumerate(words * 2)]
    train = tokenize_pairs(pairs, tok, max_length=64, max_prompt_length=24)
    model = tiny_causal_lm(n_embd=32, n_layer=2, n_head=2, n_positions=128, seed=0)
    cfg = QAdapterConfig(lora_dropout=0.0)
    pol = QAdapterModel(model, cfg) if method == "q-adapter" else LoRAPolicy(model, cfg, score=method)
    tcfg = TrainerConfig(method=method, learning_rate=1e-2, batch_size=batch_size, max_steps=steps, seed=3,
                         progress=False)
    tr = PreferenceTrainer(pol, train, tok.pad_token_id, tcfg, device="cpu")
    hist = tr.train()
    lora = {k: v.detach().cpu().clone() for k, v in pol.peft_model.named_parameters() if v.requires_grad}
    Path(out).mkdir(parents=True, exist_ok=True)
    torch.save({"world": tr.world, "rank": tr.rank, "seen": tr.seen, "loss": [h["loss"] for h in hist],
                "lora": lora}, Path(out) / f"rank{tr.rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "q-adapter")
