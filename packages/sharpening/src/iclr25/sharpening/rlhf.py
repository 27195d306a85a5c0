"""RLHF-Sharpening: KL-regularised RL on the self-reward, offline by reward regression (Eq. 8) or online
with XPO (App. J.2, Algorithm 1). Spec §1.4, §1.6.

Objective: ``max_pi E_pi[r_self] - beta KL(pi || pi_base)``, optimum ``pi*_beta ∝ pi_base^(1 + 1/beta)`` for
``r_self = log pi_base``.

- Offline (Eq. 8): pairs ``y, y' ~ pi_base`` (N = 2 per prompt); minimise
  ``( beta log[pi(y)/pi_base(y)] - beta log[pi(y')/pi_base(y')] - (r(y) - r(y')) )^2``.
- XPO: ``pi^(1) = pi_base``; each iteration draws ``y ~ pi^(t)``, ``y~ ~ pi_base``, adds ``(x, y, y~)`` to
  ``D`` and minimises ``alpha sum_D log pi(y~|x) + sum_D (...)^2`` (the "+" sign of the proof's empirical
  loss; the converted text shows a minus); the iterate with the best validation ``J_beta`` is returned.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .exact import check_beta, check_n
from .rewards import LogLikelihood, SelfReward, score_sequences
from .sampling import Samples, check_prompts, sample_responses
from .training import (
    RESUME_FIX,
    PolicyTrainer,
    TrainConfig,
    apply_lora,
    check_nonneg,
    check_positive,
    damaged_file,
    load_safetensors,
    read_saved_jsonl,
)

__all__ = ["sharpening_regression_loss", "xpo_loss", "RLHFConfig", "RLHFResult", "rlhf_sharpen",
           "sample_pairs", "estimate_j_beta", "mass_split", "rlhf_experiment"]

log = logging.getLogger(__name__)


def _same_shape(*ts) -> None:
    shapes = {tuple(t.shape) for t in ts}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ValueError(f"log-probability inputs must all be (B,) tensors of one shape, got {sorted(shapes)}")


def sharpening_regression_loss(logp_pi_y, logp_pi_y2, logp_base_y, logp_base_y2, beta: float, *,
                               reward_y=None, reward_y2=None, weights=None):
    """Eq. (8): the reward-regression loss of offline RLHF-Sharpening, averaged over pairs.

    ``mean_i ( beta (log pi(y_i) - log pi_base(y_i)) - beta (log pi(y'_i) - log pi_base(y'_i))
    - (r(y_i) - r(y'_i)) )^2`` with ``r = log pi_base`` unless ``reward_y``/``reward_y2`` are given.

    Args:
        logp_pi_y, logp_pi_y2: ``(B,)`` ``log pi(y|x)``, ``log pi(y'|x)`` of the policy (with grad), nats.
        logp_base_y, logp_base_y2: ``(B,)`` the same under ``pi_base`` (constants).
        beta: KL coefficient > 0.
        reward_y, reward_y2: optional ``(B,)`` self-rewards (default: the base log-likelihoods).
        weights: optional ``(B,)`` non-negative pair weights (a weighted mean; e.g. ``pi_base(y) pi_base(y')``
            for the population loss over all ordered pairs).

    Returns:
        Scalar tensor. Its population minimiser over all policies is ``pi_base^(1+1/beta)/Z`` (spec §6.2).

    Raises:
        ValueError: ``beta <= 0`` or mismatched shapes.
    """
    b = check_beta(beta)
    _same_shape(logp_pi_y, logp_pi_y2, logp_base_y, logp_base_y2)
    ry = logp_base_y if reward_y is None else reward_y
    ry2 = logp_base_y2 if reward_y2 is None else reward_y2
    pred = b * ((logp_pi_y - logp_base_y) - (logp_pi_y2 - logp_base_y2))
    sq = (pred - (ry - ry2)) ** 2
    if weights is None:
        return sq.mean()
    if tuple(weights.shape) != tuple(sq.shape):
        raise ValueError(f"weights shape {tuple(weights.shape)} != {tuple(sq.shape)}")
    return (weights * sq).sum() / weights.sum()


def xpo_loss(logp_pi_y, logp_pi_ytilde, logp_base_y, logp_base_ytilde, beta: float, alpha: float, *,
             reward_y=None, reward_ytilde=None):
    """XPO's empirical loss (App. J.2, Algorithm 1), averaged over ``D``:
    ``alpha * mean log pi(y~|x) + mean (beta log[pi(y)/pi_base(y)] - beta log[pi(y~)/pi_base(y~)] - (r(y) - r(y~)))^2``.

    ``y`` was drawn from the policy at its iteration, ``y~`` from ``pi_base``; the optimism term lowers the
    likelihood of what the base already produces, pushing exploration elsewhere (the "+" sign).

    Args:
        alpha: optimism coefficient >= 0 (``0``: online Eq. 8).
        others: as :func:`sharpening_regression_loss`.

    Raises:
        ValueError: ``beta <= 0``, ``alpha < 0`` or mismatched shapes.
    """
    a = check_nonneg(alpha, "alpha")
    reg = sharpening_regression_loss(logp_pi_y, logp_pi_ytilde, logp_base_y, logp_base_ytilde, beta,
                                     reward_y=reward_y, reward_y2=reward_ytilde)
    return a * logp_pi_ytilde.mean() + reg


@dataclass
class RLHFConfig:
    """RLHF-Sharpening settings (the paper runs no RLHF experiment on LLMs; these follow its SFT setup).

    Args:
        beta: KL coefficient (spec §4.2: 1, 0.5, 0.25 at CPU scale).
        algo: ``"offline"`` (Eq. 8) or ``"xpo"``.
        alpha: XPO optimism coefficient (tune on validation ``J_beta``; only a theoretical setting exists).
        pairs_per_prompt: offline pairs drawn per prompt (Eq. 8 uses one: N = 2 draws).
        iterations: XPO iterations ``T``.
        prompts_per_iteration: XPO prompts (new pairs) per iteration.
        steps_per_iteration: XPO optimiser steps on ``D`` after each iteration.
        temperature, max_new_tokens, sample_batch_size: sampling of the pairs.
        train: optimisation (:class:`TrainConfig`); for XPO ``epochs`` is unused.
    """

    beta: float = 0.5
    algo: str = "offline"
    alpha: float = 0.0
    pairs_per_prompt: int = 1
    iterations: int = 10
    prompts_per_iteration: int = 32
    steps_per_iteration: int = 20
    temperature: float = 1.0
    max_new_tokens: int = 512
    sample_batch_size: int = 64
    train: TrainConfig = field(default_factory=lambda: TrainConfig(lora_r=16, epochs=3))

    def __post_init__(self) -> None:
        check_beta(self.beta)
        check_nonneg(self.alpha, "alpha")
        check_positive(self.temperature, "temperature")
        if self.algo not in ("offline", "xpo"):
            raise ValueError(f"algo must be 'offline' or 'xpo', got {self.algo!r}")
        for f in ("pairs_per_prompt", "iterations", "prompts_per_iteration", "steps_per_iteration",
                  "max_new_tokens", "sample_batch_size"):
            check_n(getattr(self, f), f)


@dataclass
class RLHFResult:
    """Result of :func:`rlhf_sharpen`: the sharpened ``model``, the ``pairs`` used (list of dicts), the
    training ``history`` and ``stats`` (identical-pair share, samples drawn, XPO's chosen iterate)."""

    model: object
    pairs: list[dict]
    history: list[dict]
    stats: dict


def _rows(samples: Samples, b: int, j: int) -> tuple[list[int], list[int]]:
    ids, am, rm = samples.row(b, j)
    n_prompt = int((rm == 0).sum())
    return ids[:n_prompt].tolist(), ids[n_prompt:].tolist()


def sample_pairs(policy, base, tokenizer, prompts: Sequence[str], *, from_policy: bool, temperature: float = 1.0,
                 max_new_tokens: int = 512, batch_size: int = 64, reward: SelfReward | None = None,
                 progress: bool = False) -> list[dict]:
    """Pairs ``(x, y, y')`` with ``log pi_base`` of both (recomputed by a forward pass of ``base``).

    ``from_policy=False``: ``y, y' ~ pi_base`` (offline, Eq. 8). ``True``: ``y ~ policy``, ``y' = y~ ~ pi_base``
    (XPO). Each dict: ``prompt``, ``y``, ``y2`` (texts), ``prompt_ids``, ``y_ids``, ``y2_ids``, ``logp_base_y``,
    ``logp_base_y2``, ``r_y``, ``r_y2`` (self-rewards; = the log-likelihoods by default), ``identical``.
    """
    prompts = check_prompts(prompts)
    rew = reward if reward is not None else LogLikelihood(base)
    if from_policy:
        s1 = sample_responses(policy, tokenizer, prompts, 1, temperature=temperature, max_new_tokens=max_new_tokens,
                              batch_size=batch_size, progress=progress)
        s2 = sample_responses(base, tokenizer, prompts, 1, temperature=temperature, max_new_tokens=max_new_tokens,
                              batch_size=batch_size, progress=progress)
        draws = [(s1, b, 0, s2, b, 0) for b in range(len(prompts))]
        scored = [s1, s2]
    else:
        s = sample_responses(base, tokenizer, prompts, 2, temperature=temperature, max_new_tokens=max_new_tokens,
                             batch_size=batch_size, progress=progress)
        draws = [(s, b, 0, s, b, 1) for b in range(len(prompts))]
        scored = [s]
    lps = {id(x): LogLikelihood(base)(x) for x in scored}
    rws = lps if isinstance(rew, LogLikelihood) and not rew.average and rew.model is base else \
        {id(x): rew(x) for x in scored}
    out = []
    for sa, ba, ja, sb, bb, jb in draws:
        p_ids, y_ids = _rows(sa, ba, ja)
        _, y2_ids = _rows(sb, bb, jb)
        out.append({"prompt": sa.prompts[ba], "y": sa.responses[ba][ja], "y2": sb.responses[bb][jb],
                    "prompt_ids": p_ids, "y_ids": y_ids, "y2_ids": y2_ids,
                    "logp_base_y": float(lps[id(sa)][ba, ja]), "logp_base_y2": float(lps[id(sb)][bb, jb]),
                    "r_y": float(rws[id(sa)][ba, ja]), "r_y2": float(rws[id(sb)][bb, jb]),
                    "identical": y_ids == y2_ids})
    return out


def _pair_tensors(pairs: Sequence[dict], pad: int):
    """Right-padded ``2B`` rows: the ``y`` of every pair, then every ``y'``."""
    from .sft import collate_examples

    ex = [{"prompt_ids": p["prompt_ids"], "response_ids": p["y_ids"]} for p in pairs] + \
         [{"prompt_ids": p["prompt_ids"], "response_ids": p["y2_ids"]} for p in pairs]
    return collate_examples(ex, pad)


def _pair_loss(model, pairs: Sequence[dict], pad: int, beta: float, alpha: float | None):
    import torch

    from iclr25.core.lm import sequence_logprobs

    dev = next(model.parameters()).device
    ids, am, rm = _pair_tensors(pairs, pad)
    lp = sequence_logprobs(model, ids.to(dev), am.to(dev), rm.to(dev))
    B = len(pairs)
    col = lambda k: torch.tensor([p[k] for p in pairs], dtype=lp.dtype, device=dev)  # noqa: E731
    args = (lp[:B], lp[B:], col("logp_base_y"), col("logp_base_y2"), beta)
    kw = {"reward_y": col("r_y")}
    if alpha is None:
        loss = sharpening_regression_loss(*args, **kw, reward_y2=col("r_y2"))
    else:
        loss = xpo_loss(*args, alpha, **kw, reward_ytilde=col("r_y2"))
    return loss, {}


def estimate_j_beta(policy, base, tokenizer, prompts: Sequence[str], beta: float, *, n: int = 4,
                    temperature: float = 1.0, max_new_tokens: int = 512, batch_size: int = 64) -> float:
    """Monte-Carlo ``J_beta(pi) = E_{y~pi}[log pi_base(y|x) - beta (log pi(y|x) - log pi_base(y|x))]`` (nats),
    the KL-regularised objective with the likelihood self-reward, from ``n`` draws per prompt."""
    s = sample_responses(policy, tokenizer, prompts, n, temperature=temperature, max_new_tokens=max_new_tokens,
                         batch_size=batch_size)
    lb = score_sequences(base, s.input_ids, s.attention_mask, s.response_mask)
    lp = score_sequences(policy, s.input_ids, s.attention_mask, s.response_mask)
    return float((lb - beta * (lp - lb)).mean())


def rlhf_sharpen(base, tokenizer, prompts: Sequence[str], cfg: RLHFConfig | None = None, *,
                 val_prompts: Sequence[str] | None = None, pairs: list[dict] | None = None,
                 j_beta: Callable | None = None, out_dir: str | Path | None = None, resume: bool = False,
                 progress: bool = False, accelerate: bool | None = None, on_iteration: Callable | None = None,
                 ) -> RLHFResult:
    """RLHF-Sharpening of ``base`` (spec §1.4): offline Eq. (8) on base pairs, or online XPO.

    Args:
        base: ``pi_base`` (not modified; the policy starts as a deep copy, LoRA-wrapped when ``lora_r > 0``).
        tokenizer: its tokenizer.
        prompts: training prompts (offline: ``pairs_per_prompt`` pairs each; XPO: drawn from in order).
        cfg: :class:`RLHFConfig`.
        val_prompts: XPO's validation prompts for choosing the iterate (default: the training prompts).
        pairs: offline pairs from :func:`sample_pairs` (skips sampling).
        j_beta: ``callable(policy) -> float`` validation objective for XPO (default :func:`estimate_j_beta`).
        out_dir: run folder (``pairs.jsonl``, ``checkpoint/``, ``metrics.jsonl``).
        resume: continue from ``out_dir/checkpoint``.
        on_iteration: XPO callback ``(iteration, policy, samples_drawn)`` after each iteration.

    Returns:
        :class:`RLHFResult`; ``stats["identical_pair_share"]`` is the share of pairs with ``y == y'``, which
        carry no signal in Eq. (8) (also logged).
    """
    from iclr25.core.jsonl import write_jsonl

    cfg = cfg or RLHFConfig()
    prompts = check_prompts(prompts)
    out = Path(out_dir) if out_dir is not None else None
    if resume and out is None:
        raise ValueError("resume needs out_dir")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if cfg.algo == "xpo":
        return _xpo(base, tokenizer, prompts, cfg, val_prompts or prompts, j_beta, out, resume, progress,
                    accelerate, pad, on_iteration)
    if resume:
        pairs = read_saved_jsonl(out / "pairs.jsonl",
                                 required=("prompt_ids", "y_ids", "y2_ids", "logp_base_y", "logp_base_y2"))
    elif pairs is None:
        reps = [p for p in prompts for _ in range(cfg.pairs_per_prompt)]
        pairs = sample_pairs(base, base, tokenizer, reps, from_policy=False, temperature=cfg.temperature,
                             max_new_tokens=cfg.max_new_tokens, batch_size=cfg.sample_batch_size, progress=progress)
    same = float(np.mean([p["identical"] for p in pairs])) if pairs else 0.0
    log.info("Eq. (8): %d pairs; %.1f%% have identical responses and carry no signal", len(pairs), 100 * same)
    if out is not None and not resume:
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl(out / "pairs.jsonl", pairs)
        if (out / "metrics.jsonl").exists():
            (out / "metrics.jsonl").unlink()
    policy = apply_lora(copy.deepcopy(base), cfg.train)
    trainer = PolicyTrainer(policy, lambda m, idx: _pair_loss(m, [pairs[i] for i in idx.tolist()], pad, cfg.beta, None),
                            len(pairs), cfg.train, accelerate=accelerate)
    if resume:
        trainer.load_checkpoint(out / "checkpoint", data_file=out / "pairs.jsonl")
        log.info("resumed Eq. (8) training at step %d", trainer.step)
    hist = trainer.fit(checkpoint_dir=None if out is None else out / "checkpoint",
                       metrics_path=None if out is None else out / "metrics.jsonl", progress=progress)
    model = trainer.unwrapped.eval()
    return RLHFResult(model, pairs, hist, {"identical_pair_share": same, "samples_drawn": 2 * len(pairs),
                                           "steps": trainer.step, "algo": "offline", "beta": cfg.beta})


def _xpo(base, tokenizer, prompts, cfg: RLHFConfig, val_prompts, j_beta, out, resume, progress, accelerate, pad,
         on_iteration):
    import torch

    from iclr25.core.jsonl import write_jsonl

    from .training import _trainable_state, set_trainable_state

    policy = apply_lora(copy.deepcopy(base), cfg.train)
    D: list[dict] = []
    total = cfg.iterations * cfg.steps_per_iteration
    trainer = PolicyTrainer(policy, lambda m, idx: _pair_loss(m, [D[i] for i in idx.tolist()], pad, cfg.beta, cfg.alpha),
                            max(1, cfg.iterations * cfg.prompts_per_iteration), cfg.train, accelerate=accelerate,
                            total_steps=total)
    jfn = j_beta or (lambda pol: estimate_j_beta(pol, base, tokenizer, val_prompts, cfg.beta,
                                                 temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                                                 batch_size=cfg.sample_batch_size))
    start, best_j, best_it, hist = 0, float("-inf"), 0, []
    best_state = _trainable_state(trainer.unwrapped)
    ck = None if out is None else out / "checkpoint"
    if resume:
        extra = trainer.load_checkpoint(ck)
        D = read_saved_jsonl(out / "pairs.jsonl", required=("prompt_ids", "y_ids", "y2_ids"))
        try:
            start, best_j, best_it = int(extra["iteration"]), float(extra["best_j"]), int(extra["best_iteration"])
        except (KeyError, TypeError, ValueError) as e:
            raise damaged_file(ck / "trainer_state.pt", e) from None
        n_saved = extra.get("n_pairs")
        if n_saved is not None and len(D) < int(n_saved):
            raise ValueError(f"--resume: {out / 'pairs.jsonl'} has {len(D)} pairs but the checkpoint was written "
                             f"after {n_saved}: the file is truncated; {RESUME_FIX}")
        if n_saved is not None and len(D) > int(n_saved):    # pairs of an iteration the run did not finish
            log.warning("resume: dropping %d pairs of the unfinished iteration %d from pairs.jsonl",
                        len(D) - int(n_saved), start + 1)
            D = D[: int(n_saved)]
            write_jsonl(out / "pairs.jsonl", D)
        if (ck / "best.safetensors").is_file():
            best_state = load_safetensors(ck / "best.safetensors")
        from iclr25.core.checkpoint import trim_jsonl

        trim_jsonl(out / "metrics.jsonl", trainer.step)  # what a killed run logged after the checkpoint
        log.info("resumed XPO after iteration %d (%d pairs)", start, len(D))
    elif out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for f in ("pairs.jsonl", "metrics.jsonl"):
            if (out / f).exists():
                (out / f).unlink()
    if start == 0 and not resume:
        best_j, best_it = jfn(trainer.unwrapped), 0          # pi^(1) = pi_base is a candidate iterate
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(cfg.train.seed))
    for t in range(start, cfg.iterations):
        pos = [(t * cfg.prompts_per_iteration + i) % len(prompts) for i in range(cfg.prompts_per_iteration)]
        batch = [prompts[int(order[p])] for p in pos]
        new = sample_pairs(trainer.unwrapped, base, tokenizer, batch, from_policy=True, temperature=cfg.temperature,
                           max_new_tokens=cfg.max_new_tokens, batch_size=cfg.sample_batch_size)
        D += new
        if out is not None:
            from iclr25.core.jsonl import append_jsonl

            append_jsonl(out / "pairs.jsonl", new)
        g = torch.Generator().manual_seed(cfg.train.seed * 7919 + t)
        for _ in range(cfg.steps_per_iteration):
            idx = torch.randint(0, len(D), (min(cfg.train.batch_size, len(D)),), generator=g)
            rec = trainer.train_step(idx)
            rec["iteration"] = t + 1
            hist.append(rec)
        j = jfn(trainer.unwrapped)
        hist[-1]["j_beta"] = j
        if j > best_j:
            best_j, best_it, best_state = j, t + 1, _trainable_state(trainer.unwrapped)
        if on_iteration is not None:
            on_iteration(t + 1, trainer.unwrapped, 2 * len(D))
        if ck is not None:
            # the log first (a resume trims it back to the checkpointed step), then one atomic checkpoint with the
            # best iterate inside it (never a checkpoint beside another iteration's best.safetensors)
            with open(out / "metrics.jsonl", "a", encoding="utf-8") as fh:
                for r in hist[-cfg.steps_per_iteration:]:
                    fh.write(json.dumps(r) + "\n")
            trainer.save_checkpoint(ck, extra={"iteration": t + 1, "best_j": best_j, "best_iteration": best_it,
                                                "n_pairs": len(D)}, tensors={"best.safetensors": best_state})
    final = trainer.unwrapped
    if best_it != cfg.iterations:
        set_trainable_state(final, best_state)
    same = float(np.mean([p["identical"] for p in D])) if D else 0.0
    log.info("XPO: %d pairs (%.1f%% identical), best validation J_beta %.4f at iteration %d", len(D), 100 * same,
             best_j, best_it)
    if out is not None:
        write_jsonl(out / "pairs.jsonl", D)
    return RLHFResult(final.eval(), D, hist, {"identical_pair_share": same, "samples_drawn": 2 * len(D),
                                              "best_iteration": best_it, "best_j_beta": best_j, "algo": "xpo",
                                              "beta": cfg.beta, "alpha": cfg.alpha})


def mass_split(lp: np.ndarray, task, pairs: np.ndarray) -> dict:
    """Mean mass on the correct answer, on the distractors, on the other two-digit answers (which the data
    distribution never produces) and outside the 100 answers."""
    p = np.exp(lp)
    rows = np.arange(len(pairs))
    corr = p[rows, task.correct_index(pairs)]
    dis = p[rows[:, None], task.distractor_indices(pairs)].sum(1)
    return {"correct_mass": float(corr.mean()), "distractor_mass": float(dis.mean()),
            "unsupported_mass": float((p.sum(1) - corr - dis).mean()), "outside_mass": float((1 - p.sum(1)).mean())}


def rlhf_experiment(base, task, train: np.ndarray, test: np.ndarray, base_lp, *, betas: Sequence[float],
                    pairs_per_prompt: int, epochs: int, lr: float, batch_size: int, seed: int) -> dict:
    """The trap reproduction's Eq. (8): ``pairs_per_prompt`` base pairs per training prompt, one fit per
    beta, the exact mass on ``y*`` against the tilted optimum of the learned base, and the mass split."""
    from .exact import enumerate_responses, tilted_optimum
    from .training import TrainConfig

    prompts = list(task.prompts(train)) * pairs_per_prompt
    pairs = sample_pairs(base.model, base.model, base.tokenizer, prompts, from_policy=False, max_new_tokens=4,
                         batch_size=1024)
    lpn = base_lp.numpy()
    ystar = lpn.argmax(-1)
    rows = np.arange(len(test))
    out = {"identical_pair_share": float(np.mean([p["identical"] for p in pairs])), "n_pairs": len(pairs),
           "pairs_per_prompt": pairs_per_prompt, "beta": {}}
    for beta in betas:
        cfg = RLHFConfig(beta=beta, max_new_tokens=4, sample_batch_size=1024,
                         train=TrainConfig(epochs=epochs, lr=lr, batch_size=batch_size, lora_r=0, max_grad_norm=1.0,
                                           seed=seed))
        res = rlhf_sharpen(base.model, base.tokenizer, prompts, cfg, pairs=pairs)
        lp = enumerate_responses(res.model, base.tokenizer, task.prompts(test), task.candidates).numpy()
        tilted = tilted_optimum(lpn, beta)[rows, ystar]
        out["beta"][beta] = {"mode_mass": float(np.exp(lp[rows, ystar]).mean()), "tilted": float(tilted.mean()),
                             "data_tilted": task.tilted_optimum_correct(beta),
                             "sharpened_fraction": float(np.mean(np.exp(lp[rows, ystar]) > 0.5)),
                             **mass_split(lp, task, test), "final_loss": res.history[-1]["loss"]}
    out["base_split"] = mass_split(lpn, task, test)
    return out
