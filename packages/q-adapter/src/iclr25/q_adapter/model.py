"""Q-Adapter on a PEFT LoRA adapter: adapter on = ``Q``, adapter off = ``pi_1`` (paper Sec. 4).

:class:`QAdapterModel` wraps any Hugging Face causal LM. The same network gives the residual
Q-function (LoRA switched on; the full logit vector is ``Q(s, .)``) and the frozen pre-trained policy
(LoRA switched off with ``peft``'s ``disable_adapter()``). :class:`LoRAPolicy` is the plain LoRA
policy used by the DPO and SFT baselines (same adapter, same base, adapter-on log-probs).
"""

from __future__ import annotations

import inspect
import json
import logging
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .config import QAdapterConfig
from .losses import action_mask, implicit_scores, policy_logits, qadapter_loss, residual_rewards

__all__ = ["QAdapterModel", "LoRAPolicy", "check_causal_lm", "kv_decode", "cache_kwarg"]

log = logging.getLogger(__name__)
QCONFIG_NAME = "qadapter_config.json"


def check_causal_lm(model: Any) -> None:
    """Raise ``ValueError`` unless ``model`` is a causal LM with an output (LM) head.

    A bare backbone (``GPT2Model``, ``AutoModel``) returns hidden states, not logits over the vocabulary,
    so it cannot serve as ``Q``/``pi_1``.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise ValueError(
            f"{type(model).__name__} has no causal-LM head (get_output_embeddings() is None); load the base "
            "model with transformers.AutoModelForCausalLM.from_pretrained(...) instead of AutoModel"
        )


def _inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> dict[str, torch.Tensor | None]:
    """Forward kwargs; position ids follow the attention mask so left padding is handled."""
    if attention_mask is None:
        return {"input_ids": input_ids}
    pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": pos}


def _lora_config(cfg: QAdapterConfig, model: Any = None):
    from peft import LoraConfig, TaskType

    # GPT-2 style Conv1D layers store weights transposed; tell peft up front (it would warn and fix it)
    conv1d = getattr(getattr(model, "config", None), "model_type", None) in ("gpt2", "gpt_bigcode")
    return LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.target_modules) if cfg.target_modules else None,
        fan_in_fan_out=conv1d,
    )


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


class _PeftPolicy(torch.nn.Module):
    """Shared machinery: a PEFT LoRA model, forward with the adapter on/off, cached decoding, saving."""

    kind = "lora"

    def __init__(self, base_model: Any, cfg: QAdapterConfig | None = None, *, peft_model: Any = None) -> None:
        super().__init__()
        self.cfg = cfg or QAdapterConfig()
        if peft_model is None:
            check_causal_lm(base_model)
            from peft import get_peft_model

            for p in base_model.parameters():
                p.requires_grad_(False)
            peft_model = get_peft_model(base_model, _lora_config(self.cfg, base_model))
        self.peft_model = peft_model

    # --- forwards -------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor, *,
                method: str = "q-adapter", dpo_beta: float = 0.1) -> tuple[torch.Tensor, dict[str, float]]:
        """The training loss of one collated batch (first half chosen, second half rejected), ``[2B, L]``
        each; returns ``(scalar loss, stats)`` (see :func:`iclr25.q_adapter.trainer.preference_step_loss`).

        The loss is the module's forward so that a DDP wrapper (``accelerator.prepare``) sees it and
        all-reduces the LoRA gradients across processes.
        """
        from .trainer import preference_step_loss

        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": response_mask}
        return preference_step_loss(self, batch, method, dpo_beta)

    def adapter_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits with the adapter on, ``[B, L, V]`` float32 (``Q`` for Q-Adapter)."""
        return self.peft_model(**_inputs(input_ids, attention_mask)).logits.float()

    def base_log_probs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``log pi_1(. | x_{<=t})`` with the adapter off, no grad: ``[B, L, V]`` float32 (nats)."""
        with torch.no_grad(), self.peft_model.disable_adapter():
            z = self.peft_model(**_inputs(input_ids, attention_mask)).logits.float()
        return F.log_softmax(z, dim=-1)

    def log_probs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Log-probs of the trained policy, ``[B, L, V]`` float32 (from a forward pass)."""
        return F.log_softmax(self.adapter_logits(input_ids, attention_mask), dim=-1)

    def scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """Implicit preference score of each sequence (higher = preferred), ``[B]``. Overridden."""
        raise NotImplementedError

    # --- decoding with KV caches ---------------------------------------------------------------
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

    # --- saving ---------------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> None:
        """Save the adapter with ``peft``'s ``save_pretrained`` plus ``qadapter_config.json``."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.peft_model.save_pretrained(str(out))
        meta = {"kind": self.kind, **self.cfg.to_dict()}
        (out / QCONFIG_NAME).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_pretrained(cls, base_model: Any, path: str | Path, *, is_trainable: bool = False):
        """Load an adapter saved by :meth:`save_pretrained` onto ``base_model`` (peft ``from_pretrained``).

        Raises:
            FileNotFoundError: ``path`` holds no ``adapter_config.json``.
            ValueError: the folder holds another kind of adapter (e.g. a DPO LoRA for a Q-Adapter).
        """
        from peft import PeftModel

        p = Path(path)
        if not (p / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{p} holds no adapter_config.json (save it with save_pretrained)")
        check_causal_lm(base_model)
        meta: dict[str, Any] = {}
        if (p / QCONFIG_NAME).is_file():
            meta = json.loads((p / QCONFIG_NAME).read_text(encoding="utf-8"))
        kind = meta.pop("kind", cls.kind)
        if kind != cls.kind:
            raise ValueError(f"{p} holds a {kind!r} adapter, not a {cls.kind!r} one; use the matching class")
        if meta.get("target_modules") is not None:
            meta["target_modules"] = tuple(meta["target_modules"])
        cfg = QAdapterConfig(**meta) if meta else QAdapterConfig()
        peft_model = PeftModel.from_pretrained(base_model, str(p), is_trainable=is_trainable)
        return cls(base_model, cfg, peft_model=peft_model)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.peft_model.parameters() if p.requires_grad]


class QAdapterModel(_PeftPolicy):
    """The residual Q-function ``Q_theta`` (LoRA on) and the base policy ``pi_1`` (LoRA off).

    Args:
        base_model: a Hugging Face ``*ForCausalLM`` (frozen here; LoRA is injected in place by peft).
        cfg: :class:`QAdapterConfig` (alphas, loss variant, LoRA sizes).
        peft_model: an existing peft model (used by :meth:`from_pretrained`).

    Raises:
        ValueError: the base model has no causal-LM head.

    Example::

        qm = QAdapterModel(AutoModelForCausalLM.from_pretrained("gpt2"), QAdapterConfig())
        loss, stats = qm.loss(input_ids, attention_mask, response_mask)   # chosen rows first
        out = qm.generate(prompt_ids, max_new_tokens=32)                   # two KV caches
    """

    kind = "q-adapter"
    _policy_paths = ["adapter", "base"]

    def q_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``Q_theta(x_{<=t}, .)``: ``[B, L, V]`` float32 (the adapter-on logits)."""
        return self.adapter_logits(input_ids, attention_mask)

    def policy_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``(Q + alpha_0 log pi_1) / alpha~``: ``[B, L, V]`` float32."""
        q = self.q_values(input_ids, attention_mask)
        return policy_logits(q, self.base_log_probs(input_ids, attention_mask), self.cfg.alpha_tilde, self.cfg.alpha_0)

    def log_probs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``log pi~``: ``[B, L, V]`` float32 (forward passes, never processed generation scores)."""
        return F.log_softmax(self.policy_logits(input_ids, attention_mask), dim=-1)

    def token_rewards(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual rewards ``r_t`` of every response action and their mask, both ``[B, L-1]``.

        Two forwards: adapter on (with grad) and adapter off (no grad).
        """
        q = self.q_values(input_ids, attention_mask)
        base = self.base_log_probs(input_ids, attention_mask)
        mask = action_mask(response_mask, attention_mask, self.cfg.mask_alignment)
        r = residual_rewards(q, base, input_ids[:, 1:], mask, self.cfg)
        return r, mask

    def loss(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Q-Adapter loss of a batch whose first half are chosen and second half rejected sequences.

        Args:
            input_ids, attention_mask, response_mask: ``[2B, L]`` (right padding).
        Returns:
            ``(loss, stats)`` of :func:`~iclr25.q_adapter.losses.qadapter_loss`.
        """
        r, mask = self.token_rewards(input_ids, attention_mask, response_mask)
        return qadapter_loss(r, mask, self.cfg)

    def scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """``alpha~ log pi~(y|x) - alpha_0 log pi_1(y|x)`` per sequence, ``[B]`` (the learned reward up to
        the shared ``V(x)``)."""
        q = self.q_values(input_ids, attention_mask)
        base = self.base_log_probs(input_ids, attention_mask)
        lp = F.log_softmax(policy_logits(q, base, self.cfg.alpha_tilde, self.cfg.alpha_0), dim=-1)
        mask = action_mask(response_mask, attention_mask, "shifted")
        return implicit_scores(lp, base, input_ids[:, 1:], mask, self.cfg.alpha_tilde, self.cfg.alpha_0)

    def _combine(self, logits: dict[str, torch.Tensor], policy: str) -> torch.Tensor:
        if policy in ("base", "adapter"):
            return logits[policy]
        return policy_logits(logits["adapter"], F.log_softmax(logits["base"], dim=-1),
                             self.cfg.alpha_tilde, self.cfg.alpha_0)


class LoRAPolicy(_PeftPolicy):
    """A LoRA policy ``pi_theta`` on the same base (DPO and SFT baselines); ``pi_1`` = adapter off."""

    kind = "lora"

    def __init__(self, base_model: Any, cfg: QAdapterConfig | None = None, *, peft_model: Any = None,
                 score: str = "dpo") -> None:
        super().__init__(base_model, cfg, peft_model=peft_model)
        self.score = score

    def scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """``log pi(y|x) - log pi_1(y|x)`` (``score="dpo"``) or ``log pi(y|x)`` (``"sft"``), ``[B]``."""
        mask = action_mask(response_mask, attention_mask, "shifted")
        acts = input_ids[:, 1:].unsqueeze(-1)
        lp = self.log_probs(input_ids, attention_mask)[:, :-1].gather(-1, acts).squeeze(-1)
        s = (lp * mask).sum(-1)
        if self.score == "dpo":
            lb = self.base_log_probs(input_ids, attention_mask)[:, :-1].gather(-1, acts).squeeze(-1)
            s = s - (lb * mask).sum(-1)
        return s
