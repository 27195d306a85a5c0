"""Evaluation: greedy exact match on GSM8K / multiple choice / the toy task, and the toy's "gt-tau"
(how well the self-reward ranks responses by their true utility)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .parsers import CHOICE_INSTRUCTION, GSM8K_INSTRUCTION, extract_choice_answer, extract_gsm8k_answer

__all__ = ["evaluate_items", "format_question", "ToyEvaluator"]


def format_question(item: Any, task: str) -> str:
    """The prompt sent to the model: our instruction, the question and (multiple choice) the options."""
    if task == "gsm8k":
        return f"{GSM8K_INSTRUCTION}\n\nProblem: {item.question}\n"
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    opts = "\n".join(f"{letters[i]}. {c}" for i, c in enumerate(item.choices))
    return f"{CHOICE_INSTRUCTION}\n\nQuestion: {item.question}\n{opts}\n"


def evaluate_items(generator: Any, items: Sequence[Any], task: str, *, max_new_tokens: int = 512
                   ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Greedy decoding and exact match of the extracted answer.

    Args:
        generator: a core ``TextGenerator``.
        items: :class:`~iclr25.cream.data.EvalItem` list.
        task: ``"gsm8k"`` or ``"choice"``.
        max_new_tokens: the most tokens per answer.

    Returns:
        ``({"accuracy", "n", "n_unparsed"}, predictions)`` with one ``{question, answer,
        prediction, completion, correct}`` per item.
    """
    from iclr25.core.lm.generation import GenerationConfig

    prompts = [format_question(it, task) for it in items]
    outs = generator.generate(prompts, GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0, top_p=1.0))
    preds, rows = [], []
    for it, text in zip(items, outs):
        p = extract_gsm8k_answer(text) if task == "gsm8k" else extract_choice_answer(text, len(it.choices))
        preds.append(p)
        rows.append({"question": it.question, "answer": it.answer, "prediction": p, "completion": text,
                     "correct": p == it.answer})
    acc = float(np.mean([r["correct"] for r in rows])) if rows else float("nan")
    return {"accuracy": acc, "n": len(rows), "n_unparsed": sum(p is None for p in preds)}, rows


@dataclass
class ToyEvaluator:
    """Evaluator of the addition task for :func:`~iclr25.cream.loop.self_rewarding_loop`.

    ``evaluator(model, reference)`` returns:

    - ``accuracy``: greedy exact match on the test prompts;
    - ``gt_tau``: mean over test prompts of Kendall tau-b between the model's self-reward of
      ``n_samples`` responses it samples (``log pi - log pi_ref``; the length-normalised
      ``log pi`` for M0, ``reference=None``) and their true utility; prompts whose responses are all
      equal (tau undefined) are left out, and ``gt_tau_n`` counts the prompts used;
    - ``sample_accuracy``: the share of those samples that are correct.

    The evaluation samples use one fixed seed for every model and method.
    """

    task: Any
    tokenizer: Any
    n_samples: int = 5
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 12345
    batch_size: int = 2048

    def __call__(self, model: Any, reference: Any) -> dict[str, float]:
        from iclr25.core.lm import GenerationConfig, TransformersGenerator

        from .consistency import kendall_tau_b
        from .rewards import score_responses

        prompts = self.task.test_prompts
        gen = TransformersGenerator(model, self.tokenizer, batch_size=self.batch_size)
        greedy = gen.generate(prompts, GenerationConfig(max_new_tokens=2, temperature=0.0))
        acc = self.task.accuracy(prompts, greedy)
        flat_p = [p for p in prompts for _ in range(self.n_samples)]
        flat_r = gen.generate(flat_p, GenerationConfig(max_new_tokens=2, temperature=self.temperature,
                                                       top_p=self.top_p, seed=self.seed))
        if reference is None:
            r = score_responses(model, self.tokenizer, flat_p, flat_r, average=True, batch_size=self.batch_size)
        else:
            r = score_responses(model, self.tokenizer, flat_p, flat_r, batch_size=self.batch_size) - \
                score_responses(reference, self.tokenizer, flat_p, flat_r, batch_size=self.batch_size)
        r = r.numpy().reshape(len(prompts), self.n_samples)
        u = np.stack([self.task.utility(p, flat_r[i * self.n_samples:(i + 1) * self.n_samples])
                      for i, p in enumerate(prompts)])
        tau = kendall_tau_b(r, u)
        ok = np.isfinite(tau)
        return {"accuracy": acc, "gt_tau": float(tau[ok].mean()) if ok.any() else float("nan"),
                "gt_tau_n": int(ok.sum()), "sample_accuracy": float((u == 0).mean())}
