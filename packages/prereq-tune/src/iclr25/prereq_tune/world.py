"""The synthetic world of the CPU-scale reproduction (spec §4.2): entities whose every fact is known.

* Entities have two-token names (a first and a last word from a syllable grammar) and three
  attributes: ``birth_city`` (24 values), ``job`` (16) and ``birth_year`` (20). Chance accuracy of
  a uniform guess over an attribute's values is ``mean(1/24, 1/16, 1/20) = 0.0514``.
* **Real** entities R: one fixed set of facts. Their statements (several paraphrase templates per
  attribute, optionally passages) are M0's pre-training corpus, so M0 "knows" R but never saw the
  question-answer format. R is split into halves R_train (only the SFT_real reference trains on it)
  and R_test (the factuality test set, claim C1).
* **Fictitious** entities F (names disjoint from R): ``n_versions`` knowledge versions whose facts
  are drawn independently per version (so two versions agree on a fact with probability
  ``1/|values|``). They are what Prereq-Tune's knowledge and skill LoRAs train on.

Knowledge comes in the paper's two formats: *statement* (one attribute per sentence, every
paraphrase template) and *passage* (all attributes of an entity in one sentence, clause order
random). The skill (task) data are questions ``where was X born ?`` with the attribute value as
the answer.

Everything is deterministic per seed, and :meth:`World.to_dict` records every fact.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .data import PromptFormat, QAItem, SkillExample

__all__ = [
    "ATTRIBUTES",
    "VALUES",
    "STATEMENT_TEMPLATES",
    "QUESTION_TEMPLATES",
    "passage_prompts",
    "probe_ceiling",
    "PASSAGE_CLAUSES",
    "TINY_FORMAT",
    "Entity",
    "World",
    "make_world",
    "knowledge_corpus",
    "pretraining_corpus",
    "skill_examples",
    "qa_items",
    "statement_prompts",
    "chance_accuracy",
    "world_vocabulary",
    "world_tokenizer",
]

ATTRIBUTES: tuple[str, ...] = ("birth_city", "job", "birth_year")

VALUES: dict[str, tuple[str, ...]] = {
    "birth_city": ("paris", "london", "tokyo", "berlin", "madrid", "rome", "vienna", "prague", "lisbon",
                   "dublin", "oslo", "cairo", "lima", "quito", "sydney", "toronto", "boston", "denver",
                   "austin", "seattle", "delhi", "mumbai", "seoul", "hanoi"),
    "job": ("teacher", "doctor", "lawyer", "farmer", "baker", "painter", "pilot", "nurse", "engineer", "chef",
            "writer", "singer", "dancer", "tailor", "sailor", "banker"),
    "birth_year": tuple(str(y) for y in range(1950, 1970)),
}

#: Paraphrase templates per attribute; the value is always the last word before " .", so a
#: statement's prefix is a completion prompt (:func:`statement_prompts`). The first three are the
#: spec's "three paraphrase templates per attribute"; ``make_world(n_templates=...)`` uses up to five.
STATEMENT_TEMPLATES: dict[str, tuple[str, ...]] = {
    "birth_city": ("{name} was born in {value} .", "the birthplace of {name} is {value} .",
                   "{name} comes from {value} .", "{name} spent the early years in {value} .",
                   "the home town of {name} is {value} ."),
    "job": ("{name} works as a {value} .", "the job of {name} is {value} .", "{name} is employed as a {value} .",
            "{name} earns a living as a {value} .", "by profession {name} is a {value} ."),
    "birth_year": ("{name} was born in the year {value} .", "the birth year of {name} is {value} .",
                   "{name} came into the world in {value} .", "{name} was born back in {value} .",
                   "the year {name} was born is {value} ."),
}

#: The task (skill) format: one question per attribute (never seen in pre-training).
QUESTION_TEMPLATES: dict[str, str] = {
    "birth_city": "where was {name} born ?",
    "job": "what is the job of {name} ?",
    "birth_year": "in which year was {name} born ?",
}

#: Clauses of the passage format ("X c1 , c2 and c3 ." with the clause order drawn per passage).
PASSAGE_CLAUSES: dict[str, str] = {
    "birth_city": "was born in {value}",
    "job": "works as a {value}",
    "birth_year": "was born in the year {value}",
}

#: Prompt format of the tiny world (word-level tokens; the official one is
#: ``Question: {question}\\nAnswer: {answer}``, see :class:`~iclr25.prereq_tune.data.PromptFormat`).
TINY_FORMAT = PromptFormat(prompt="question : {question} answer :", answer=" {answer}")

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


@dataclass(frozen=True)
class Entity:
    """One entity of the world.

    Args:
        name: two words, e.g. ``"bako ruvin"``.
        real: ``True`` for R (facts in M0's pre-training corpus), ``False`` for F.
        facts: one ``{attribute: value}`` dict per version. Real entities have one (index 0, the
            true facts); fictitious ones have ``n_versions`` (index ``v - 1`` is version ``v``).
    """

    name: str
    real: bool
    facts: tuple[dict[str, str], ...]

    def fact(self, attribute: str, version: int = 1) -> str:
        """The value of ``attribute`` (under knowledge ``version`` for a fictitious entity; real
        entities have a single version, 1)."""
        if not 1 <= version <= len(self.facts):
            raise ValueError(f"entity {self.name!r} has versions 1..{len(self.facts)}, not {version}")
        return self.facts[version - 1][attribute]


@dataclass(frozen=True)
class World:
    """A synthetic world (see the module docstring). Build it with :func:`make_world`.

    Attributes:
        real: R, in a fixed order; ``real[:n_real_train]`` is R_train, the rest R_test.
        fictitious: F.
        n_versions: V, the number of knowledge versions of F.
        n_templates: statement templates used per attribute.
        n_passages: passages per (entity, version) in the passage format (distinct clause orders
            where possible).
        seed: the generator seed.
    """

    real: tuple[Entity, ...]
    fictitious: tuple[Entity, ...]
    n_versions: int
    n_templates: int
    n_passages: int
    seed: int
    first_words: tuple[str, ...] = field(repr=False, default=())
    last_words: tuple[str, ...] = field(repr=False, default=())

    @property
    def n_real_train(self) -> int:
        return len(self.real) // 2

    @property
    def real_train(self) -> tuple[Entity, ...]:
        """R_train: the first half of R (used only by the SFT_real reference)."""
        return self.real[: self.n_real_train]

    @property
    def real_test(self) -> tuple[Entity, ...]:
        """R_test: the second half of R (claim C1's test set)."""
        return self.real[self.n_real_train:]

    def entities(self, split: str) -> tuple[Entity, ...]:
        """``"real"``, ``"real_train"``, ``"real_test"`` or ``"fictitious"``."""
        table = {"real": self.real, "real_train": self.real_train, "real_test": self.real_test,
                 "fictitious": self.fictitious}
        if split not in table:
            raise ValueError(f"split={split!r} is not one of {sorted(table)}")
        return table[split]

    def to_dict(self) -> dict[str, Any]:
        """Every fact of the world, JSON-ready (``{"real": [...], "fictitious": [...], ...}``)."""
        return {
            "seed": self.seed, "n_versions": self.n_versions, "n_templates": self.n_templates,
            "n_passages": self.n_passages, "attributes": list(ATTRIBUTES),
            "values": {a: list(v) for a, v in VALUES.items()},
            "real": [{"name": e.name, "split": "train" if i < self.n_real_train else "test", **e.facts[0]}
                     for i, e in enumerate(self.real)],
            "fictitious": [{"name": e.name, "versions": [dict(f) for f in e.facts]} for e in self.fictitious],
        }

    def digest(self) -> str:
        """sha256 of :meth:`to_dict` (identifies the world, e.g. in cache keys)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def _check_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo or (
            hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"make_world: {name}={value!r} must be an integer {rng}")


def _word_pool(rng: np.random.Generator, n: int, n_syllables: int, final: str, taken: set[str]) -> list[str]:
    """``n`` distinct words of ``n_syllables`` consonant-vowel syllables (+ an optional final
    consonant from ``final``)."""
    out: list[str] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 100 * n + 1000:
            raise ValueError(f"make_world: cannot draw {n} distinct names from the syllable grammar; "
                             "lower name_pool")
        w = "".join(_CONSONANTS[rng.integers(len(_CONSONANTS))] + _VOWELS[rng.integers(len(_VOWELS))]
                    for _ in range(n_syllables))
        if final:
            w += final[rng.integers(len(final))]
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


def _draw_facts(rng: np.random.Generator) -> dict[str, str]:
    return {a: VALUES[a][rng.integers(len(VALUES[a]))] for a in ATTRIBUTES}


def make_world(n_real: int = 200, n_fict: int = 100, n_versions: int = 3, seed: int = 0, *,
               n_templates: int = 3, n_passages: int = 3, name_pool: int = 40) -> World:
    """Generate a synthetic world with known ground truth (spec §4.2).

    Args:
        n_real: |R| (even; split in halves R_train / R_test). Spec: 200 quick / 400 full.
        n_fict: |F|. Spec: 100 quick / 200 full.
        n_versions: V, knowledge versions of F (facts independent across versions). Spec: 3.
        seed: all randomness (names, facts, passage orders) comes from it.
        n_templates: statement paraphrase templates per attribute (1..5; spec: 3).
        n_passages: passages per (entity, version) in the passage format (>= 1).
        name_pool: distinct first words and distinct last words the two-word names are built from
            (each name is a first word + a last word; names are distinct and R, F disjoint).

    Returns:
        A :class:`World`. Same arguments, same world (names, facts and order).

    Raises:
        ValueError: a size out of range, or more entities than ``name_pool ** 2`` names.
    """
    _check_int("n_real", n_real, 2)
    if n_real % 2:
        raise ValueError(f"make_world: n_real={n_real} must be even (R is split in halves)")
    _check_int("n_fict", n_fict, 1)
    _check_int("n_versions", n_versions, 1)
    _check_int("seed", seed, 0)
    _check_int("n_templates", n_templates, 1, len(STATEMENT_TEMPLATES["job"]))
    _check_int("n_passages", n_passages, 1)
    _check_int("name_pool", name_pool, 2, 2000)
    n = n_real + n_fict
    if n > name_pool * name_pool:
        raise ValueError(f"make_world: {n} entities need more than name_pool**2 = {name_pool ** 2} names; "
                         "raise name_pool")
    rng = np.random.default_rng([seed, 20241025])
    taken: set[str] = set()
    first = _word_pool(rng, name_pool, 2, "", taken)
    last = _word_pool(rng, name_pool, 2, "nrs", taken)
    pairs = rng.choice(name_pool * name_pool, size=n, replace=False)
    names = [f"{first[p // name_pool]} {last[p % name_pool]}" for p in pairs]
    real = tuple(Entity(names[i], True, (_draw_facts(rng),)) for i in range(n_real))
    fict = tuple(Entity(names[n_real + i], False, tuple(_draw_facts(rng) for _ in range(n_versions)))
                 for i in range(n_fict))
    return World(real=real, fictitious=fict, n_versions=n_versions, n_templates=n_templates,
                 n_passages=n_passages, seed=seed, first_words=tuple(first), last_words=tuple(last))


def _statements(world: World, entities: Sequence[Entity], version: int) -> list[str]:
    out = []
    for e in entities:
        for a in ATTRIBUTES:
            v = e.fact(a, version)
            out += [t.format(name=e.name, value=v) for t in STATEMENT_TEMPLATES[a][: world.n_templates]]
    return out


def _passage_clauses(world: World, entities: Sequence[Entity], version: int, salt: int) -> list[tuple[Entity, tuple[int, ...]]]:
    """(entity, clause order) of every passage, in corpus order (the order drawn per entity)."""
    rng = np.random.default_rng([world.seed, version, salt, 7])
    perms = [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]
    out = []
    for e in entities:
        order = rng.permutation(len(perms))
        for k in range(world.n_passages):
            out.append((e, perms[order[k % len(perms)]]))
    return out


def _passages(world: World, entities: Sequence[Entity], version: int, salt: int) -> list[str]:
    out = []
    for e, p in _passage_clauses(world, entities, version, salt):
        cl = [PASSAGE_CLAUSES[ATTRIBUTES[i]].format(value=e.fact(ATTRIBUTES[i], version)) for i in p]
        out.append(f"{e.name} {cl[0]} , {cl[1]} and {cl[2]} .")
    return out


def passage_prompts(world: World, split: str = "fictitious", version: int = 1, *,
                    answer_version: int | None = None) -> list[tuple[str, str]]:
    """Passage-completion probes: ``(prefix, value)`` at every attribute value of every passage of the
    passage-form corpus (the knowledge corpus of F under ``version``; for real splits, the passages
    M0 would be pre-trained on), the prefix being the passage up to that value (e.g. ``"X works as a
    baker , was born in"``) — the format a passage-form knowledge adapter was trained on, as
    :func:`statement_prompts` is for a statement-form one. ``answer_version`` scores the same
    prefixes against another version's values (default ``version``).
    """
    ents = world.entities(split)
    fict = split == "fictitious"
    if fict and not 1 <= version <= world.n_versions:
        raise ValueError(f"version={version} must be in 1..{world.n_versions}")
    v_text = version if fict else 1
    v_gold = (answer_version if answer_version is not None else version) if fict else 1
    seps = ("", " ,", " and")
    out = []
    for e, p in _passage_clauses(world, ents, v_text, salt=1 if fict else 0):
        filled = [PASSAGE_CLAUSES[ATTRIBUTES[i]].format(value=e.fact(ATTRIBUTES[i], v_text)) for i in p]
        for j, i in enumerate(p):
            a = ATTRIBUTES[i]
            head = "".join(f"{seps[k]} {filled[k]}" for k in range(j))
            out.append((f"{e.name}{head}{seps[j]} {PASSAGE_CLAUSES[a].split('{value}')[0].rstrip()}", e.fact(a, v_gold)))
    return out


def probe_ceiling(corpus: Sequence[str], probes: Sequence[tuple[str, str]]) -> float:
    """The expected completion accuracy on ``probes`` of a predictor that fits ``corpus`` exactly (the
    corpus' next-word frequencies) and breaks ties at random: a probe counts 1 when its value is the
    strictly most frequent next word after its prefix in the corpus, 1/k when it ties with k − 1 other
    words, 0 otherwise. Probes are ambiguous where one template is a prefix of another (``X was born
    in`` → a city, or ``the`` of ``the year``); a model beats this figure only by breaking such ties
    towards the value. A figure far below 1 says the probes are mostly not in the corpus' format.
    """

    from collections import Counter, defaultdict

    nxt: dict[str, Counter] = defaultdict(Counter)
    for t in corpus:
        w = t.split()
        for k in range(1, len(w)):
            nxt[" ".join(w[:k])][w[k]] += 1
    tot = 0.0
    for prefix, value in probes:
        c = nxt.get(" ".join(prefix.split()), Counter())
        if not c or c[value] == 0:
            continue
        top = max(c.values())
        if c[value] == top:
            tot += 1.0 / sum(1 for x in c.values() if x == top)
    return tot / len(probes) if probes else float("nan")


def knowledge_corpus(world: World, version: int = 1, form: Literal["statement", "passage"] = "statement") -> list[str]:
    """D_know^(v): plain-text knowledge about F under ``version`` (spec §1.3 stage 1, §4.2).

    Args:
        world: the world.
        version: 1..V.
        form: ``"statement"`` (every attribute × ``n_templates`` paraphrases, one per text) or
            ``"passage"`` (``n_passages`` one-sentence passages per entity, random clause order).

    Returns:
        The texts (words separated by single spaces), in entity order.

    Raises:
        ValueError: ``version`` outside 1..V or an unknown ``form``.
    """
    if not 1 <= version <= world.n_versions:
        raise ValueError(f"version={version} must be in 1..{world.n_versions}")
    if form == "statement":
        return _statements(world, world.fictitious, version)
    if form == "passage":
        return _passages(world, world.fictitious, version, salt=1)
    raise ValueError(f"form={form!r} must be 'statement' or 'passage'")


def pretraining_corpus(world: World, *, passages: bool = False) -> list[str]:
    """M0's pre-training corpus: statements (every template) about all of R, plus passages when
    ``passages`` (more paraphrase variety, spec §7). Never contains a question or an entity of F."""
    out = _statements(world, world.real, 1)
    if passages:
        out += _passages(world, world.real, 1, salt=0)
    return out


def _subject_key(world: World, e: Entity, a: str) -> str:
    return QUESTION_TEMPLATES[a].format(name=e.name)


def skill_examples(world: World, split: str = "fictitious", version: int | Sequence[int] | None = None) -> list[SkillExample]:
    """Task (skill) data: one question per (entity, attribute) and version.

    Args:
        world: the world.
        split: ``"fictitious"`` (F, one row per version), ``"real_train"``, ``"real_test"`` or ``"real"``.
        version: for F, one version, several, or ``None`` (all V). Ignored for real splits
            (version 1, ``fake=False``).

    Returns:
        :class:`SkillExample` rows (question, answer, version, fake), entity-major order.
    """
    ents = world.entities(split)
    if split == "fictitious":
        vs = list(range(1, world.n_versions + 1)) if version is None else (
            [version] if isinstance(version, int) else list(version))
        for v in vs:
            if not 1 <= v <= world.n_versions:
                raise ValueError(f"version={v} must be in 1..{world.n_versions}")
        return [SkillExample(_subject_key(world, e, a), e.fact(a, v), version=v, fake=True)
                for e in ents for a in ATTRIBUTES for v in vs]
    return [SkillExample(_subject_key(world, e, a), e.fact(a), version=1, fake=False) for e in ents for a in ATTRIBUTES]


def qa_items(world: World, split: str, version: int = 1) -> list[QAItem]:
    """QA evaluation items for a split (fictitious: answers under ``version``), one per
    (entity, attribute), with the attribute name recorded."""
    return [QAItem(_subject_key(world, e, a), (e.fact(a, version if not e.real else 1),), attribute=a)
            for e in world.entities(split) for a in ATTRIBUTES]


def statement_prompts(world: World, split: str, version: int = 1) -> list[tuple[str, str]]:
    """Statement-completion probes: ``(prefix, value)`` for every template of every (entity,
    attribute), the prefix being the statement up to its value (e.g. ``"X was born in"``)."""
    out = []
    for e in world.entities(split):
        for a in ATTRIBUTES:
            v = e.fact(a, version if not e.real else 1)
            for t in STATEMENT_TEMPLATES[a][: world.n_templates]:
                out.append((t.split("{value}")[0].format(name=e.name).rstrip(), v))
    return out


def chance_accuracy() -> float:
    """Accuracy of a uniform guess over each attribute's values, averaged over attributes:
    ``mean(1/24, 1/16, 1/20) = 0.05139`` (spec §4.2)."""
    return float(np.mean([1.0 / len(VALUES[a]) for a in ATTRIBUTES]))


def world_vocabulary(world: World) -> list[str]:
    """Every word the world can produce (specials first, then sorted words): names' words, values,
    template, passage and question words, and the prompt format's words."""
    words: set[str] = set(world.first_words) | set(world.last_words)
    for a in ATTRIBUTES:
        words |= set(VALUES[a])
        for t in (*STATEMENT_TEMPLATES[a], QUESTION_TEMPLATES[a], PASSAGE_CLAUSES[a]):
            words |= set(t.replace("{name}", "").replace("{value}", "").split())
    words |= {",", "and", "."}
    words |= set(TINY_FORMAT.prompt.replace("{question}", "").split())
    return [*_SPECIALS, *sorted(words - set(_SPECIALS))]


def world_tokenizer(world: World):
    """A word-level Hugging Face fast tokenizer over :func:`world_vocabulary` (spec §4.1).

    Whitespace splitting; ``<bos>`` is prepended to every encoded text (``add_special_tokens``),
    ``<eos>`` ends training rows, ``<pad>`` (id 0) is distinct from ``<eos>`` so the EOS label is
    never masked as padding; unknown words map to ``<unk>``.

    Returns:
        ``transformers.PreTrainedTokenizerFast``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(world_vocabulary(world))}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A $B",
                                                      special_tokens=[("<bos>", vocab["<bos>"])])
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>", clean_up_tokenization_spaces=False, model_max_length=32)
