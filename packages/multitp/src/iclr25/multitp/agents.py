"""Scripted agents: simulated responders with a known truth, answering in free text (ours, [design]).

A :class:`ScriptedAgent` has, for each language ``l`` and category ``d``, a preference ``p*_l,d`` (percent
of decisions for the positive group), a refusal rate ``rho``, an either-rate ``e``, a rate ``u`` of
unparseable answers and a left bias ``b``. For each vignette it draws, from uniforms that are a
deterministic function of (seed, language, vignette id) — independent of batching and order:

- with probability ``rho``: a refusal ("As an AI, I cannot ...");
- else with probability ``e``: "either" ("Either five dogs or five people; ...");
- else with probability ``u``: text no rule can parse;
- else a decision: the positive group with probability ``p* + b/2`` when it is on the left and
  ``p* - b/2`` when it is on the right. With both orders of every pair (the paper's design) the bias
  cancels in P; ``choosing_the_first`` = 50 + 50 b (percent).

Answers are free text ("Save the five dogs.", "The two girls. ...") so the parser runs. The agent is
a :class:`~iclr25.core.lm.generation.TextGenerator` factory: ``agent(lang, system_prompt)`` returns a
generator for that language, which looks prompts up in the vignettes it was given.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from .spec import CATEGORIES, LANGUAGES

__all__ = ["ScriptedAgent", "random_chooser", "always_left", "human_like_agent"]

_DECIDE = ("Save the {x}.", "The {x}. Saving them is the lesser harm.", "I would save the {x}, because the "
           "choice has to be made.", "{X}.", "It should save the {x}.")
_REFUSE = ("As an AI, I cannot decide whose life is worth more.", "I'm sorry, but I cannot choose between "
           "these lives.", "Neither group should be chosen; the car should try to stop.")
_EITHER = ("Either the {l} or the {r}; both choices are equally tragic.", "{L} or {R}, it makes no difference.")
_NOISE = ("Hmm, that is a hard question to think about.", "Cars should have better brakes.",
          "This depends on many things.")


def _the(x: str) -> str:
    return x[2:] if x.startswith("a ") else x[3:] if x.startswith("an ") else x


@lru_cache(maxsize=1 << 18)
def _uniforms(seed: int, lang: str, vid: str) -> tuple[float, float, float]:
    h = hashlib.sha256(f"{seed}|{lang}|{vid}".encode()).digest()
    return tuple(int.from_bytes(h[i:i + 8], "big") / 2.0**64 for i in (0, 8, 16))  # type: ignore[return-value]


def _check_rate(x: float, name: str) -> float:
    v = float(x)
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise ValueError(f"{name}={x!r} must be a probability in [0, 1]")
    return v


class ScriptedAgent:
    """A seeded, deterministic responder with known preferences (see the module docstring).

    Args:
        preferences: ``{category: p* in percent}`` for every language, or ``{lang: {category: p*}}``.
        refusal: ``rho`` in [0, 1] — a number, ``{category: rho}`` or ``{lang: {category: rho}}``.
        either: either-rate ``e`` (same forms).
        unparseable: rate ``u`` of answers no rule parses (same forms).
        left_bias: ``b`` in [0, 1]; needs ``b/2 <= min(p*, 1 - p*)`` (as fractions) in every cell.
        seed: seed of the draws.
        name: the model name recorded in results.

    Raises:
        ValueError: a missing category, a value outside its range, ``rho + e + u > 1`` or a bias that
            does not fit a preference (naming the language and category).
    """

    def __init__(self, preferences: Mapping[str, Any], *, refusal: Any = 0.0, either: Any = 0.0,
                 unparseable: Any = 0.0, left_bias: float = 0.0, seed: int = 0,
                 name: str = "scripted-agent") -> None:
        self.seed, self.name = int(seed), name
        self.left_bias = _check_rate(left_bias, "left_bias")
        self._pref = self._table(preferences, "preferences", scale=100.0)
        self._rho = self._table(refusal, "refusal")
        self._either = self._table(either, "either")
        self._noise = self._table(unparseable, "unparseable")
        langs = set(self._pref) | set(self._rho) | set(self._either) | set(self._noise)
        if "*" not in self._pref:
            langs.discard("*")
        for lang in sorted(langs):
            for c in CATEGORIES:
                r, e, u = (self._get(t, lang, c) for t in (self._rho, self._either, self._noise))
                if r + e + u > 1 + 1e-12:
                    raise ValueError(f"{lang}/{c}: refusal + either + unparseable = {r + e + u} > 1")
                p = self._get(self._pref, lang, c)
                if self.left_bias / 2 > min(p, 1 - p) + 1e-12:
                    raise ValueError(f"{lang}/{c}: left_bias/2 = {self.left_bias / 2} exceeds min(p*, 1-p*) = "
                                     f"{min(p, 1 - p):.4f}; lower the bias or move p* inside [b/2, 1-b/2]")

    @staticmethod
    def _table(x: Any, name: str, scale: float = 1.0) -> dict[str, dict[str, float]]:
        """Normalise to ``{lang or "*": {category: value in [0, 1]}}``."""
        def cell(v: Any, where: str) -> float:
            f = float(v) / scale
            if not (math.isfinite(f) and 0.0 <= f <= 1.0):
                raise ValueError(f"{name}{where}={v!r} must be in [0, {scale:g}]")
            return f

        if isinstance(x, (int, float)):
            return {"*": {c: cell(x, "") for c in CATEGORIES}}
        if not isinstance(x, Mapping) or not x:
            raise ValueError(f"{name} must be a number or a non-empty mapping")
        if all(k in CATEGORIES for k in x):
            miss = [c for c in CATEGORIES if c not in x]
            if miss and scale != 1.0:
                raise ValueError(f"{name} lacks categories {miss}")
            return {"*": {c: cell(x.get(c, 0.0), f"[{c}]") for c in CATEGORIES}}
        out: dict[str, dict[str, float]] = {}
        for lang, v in x.items():
            if lang not in LANGUAGES and lang != "*":
                raise ValueError(f"{name}: {lang!r} is neither a category nor one of the 107 language codes")
            if isinstance(v, (int, float)):
                out[lang] = {c: cell(v, f"[{lang}]") for c in CATEGORIES}
            else:
                miss = [c for c in CATEGORIES if c not in v]
                if miss and scale != 1.0:
                    raise ValueError(f"{name}[{lang}] lacks categories {miss}")
                out[lang] = {c: cell(v.get(c, 0.0), f"[{lang}][{c}]") for c in CATEGORIES}
        return out

    @staticmethod
    def _get(t: dict[str, dict[str, float]], lang: str, c: str) -> float:
        row = t.get(lang) or t.get("*")
        if row is None:
            raise ValueError(f"no value for language {lang!r} (give it, or a language-independent value)")
        return row[c]

    # --- truth -------------------------------------------------------------------------------------
    def true_preferences(self, lang: str) -> dict[str, float]:
        """``p*`` in percent for ``lang``."""
        return {c: 100.0 * self._get(self._pref, lang, c) for c in CATEGORIES}

    def rates(self, lang: str, category: str) -> tuple[float, float, float]:
        """``(rho, e, u)`` for a language and category."""
        return tuple(self._get(t, lang, category) for t in (self._rho, self._either, self._noise))  # type: ignore

    # --- behaviour ---------------------------------------------------------------------------------
    def decide(self, vignette: Any, lang: str | None = None) -> str:
        """The agent's label for one vignette (``left``/``right``/``either``/``neither``/``other``)."""
        lang = lang or vignette.lang
        u1, u2, _ = _uniforms(self.seed, lang, vignette.id)
        rho, e, u = self.rates(lang, vignette.category)
        if u1 < rho:
            return "neither"
        if u1 < rho + e:
            return "either"
        if u1 < rho + e + u:
            return "other"
        p = self._get(self._pref, lang, vignette.category)
        pos_left = vignette.positive_side == "left"
        q = p + self.left_bias / 2 if pos_left else p - self.left_bias / 2
        pos = u2 < q
        return "left" if pos == pos_left else "right"

    def answer(self, vignette: Any, lang: str | None = None) -> str:
        """Free-text answer (English) for one vignette."""
        lang = lang or vignette.lang
        lab = self.decide(vignette, lang)
        k = int(_uniforms(self.seed, lang, vignette.id)[2] * 1e6)
        if lab == "neither":
            return _REFUSE[k % len(_REFUSE)]
        if lab == "other":
            return _NOISE[k % len(_NOISE)]
        if lab == "either":
            t = _EITHER[k % len(_EITHER)]
            return t.format(l=_the(vignette.left), r=_the(vignette.right), L=vignette.left.capitalize(),
                            R=vignette.right)
        x = vignette.left if lab == "left" else vignette.right
        t = _DECIDE[k % len(_DECIDE)]
        return t.format(x=_the(x), X=x.capitalize())

    def labels(self, vignettes: Sequence[Any], lang: str | None = None) -> list[str]:
        return [self.decide(v, lang) for v in vignettes]

    def __call__(self, lang: str, system_prompt: str | None = None, *, vignettes: Sequence[Any] | None = None,
                 tag: str | None = None) -> _AgentBackend:
        """A :class:`~iclr25.core.lm.generation.TextGenerator` answering as this agent in ``lang``.

        Args:
            lang: the language.
            system_prompt: recorded (the agent's behaviour does not depend on it).
            vignettes: the vignettes whose prompts it will see (default: the English 460, paraphrase 0).
            tag: a prefix the prompts carry (e.g. the pseudo-translation tag ``"[de] "``), stripped before lookup.
        """
        if vignettes is None:  # prompts are looked up by text; the answer uses this backend's language
            from .vignettes import generate_vignettes

            vignettes = generate_vignettes("en")
        return _AgentBackend(self, lang, vignettes, system_prompt, tag)


class _AgentBackend:
    def __init__(self, agent: ScriptedAgent, lang: str, vignettes: Sequence[Any], system_prompt: str | None,
                 tag: str | None) -> None:
        self.agent, self.lang, self.system_prompt, self.tag = agent, lang, system_prompt, tag
        self.name = agent.name
        self.by_text: dict[str, Any] = {}
        for v in vignettes:
            self.by_text[v.prompt] = v
            self.by_text[v.prompt_en] = v
        self.n_calls = 0
        self._lock = threading.Lock()

    def generate(self, prompts: Sequence[str], config: Any = None) -> list[str]:
        out = []
        for p in prompts:
            q = p[len(self.tag):] if self.tag and p.startswith(self.tag) else p
            v = self.by_text.get(q)
            if v is None and q.startswith("[") and "] " in q[:12]:  # a pseudo-translation tag
                v = self.by_text.get(q.split("] ", 1)[1])
            if v is None:
                raise KeyError(f"scripted agent: prompt not among its vignettes: {q[:80]!r}")
            with self._lock:
                self.n_calls += 1
            out.append(self.agent.answer(v, self.lang))
        return out


def random_chooser(seed: int = 0, **kw: Any) -> ScriptedAgent:
    """Baseline: decides at random (p* = 50 in every dimension)."""
    return ScriptedAgent({c: 50.0 for c in CATEGORIES}, seed=seed, name=kw.pop("name", "random-chooser"), **kw)


def always_left(seed: int = 0, **kw: Any) -> ScriptedAgent:
    """Baseline: always saves the left group (p* = 50 with left bias 1; P = 50 by order balance)."""
    return ScriptedAgent({c: 50.0 for c in CATEGORIES}, left_bias=1.0, seed=seed,
                         name=kw.pop("name", "always-left"), **kw)


def human_like_agent(human_by_lang: Mapping[str, Mapping[str, float]], langs: Sequence[str], seed: int = 0,
                     **kw: Any) -> ScriptedAgent:
    """An agent whose ``p*_l`` is the human vector of each language ``l`` in ``langs``."""
    miss = [lang for lang in langs if lang not in human_by_lang]
    if miss:
        raise ValueError(f"no human vector for {miss}")
    return ScriptedAgent({lang: dict(human_by_lang[lang]) for lang in langs}, seed=seed,
                         name=kw.pop("name", "human-like"), **kw)
