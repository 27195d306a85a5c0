"""The tiny-LM task (spec "CPU-scale reproduction" C): LLM mechanics with a known reward.

A vocabulary of its own: ``0`` = pad, ``1`` = BOS/EOS, ``n_prompts`` one-token prompts, ``vocab`` content tokens of
which ``n_good`` are "good". A sequence is ``[BOS, prompt, y_1 .. y_L]``; the true reward of a response is the number
of good tokens in it. ``pi_ref`` is core ``tiny_causal_lm(n_layer=2, n_embd=64)`` pre-trained from scratch on
uniform random sequences (cached under the user cache). Demonstrations are drawn from ``pi_ref`` by
sampling-importance-resampling with weights ``exp(r*/beta)`` (so they follow ``pi* ∝ pi_ref exp(r*/beta)``);
preference pairs are two ``pi_ref`` samples labelled by Bradley-Terry on ``r*``. Methods: DPO (w = 0), AIHF-DPO /
Self-Play-AIHF (``w``, several rounds), SFT, SFT->DPO; metric: mean true reward of ``n_eval`` samples, with the KL to
``pi_ref`` estimated from the same samples.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import AIHFConfig, TinyLMConfig, check_count
from .implicit import Encoded, batched_logprobs, implicit_epoch, sft_epoch

__all__ = ["TinyLMTask", "LMData", "LMResult", "train_aihf_dpo", "run_lm_method", "LM_METHODS", "pretrain_reference"]

log = logging.getLogger("iclr25.aihf")
LM_METHODS = ("dpo", "aihf", "sft", "sft-dpo", "self-play")
PAD, BOS = 0, 1
_REF_VERSION = "aihf-tinylm-ref-v1"


@dataclass
class LMData:
    """Demonstrations ``(N_D, L)`` with prompts ``(N_D,)``, and preference pairs ``(N_P, L)`` with prompts."""

    demo_prompts: torch.Tensor
    demos: torch.Tensor
    pref_prompts: torch.Tensor
    chosen: torch.Tensor
    rejected: torch.Tensor


@dataclass
class LMResult:
    """A trained policy, its evaluation, the per-round history and the resumable state."""

    model: Any
    metrics: dict
    history: list[dict] = field(default_factory=list)


class TinyLMTask:
    """The tiny-LM alignment task.

    Args:
        cfg: :class:`TinyLMConfig` (vocabulary, good tokens, length, prompts, ``dpo_beta`` = the task's beta).
        seed: which content tokens are good (a fixed draw per seed of the task).
        ref_steps: pre-training steps of ``pi_ref``.
        cache: cache root for ``pi_ref`` (default the core user cache); ``None`` uses it, ``False`` disables caching.
    """

    def __init__(self, cfg: TinyLMConfig = TinyLMConfig(), *, task_seed: int = 0, ref_steps: int = 300,
                 cache: str | Path | None | bool = None, device: str = "cpu") -> None:
        self.cfg = cfg
        self.beta = cfg.dpo_beta
        self.L = cfg.length
        self.first_prompt = 2
        self.first_content = 2 + cfg.n_prompts
        self.vocab_size = self.first_content + cfg.vocab
        g = np.random.default_rng([task_seed, 17])
        good = g.choice(cfg.vocab, size=cfg.n_good, replace=False) + self.first_content
        self.good = torch.zeros(self.vocab_size, dtype=torch.bool)
        self.good[torch.from_numpy(good)] = True
        self.device = device
        self.ref_steps = ref_steps
        self.reference = pretrain_reference(self, steps=ref_steps, cache=cache).to(device).eval()
        for p in self.reference.parameters():
            p.requires_grad_(False)

    # encoding and reward
    def encode(self, prompts: torch.Tensor, responses: torch.Tensor) -> Encoded:
        """``[BOS, prompt, response]`` rows with the response mask (no padding: fixed length)."""
        n = responses.shape[0]
        ids = torch.cat([torch.full((n, 1), BOS, dtype=torch.long), prompts.view(n, 1).long(), responses.long()], 1)
        resp = torch.zeros_like(ids)
        resp[:, 2:] = 1
        return Encoded(ids, torch.ones_like(ids), resp)

    def true_reward(self, responses: torch.Tensor) -> torch.Tensor:
        """``(N,)`` float number of good tokens per ``(N, L)`` response."""
        return self.good[responses.long()].sum(-1).float()

    def random_prompts(self, n: int, g: torch.Generator) -> torch.Tensor:
        return torch.randint(self.first_prompt, self.first_content, (n,), generator=g)

    @torch.no_grad()
    def sample(self, model: torch.nn.Module, prompts: torch.Tensor, g: torch.Generator,
               batch_size: int = 1024) -> torch.Tensor:
        """``(N, L)`` responses sampled autoregressively (temperature 1, full vocabulary) for ``(N,)`` prompts."""
        model.eval()
        out = []
        for i in range(0, prompts.numel(), batch_size):
            p = prompts[i:i + batch_size]
            ids = torch.cat([torch.full((p.numel(), 1), BOS, dtype=torch.long), p.view(-1, 1)], 1).to(self.device)
            past = None
            step_in = ids
            # transformers >= 5 names the KV cache `cache` (`past_key_values` is deprecated there)
            key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
            for _ in range(self.L):
                res = model(input_ids=step_in, attention_mask=torch.ones_like(ids), use_cache=True, **{key: past})
                past = res["cache"] if "cache" in res else res["past_key_values"]
                probs = torch.softmax(res.logits[:, -1].float(), -1).cpu()
                nxt = torch.multinomial(probs, 1, generator=g).to(self.device)
                ids = torch.cat([ids, nxt], 1)
                step_in = nxt
            out.append(ids[:, 2:].cpu())
        return torch.cat(out)

    def make_data(self, n_demo: int, n_pref: int, seed: int, sir_factor: int = 16) -> LMData:
        """Demonstrations by sampling-importance-resampling from ``pi_ref`` (``sir_factor * n_demo`` candidates,
        weights ``exp(r*/beta)``), preferences as Bradley-Terry-labelled ``pi_ref`` pairs."""
        g = torch.Generator().manual_seed(int(seed) * 7919 + 1)
        cand_p = self.random_prompts(sir_factor * n_demo, g)
        cand = self.sample(self.reference, cand_p, g)
        logw = self.true_reward(cand) / self.beta
        idx = torch.multinomial(torch.softmax(logw, 0), n_demo, replacement=True, generator=g)
        pp = self.random_prompts(n_pref, g)
        y1, y2 = self.sample(self.reference, pp, g), self.sample(self.reference, pp, g)
        p1 = torch.sigmoid(self.true_reward(y1) - self.true_reward(y2))
        first = (torch.rand(n_pref, generator=g) < p1).unsqueeze(1)
        return LMData(cand_p[idx], cand[idx], pp, torch.where(first, y1, y2), torch.where(first, y2, y1))

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, n: int = 256, seed: int = 12345) -> dict:
        """Mean true reward of ``n`` samples, KL(pi || pi_ref) estimated on them (nats per sequence), the
        KL-regularised objective ``E r - beta KL``, and the same numbers for ``pi_ref``."""
        g = torch.Generator().manual_seed(seed)
        prompts = self.random_prompts(n, g)
        y = self.sample(model, prompts, g)
        enc = self.encode(prompts, y)
        lp = batched_logprobs(model, enc)
        lr = batched_logprobs(self.reference, enc)
        r = self.true_reward(y)
        kl = float((lp - lr).mean())
        return {"reward": float(r.mean()), "reward_se": float(r.std() / math.sqrt(n)), "kl": kl,
                "objective": float(r.mean()) - self.beta * kl}


def _ref_key(task: TinyLMTask, steps: int) -> str:
    c = task.cfg
    blob = json.dumps([_REF_VERSION, c.vocab, c.n_prompts, c.length, steps], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def pretrain_reference(task: TinyLMTask, steps: int = 300, cache: str | Path | None | bool = None,
                       batch_size: int = 128, lr: float = 3e-3) -> torch.nn.Module:
    """``pi_ref``: core ``tiny_causal_lm(n_layer=2, n_embd=64)`` pre-trained on uniform random sequences of the
    task's vocabulary (uniform prompt, uniform content tokens), reloaded from ``<cache>/aihf/tinylm-ref-<key>`` when
    present (``save_pretrained``, safetensors). The loss is on the response tokens."""
    from transformers import GPT2LMHeadModel

    from iclr25.core.data import cache_dir
    from iclr25.core.lm import tiny_causal_lm

    folder = None
    if cache is not False:
        root = Path(cache) if isinstance(cache, (str, Path)) else cache_dir()
        folder = root / "aihf" / f"tinylm-ref-{_ref_key(task, steps)}"
        if (folder / "config.json").is_file():
            return GPT2LMHeadModel.from_pretrained(folder)
    t0 = time.perf_counter()
    model = tiny_causal_lm(vocab_size=task.vocab_size, n_positions=task.L + 4, n_embd=64, n_layer=2, n_head=2,
                           seed=0, eos_token_id=BOS, pad_token_id=PAD)
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    model.train()
    for _ in range(steps):
        p = task.random_prompts(batch_size, g)
        y = torch.randint(task.first_content, task.vocab_size, (batch_size, task.L), generator=g)
        enc = task.encode(p, y)
        labels = enc.input_ids.masked_fill(enc.response_mask == 0, -100)
        loss = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    log.info("pre-trained the tiny-LM pi_ref (%d steps) in %.1f s, final loss %.4f (uniform: %.4f)", steps,
             time.perf_counter() - t0, float(loss.detach()), math.log(task.cfg.vocab))
    if folder is not None:
        tmp = folder.with_name(folder.name + f".tmp-{time.time_ns()}")
        model.save_pretrained(tmp)
        if not folder.exists():
            tmp.rename(folder)
    return model


def _optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)


def train_aihf_dpo(task: TinyLMTask, data: LMData, config: AIHFConfig = AIHFConfig(), lm: TinyLMConfig = TinyLMConfig(),
                   *, seed: int = 0, init: torch.nn.Module | None = None, reference: torch.nn.Module | None = None,
                   rounds: int | None = None, resume: dict | None = None, checkpoint=None) -> LMResult:
    """AIHF in implicit (DPO) form on the tiny LM: ``rounds`` rounds of (agent samples from ``pi_old``; cached
    reference / ``pi_old`` log-probs; ``epochs`` passes of :func:`~iclr25.aihf.implicit.implicit_epoch`).

    ``config.w`` weights the demonstration term (0 = DPO: no demonstrations, no agent samples); ``lm.variant``
    picks the demonstration-term reference (``"aihf-dpo"``: ``pi_ref``; ``"self-play"``: ``pi_old``).
    ``init`` is the starting policy (default a copy of ``pi_ref``), ``reference`` the preference-term reference
    (default ``pi_ref``; SFT->DPO passes the SFT model). Every round runs the same number of optimiser steps
    (``epochs`` passes over the demonstrations, or over the preferences when ``w = 0``... at least one step).

    Returns:
        :class:`LMResult` with the trained model, its evaluation and per-round history.

    Raises:
        ValueError: ``rounds < 1``; a ``resume`` state already past ``rounds``.
    """
    rounds = lm.rounds if rounds is None else rounds
    check_count("rounds", rounds, 1, why="0 would train nothing")
    ref = task.reference if reference is None else reference
    model = copy.deepcopy(init if init is not None else task.reference)
    for p in model.parameters():
        p.requires_grad_(True)
    opt = _optimizer(model, lm.lm_lr)
    rng = np.random.default_rng([seed, 3])
    g = torch.Generator().manual_seed(int(seed) * 104729 + 5)
    start, history = 0, []
    if resume is not None:
        model.load_state_dict(resume["model"])
        opt.load_state_dict(resume["optimizer"])
        start = int(resume["round"])
        if start > rounds:
            raise ValueError(f"rounds={rounds}: the checkpoint is already at round {start}; --rounds is the total to "
                             f"reach, pass more than {start}")
        if start == rounds:
            log.warning("the checkpoint is already at round %d = rounds: nothing to train (pass a larger --rounds "
                        "to continue)", start)
        rng.bit_generator.state = resume["rng"]
        g.set_state(resume["torch_rng"])
        history = list(resume.get("history", []))
    chosen = task.encode(data.pref_prompts, data.chosen) if config.w < 1 and data.chosen.numel() else None
    rejected = task.encode(data.pref_prompts, data.rejected) if chosen is not None else None
    ref_w = batched_logprobs(ref, chosen) if chosen is not None else None
    ref_l = batched_logprobs(ref, rejected) if rejected is not None else None
    demos = task.encode(data.demo_prompts, data.demos) if config.w > 0 else None
    steps_per_round = lm.epochs * max(1, math.ceil(max(len(data.demos), 1) / lm.lm_batch))
    for rnd in range(start, rounds):
        t0 = time.perf_counter()
        agents = demo_old = agent_old = None
        if demos is not None:
            old = copy.deepcopy(model).eval()
            y_agent = task.sample(old, data.demo_prompts, g)
            agents = task.encode(data.demo_prompts, y_agent)
            demo_ref = task.reference if lm.variant == "aihf-dpo" else old
            demo_old = batched_logprobs(demo_ref, demos)      # cached once per round
            agent_old = batched_logprobs(demo_ref, agents)
        losses = implicit_epoch(model, opt, w=config.w, beta=lm.dpo_beta, demos=demos, agents=agents,
                                demo_old=demo_old, agent_old=agent_old, chosen=chosen, rejected=rejected,
                                ref_chosen=ref_w, ref_rejected=ref_l, batch_size=lm.lm_batch, rng=rng, pad_id=PAD,
                                weighting=config.weighting, steps=steps_per_round)
        history.append({"round": rnd + 1, "loss_first": losses[0], "loss_last": losses[-1], "steps": len(losses),
                        "seconds": time.perf_counter() - t0})
        if checkpoint is not None:
            checkpoint({"model": model.state_dict(), "optimizer": opt.state_dict(), "round": rnd + 1,
                        "rng": rng.bit_generator.state, "torch_rng": g.get_state(), "history": history})
    model.eval()
    return LMResult(model, task.evaluate(model, lm.n_eval), history)


def train_sft(task: TinyLMTask, data: LMData, lm: TinyLMConfig, *, seed: int = 0) -> torch.nn.Module:
    """SFT: ``lm.sft_epochs`` passes of next-token NLL on the demonstrations, from ``pi_ref``."""
    model = copy.deepcopy(task.reference)
    for p in model.parameters():
        p.requires_grad_(True)
    opt = _optimizer(model, lm.lm_lr)
    rng = np.random.default_rng([seed, 4])
    demos = task.encode(data.demo_prompts, data.demos)
    for _ in range(lm.sft_epochs):
        sft_epoch(model, opt, demos, lm.lm_batch, rng)
    return model.eval()


def run_lm_method(method: str, task: TinyLMTask, data: LMData, config: AIHFConfig = AIHFConfig(),
                  lm: TinyLMConfig = TinyLMConfig(), *, seed: int = 0, resume: dict | None = None,
                  checkpoint=None) -> LMResult:
    """One tiny-LM method on the same data and seed: ``dpo`` (w = 0), ``aihf`` (``config.w``, ``lm.variant``),
    ``self-play`` (``config.w``, Self-Play-AIHF), ``sft``, ``sft-dpo`` (DPO from the SFT model with the SFT model as
    reference). DPO and SFT->DPO run as many optimiser steps as AIHF-DPO (``rounds * epochs`` passes).

    Raises:
        ValueError: an unknown method.
    """
    if method not in LM_METHODS:
        raise ValueError(f"method must be one of {LM_METHODS} for the tiny LM, got {method!r}")
    if method == "sft":
        m = train_sft(task, data, lm, seed=seed)
        return LMResult(m, task.evaluate(m, lm.n_eval), [])
    if method in ("aihf", "self-play"):
        lm2 = TinyLMConfig(**{**asdict(lm), "variant": "self-play" if method == "self-play" else lm.variant})
        return train_aihf_dpo(task, data, config, lm2, seed=seed, resume=resume, checkpoint=checkpoint)
    cfg0 = AIHFConfig(**{**config.__dict__, "w": 0.0})
    if method == "dpo":
        return train_aihf_dpo(task, data, cfg0, lm, seed=seed, resume=resume, checkpoint=checkpoint)
    sft = train_sft(task, data, lm, seed=seed)
    return train_aihf_dpo(task, data, cfg0, lm, seed=seed, init=sft, reference=sft, resume=resume,
                          checkpoint=checkpoint)
