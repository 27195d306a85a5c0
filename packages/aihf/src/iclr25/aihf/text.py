"""AIHF on your own model and text data (``iclr25-aihf train --task text``).

Two forms (spec "Special cases"):

- **implicit** (no ``--reward-model``): AIHF-DPO / Self-Play-AIHF rounds with
  :func:`~iclr25.aihf.implicit.implicit_epoch` (agent samples per demonstration prompt, cached reference / pi_old
  log-probs, one demonstration-vs-agent and one preference pair per example);
- **explicit** (``--reward-model``): a reward model (causal-LM backbone + bias-free linear head, scalar at the last
  real token) trained on :func:`~iclr25.aihf.losses.aihf_reward_loss` over (demonstration, agent sample) and
  preference pairs, then a pluggable :class:`PolicyStep` (built-in :class:`PPOStep`) under that reward with a KL
  penalty to pi_ref.

Models load through core ``load_causal_lm`` (local folder or Hugging Face id; dtype, ``device_map``, 4-bit),
LoRA through peft (``--lora-r``), multi-GPU/DeepSpeed through ``accelerate launch`` (the packaged ``accelerate_ds`` preset, ``preset_path("accelerate_ds")``),
agent samples from any core ``TextGenerator`` (local transformers, or a vLLM server via the OpenAI backends).
Tokenisation never parses special-token strings inside the text (``split_special_tokens=True``), and masks come
from real lengths, not from pad = EOS detection, so a response containing the EOS string is not cut there.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from .implicit import Encoded, batched_logprobs, implicit_epoch
from .losses import aihf_reward_loss

__all__ = ["encode_texts", "encode_pairs", "RewardModel", "PolicyStep", "PPOStep", "train_text", "load_text_data",
           "disable_dropout_in_model",
           "cut_at_next_turn", "TURN_STOPS"]

log = logging.getLogger("iclr25.aihf")
TURN_STOPS = ("\n\nHuman:", "\n\nAssistant:", "\n\nSystem:")
"""Turn markers of the HH text format: a sampled response ends before the next one (the authors' code stops
generation at "Human:" / "Assistant:")."""


def cut_at_next_turn(responses: Sequence[str]) -> tuple[list[str], int]:
    """Cut each sampled response before the first HH turn marker (:data:`TURN_STOPS`), so an agent sample is one
    assistant turn and never writes the next human turn. Returns ``(responses, number cut)``."""
    out, n = [], 0
    for r in responses:
        cut = min((i for i in (r.find(m) for m in TURN_STOPS) if i >= 0), default=-1)
        if cut >= 0:
            r, n = r[:cut], n + 1
        out.append(r)
    return out, n


def _ids(tok: Any, texts: Sequence[str]) -> list[list[int]]:
    try:
        return tok(list(texts), add_special_tokens=False, split_special_tokens=True)["input_ids"]
    except TypeError:  # tokenizers without split_special_tokens
        return tok(list(texts), add_special_tokens=False)["input_ids"]


def encode_texts(tok: Any, prompts: Sequence[str], responses: Sequence[str], max_length: int = 256,
                 add_eos: bool = True, stats: dict | None = None) -> Encoded:
    """Encode ``prompt + response (+ EOS)`` rows, right-padded, with a response mask.

    Too-long rows lose prompt tokens from the left (at least one prompt token is kept, since position 0 cannot be
    scored); a response longer than ``max_length - 1`` is cut at the right and counted in ``stats["n_truncated"]``
    (logged), never silently.

    Returns:
        :class:`~iclr25.aihf.implicit.Encoded` with ``(N, T)`` tensors.

    Raises:
        ValueError: lengths differ, an empty prompt or response, ``max_length < 2``.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts for {len(responses)} responses")
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    for i, (p, r) in enumerate(zip(prompts, responses)):
        if not p or not r or not r.strip():
            raise ValueError(f"row {i + 1}: empty {'prompt' if not p else 'response'}")
    P, R = _ids(tok, prompts), _ids(tok, responses)
    eos = [tok.eos_token_id] if add_eos and tok.eos_token_id is not None else []
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    rows, masks, n_trunc = [], [], 0
    for p, r in zip(P, R):
        r = r + eos
        if len(r) > max_length - 1:
            n_trunc += 1
            r = r[:max_length - 1]
        p = p[-(max_length - len(r)):] if len(p) + len(r) > max_length else p
        if not p:
            p = [pad]
        rows.append(p + r)
        masks.append([0] * len(p) + [1] * len(r))
    if n_trunc:
        log.warning("%d of %d responses were longer than max_length=%d tokens and were cut at the right", n_trunc,
                    len(rows), max_length)
    if stats is not None:
        stats["n_truncated"] = stats.get("n_truncated", 0) + n_trunc
    T = max(len(x) for x in rows)
    ids = torch.full((len(rows), T), pad, dtype=torch.long)
    att = torch.zeros_like(ids)
    resp = torch.zeros_like(ids)
    for i, (x, m) in enumerate(zip(rows, masks)):
        ids[i, :len(x)] = torch.tensor(x)
        att[i, :len(x)] = 1
        resp[i, :len(x)] = torch.tensor(m)
    return Encoded(ids, att, resp)


def encode_pairs(tok: Any, pairs: Sequence[dict], max_length: int = 256) -> tuple[Encoded, Encoded]:
    """Encode preference pairs ``{"prompt", "chosen", "rejected"}`` as two aligned :class:`Encoded` sets that share
    each prompt's tokens (the first differing token then lies in the response)."""
    prompts = [p["prompt"] for p in pairs]
    return (encode_texts(tok, prompts, [p["chosen"] for p in pairs], max_length),
            encode_texts(tok, prompts, [p["rejected"] for p in pairs], max_length))


class RewardModel(torch.nn.Module):
    """A scalar reward ``r_theta(x, y)``: a causal-LM backbone's last hidden state at the last real token, through a
    bias-free linear head (as the authors' code; there the head reads every token, the RL reward the first EOS).

    Args:
        backbone: a ``*ForCausalLM`` (called with ``output_hidden_states=True``).
    """

    def __init__(self, backbone: torch.nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        hidden = backbone.config.hidden_size if hasattr(backbone.config, "hidden_size") else backbone.config.n_embd
        self.head = torch.nn.Linear(hidden, 1, bias=False)
        torch.nn.init.zeros_(self.head.weight)
        self.head.to(next(backbone.parameters()).device)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``(N,)`` float rewards of ``(N, T)`` right-padded rows."""
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        h = out.hidden_states[-1]
        last = attention_mask.long().sum(1).clamp(min=1) - 1
        r = self.head(h[torch.arange(h.shape[0], device=h.device), last].to(self.head.weight.dtype)).squeeze(-1)
        return r.float()

    def score(self, enc: Encoded, batch_size: int = 16) -> torch.Tensor:
        dev = self.head.weight.device
        outs = []
        for i in range(0, len(enc), batch_size):
            b = enc[i:i + batch_size].trimmed().to(dev)
            outs.append(self(b.input_ids, b.attention_mask))
        return torch.cat(outs)

    def save(self, folder: str | Path) -> None:
        """``save_pretrained`` of the backbone (a PEFT adapter when it is one) + ``reward_head.safetensors``."""
        from safetensors.torch import save_file

        f = Path(folder)
        f.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(f)
        save_file({"weight": self.head.weight.detach().float().cpu().contiguous()}, str(f / "reward_head.safetensors"))


@runtime_checkable
class PolicyStep(Protocol):
    """The policy step of the explicit form: improve ``policy`` under ``reward_fn`` with a KL penalty to
    ``reference``. Plug in your own (e.g. a wrapper around TRL's PPO/RLOO trainers) with this signature.

    ``reward_fn(prompts, responses) -> (N,) float tensor``; returns a dict of statistics."""

    def __call__(self, policy: torch.nn.Module, reference: Callable[[Encoded], torch.Tensor], tokenizer: Any,
                 prompts: Sequence[str], reward_fn: Callable[[Sequence[str], Sequence[str]], torch.Tensor],
                 optimizer: torch.optim.Optimizer) -> dict: ...


class PPOStep:
    """A built-in PPO step with sequence-level actions (one response = one action): responses are sampled from
    ``pi_old``, the reward is ``r(x, y) - kl_coef * (log pi_old(y|x) - log pi_ref(y|x))``, advantages are the
    batch-normalised rewards, and ``ppo_epochs`` epochs of the clipped surrogate
    ``min(rho A, clip(rho, 1 - clip, 1 + clip) A)`` with ``rho = pi(y|x) / pi_old(y|x)`` are taken.
    (TRL's token-level PPO with a value head is the paper's; plug it in through :class:`PolicyStep`.)"""

    def __init__(self, kl_coef: float = 0.05, clip: float = 0.2, ppo_epochs: int = 2, batch_size: int = 4,
                 max_new_tokens: int = 64, max_length: int = 256, generator: Any = None, seed: int = 0) -> None:
        from .config import check_count, check_finite

        check_finite("kl_coef", kl_coef, lo=0.0)
        check_finite("clip", clip, lo=0.0, lo_open=True)
        check_count("ppo_epochs", ppo_epochs, 1, why="0 would not update the policy")
        check_count("batch_size", batch_size, 1)
        check_count("max_new_tokens", max_new_tokens, 1)
        self.kl_coef, self.clip, self.ppo_epochs, self.batch_size = kl_coef, clip, ppo_epochs, batch_size
        self.max_new_tokens, self.max_length, self.generator, self.seed = max_new_tokens, max_length, generator, seed

    def __call__(self, policy, reference, tokenizer, prompts, reward_fn, optimizer) -> dict:
        from iclr25.core.lm import GenerationConfig, TransformersGenerator, sequence_logprobs

        gen = self.generator or TransformersGenerator(policy, tokenizer, batch_size=self.batch_size)
        resp = gen.generate(list(prompts), GenerationConfig(max_new_tokens=self.max_new_tokens, seed=self.seed))
        resp, n_cut = cut_at_next_turn(resp)
        if n_cut:
            log.info("PPO step: %d of %d responses cut before the next HH turn marker", n_cut, len(resp))
        keep = [i for i, r in enumerate(resp) if r.strip()]
        if not keep:
            return {"ppo_samples": 0}
        prompts = [prompts[i] for i in keep]
        resp = [resp[i] for i in keep]
        enc = encode_texts(tokenizer, prompts, resp, self.max_length)
        with torch.no_grad():
            r = reward_fn(prompts, resp).float().cpu()
            old = batched_logprobs(policy, enc, self.batch_size)
            ref = reference(enc)
        R = r - self.kl_coef * (old - ref)
        A = (R - R.mean()) / (R.std() + 1e-8) if len(R) > 1 else R - R.mean()
        dev = str(next(policy.parameters()).device)
        policy.train()
        for _ in range(self.ppo_epochs):
            for i in range(0, len(enc), self.batch_size):
                b = enc[i:i + self.batch_size].trimmed().to(dev)
                lp = sequence_logprobs(policy, b.input_ids, b.attention_mask, b.response_mask)
                rho = torch.exp(lp - old[i:i + self.batch_size].to(lp))
                a = A[i:i + self.batch_size].to(lp)
                loss = -torch.min(rho * a, rho.clamp(1 - self.clip, 1 + self.clip) * a).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        policy.eval()
        return {"ppo_samples": len(resp), "ppo_reward": float(r.mean()), "ppo_kl": float((old - ref).mean())}


def load_text_data(cfg: Any) -> tuple[list[dict], list[dict], dict]:
    """Demonstrations and preference pairs from ``--demos`` / ``--prefs`` files or ``--hh`` (chosen responses as
    demonstrations). Returns ``(demos, prefs, stats)``."""
    from .data import load_hh_pairs, read_demonstrations, read_preferences

    stats: dict = {}
    if cfg.hh:
        prefs = load_hh_pairs(stats=stats)
        demos = [{"prompt": p["prompt"], "response": p["chosen"]} for p in prefs]
    else:
        prefs = read_preferences(cfg.prefs, drop_invalid=cfg.drop_invalid, stats=stats) if cfg.prefs else []
        demos = read_demonstrations(cfg.demos) if cfg.demos else []
    if cfg.max_pairs is not None:
        prefs, demos = prefs[:cfg.max_pairs], demos[:cfg.max_pairs]
    if cfg.w > 0 and not demos:
        raise ValueError(f"w={cfg.w} > 0 needs demonstrations: give --demos FILE.jsonl (or --hh)")
    if cfg.w < 1 and not prefs:
        raise ValueError(f"w={cfg.w} < 1 needs preference pairs: give --prefs FILE.jsonl (or --hh)")
    return demos, prefs, stats


def _agent_responses(cfg: Any, demos: list[dict], policy, tok, round_: int) -> list[str]:
    from iclr25.core.lm import GenerationConfig, OpenAICompletionGenerator, TransformersGenerator

    from .data import read_agent_samples

    if cfg.agent_samples_file is not None:
        return read_agent_samples(cfg.agent_samples_file, demos)
    if cfg.agent_endpoint:
        # raw continuations of the HH-format prompt the policy is trained on (deviation 10); a chat endpoint would
        # wrap it in the server's chat template, so the samples would answer another prompt than the one scored
        gen = OpenAICompletionGenerator(cfg.agent_model or cfg.policy, base_url=cfg.agent_endpoint,
                                        stop=list(TURN_STOPS))
    else:
        gen = TransformersGenerator(policy, tok, batch_size=cfg.batch_size)
    out = gen.generate([d["prompt"] for d in demos],
                       GenerationConfig(max_new_tokens=cfg.max_new_tokens, seed=cfg.seed * 1000 + round_))
    out, n_cut = cut_at_next_turn(out)
    if n_cut:
        log.info("%d of %d agent samples cut before the next HH turn marker", n_cut, len(out))
    empty = [i + 1 for i, r in enumerate(out) if not r.strip()]
    if empty:
        log.warning("%d agent samples were empty; they are replaced by a single EOS-free space token", len(empty))
        out = [r if r.strip() else " ." for r in out]
    return out


def check_context(model: Any, max_length: int, flag: str = "--policy") -> None:
    """Fail early when ``max_length`` (prompt + response tokens) exceeds the model's position count.

    Raises:
        ValueError: ``max_length`` > ``config.max_position_embeddings`` (GPT-2: ``n_positions``); a longer sequence
            would index past the position table (an IndexError deep inside the forward pass).
    """
    conf = getattr(model, "config", None)
    n_pos = getattr(conf, "max_position_embeddings", None) or getattr(conf, "n_positions", None)
    if isinstance(n_pos, int) and 0 < n_pos < max_length:
        raise ValueError(f"max_length={max_length} exceeds the {flag} model's context of {n_pos} positions; "
                         f"pass --max-length {n_pos} or less")


def check_vocab(model: Any, tokenizer: Any, flag: str, *, policy_tokenizer: Any = None) -> None:
    """Fail early when token ids would index past ``model``'s embedding (an IndexError deep in the forward pass).

    ``tokenizer`` is the one saved with ``model``; with ``policy_tokenizer`` (the reward model reads the
    policy's token ids) the two vocabularies must be identical.

    Raises:
        ValueError: the tokenizer has more tokens than the embedding has rows, or another vocabulary than the
            policy's.
    """
    if policy_tokenizer is not None and tokenizer.get_vocab() != policy_tokenizer.get_vocab():
        raise ValueError(f"{flag} has another vocabulary than --policy ({len(tokenizer)} vs {len(policy_tokenizer)} "
                         "tokens); the reward model reads the policy's token ids: use a backbone with the policy's "
                         "tokenizer (the same model family)")
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    rows = getattr(emb, "num_embeddings", None)
    if isinstance(rows, int) and len(tokenizer) > rows:
        raise ValueError(f"{flag}: the tokenizer has {len(tokenizer)} tokens but the model's embedding has {rows} "
                         "rows; use a model saved with its own tokenizer (or resize its embeddings)")


def _lora(model, cfg):
    if cfg.lora_r <= 0:
        return model
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ImportError("--lora-r needs peft: pip install 'iclr25-aihf[scale]'") from None
    return get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                                            target_modules="all-linear", task_type="CAUSAL_LM"))


def _accelerator(cfg):
    try:
        from accelerate import Accelerator
    except ImportError:
        return None
    # gradient accumulation is done by implicit_epoch itself (accelerate would rescale the loss a second time)
    return Accelerator(cpu=cfg.device == "cpu")


def train_text(cfg: Any, *, policy_step: PolicyStep | None = None) -> dict:
    """Train AIHF on text (``cfg``: :class:`~iclr25.aihf.config.TrainConfig` with ``task="text"``); writes the policy
    (``<out>/policy``, PEFT adapter when LoRA), the reward model (explicit form), ``state.json`` / ``optimizer.pt``
    (``--resume``) and returns the metrics.

    Args:
        cfg: the train config.
        policy_step: the explicit form's policy step (a :class:`PolicyStep`, e.g. a wrapper around a TRL trainer),
            called once per round after the reward step; default the built-in :class:`PPOStep` (``cfg.policy_step
            = "ppo"``) or none (``"none"``).

    Raises:
        ValueError: ``policy_step`` is not a :class:`PolicyStep`, or is given for the implicit form (no
            ``cfg.reward_model``), where the policy is trained directly.
    """
    if policy_step is not None:
        if not isinstance(policy_step, PolicyStep):
            raise ValueError(f"policy_step must be callable as PolicyStep(policy, reference, tokenizer, prompts, "
                             f"reward_fn, optimizer), got {type(policy_step).__name__}")
        if not cfg.reward_model:
            raise ValueError("policy_step is the explicit form's policy step: give --reward-model (the implicit form "
                             "trains the policy directly)")
    from iclr25.core.checkpoint import capture_rng_state, recover_folder, restore_rng_state
    from iclr25.core.lm import load_causal_lm
    from iclr25.core.seed import seed_everything

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    ck = out / "checkpoint"
    if cfg.resume:  # checked before the data and the models load
        recover_folder(ck)  # a kill between atomic_folder's two renames leaves checkpoint.old
        if not (ck / "state.json").is_file():
            raise FileNotFoundError(f"--resume given but no checkpoint in {ck} (train without --resume first)")
    seed_everything(cfg.seed)  # every global generator: a run is repeatable (dropout, if kept, draws from torch's)
    demos, prefs, stats = load_text_data(cfg)
    load_kw = dict(dtype=cfg.dtype, device=cfg.device, device_map=cfg.device_map, load_in_4bit=cfg.load_in_4bit,
                   gradient_checkpointing=cfg.gradient_checkpointing)
    state = {"round": 0, "history": []}
    if cfg.resume:
        state = json.loads((ck / "state.json").read_text())
        if state["round"] > cfg.rounds:
            raise ValueError(f"rounds={cfg.rounds}: {out} is already at round {state['round']}; --rounds is the total "
                             f"to reach, pass more than {state['round']}")
        if state["round"] == cfg.rounds:
            log.warning("%s is already at round %d = rounds: nothing to train (pass a larger --rounds to continue)",
                        out, state["round"])
    policy, tok = load_causal_lm(cfg.policy, **load_kw)
    check_context(policy, cfg.max_length, "--policy")
    check_vocab(policy, tok, "--policy")
    reference = None
    if cfg.lora_r <= 0:
        reference = copy.deepcopy(policy).eval()
        for p in reference.parameters():
            p.requires_grad_(False)
    policy = _lora(policy, cfg)
    if cfg.disable_dropout:
        # TRL's default for preference losses: the policy's forward is dropout-free like the reference's (cached
        # in eval mode), so at initialisation (policy == reference) the implicit loss is exactly log 2
        disable_dropout_in_model(policy)
    if state["round"] > 0:
        _load_weights(policy, ck / "policy")
    policy.train()
    acc = _accelerator(cfg)
    if acc is not None and acc.num_processes > 1:
        demos, prefs = _shard(demos, acc), _shard(prefs, acc)
    dev = str(next(policy.parameters()).device)

    def ref_logps(enc: Encoded) -> torch.Tensor:
        if reference is not None:
            return batched_logprobs(reference, enc, cfg.batch_size)
        with policy.disable_adapter():
            return batched_logprobs(policy, enc, cfg.batch_size)

    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=cfg.lr, betas=(0.9, 0.95),
                            weight_decay=1e-6)
    if acc is not None and acc.num_processes > 1:
        policy, opt = acc.prepare(policy, opt)
    if cfg.resume:
        opt.load_state_dict(torch.load(ck / "optimizer.pt", weights_only=True))
    rng = np.random.default_rng([cfg.seed, 11])
    if "rng" in state:
        rng.bit_generator.state = state["rng"]
    if "rng_global" in state:
        restore_rng_state(state["rng_global"])
    chosen = rejected = ref_w = ref_l = None
    if prefs and cfg.w < 1:
        chosen, rejected = encode_pairs(tok, prefs, cfg.max_length)
        ref_w, ref_l = ref_logps(chosen), ref_logps(rejected)
    demo_enc = encode_texts(tok, [d["prompt"] for d in demos], [d["response"] for d in demos], cfg.max_length) \
        if demos and cfg.w > 0 else None
    rm = rm_opt = None
    if cfg.reward_model:
        backbone, rm_tok = load_causal_lm(cfg.reward_model, **load_kw)
        check_context(backbone, cfg.max_length, "--reward-model")
        check_vocab(backbone, rm_tok, "--reward-model", policy_tokenizer=tok)
        rm = RewardModel(_lora(backbone, cfg))
        if state["round"] > 0:
            _load_weights(rm.backbone, ck / "reward_model")
            from safetensors.torch import load_file

            rm.head.weight.data.copy_(load_file(str(ck / "reward_model" / "reward_head.safetensors"))["weight"])
        rm_opt = torch.optim.AdamW([p for p in rm.parameters() if p.requires_grad], lr=cfg.lr)
    for rnd in range(state["round"], cfg.rounds):
        t0 = time.perf_counter()
        rec: dict = {"round": rnd + 1}
        agents = None
        if demo_enc is not None:
            policy.eval()
            resp = _agent_responses(cfg, demos, _unwrap(policy, acc), tok, rnd)
            agents = encode_texts(tok, [d["prompt"] for d in demos], resp, cfg.max_length)
        if rm is None:  # implicit form
            demo_ref_fn = ref_logps if cfg.variant == "aihf-dpo" else (
                lambda e: batched_logprobs(_unwrap(policy, acc), e, cfg.batch_size))
            demo_old = demo_ref_fn(demo_enc) if demo_enc is not None else None
            agent_old = demo_ref_fn(agents) if agents is not None else None
            losses = implicit_epoch(policy, opt, w=cfg.w, beta=cfg.dpo_beta, demos=demo_enc, agents=agents,
                                    demo_old=demo_old, agent_old=agent_old, chosen=chosen, rejected=rejected,
                                    ref_chosen=ref_w, ref_rejected=ref_l, batch_size=cfg.batch_size, rng=rng,
                                    pad_id=tok.pad_token_id, weighting=cfg.weighting, device=dev, accelerator=acc,
                                    grad_accum=cfg.grad_accum)
            rec["loss"] = float(np.mean(losses))
        else:  # explicit form: reward step(s), then the policy step
            rec["reward_loss"] = _reward_epoch(rm, rm_opt, cfg, demo_enc, agents, chosen, rejected, rng)
            if policy_step is not None or cfg.policy_step == "ppo":
                step = policy_step if policy_step is not None else PPOStep(
                    kl_coef=cfg.kl_coef, batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens,
                    max_length=cfg.max_length, seed=cfg.seed + rnd)
                prompts = [d["prompt"] for d in demos] or [p["prompt"] for p in prefs]

                def reward_fn(ps, rs):
                    with torch.no_grad():
                        return rm.score(encode_texts(tok, ps, rs, cfg.max_length), cfg.batch_size)

                rec.update(step(_unwrap(policy, acc), ref_logps, tok, prompts, reward_fn, opt) or {})
        rec["seconds"] = time.perf_counter() - t0
        state["history"].append(rec)
        state["round"] = rnd + 1
        state["rng"] = rng.bit_generator.state
        state["rng_global"] = capture_rng_state(torch_state=True)
        _save(out, _unwrap(policy, acc), tok, rm, opt, state, acc)
        log.info("round %d: %s", rnd + 1, {k: round(v, 4) if isinstance(v, float) else v for k, v in rec.items()})
    metrics = {"rounds": state["round"], "history": state["history"], "n_demos": len(demos), "n_prefs": len(prefs),
               "data_stats": {k: v for k, v in stats.items() if k != "mismatch_lines"}}
    if chosen is not None:
        metrics["pref_accuracy"] = _pref_accuracy(rm, _unwrap(policy, acc), ref_logps, chosen, rejected, cfg)
    return metrics


def _shard(rows: list, acc) -> list:
    """This process's equal-size share of ``rows`` (``rows[rank::world]``, cut to a common length so every process
    runs the same number of synchronised steps; the cut is logged)."""
    if not rows:
        return rows
    world, rank = acc.num_processes, acc.process_index
    n = len(rows) // world
    if n == 0:
        raise ValueError(f"{len(rows)} examples cannot be shared by {world} processes; give at least {world}")
    if len(rows) % world and rank == 0:
        log.warning("%d example(s) left out so that %d processes get %d each", len(rows) % world, world, n)
    return rows[rank::world][:n]


def _unwrap(model, acc):
    return acc.unwrap_model(model) if acc is not None and acc.num_processes > 1 else model


def _reward_epoch(rm, opt, cfg, demos, agents, chosen, rejected, rng) -> float:
    n = max(len(demos) if demos is not None else 0, len(chosen) if chosen is not None else 0)
    losses = []
    for _ in range(max(1, math.ceil(n / cfg.batch_size))):
        rd = ra = rw = rl = None
        if demos is not None and cfg.w > 0:
            i = torch.from_numpy(rng.choice(len(demos), size=min(cfg.batch_size, len(demos)), replace=False))
            rd, ra = rm.score(demos[i], cfg.batch_size), rm.score(agents[i], cfg.batch_size)
        if chosen is not None and cfg.w < 1:
            j = torch.from_numpy(rng.choice(len(chosen), size=min(cfg.batch_size, len(chosen)), replace=False))
            rw, rl = rm.score(chosen[j], cfg.batch_size), rm.score(rejected[j], cfg.batch_size)
        loss = aihf_reward_loss(rd, ra, rw, rl, cfg.w, cfg.beta, cfg.demo_loss, weighting=cfg.weighting)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return float(np.mean(losses))


@torch.no_grad()
def _pref_accuracy(rm, policy, ref_logps, chosen, rejected, cfg) -> float:
    """Share of preference pairs ordered correctly by the learned reward (explicit) or ``log pi / pi_ref``."""
    if rm is not None:
        h = rm.score(chosen, cfg.batch_size) - rm.score(rejected, cfg.batch_size)
    else:
        h = (batched_logprobs(policy, chosen, cfg.batch_size) - ref_logps(chosen)) - \
            (batched_logprobs(policy, rejected, cfg.batch_size) - ref_logps(rejected))
    return float((h > 0).float().mean())


def _save(out: Path, policy, tok, rm, opt, state: dict, acc) -> None:
    """The round's checkpoint ``<out>/checkpoint/`` (policy, reward model, optimiser, ``state.json``), written with
    :func:`iclr25.core.checkpoint.atomic_folder` (a kill at any moment leaves the previous round's checkpoint or this
    one, never round-r weights beside round-(r-1) state); then the exports ``<out>/policy``, ``<out>/reward_model``
    and ``<out>/state.json`` for users (not read by ``--resume``)."""
    from iclr25.core.checkpoint import atomic_folder, atomic_write_text

    if acc is not None and not acc.is_main_process:
        return
    text = json.dumps(state, indent=1, default=float) + "\n"
    with atomic_folder(out / "checkpoint") as tmp:
        policy.save_pretrained(tmp / "policy")
        tok.save_pretrained(tmp / "policy")
        if rm is not None:
            rm.save(tmp / "reward_model")
        torch.save(opt.state_dict(), tmp / "optimizer.pt")
        (tmp / "state.json").write_text(text, encoding="utf-8")
    policy.save_pretrained(out / "policy")
    tok.save_pretrained(out / "policy")
    if rm is not None:
        rm.save(out / "reward_model")
    atomic_write_text(out / "state.json", text)


def disable_dropout_in_model(model: torch.nn.Module) -> int:
    """Set every ``nn.Dropout`` of ``model`` to ``p = 0`` (TRL's ``disable_dropout_in_model``); returns how many."""
    n = 0
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout) and mod.p:
            mod.p = 0.0
            n += 1
    return n


def _load_weights(model, folder: Path) -> None:
    """Reload saved weights into ``model`` (a PEFT adapter, or full safetensors weights)."""
    if (folder / "adapter_model.safetensors").is_file():
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(model, load_file(str(folder / "adapter_model.safetensors")))
        return
    from safetensors.torch import load_file

    sd = {}
    for f in sorted(folder.glob("*.safetensors")):
        if f.name != "reward_head.safetensors":
            sd.update(load_file(str(f)))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected:
        raise ValueError(f"{folder}: weights do not fit the model (unexpected keys {unexpected[:3]}...)")
