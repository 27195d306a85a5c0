"""The implicit-reward (DPO-form) AIHF trainer shared by the tiny-LM task and the text path.

Sequences are encoded batches ``(input_ids, attention_mask, response_mask)`` (each ``(N, T)`` long / 0-1), scored
with core ``sequence_logprobs``. One *round* (spec "Special cases" and "Algorithm"): agent samples ``y'`` are drawn
from ``pi_old`` (the iterate at the round's start) for every demonstration prompt; the demonstration-term reference
log-probs (``pi_ref`` for AIHF-DPO, ``pi_old`` for Self-Play-AIHF) and the preference reference log-probs are
computed **once** and cached; then ``epochs`` passes of AdamW steps on :func:`~iclr25.aihf.losses.aihf_implicit_loss`,
each step holding a demonstration-vs-agent pair and a preference pair per example.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from iclr25.core.lm import sequence_logprobs

from .losses import aihf_implicit_loss

__all__ = ["Encoded", "cat_encoded", "batched_logprobs", "implicit_epoch", "sft_epoch"]


@dataclass
class Encoded:
    """An encoded set of sequences: ``input_ids``, ``attention_mask``, ``response_mask``, each ``(N, T)``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def __getitem__(self, idx) -> Encoded:
        return Encoded(self.input_ids[idx], self.attention_mask[idx], self.response_mask[idx])

    def to(self, device) -> Encoded:
        return Encoded(self.input_ids.to(device), self.attention_mask.to(device), self.response_mask.to(device))

    def trimmed(self) -> Encoded:
        """Drop trailing all-padding columns (right padding)."""
        width = int(self.attention_mask.sum(0).nonzero().max()) + 1 if self.attention_mask.any() else 1
        return Encoded(self.input_ids[:, :width], self.attention_mask[:, :width], self.response_mask[:, :width])


def cat_encoded(parts: list[Encoded], pad_id: int) -> Encoded:
    """Concatenate encoded sets along the batch axis, right-padding to the widest."""
    width = max(p.input_ids.shape[1] for p in parts)

    def pad(t: torch.Tensor, v: int) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=v)

    return Encoded(torch.cat([pad(p.input_ids, pad_id) for p in parts]),
                   torch.cat([pad(p.attention_mask, 0) for p in parts]),
                   torch.cat([pad(p.response_mask, 0) for p in parts]))


@torch.no_grad()
def batched_logprobs(model: torch.nn.Module, enc: Encoded, batch_size: int = 256, device: str | None = None,
                     average: bool = False) -> torch.Tensor:
    """``(N,)`` float32 summed response log-probs of ``model`` on ``enc`` (no gradient; batched), on CPU."""
    dev = device or str(next(model.parameters()).device)
    was = model.training
    model.eval()
    out = []
    for i in range(0, len(enc), batch_size):
        b = enc[i:i + batch_size].trimmed().to(dev)
        out.append(sequence_logprobs(model, b.input_ids, b.attention_mask, b.response_mask, average=average).float()
                   .cpu())
    model.train(was)
    return torch.cat(out) if out else torch.zeros(0)


def _forward_logps(model: torch.nn.Module, enc: Encoded, device: str) -> torch.Tensor:
    b = enc.trimmed().to(device)
    return sequence_logprobs(model, b.input_ids, b.attention_mask, b.response_mask)


def implicit_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, w: float, beta: float,
                   demos: Encoded | None, agents: Encoded | None, demo_old: torch.Tensor | None,
                   agent_old: torch.Tensor | None, chosen: Encoded | None, rejected: Encoded | None,
                   ref_chosen: torch.Tensor | None, ref_rejected: torch.Tensor | None, batch_size: int,
                   rng: np.random.Generator, pad_id: int, weighting: str = "mean", device: str = "cpu",
                   steps: int | None = None, grad_clip: float = 1.0, accelerator=None,
                   grad_accum: int = 1) -> list[float]:
    """One pass of AdamW steps on the implicit AIHF loss; returns the per-step losses.

    Each step takes ``batch_size`` demonstration/agent pairs (a pass over the demonstrations, shuffled) and
    ``batch_size`` preference pairs (a pass over the preferences, restarted when exhausted; with fewer pairs than
    ``batch_size`` all pairs are used). With ``w = 0`` (DPO) the pass is over the preferences. ``steps`` fixes the
    number of steps (default: one pass); with ``grad_accum = k`` the gradients of ``k`` consecutive steps (each
    scaled by ``1/k``) are summed before one optimiser update. Cached log-probs (``*_old``, ``ref_*``) are ``(N,)`` tensors without grad.
    All four kinds of sequences of a step go through the model in one forward pass.

    Raises:
        ValueError: a NaN/inf loss (from ``aihf_implicit_loss``), no data or missing cached log-probs for a weighted
            term.
    """
    use_demo = w > 0 and demos is not None and len(demos) > 0
    use_pref = w < 1 and chosen is not None and len(chosen) > 0
    if w > 0 and not use_demo:
        raise ValueError(f"w={w} > 0 weights the demonstration term, but there are no demonstrations (use w = 0 for "
                         "preferences only)")
    if w < 1 and not use_pref:
        raise ValueError(f"w={w} < 1 weights the preference term, but there are no preference pairs (use w = 1 for "
                         "demonstrations only)")
    n_demo = len(demos) if use_demo else 0
    n_pref = len(chosen) if use_pref else 0
    main = n_demo if use_demo else n_pref
    if steps is None:
        steps = max(1, math.ceil(main / batch_size))
    demo_order = rng.permutation(n_demo) if use_demo else None
    pref_order = rng.permutation(n_pref) if use_pref else None
    dp = pp = 0
    losses = []
    model.train()
    if grad_accum < 1:
        raise ValueError(f"grad_accum must be >= 1, got {grad_accum}")
    optimizer.zero_grad(set_to_none=True)
    for s in range(steps):
        parts, sizes = [], []
        if use_demo:
            if dp >= n_demo:
                demo_order, dp = rng.permutation(n_demo), 0
            di = torch.from_numpy(demo_order[dp:dp + batch_size])  # type: ignore[index]
            dp += batch_size
            parts += [demos[di], agents[di]]  # type: ignore[index]
            sizes += [len(di), len(di)]
        if use_pref:
            bp = min(batch_size, n_pref)
            if pp + bp > n_pref:
                pref_order, pp = rng.permutation(n_pref), 0
            pi = torch.from_numpy(pref_order[pp:pp + bp])  # type: ignore[index]
            pp += bp
            parts += [chosen[pi], rejected[pi]]  # type: ignore[index]
            sizes += [bp, bp]
        logps = torch.split(_forward_logps(model, cat_encoded(parts, pad_id), device), sizes)
        k = 0
        lp_d = lp_a = lp_w = lp_l = None
        od = oa = rw = rl = None
        if use_demo:
            lp_d, lp_a = logps[0], logps[1]
            od, oa = demo_old[di].to(lp_d), agent_old[di].to(lp_d)  # type: ignore[index]
            k = 2
        if use_pref:
            lp_w, lp_l = logps[k], logps[k + 1]
            rw, rl = ref_chosen[pi].to(lp_w), ref_rejected[pi].to(lp_w)  # type: ignore[index]
        w_eff = w if (use_demo and use_pref) else (1.0 if use_demo else 0.0)
        loss = aihf_implicit_loss(lp_d, lp_a, od, oa, lp_w, lp_l, rw, rl, w_eff, beta, weighting=weighting)
        scaled = loss / grad_accum if grad_accum > 1 else loss
        if accelerator is not None:
            accelerator.backward(scaled)
        else:
            scaled.backward()
        losses.append(float(loss.detach()))
        if (s + 1) % grad_accum and s + 1 < steps:
            continue
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return losses


def sft_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, demos: Encoded, batch_size: int,
              rng: np.random.Generator, device: str = "cpu", grad_clip: float = 1.0) -> list[float]:
    """One pass of supervised fine-tuning (mean negative log-likelihood per response token) on the demonstrations."""
    order = rng.permutation(len(demos))
    losses = []
    model.train()
    for i in range(0, len(demos), batch_size):
        b = demos[torch.from_numpy(order[i:i + batch_size])].trimmed().to(device)
        lp = sequence_logprobs(model, b.input_ids, b.attention_mask, b.response_mask)
        n = b.response_mask[:, 1:].sum().clamp(min=1)
        loss = -lp.sum() / n
        if not torch.isfinite(loss):
            raise ValueError(f"SFT loss became {float(loss)}; lower the learning rate")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], grad_clip)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses
