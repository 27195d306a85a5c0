"""Measuring a policy on the trap task: exact enumeration of the 100 answers, temperature-1 samples and
greedy decoding, all scored by the reference model's forward pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bon import select_best
from .exact import bon_output_law, bon_success_probability, enumerate_responses, sharpness_report
from .rewards import LogLikelihood, score_sequences
from .sampling import Samples, sample_responses
from .task import TrapArithmeticTask

__all__ = ["TrapEval", "trap_correct", "evaluate_on_trap", "bon_accuracy_curve", "bon_law_correct", "bon_experiment"]


def trap_correct(samples: Samples, pairs: np.ndarray) -> np.ndarray:
    """``(B, N)`` bool: the response is exactly the two-digit sum followed by EOS."""
    c = TrapArithmeticTask.correct_index(pairs)
    fin = samples.finished.numpy()
    ok = np.array([[t == f"{c[b]:02d}" for t in row] for b, row in enumerate(samples.responses)])
    return ok & fin


@dataclass
class TrapEval:
    """What :func:`evaluate_on_trap` measures for one policy (all on the same test prompts).

    Attributes:
        logprobs: ``(B, 100)`` exact ``log pi_hat(answer + EOS | x)``.
        mode_mass: ``(B,)`` ``pi_hat(y*|x)`` with ``y*`` the *base* argmax.
        sharpened_fraction: fraction with ``pi_hat(y*|x) > 1/2``.
        expected_accuracy: mean ``pi_hat(a+b | x)`` (exact temperature-1 accuracy).
        sample_accuracy: accuracy of the temperature-1 samples drawn.
        sample_logp_base: mean ``log pi_base`` of those samples (nats).
        sample_length: mean response length of the samples (tokens, EOS included).
        greedy_accuracy: accuracy of greedy decoding.
        greedy_logp_base: mean ``log pi_base`` of the greedy outputs (nats).
        outside_mass: mean mass outside the 100 answers.
    """

    logprobs: object
    mode_mass: np.ndarray
    sharpened_fraction: float
    expected_accuracy: float
    sample_accuracy: float
    sample_logp_base: float
    sample_length: float
    greedy_accuracy: float
    greedy_logp_base: float
    outside_mass: float

    def summary(self) -> dict:
        return {k: float(getattr(self, k)) for k in (
            "sharpened_fraction", "expected_accuracy", "sample_accuracy", "sample_logp_base", "sample_length",
            "greedy_accuracy", "greedy_logp_base", "outside_mass")} | {"mean_mode_mass": float(self.mode_mass.mean())}


def evaluate_on_trap(policy, base, tokenizer, task: TrapArithmeticTask, pairs: np.ndarray, base_logprobs, *,
                     n_samples: int = 4, batch_size: int = 1024) -> TrapEval:
    """Exact, sampled and greedy measurements of ``policy`` on the trap prompts ``pairs``.

    Args:
        policy: the model to measure (``pi_hat``; the base itself for the baseline).
        base: ``pi_base`` (scores every response: the likelihood-lift metric).
        tokenizer: the byte tokenizer.
        task: the trap task.
        pairs: ``(B, 2)`` test operands.
        base_logprobs: ``(B, 100)`` exact base log-probs (defines ``y*``).
        n_samples: temperature-1 samples per prompt.
    """
    prompts = task.prompts(pairs)
    lp = enumerate_responses(policy, tokenizer, prompts, task.candidates)
    rep = sharpness_report(lp, base_logprobs, delta=0.5, correct=task.correct_index(pairs))
    ystar = np.argmax(np.asarray(base_logprobs), -1)
    mode_mass = np.exp(lp.numpy()[np.arange(len(pairs)), ystar])
    s = sample_responses(policy, tokenizer, prompts, n_samples, temperature=1.0, max_new_tokens=4,
                         batch_size=batch_size)
    lpb = score_sequences(base, s.input_ids, s.attention_mask, s.response_mask)
    g = sample_responses(policy, tokenizer, prompts, 1, temperature=0.0, max_new_tokens=4, batch_size=batch_size)
    lpg = score_sequences(base, g.input_ids, g.attention_mask, g.response_mask)
    return TrapEval(lp, mode_mass, rep.sharpened_fraction, float(rep.expected_sample_accuracy),
                    float(trap_correct(s, pairs).mean()), float(lpb.mean()), float(s.lengths.double().mean()),
                    float(trap_correct(g, pairs).mean()), float(lpg.mean()), rep.mean_outside_mass)


def bon_accuracy_curve(scores, correct: np.ndarray, ns) -> dict[int, float]:
    """BoN accuracy for each ``N`` in ``ns`` from the prefixes of the draws (first-index ties).

    Args:
        scores: ``(B, M)`` self-rewards of ``M >= max(ns)`` draws.
        correct: ``(B, M)`` bool, draw ``j`` of prompt ``b`` is correct.
    """
    out = {}
    rows = np.arange(correct.shape[0])
    for n in ns:
        out[int(n)] = float(correct[rows, select_best(scores, n)].mean())
    return out


def bon_law_correct(base_logprobs, correct_index: np.ndarray, n: int) -> np.ndarray:
    """``(B,)`` probability that likelihood-BoN with ``n`` draws returns the correct answer (exact law,
    spec §6.3, with the unlisted mass counted as lower-likelihood); when the correct answer is the base's
    argmax this is ``1 - (1 - pi(y*))^n`` (less the unlisted mass's share)."""
    p = np.exp(np.asarray(base_logprobs, dtype=np.float64))
    law = bon_output_law(p, n)
    return law[np.arange(len(p)), correct_index]


def bon_experiment(base, task, test: np.ndarray, base_lp, ns) -> dict:
    """The trap reproduction's inference-time BoN on ``test``: measured accuracy per N (log-likelihood
    self-reward on the base's own samples), the mean ``log pi_base`` of the selection, and the exact BoN law
    of the learned base (per prompt and mean; the issue's ``1{y*=a+b}(1-(1-p*)^N)`` beside it)."""
    s = sample_responses(base.model, base.tokenizer, task.prompts(test), max(ns), max_new_tokens=4, batch_size=1024)
    scores = LogLikelihood(base.model, batch_size=2048)(s)
    correct = trap_correct(s, test)
    acc = bon_accuracy_curve(scores, correct, ns)
    sel_lp = {n: float(scores.numpy()[np.arange(len(test)), select_best(scores, n)].mean()) for n in ns}
    c = task.correct_index(test)
    lpn = base_lp.numpy()
    ystar = lpn.argmax(-1)
    pstar = np.exp(lpn.max(-1))
    law = {n: bon_law_correct(lpn, c, n) for n in ns}
    formula = {n: (ystar == c) * bon_success_probability(pstar, n) for n in ns}
    return {"accuracy": acc, "selected_logp": sel_lp, "law": {n: law[n].tolist() for n in ns},
            "formula_mean": {n: float(formula[n].mean()) for n in ns},
            "law_mean": {n: float(law[n].mean()) for n in ns}}
