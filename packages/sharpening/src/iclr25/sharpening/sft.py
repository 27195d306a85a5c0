"""SFT-Sharpening: best-of-N distillation (spec §1.3, §1.6; Theorem 4.1; adaptive variant App. D).

(1) for each training prompt run best-of-N on ``pi_base`` with the self-reward (paper: N = 50), or draw
adaptively until ``k >= mu / max_j pi_base(y_j|x)`` with ``mu = ln(2/delta)``; (2) build the corpus
``{(x, y_BoN)}``; (3) fine-tune with next-token loss on the response tokens (plain maximum likelihood,
``argmax_pi sum_i log pi(y_BoN_i | x_i)``), full or LoRA; (4) evaluate by sampling at temperature 1.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .adaptive import adaptive_mu, adaptive_sample_count
from .bon import best_of_n
from .exact import check_n
from .rewards import LogLikelihood, SelfReward, score_sequences
from .sampling import check_prompts, sample_responses
from .training import PolicyTrainer, TrainConfig, apply_lora, check_positive, read_saved_jsonl

__all__ = ["SFTConfig", "SFTResult", "build_sft_corpus", "sft_sharpen", "sft_loss", "collate_examples", "sft_experiment"]

log = logging.getLogger(__name__)


@dataclass
class SFTConfig:
    """SFT-Sharpening settings (paper Appendix A defaults; the trap presets override them).

    Args:
        n: best-of-N draws per training prompt (paper: 50).
        adaptive_delta: use the adaptive rule of App. D with ``mu = ln(2/delta)`` instead of a fixed ``n``
            (``None``: fixed ``n``).
        max_n: the most draws per prompt under the adaptive rule (a cap; prompts that hit it are counted).
        adaptive_round: draws per prompt per round under the adaptive rule.
        temperature: sampling temperature of the draws (paper: 1.0).
        max_new_tokens: response length limit (paper: 512).
        sample_batch_size: sequences per ``generate`` call / scoring forward.
        train: optimisation (:class:`~iclr25.sharpening.training.TrainConfig`; paper: LoRA 16, lr 3e-4,
            clip 0.1, batch 4, 30 epochs).
    """

    n: int = 50
    adaptive_delta: float | None = None
    max_n: int = 200
    adaptive_round: int = 8
    temperature: float = 1.0
    max_new_tokens: int = 512
    sample_batch_size: int = 64
    train: TrainConfig = field(default_factory=lambda: TrainConfig(lora_r=16))

    def __post_init__(self) -> None:
        check_n(self.n, "n")
        check_n(self.max_n, "max_n")
        check_n(self.adaptive_round, "adaptive_round")
        check_n(self.max_new_tokens, "max_new_tokens")
        check_n(self.sample_batch_size, "sample_batch_size")
        if self.adaptive_delta is not None:
            adaptive_mu(self.adaptive_delta)  # raises unless 0 < delta < 1
        check_positive(self.temperature, "temperature")


@dataclass
class SFTResult:
    """Result of :func:`sft_sharpen`: the sharpened ``model``, the BoN ``corpus`` (list of dicts), the
    training ``history`` (one dict per step) and ``stats`` (samples drawn, mean best score, lengths)."""

    model: object
    corpus: list[dict]
    history: list[dict]
    stats: dict


def _example(samples, b: int, j: int, score: float, drawn: int) -> dict:
    ids, am, rm = samples.row(b, j)
    n_prompt = int((rm == 0).sum())
    return {"prompt": samples.prompts[b], "response": samples.responses[b][j], "score": float(score),
            "prompt_ids": ids[:n_prompt].tolist(), "response_ids": ids[n_prompt:].tolist(),
            "length": int(rm.sum()), "samples": int(drawn)}


def build_sft_corpus(base, tokenizer, prompts: Sequence[str], cfg: SFTConfig, *,
                     self_reward: SelfReward | None = None, progress: bool = False) -> tuple[list[dict], dict]:
    """Step (1)-(2) of SFT-Sharpening: one best-of-N response per prompt from ``base``.

    Args:
        base: ``pi_base`` (a local ``*ForCausalLM``), which both samples and (by default) scores.
        tokenizer: its tokenizer.
        prompts: training prompts.
        cfg: :class:`SFTConfig` (``n`` or the adaptive rule).
        self_reward: the self-reward (default ``LogLikelihood(base)``; the adaptive rule needs it).

    Returns:
        ``(corpus, stats)``: one dict per prompt (``prompt``, ``response``, ``score``, token ids, ``length``,
        ``samples`` drawn for it) and ``{"samples_total", "samples_mean", "capped", ...}``.

    Raises:
        ValueError: the adaptive rule with a reward other than the log-likelihood.
    """
    prompts = check_prompts(prompts)
    reward = self_reward if self_reward is not None else LogLikelihood(base)
    if cfg.adaptive_delta is None:
        res = best_of_n(base, tokenizer, prompts, cfg.n, reward, temperature=cfg.temperature,
                        max_new_tokens=cfg.max_new_tokens, batch_size=cfg.sample_batch_size, progress=progress)
        corpus = [_example(res.samples, b, int(j), res.best_scores[b], cfg.n) for b, j in enumerate(res.best_index)]
        identical = float(np.mean([len(set(r)) == 1 for r in res.samples.responses]))
        stats = {"samples_total": cfg.n * len(prompts), "samples_mean": float(cfg.n), "capped": 0,
                 "all_draws_identical_share": identical}
    else:
        if not isinstance(reward, LogLikelihood) or reward.average:
            raise ValueError("the adaptive rule (adaptive_delta) stops on pi_base likelihoods: use the "
                             "LogLikelihood self-reward")
        corpus, stats = _adaptive_corpus(base, tokenizer, prompts, cfg, reward, progress)
    stats["mean_best_score"] = float(np.mean([e["score"] for e in corpus]))
    stats["mean_best_length"] = float(np.mean([e["length"] for e in corpus]))
    return corpus, stats


def _adaptive_corpus(base, tokenizer, prompts, cfg: SFTConfig, reward: LogLikelihood, progress: bool):
    """Adaptive BoN (App. D): draw rounds for the prompts that have not stopped, up to ``max_n`` each."""
    import torch

    mu = adaptive_mu(cfg.adaptive_delta)
    B = len(prompts)
    scores: list[list[float]] = [[] for _ in range(B)]
    best: list[dict | None] = [None] * B
    active = list(range(B))
    stop = np.zeros(B, dtype=np.int64)
    while active:
        drawn = len(scores[active[0]])
        k = min(cfg.adaptive_round, cfg.max_n - drawn)
        s = sample_responses(base, tokenizer, [prompts[i] for i in active], k, temperature=cfg.temperature,
                             max_new_tokens=cfg.max_new_tokens, batch_size=cfg.sample_batch_size, progress=progress)
        lp = reward(s)                                                        # (A, k)
        still = []
        for a, i in enumerate(active):
            before = len(scores[i])
            scores[i] += lp[a].tolist()
            kk, stopped = adaptive_sample_count(torch.tensor(scores[i]), mu=mu)
            # the most likely draw among the first kk (ties: the earliest)
            j = int(np.argmax(scores[i][:kk]))
            if j >= before:
                best[i] = _example(s, a, j - before, scores[i][j], kk)
            elif best[i] is not None:
                best[i]["samples"] = kk
            if stopped or len(scores[i]) >= cfg.max_n:
                stop[i] = kk
            else:
                still.append(i)
        active = still
    corpus = [b for b in best if b is not None]
    capped = int(sum(1 for i in range(B) if stop[i] >= cfg.max_n and not
                     adaptive_sample_count(torch.tensor(scores[i]), mu=mu)[1]))
    if capped:
        log.warning("adaptive rule: %d of %d prompts reached max_n=%d draws without stopping", capped, B, cfg.max_n)
    return corpus, {"samples_total": int(stop.sum()), "samples_mean": float(stop.mean()), "capped": capped,
                    "mu": mu, "drawn_total": int(sum(len(s) for s in scores))}


def collate_examples(examples: Sequence[dict], pad_id: int):
    """Right-padded ``(input_ids, attention_mask, response_mask)`` of ``prompt_ids + response_ids``."""
    import torch

    L = max(len(e["prompt_ids"]) + len(e["response_ids"]) for e in examples)
    ids = torch.full((len(examples), L), pad_id, dtype=torch.long)
    am = torch.zeros_like(ids)
    rm = torch.zeros_like(ids)
    for r, e in enumerate(examples):
        p, y = e["prompt_ids"], e["response_ids"]
        ids[r, :len(p) + len(y)] = torch.tensor(p + y, dtype=torch.long)
        am[r, :len(p) + len(y)] = 1
        rm[r, len(p):len(p) + len(y)] = 1
    return ids, am, rm


def sft_loss(model, ids, am, rm):
    """Mean next-token negative log-likelihood of the response tokens (nats/token), via core ``token_logprobs``."""
    from iclr25.core.lm import token_logprobs

    dev = next(model.parameters()).device
    ids, am, rm = ids.to(dev), am.to(dev), rm.to(dev)
    lp = token_logprobs(model, ids, am, rm)
    n = rm[:, 1:].sum().clamp(min=1)
    return -lp.sum() / n


def sft_sharpen(base, tokenizer, prompts: Sequence[str], cfg: SFTConfig | None = None, *,
                self_reward: SelfReward | None = None, corpus: list[dict] | None = None,
                out_dir: str | Path | None = None, resume: bool = False, progress: bool = False,
                accelerate: bool | None = None) -> SFTResult:
    """SFT-Sharpening of ``base`` on ``prompts`` (spec §1.3): BoN corpus, then maximum-likelihood fine-tuning.

    Args:
        base: ``pi_base``; it is not modified (the policy is a deep copy, LoRA-wrapped when ``lora_r > 0``).
        tokenizer: its tokenizer.
        prompts: training prompts.
        cfg: :class:`SFTConfig` (default: the paper's).
        self_reward: default ``LogLikelihood(base)``.
        corpus: a corpus from :func:`build_sft_corpus` (skips sampling).
        out_dir: run folder: ``corpus.jsonl``, ``checkpoint/`` (every epoch), ``metrics.jsonl``.
        resume: continue from ``out_dir/checkpoint`` with the corpus saved there (no resampling).
        progress: progress bars.
        accelerate: train under ``accelerate`` (default: when launched with ``accelerate launch``).

    Returns:
        :class:`SFTResult`.

    Raises:
        FileNotFoundError: ``resume`` without a checkpoint/corpus in ``out_dir``.
        ValueError: bad settings or prompts.
    """
    from iclr25.core.jsonl import write_jsonl

    cfg = cfg or SFTConfig()
    out = Path(out_dir) if out_dir is not None else None
    if resume and out is None:
        raise ValueError("resume needs out_dir")
    stats: dict = {}
    if resume:
        corpus = read_saved_jsonl(out / "corpus.jsonl", required=("prompt_ids", "response_ids"))
        stats = json.loads((out / "corpus_stats.json").read_text()) if (out / "corpus_stats.json").is_file() else {}
    elif corpus is None:
        corpus, stats = build_sft_corpus(base, tokenizer, prompts, cfg, self_reward=self_reward, progress=progress)
    if out is not None and not resume:
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl(out / "corpus.jsonl", corpus)
        (out / "corpus_stats.json").write_text(json.dumps(stats, indent=2))
        if (out / "metrics.jsonl").exists():
            (out / "metrics.jsonl").unlink()
    policy = apply_lora(copy.deepcopy(base), cfg.train)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def loss_fn(model, idx):
        ids, am, rm = collate_examples([corpus[i] for i in idx.tolist()], pad)
        return sft_loss(model, ids, am, rm), {}

    trainer = PolicyTrainer(policy, loss_fn, len(corpus), cfg.train, accelerate=accelerate)
    if resume:
        trainer.load_checkpoint(out / "checkpoint", data_file=out / "corpus.jsonl")
        log.info("resumed SFT at step %d of %d", trainer.step, cfg.train.epochs * trainer.per_epoch)
    hist = trainer.fit(checkpoint_dir=None if out is None else out / "checkpoint",
                       metrics_path=None if out is None else out / "metrics.jsonl", progress=progress)
    model = trainer.unwrapped
    model.eval()
    stats["steps"] = trainer.step
    return SFTResult(model, corpus, hist, stats)


def mean_logprob_under(reference, samples) -> float:
    """Mean ``log pi_ref(y|x)`` of the samples (nats), recomputed by a forward pass of ``reference``."""
    lp = score_sequences(reference, samples.input_ids, samples.attention_mask, samples.response_mask)
    if not math.isfinite(float(lp.mean())):
        raise FloatingPointError("non-finite log-likelihood")
    return float(lp.mean())


def sft_experiment(base, task, train: np.ndarray, test: np.ndarray, base_lp, *, n: int, epochs: int, lr: float,
                   batch_size: int, seed: int, eval_samples: int = 4) -> dict:
    """The trap reproduction's SFT-Sharpening: N-draw BoN winners on ``train``, full fine-tune, evaluated on
    ``test`` (sampling / greedy accuracy, exact mode mass, likelihood under the base)."""
    from .evaluation import evaluate_on_trap
    from .training import TrainConfig

    cfg = SFTConfig(n=n, max_new_tokens=4, sample_batch_size=1024,
                    train=TrainConfig(epochs=epochs, lr=lr, batch_size=batch_size, lora_r=0, max_grad_norm=1.0,
                                      seed=seed))
    res = sft_sharpen(base.model, base.tokenizer, task.prompts(train), cfg)
    ev = evaluate_on_trap(res.model, base.model, base.tokenizer, task, test, base_lp, n_samples=eval_samples)
    corpus_correct = float(np.mean([e["response"] == f"{a + b:02d}" for e, (a, b) in zip(res.corpus, train)]))
    return ev.summary() | {"corpus_correct": corpus_correct, "final_loss": res.history[-1]["loss"],
                           "samples": res.stats["samples_total"]}
