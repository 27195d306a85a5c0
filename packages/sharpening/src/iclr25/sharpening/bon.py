"""Inference-time best-of-N sharpening (spec §1.6, Prop. C.1; paper Fig. 1).

(1) draw ``N`` responses per prompt at temperature 1 (batched); (2) score each with the self-reward, for the
likelihood rewards a teacher-forced forward pass of the reference model; (3) return the argmax, ties broken
by the first index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .exact import check_n
from .rewards import LogLikelihood, SelfReward
from .sampling import Samples, check_prompts, sample_responses, samples_from_texts

__all__ = ["BoNResult", "best_of_n", "select_best"]


def select_best(scores, n: int | None = None) -> np.ndarray:
    """Index of the best of the first ``n`` responses of each prompt (all when ``None``), ties -> first index.

    Args:
        scores: ``(B, N)`` float self-rewards (numpy or torch). NaN raises ``ValueError``.
        n: use only the first ``n`` columns (sub-sampling the ``N`` draws, as the paper does for smaller N).

    Returns:
        ``(B,)`` int64 numpy.
    """
    s = scores.detach().cpu().numpy() if hasattr(scores, "detach") else np.asarray(scores)
    if s.ndim != 2:
        raise ValueError(f"scores must be (B, N), got shape {s.shape}")
    if np.isnan(s).any():
        raise ValueError("self-reward scores contain NaN")
    if n is not None:
        n = check_n(n)
        if n > s.shape[1]:
            raise ValueError(f"n={n} exceeds the {s.shape[1]} responses drawn")
        s = s[:, :n]
    return np.argmax(s, axis=1)  # numpy: first occurrence of the maximum


@dataclass
class BoNResult:
    """Result of :func:`best_of_n`.

    Attributes:
        best: ``B`` selected responses (text).
        best_index: ``(B,)`` int64, which of the ``N`` draws was selected.
        scores: ``(B, N)`` float64 torch tensor of self-rewards.
        samples: all draws (:class:`~iclr25.sharpening.sampling.Samples`).
    """

    best: list[str]
    best_index: np.ndarray
    scores: object
    samples: Samples

    @property
    def best_scores(self) -> np.ndarray:
        """``(B,)`` self-reward of the selected responses."""
        return self.scores.numpy()[np.arange(len(self.best_index)), self.best_index]

    @property
    def best_lengths(self) -> np.ndarray:
        """``(B,)`` token length (EOS included) of the selected responses."""
        return self.samples.lengths.numpy()[np.arange(len(self.best_index)), self.best_index]


def best_of_n(sampler, tokenizer, prompts: Sequence[str], n: int, self_reward: SelfReward | None = None, *,
              temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 64, batch_size: int = 256,
              samples: Samples | None = None, chat_template: bool = False, progress: bool = False) -> BoNResult:
    """Best-of-N with a self-reward: sample ``n`` responses per prompt and keep the best.

    Args:
        sampler: where draws come from — a local ``*ForCausalLM`` (batched ``generate``) or any
            ``iclr25.core.lm.TextGenerator`` (e.g. ``OpenAIChatGenerator`` for a vLLM server; it returns text
            only, which is re-tokenised with ``tokenizer``).
        tokenizer: the tokenizer of the sampler and of the reference model that scores.
        prompts: ``B`` non-empty prompts.
        n: responses per prompt, >= 1.
        self_reward: the reward (default ``LogLikelihood(sampler)`` for a local model; required for a text
            backend — pass ``LogLikelihood(reference_model)``).
        temperature, top_p: sampling settings (paper: 1.0 and no truncation).
        max_new_tokens: response length limit.
        batch_size: sequences per ``generate`` call.
        samples: reuse draws already made (then nothing is sampled).
        chat_template: for a text backend, score with the tokenizer's chat template applied to each prompt.

    Returns:
        :class:`BoNResult`; the scores never come from the generation API.

    Raises:
        ValueError: ``n < 1``, empty prompts, or a text backend without a self-reward.
    """
    prompts = check_prompts(prompts)
    n = check_n(n)
    local = hasattr(sampler, "generate") and hasattr(sampler, "parameters")
    if self_reward is None:
        if not local:
            raise ValueError("a text-generation backend returns no log-likelihoods we may use: pass "
                             "self_reward=LogLikelihood(reference_model)")
        self_reward = LogLikelihood(sampler)
    if samples is None:
        if local:
            samples = sample_responses(sampler, tokenizer, prompts, n, temperature=temperature, top_p=top_p,
                                       max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress)
        else:
            from iclr25.core.lm import GenerationConfig

            cfg = GenerationConfig(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
            texts = sampler.generate([p for p in prompts for _ in range(n)], cfg)
            samples = samples_from_texts(tokenizer, prompts, [texts[b * n:(b + 1) * n] for b in range(len(prompts))],
                                         chat_template=chat_template)
    elif samples.n != n or samples.prompts != prompts:
        raise ValueError(f"the given samples hold {samples.n} responses for {len(samples.prompts)} prompts, "
                         f"not {n} for these {len(prompts)}")
    scores = self_reward(samples)
    idx = select_best(scores)
    best = [samples.responses[b][j] for b, j in enumerate(idx)]
    return BoNResult(best, idx, scores, samples)
