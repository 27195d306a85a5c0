"""The CPU-scale task with a known preference: two-digit addition (spec §4.1).

Prompts ``"ab+cd="`` for ``a + b`` with ``a, b in 0..29`` (900 prompts, operands written with two
digits); the response is the sum as two digits (``"07"``) followed by EOS. The true utility of a
response is ``u(y) = -|y - (a + b)|`` (``-100`` for anything that is not two digits), so the true
ranking of any sample set is known.

Per seed: a shuffled split into 200 test prompts, 120 labelled seed prompts (the SFT set) and 580
unlabeled prompts in ``T`` equal parts (one per round); M0 is the core's tiny GPT-2
(``n_layer=3, n_embd=96, n_head=4, n_positions=16``) pre-trained from scratch on a *noisy* corpus
(6 answers per prompt, correct with probability 0.2, otherwise the sum plus an offset drawn
uniformly from ``{-10, -2, -1, +2, +10, U{-20..20}}``, clipped at 0), so it knows the format but is
unsure of the sum; M1 = SFT(M0) on the 120 correct seed examples. Both are cached per seed.

Sampling and greedy decoding are restricted to the ten digit tokens and exactly two new tokens,
through the model's ``generation_config.suppress_tokens`` (so the core ``TransformersGenerator``
and any ``model.generate`` call respect it, also after ``save_pretrained``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["AdditionTask", "toy_lm_spec", "toy_models", "digit_only", "INVALID_UTILITY"]

log = logging.getLogger(__name__)

#: utility of a response that is not a two-digit number
INVALID_UTILITY = -100.0
_OFFSETS = (-10, -2, -1, 2, 10)  # plus U{-20..20} as the sixth option


@dataclass(frozen=True)
class AdditionTask:
    """The addition task's data for one seed (spec §4.1).

    Args:
        seed: split and corpus seed.
        n_operand: operands range over ``0..n_operand-1`` (30: 900 prompts).
        n_test, n_seed: held-out test prompts and labelled SFT prompts (200, 120).
        iterations: ``T``, the number of unlabeled parts (3).
        p_correct: probability that a corpus answer is correct (0.2).
        corpus_samples: corpus answers per prompt (6).
    """

    seed: int = 0
    n_operand: int = 30
    n_test: int = 200
    n_seed: int = 120
    iterations: int = 3
    p_correct: float = 0.2
    corpus_samples: int = 6
    _order: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        n = self.n_operand ** 2
        if self.n_operand < 2 or self.n_operand > 50:
            raise ValueError(f"AdditionTask.n_operand={self.n_operand} must be in 2..50 (sums stay two digits)")
        if self.n_test < 1 or self.n_seed < 1 or self.n_test + self.n_seed + self.iterations * 2 > n:
            raise ValueError(f"AdditionTask: {self.n_test} test + {self.n_seed} seed prompts leave too few of "
                             f"{n} for {self.iterations} unlabeled parts")
        if not 0 <= self.p_correct <= 1:
            raise ValueError(f"AdditionTask.p_correct={self.p_correct} must be in [0, 1]")
        rng = np.random.default_rng(self.seed)
        object.__setattr__(self, "_order", tuple(int(i) for i in rng.permutation(n)))

    # prompts ---------------------------------------------------------------------------------
    @staticmethod
    def prompt(a: int, b: int) -> str:
        """The prompt text of ``a + b``: ``"07+12="``."""
        return f"{a:02d}+{b:02d}="

    @staticmethod
    def answer(a: int, b: int) -> str:
        """The correct response: the sum as two digits."""
        return f"{a + b:02d}"

    @staticmethod
    def operands(prompt: str) -> tuple[int, int]:
        """``"07+12="`` -> ``(7, 12)``.

        Raises:
            ValueError: a prompt not of this task.
        """
        if len(prompt) != 6 or prompt[2] != "+" or prompt[5] != "=" or not (prompt[:2] + prompt[3:5]).isdigit():
            raise ValueError(f"not an addition prompt: {prompt!r}")
        return int(prompt[:2]), int(prompt[3:5])

    def _pairs(self, idx: Sequence[int]) -> list[tuple[int, int]]:
        return [(i // self.n_operand, i % self.n_operand) for i in idx]

    @property
    def test_prompts(self) -> list[str]:
        """The held-out test prompts (``n_test``)."""
        return [self.prompt(a, b) for a, b in self._pairs(self._order[:self.n_test])]

    @property
    def seed_prompts(self) -> list[str]:
        return [self.prompt(a, b) for a, b in self._pairs(self._order[self.n_test:self.n_test + self.n_seed])]

    def sft_data(self) -> list[tuple[str, str]]:
        """The labelled seed set: ``(prompt, correct answer)`` for the ``n_seed`` prompts."""
        return [(self.prompt(a, b), self.answer(a, b))
                for a, b in self._pairs(self._order[self.n_test:self.n_test + self.n_seed])]

    def unlabeled_splits(self) -> list[list[str]]:
        """The unlabeled prompts in ``iterations`` (near-)equal parts, one per round."""
        rest = self._order[self.n_test + self.n_seed:]
        return [[self.prompt(a, b) for a, b in self._pairs(part)]
                for part in np.array_split(np.asarray(rest), self.iterations)]

    def noisy_corpus(self) -> list[tuple[str, str]]:
        """M0's pre-training corpus: ``corpus_samples`` answers for every prompt, each correct with
        probability ``p_correct``, otherwise the sum plus an offset drawn uniformly from
        ``{-10, -2, -1, +2, +10, U{-20..20}}`` (clipped at 0)."""
        rng = np.random.default_rng(10_000 + self.seed)
        n = self.n_operand ** 2
        a = np.repeat(np.arange(n) // self.n_operand, self.corpus_samples)
        b = np.repeat(np.arange(n) % self.n_operand, self.corpus_samples)
        s = a + b
        correct = rng.random(len(s)) < self.p_correct
        which = rng.integers(0, len(_OFFSETS) + 1, size=len(s))
        wide = rng.integers(-20, 21, size=len(s))
        off = np.where(which < len(_OFFSETS), np.asarray(_OFFSETS)[np.minimum(which, len(_OFFSETS) - 1)], wide)
        y = np.where(correct, s, np.clip(s + off, 0, 99))
        order = rng.permutation(len(s))
        return [(self.prompt(int(a[i]), int(b[i])), f"{int(y[i]):02d}") for i in order]

    # utility ---------------------------------------------------------------------------------
    def utility(self, prompt: str, responses: Sequence[str]) -> np.ndarray:
        """True utility ``-|y - (a + b)|`` of each response (``INVALID_UTILITY`` if not two digits).

        Returns:
            ``(len(responses),)`` float64.
        """
        a, b = self.operands(prompt)
        out = np.full(len(responses), INVALID_UTILITY)
        for i, r in enumerate(responses):
            r = r.strip()
            if len(r) == 2 and r.isdigit():
                out[i] = -abs(int(r) - (a + b))
        return out

    def accuracy(self, prompts: Sequence[str], answers: Sequence[str]) -> float:
        """Exact-match accuracy of ``answers`` on ``prompts``."""
        if not prompts:
            raise ValueError("no prompts")
        return float(np.mean([ans.strip() == self.answer(*self.operands(p)) for p, ans in zip(prompts, answers)]))

    def key(self) -> str:
        d = {k: v for k, v in asdict(self).items() if k not in ("_order", "iterations")}  # splits of T do not change M0/M1
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def toy_lm_spec(seed: int, *, steps: int | None = None):
    """M0's :class:`~iclr25.core.lm.TinyLMSpec`: byte tokenizer, ``n_layer=3, n_embd=96, n_head=4,
    n_positions=16``, dropout 0, one sequence per example, 8 epochs, AdamW lr 2e-3, batch 128
    (spec §4.1). ``steps`` overrides the epoch count (tests)."""
    from iclr25.core.lm import TinyLMSpec

    return TinyLMSpec(tokenizer="byte", n_layer=3, n_embd=96, n_head=4, n_positions=16, dropout=0.0,
                      packing="sequences", seq_len=16, steps=steps, epochs=8.0, batch_size=128, lr=2e-3,
                      seed=seed)


def digit_only(model: Any, tokenizer: Any) -> Any:
    """Restrict ``model.generate`` to the ten digit tokens (``generation_config.suppress_tokens``
    holds every other id, EOS included, so exactly ``max_new_tokens`` digits are produced)."""
    digits = {tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)}
    vocab = model.config.vocab_size
    model.generation_config.suppress_tokens = [i for i in range(vocab) if i not in digits]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def toy_models(task: AdditionTask, *, cache: str | Path | None = None, m0_steps: int | None = None,
               sft_epochs: float | None = None, progress: bool = True) -> dict[str, Any]:
    """M0 and M1 of the addition task for ``task.seed``, pre-trained once and cached.

    M0: :func:`iclr25.core.lm.cached_tiny_lm` on :meth:`AdditionTask.noisy_corpus` (loss on the
    answer and EOS). M1: :func:`iclr25.cream.training.train_sft` of M0 on
    :meth:`AdditionTask.sft_data` with :meth:`CreamConfig.toy`'s SFT settings (20 epochs, lr 5e-4,
    batch 32), cached next to M0. ``m0_steps`` / ``sft_epochs`` shrink both (tests).

    Returns:
        ``{"m0", "m1", "tokenizer", "m0_dir", "m1_dir", "m0_seconds", "m1_seconds", "cached"}``;
        ``*_seconds`` are the one-time training times (0 when loaded from the cache).
    """
    import torch
    from transformers import AutoModelForCausalLM

    from iclr25.core.data import cache_dir
    from iclr25.core.lm import cached_tiny_lm
    from iclr25.core.lm.pretrain import corpus_sha256, tiny_lm_dir

    from .config import CreamConfig
    from .training import train_sft

    spec = toy_lm_spec(task.seed, steps=m0_steps)
    t = time.perf_counter()
    corpus = [p + r for p, r in task.noisy_corpus()]  # LM pre-training on the corpus text (EOS appended)

    d0 = tiny_lm_dir("cream", spec, corpus_sha256(corpus), cache)
    m0_cached = (d0 / "config.json").is_file()
    m0, tok, m0_dir = cached_tiny_lm("cream", corpus, spec, cache=cache, progress=progress)
    m0_seconds = 0.0 if m0_cached else time.perf_counter() - t
    digit_only(m0, tok)
    over = {} if sft_epochs is None else {"sft_epochs": sft_epochs}
    cfg = CreamConfig.toy(seed=task.seed, **over).sft_train(device="cpu")
    # disable_dropout (DPO stages only) is left out of the key: SFT does not read it, so M1s cached before it
    # existed are the same models
    sft_cfg = {k: v for k, v in asdict(cfg).items() if k != "disable_dropout"}
    key = hashlib.sha256(json.dumps([m0_dir.name, task.key(), sft_cfg, "m1-v1"], sort_keys=True).encode()
                         ).hexdigest()[:16]
    root = Path(cache) if cache is not None else cache_dir()
    d1 = root / "cream" / f"m1-{key}"
    t = time.perf_counter()
    m1_cached = (d1 / "config.json").is_file()
    if m1_cached:
        m1 = AutoModelForCausalLM.from_pretrained(d1).eval()
        m1_seconds = 0.0
    else:
        m1 = AutoModelForCausalLM.from_pretrained(m0_dir)
        torch.manual_seed(task.seed)
        res = train_sft(m1, tok, task.sft_data(), cfg, progress=progress)
        m1 = res.model.cpu().eval()
        digit_only(m1, tok)
        tmp = d1.with_name(d1.name + f".tmp-{time.time_ns()}")
        m1.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "sft_history.json").write_text(json.dumps(res.summary(), indent=2))
        if d1.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(d1)
        m1_seconds = time.perf_counter() - t
    digit_only(m1, tok)
    return {"m0": m0.eval(), "m1": m1, "tokenizer": tok, "m0_dir": m0_dir, "m1_dir": d1, "m0_seconds": m0_seconds,
            "m1_seconds": m1_seconds, "cached": m0_cached and m1_cached}
