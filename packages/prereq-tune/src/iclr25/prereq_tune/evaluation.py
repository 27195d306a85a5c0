"""Evaluation: QA accuracy, the official metrics, generation with or without a knowledge adapter,
and long-form generation with a pluggable claim scorer.

* :func:`qa_accuracy` — greedy first answer token vs the gold answer's first token (the CPU-scale
  metric, spec §4.4), batched: one forward pass per batch, no generation loop.
* :func:`normalize_answer`, :func:`em_match` — the official QA metrics (official code detail 6):
  SQuAD-style normalisation, and PopQA's "any gold alias is a substring of the lower-cased
  prediction and 'i don't know' is not".
* :func:`generate_answers` — greedy decoding of answers with a chosen adapter stack (the skill
  LoRA alone, or a knowledge LoRA plugged back in: knowledge-controlled generation).
* :class:`ClaimScorer` and :func:`generate_longform` — long-form generation for entity lists
  (persons / medical entities); FActScore-style scoring is unreleased and needs an external model,
  so no scorer ships: pass your own.
"""

from __future__ import annotations

import contextlib
import re
import string
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from .data import OFFICIAL_FORMAT, PromptFormat, QAItem

__all__ = [
    "normalize_answer",
    "em_match",
    "qa_accuracy",
    "first_token_predictions",
    "first_token_accuracy",
    "completion_accuracy",
    "generate_answers",
    "qa_em_accuracy",
    "ClaimScorer",
    "load_scorer",
    "generate_longform",
    "adapter_stack",
]


def normalize_answer(s: str) -> str:
    """SQuAD-style normalisation: lower-case, drop punctuation and the articles a/an/the, collapse
    whitespace. ``normalize_answer("The  Beatles!") == "beatles"``."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def em_match(prediction: str, answers: Sequence[str]) -> bool:
    """The official PopQA match: some gold alias (lower-cased) is a substring of the lower-cased
    prediction, and the prediction does not contain "i don't know" (an abstention is never correct).

    ``em_match("it is Paris.", ["paris"])`` is True; ``em_match("i don't know, maybe paris", ["paris"])``
    is False.
    """
    p = prediction.lower()
    if "i don't know" in p or "i don’t know" in p:
        return False
    return any(a.lower() in p for a in answers if a)


@contextlib.contextmanager
def adapter_stack(model: Any, adapters: Sequence[str] | None) -> Iterator[Any]:
    """Run with exactly ``adapters`` active (``None`` or ``[]``: the base model alone, every
    adapter disabled); nothing trainable."""
    from .lora import _is_peft, active_adapters

    if not _is_peft(model):
        if adapters:
            raise ValueError(f"adapters {list(adapters)} requested but the model holds none")
        yield model
        return
    if not adapters:
        with model.disable_adapter():
            yield model
        return
    with active_adapters(model, list(adapters), trainable=()):
        yield model


def first_token_predictions(model: Any, tokenizer: Any, prompts: Sequence[str], *, adapters: Sequence[str] | None = None,
                            batch_size: int = 512) -> list[int]:
    """Greedy next-token id after each prompt (one batched forward per ``batch_size`` prompts;
    right padding, the logit at each prompt's last token).

    Returns:
        Token ids, one per prompt.
    """
    import torch

    out: list[int] = []
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with adapter_stack(model, adapters), torch.inference_mode():
            for i in range(0, len(prompts), batch_size):
                enc = tokenizer(list(prompts[i:i + batch_size]), add_special_tokens=True)["input_ids"]
                width = max(len(e) for e in enc)
                pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
                ids = torch.full((len(enc), width), pad, dtype=torch.long)
                att = torch.zeros_like(ids)
                for r, e in enumerate(enc):
                    ids[r, :len(e)] = torch.tensor(e)
                    att[r, :len(e)] = 1
                last = att.sum(1) - 1
                logits = model(input_ids=ids.to(dev), attention_mask=att.to(dev)).logits
                out += logits[torch.arange(len(enc), device=dev), last.to(dev)].argmax(-1).tolist()
    finally:
        model.train(was_training)
    return out


def _first_tokens(tokenizer: Any, texts: Sequence[str]) -> dict[str, int]:
    """First token id of each distinct text (one batched tokenizer call)."""
    uniq = list(dict.fromkeys(texts))
    if not uniq:
        return {}
    enc = tokenizer(uniq, add_special_tokens=False)["input_ids"]
    out = {}
    for t, ids in zip(uniq, enc):
        if not ids:
            raise ValueError(f"answer {t!r} tokenises to nothing")
        out[t] = int(ids[0])
    return out


def first_token_accuracy(tokenizer: Any, predictions: Sequence[int], gold: Sequence[Sequence[str]],
                         fmt: PromptFormat = OFFICIAL_FORMAT) -> float:
    """Fraction of ``predictions`` (token ids, from :func:`first_token_predictions`) equal to the first
    token of any answer in the matching ``gold`` list (rendered with ``fmt``). Lets one forward pass be
    scored against several answer versions (the same questions, version-1 vs version-2 answers).

    Raises:
        ValueError: no predictions, or ``gold`` of another length.
    """
    if not predictions or len(gold) != len(predictions):
        raise ValueError(f"first_token_accuracy: {len(gold)} gold answer lists for {len(predictions)} predictions")
    first = _first_tokens(tokenizer, [fmt.render_answer(a) for g in gold for a in g])
    ok = [p in {first[fmt.render_answer(a)] for a in g} for p, g in zip(predictions, gold)]
    return sum(ok) / len(ok)


def qa_accuracy(model: Any, tokenizer: Any, items: Sequence[QAItem], *, adapters: Sequence[str] | None = None,
                fmt: PromptFormat = OFFICIAL_FORMAT, gold: Sequence[Sequence[str]] | None = None,
                return_predictions: bool = False) -> float | tuple[float, list[int]]:
    """QA accuracy by the greedy first answer token (spec §4.4 metric).

    Args:
        model, tokenizer: the model (a ``PeftModel`` for adapter stacks) and its tokenizer.
        items: :class:`QAItem` questions; an item is correct when the argmax token after the prompt
            equals the first token of any of its answers.
        adapters: the adapter stack (``None``: the base model; ``["skill"]``: θ₀ + Δskill;
            ``["know_v1", "skill"]``: knowledge-controlled).
        fmt: the prompt format.
        gold: override the items' answers (e.g. score the same questions against version-2 answers).
        return_predictions: also return the predicted token ids.

    Returns:
        Accuracy in [0, 1] (and the predictions).

    Raises:
        ValueError: no items, or ``gold`` of another length.
    """
    if not items:
        raise ValueError("qa_accuracy: no items")
    golds = [it.answers for it in items] if gold is None else list(gold)
    if len(golds) != len(items):
        raise ValueError(f"qa_accuracy: {len(golds)} gold answer lists for {len(items)} items")
    pred = first_token_predictions(model, tokenizer, [fmt.render_prompt(it.question) for it in items], adapters=adapters)
    acc = first_token_accuracy(tokenizer, pred, golds, fmt)
    return (acc, pred) if return_predictions else acc


def completion_accuracy(model: Any, tokenizer: Any, probes: Sequence[tuple[str, str]], *,
                        adapters: Sequence[str] | None = None) -> float:
    """Statement completion: fraction of ``(prefix, value)`` probes whose greedy next token after
    ``prefix`` is ``value``'s first token (e.g. "X was born in" -> "paris")."""
    if not probes:
        raise ValueError("completion_accuracy: no probes")
    pred = first_token_predictions(model, tokenizer, [p for p, _ in probes], adapters=adapters)
    first = _first_tokens(tokenizer, [" " + v for _, v in probes])
    gold = [first[" " + v] for _, v in probes]
    return sum(int(a == b) for a, b in zip(pred, gold)) / len(probes)


def generate_answers(model: Any, tokenizer: Any, questions: Sequence[str], *, adapters: Sequence[str] | None = None,
                     fmt: PromptFormat = OFFICIAL_FORMAT, max_new_tokens: int = 16, batch_size: int = 16) -> list[str]:
    """Greedy answers to ``questions`` with the adapter stack ``adapters`` (``["skill"]``: the
    deployed model; ``["know_v2", "skill"]``: answers that follow knowledge version 2), through the
    core ``TransformersGenerator``; text after the prompt, up to EOS.
    """
    from iclr25.core.lm import GenerationConfig, TransformersGenerator

    gen = TransformersGenerator(model, tokenizer, batch_size=batch_size)
    with adapter_stack(model, adapters):
        return gen.generate([fmt.render_prompt(q) for q in questions],
                            GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0))


def qa_em_accuracy(predictions: Sequence[str], items: Sequence[QAItem]) -> float:
    """Mean :func:`em_match` of generated answers against the items' aliases."""
    if len(predictions) != len(items) or not items:
        raise ValueError(f"{len(predictions)} predictions for {len(items)} items")
    return sum(em_match(p, it.answers) for p, it in zip(predictions, items)) / len(items)


@runtime_checkable
class ClaimScorer(Protocol):
    """Scores a long-form generation: how many of its atomic claims are supported.

    ``score(entity, text)`` returns ``{"supported": int, "claims": int}`` (the FActScore-style
    accuracy is ``supported / claims``; ``claims`` is the paper's "# claims").
    """

    def score(self, entity: str, text: str) -> dict[str, int]: ...


def load_scorer(spec: str) -> ClaimScorer:
    """Import a scorer ``"package.module:attr"`` (a :class:`ClaimScorer` instance, a class, or a
    function ``(entity, text) -> dict``).

    Raises:
        ValueError: a malformed spec or an object that is not a scorer.
    """
    import importlib

    mod, _, attr = spec.partition(":")
    if not mod or not attr:
        raise ValueError(f"--scorer {spec!r} must be 'module:attribute'")
    try:
        obj = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--scorer {spec!r}: {e}") from None
    if isinstance(obj, type):
        obj = obj()
    if isinstance(obj, ClaimScorer):
        return obj
    if callable(obj):
        class _Fn:
            def score(self, entity: str, text: str) -> dict[str, int]:
                return obj(entity, text)

        return _Fn()
    raise ValueError(f"--scorer {spec!r} is neither a ClaimScorer nor a function")


def generate_longform(generator: Any, entities: Sequence[str], *, template: str = "Generate a biography for {entity}.",
                      max_new_tokens: int = 512, scorer: ClaimScorer | None = None) -> list[dict[str, Any]]:
    """Generate one long-form text per entity and score it with ``scorer`` when given.

    Args:
        generator: a core ``TextGenerator`` (``TransformersGenerator`` on the skill-LoRA model, or
            ``OpenAIChatGenerator`` / ``OpenAICompletionGenerator`` on a vLLM server that serves
            the skill adapter as a LoRA module).
        entities: names (e.g. the mirrored ``bio_skill_test.json``).
        template: prompt with ``{entity}``.
        max_new_tokens: the paper's evaluation uses 128 for QA; biographies need more.
        scorer: a :class:`ClaimScorer`.

    Returns:
        ``[{"entity", "prompt", "output", "supported"?, "claims"?}]``.

    Raises:
        ValueError: a template without ``{entity}``, or a scorer result without the two counts.
    """
    from iclr25.core.lm import GenerationConfig

    if "{entity}" not in template:
        raise ValueError(f"--template {template!r} must contain {{entity}}")
    prompts = [template.replace("{entity}", e) for e in entities]
    outs = generator.generate(prompts, GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0))
    rows = []
    for e, p, o in zip(entities, prompts, outs):
        row: dict[str, Any] = {"entity": e, "prompt": p, "output": o}
        if scorer is not None:
            s = scorer.score(e, o)
            if not isinstance(s, dict) or not {"supported", "claims"} <= set(s):
                raise ValueError(f"the scorer returned {s!r} for {e!r}; expected {{'supported': int, 'claims': int}}")
            row.update(supported=int(s["supported"]), claims=int(s["claims"]))
        rows.append(row)
    return rows
