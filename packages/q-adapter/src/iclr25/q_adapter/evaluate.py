"""Evaluation of a customised policy: new-preference pair accuracy, forgetting (general-text NLL rise),
and generation throughput of the two-cache policy against the base alone."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .data import TokenizedPair, collate_pairs, collate_sequences
from .model import _PeftPolicy

__all__ = ["pair_accuracy", "general_nll", "generation_throughput", "evaluate_customization"]


@torch.no_grad()
def pair_accuracy(policy: _PeftPolicy, pairs: Sequence[TokenizedPair], pad_token_id: int, *,
                  batch_size: int = 32, which: str = "policy") -> float:
    """Fraction of held-out pairs whose chosen response gets the higher implicit score.

    ``which="policy"``: the policy's own score (Q-Adapter: ``alpha~ log pi~ - alpha_0 log pi_1``; DPO:
    ``log pi - log pi_1``; SFT: ``log pi``); ``which="base"``: ``log pi_1`` (the untouched base).
    Ties count as half. Returns a float in ``[0, 1]``.
    """
    if not pairs:
        raise ValueError("no pairs to evaluate")
    policy.eval()
    wins = []
    for i in range(0, len(pairs), batch_size):
        b = collate_pairs(pairs[i:i + batch_size], pad_token_id)
        ids, attn, resp = b["input_ids"], b["attention_mask"], b["response_mask"]
        if which == "base":
            lb = policy.base_log_probs(ids, attn)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
            s = (lb * resp[:, 1:] * attn[:, 1:]).sum(-1)
        else:
            s = policy.scores(ids, attn, resp)
        n = ids.shape[0] // 2
        d = s[:n] - s[n:]
        wins.append(torch.where(d == 0, torch.full_like(d, 0.5), (d > 0).float()))
    return float(torch.cat(wins).mean())


@torch.no_grad()
def general_nll(policy: _PeftPolicy, texts: Sequence[str], tokenizer: Any, *, max_length: int = 128,
                batch_size: int = 32, which: str = "policy") -> float:
    """Mean per-token negative log-likelihood (nats/token) of general text under the policy
    (``which="policy"``: ``pi~`` for Q-Adapter, ``pi_theta`` for LoRA baselines) or the base
    (``which="base"``). Every token after the first counts. Uses forward passes only."""
    conf = policy.peft_model.get_base_model().config
    limit = getattr(conf, "n_positions", None) or getattr(conf, "max_position_embeddings", None)
    if limit:
        max_length = min(max_length, int(limit))
    enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    seqs = [([], ids[:max_length]) for ids in enc if len(ids) >= 2]
    if not seqs:
        raise ValueError("no text of at least two tokens")
    policy.eval()
    tot, cnt = 0.0, 0.0
    for i in range(0, len(seqs), batch_size):
        b = collate_sequences(seqs[i:i + batch_size], tokenizer.pad_token_id)
        ids, attn = b["input_ids"], b["attention_mask"]
        lp = policy.base_log_probs(ids, attn) if which == "base" else policy.log_probs(ids, attn)
        tok = lp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
        m = attn[:, 1:].float()
        tot += float(-(tok * m).sum())
        cnt += float(m.sum())
    return tot / cnt


def generation_throughput(policy: _PeftPolicy, prompt_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                          max_new_tokens: int = 32, repeats: int = 3) -> dict[str, float]:
    """Tokens/s of the customised policy and of the base alone, measured side by side (same prompts,
    same KV-cached loop, EOS ignored so both generate ``max_new_tokens``); runs alternate base/policy
    ``repeats`` times and the best time of each is kept (robust to load from other processes).

    Returns: ``{"policy_tok_s", "base_tok_s", "ratio"}``.
    """
    best = {"base": float("inf"), "customized": float("inf")}
    n_new = 0
    for _ in range(repeats):
        for pol in ("base", "customized"):
            t0 = time.perf_counter()
            out = policy.generate(prompt_ids, attention_mask, max_new_tokens=max_new_tokens, policy=pol,
                                  eos_token_id=-1)
            best[pol] = min(best[pol], time.perf_counter() - t0)
            n_new = (out.shape[1] - prompt_ids.shape[1]) * out.shape[0]
    res = {"base_tok_s": n_new / best["base"], "policy_tok_s": n_new / best["customized"]}
    res["ratio"] = res["policy_tok_s"] / res["base_tok_s"]
    return res


def evaluate_customization(policy: _PeftPolicy, test_pairs: Sequence[TokenizedPair], general_texts: Sequence[str],
                           tokenizer: Any, *, which: str = "policy", max_length: int = 128) -> dict[str, float]:
    """``{"pair_accuracy", "general_nll"}`` of a policy (or of its base with ``which="base"``)."""
    return {
        "pair_accuracy": pair_accuracy(policy, test_pairs, tokenizer.pad_token_id, which=which),
        "general_nll": general_nll(policy, general_texts, tokenizer, which=which, max_length=max_length),
    }


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0

