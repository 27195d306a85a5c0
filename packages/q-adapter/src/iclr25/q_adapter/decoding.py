"""Decoding with KV caches: the token loop shared by every policy (:func:`kv_decode`) and the
:class:`DecodingMixin` that gives a LoRA policy ``generate`` (customised / base / adapter-alone policy, one fused
forward of ``Q`` and ``pi_1`` per token)."""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["kv_decode", "cache_kwarg", "DecodingMixin"]


def cache_kwarg(model: Any) -> str:
    """The KV-cache keyword of ``model.forward``: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def kv_decode(step, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
              max_new_tokens: int = 32, do_sample: bool = False, temperature: float = 1.0, top_k: int = 0,
              eos_token_id: int | None = None, pad_token_id: int | None = None,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """The token loop shared by every policy (and by the throughput benchmark's unwrapped base).

    Args:
        step: ``step(ids [B, T], step_ids [B, t], attn [B, T], step_pos [B, t]) -> logits [B, V]`` for the
            next token (``step_ids``/``step_pos`` are the tokens not yet in the caller's KV cache).
        input_ids, attention_mask: ``[B, P]`` left-padded prompts.
        other arguments: as in :meth:`_PeftPolicy.generate`.
    Returns: ``[B, P + n]`` long.
    """
    pad = pad_token_id if pad_token_id is not None else (eos_token_id if eos_token_id is not None else 0)
    attn = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
    ids = input_ids
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    step_ids, step_pos = ids, (attn.cumsum(-1) - 1).clamp(min=0)
    for _ in range(max_new_tokens):
        z = step(ids, step_ids, attn, step_pos)
        if do_sample:
            z = z / max(temperature, 1e-6)
            if top_k > 0:
                kth = z.topk(min(top_k, z.shape[-1]), dim=-1).values[:, -1:]
                z = z.masked_fill(z < kth, float("-inf"))
            nxt = torch.multinomial(F.softmax(z, dim=-1), 1, generator=generator).squeeze(-1)
        else:
            nxt = z.argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        last_pos = step_pos[:, -1:]
        attn = torch.cat([attn, torch.ones_like(nxt)[:, None]], dim=1)
        step_ids, step_pos = nxt[:, None], last_pos + 1
        if eos_token_id is not None:
            done |= nxt == eos_token_id
            if bool(done.all()):
                break
    return ids


class DecodingMixin:
    """``generate`` for a policy holding ``self.peft_model`` (see :class:`iclr25.q_adapter.model.QAdapterModel`)."""

    def _paths(self, policy: str) -> list[str]:
        return {"base": ["base"], "adapter": ["adapter"], "customized": self._policy_paths}[policy]

    _policy_paths = ["adapter"]

    def _combine(self, logits: dict[str, torch.Tensor], policy: str) -> torch.Tensor:
        return logits["base" if policy == "base" else "adapter"]

    def _cache_kwarg(self) -> str:
        # transformers >= 5.2x names the KV cache ``cache``; older versions ``past_key_values``
        if not hasattr(self, "_cache_kw"):
            self._cache_kw = cache_kwarg(self.peft_model.get_base_model())
        return self._cache_kw

    def _forward_path(self, path: str, ids, attn, pos, cache):
        kw = {"input_ids": ids, "attention_mask": attn, "position_ids": pos, "use_cache": True,
              self._cache_kwarg(): cache}
        if path == "base":
            with self.peft_model.disable_adapter():
                out = self.peft_model(**kw)
        elif path == "fused":
            n = ids.shape[0] // 2
            out = self.peft_model(**kw, adapter_names=["default"] * n + ["__base__"] * n)
        else:
            out = self.peft_model(**kw)
        new_cache = getattr(out, "cache", None)
        if new_cache is None:
            new_cache = getattr(out, "past_key_values", None)
        return out.logits[:, -1].float(), new_cache

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        max_new_tokens: int = 32,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        eos_token_id: int | None = None,
        pad_token_id: int | None = None,
        policy: str = "customized",
        use_cache: bool = True,
        fused: bool = True,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Decode from the customised policy (or ``policy="base"`` / ``"adapter"``) with KV caches, so the
        prefix is never recomputed.

        Args:
            input_ids: ``[B, P]`` long prompts, **left**-padded when their lengths differ.
            attention_mask: ``[B, P]`` 0/1 (default all ones).
            max_new_tokens: tokens to generate at most.
            do_sample: sample (True) or greedy argmax (False).
            temperature, top_k: sampling settings applied to the policy logits.
            eos_token_id: stop a row after it emits this id (default: the model config's).
            pad_token_id: filler after EOS (default: ``eos_token_id``).
            policy: ``"customized"`` (``softmax((Q + alpha_0 log pi_1)/alpha~)`` for Q-Adapter; the LoRA
                policy for baselines), ``"base"`` (adapter off) or ``"adapter"`` (adapter on alone).
            use_cache: False recomputes the whole sequence every step (reference for tests).
            fused: for the customised Q-Adapter policy, run ``Q`` and ``pi_1`` as ONE forward of the
                doubled batch per token (peft mixed-adapter batch: rows ``[:B]`` adapter on, ``[B:]`` off)
                with one shared KV cache; False: two forwards and two caches.
            generator: torch RNG for sampling.
        Returns:
            ``[B, P + n]`` long, the prompts followed by the generated tokens (``n <= max_new_tokens``).
        """
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ValueError(f"input_ids must be a non-empty [B, P] batch, got {tuple(input_ids.shape)}")
        if policy not in ("customized", "base", "adapter"):
            raise ValueError(f"policy must be 'customized', 'base' or 'adapter', got {policy!r}")
        conf = self.peft_model.get_base_model().config
        eos = eos_token_id if eos_token_id is not None else getattr(conf, "eos_token_id", None)
        paths = self._paths(policy)
        fuse = fused and use_cache and len(paths) == 2
        caches: dict[str, Any] = {p: None for p in (["fused"] if fuse else paths)}
        B = input_ids.shape[0]

        def step(ids, step_ids, attn, step_pos):
            logits = {}
            if fuse:
                z, caches["fused"] = self._forward_path("fused", torch.cat([step_ids, step_ids]),
                                                        torch.cat([attn, attn]), torch.cat([step_pos, step_pos]),
                                                        caches["fused"])
                logits = {"adapter": z[:B], "base": z[B:]}
            else:
                for p in paths:
                    if use_cache:
                        logits[p], caches[p] = self._forward_path(p, step_ids, attn, step_pos, caches[p])
                    else:
                        full_pos = (attn.cumsum(-1) - 1).clamp(min=0)
                        logits[p], _ = self._forward_path(p, ids, attn, full_pos, None)
            return self._combine(logits, policy)

        was_training = self.peft_model.training
        self.peft_model.eval()
        try:
            return kv_decode(step, input_ids, attention_mask, max_new_tokens=max_new_tokens, do_sample=do_sample,
                             temperature=temperature, top_k=top_k, eos_token_id=eos, pad_token_id=pad_token_id,
                             generator=generator)
        finally:
            self.peft_model.train(was_training)

