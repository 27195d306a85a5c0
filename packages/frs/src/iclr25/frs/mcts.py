"""Vulnerable-area search with Monte Carlo tree search in the Damerau–Levenshtein space (Sec. 4.3).

The fuzzer looks for the segment T(x') of a (possibly triggered) text x' whose perturbation moves
the model's output most — a trigger is exactly such a segment. Paper [paper]: MCTS over text
segments, expansion by DL mutation operators inside the segment, reward
``KL(p(·|x') ‖ p(·|x̃))`` of a mutated text x̃, UCT selection, the segment with the largest mean reward
after I iterations. Tree design [design] (the paper's exact state/action design was not readable):

* a node is an interval ``[a, b)`` of token positions; the root is the whole text;
* a node longer than Λ (``max_span``) has two children, its left and right halves overlapping by
  Λ − 1 tokens, so every segment of length <= Λ lies entirely inside one child at every level;
  nodes of length <= Λ are leaves (candidate vulnerable areas, depth ≈ log2(L/Λ));
* an iteration selects a path by UCT, ``argmax Q/N + C·sqrt(ln N_parent / N)`` with Q/N the mean
  reward normalised by the largest reward seen in this search (rewards are unbounded KLs),
  expands the first unvisited child, and evaluates it: every token of the node's interval gets a
  random DL operator — by default substitute (by the mask token) or delete; transpose (with its
  right neighbour) and insert (a mask token before it) are available — and the reward is the KL
  above; the reward is backed up the path;
* after I iterations T(x') is the visited leaf with the largest mean reward. If no leaf was visited
  yet, the greedy (largest-mean) path is completed with extra evaluations, counted in the trace as
  ``completion_evals``.

:meth:`MCTSFuzzer.search_many` runs the searches of many texts in lock-step, so every iteration
is one batched ``predict_proba`` call over all texts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["MCTSFuzzer", "SearchTrace", "kl_divergence", "mutate_segment", "OPERATORS", "ERASING_OPERATORS"]

OPERATORS = ("substitute", "delete", "transpose", "insert")
#: the default operators: the token-erasing ones (see the module docstring)
ERASING_OPERATORS = ("substitute", "delete")


def kl_divergence(p: np.ndarray, q: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """``KL(p ‖ q) = Σ_c p_c (ln p_c − ln q_c)`` row-wise; ``p, q: float[B, C]`` -> ``float[B]`` (nats)."""
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1.0)
    q = np.clip(np.asarray(q, dtype=np.float64), eps, 1.0)
    return np.sum(p * (np.log(p) - np.log(q)), axis=-1)


def mutate_segment(tokens: Sequence[str], start: int, end: int, rng: np.random.Generator, mask_token: str,
                   operators: Sequence[str] = OPERATORS) -> list[str]:
    """Apply one random DL operator to every token of ``tokens[start:end]`` (see module docstring).

    The result is never empty (a text whose every token would be deleted keeps one mask token).
    """
    ops = rng.integers(0, len(operators), size=end - start)
    out: list[str] = list(tokens[:start])
    seg = list(tokens[start:end])
    i = 0
    while i < len(seg):
        op = operators[ops[i]]
        if op == "substitute":
            out.append(mask_token)
        elif op == "delete":
            pass
        elif op == "transpose" and i + 1 < len(seg):
            out += [seg[i + 1], seg[i]]
            i += 1
        elif op == "transpose":  # last token of the segment has no right neighbour inside it: kept
            out.append(seg[i])
        elif op == "insert":
            out += [mask_token, seg[i]]
        i += 1
    out += list(tokens[end:])
    return out if out else [mask_token]


@dataclass
class _Node:
    start: int
    end: int
    parent: int
    children: list[int] = field(default_factory=list)
    visits: int = 0
    total: float = 0.0

    @property
    def mean(self) -> float:
        return self.total / self.visits if self.visits else 0.0


@dataclass
class SearchTrace:
    """What one search did: per-iteration ``(start, end, reward)``, the leaves' mean rewards,
    the chosen segment and the number of model evaluations."""

    segment: tuple[int, int]
    mean_reward: float
    iterations: list[tuple[int, int, float]]
    leaves: dict[tuple[int, int], tuple[int, float]]
    evaluations: int
    completion_evals: int

    def to_dict(self) -> dict:
        return {"segment": list(self.segment), "mean_reward": self.mean_reward,
                "iterations": [list(t) for t in self.iterations],
                "leaves": [[a, b, n, m] for (a, b), (n, m) in sorted(self.leaves.items())],
                "evaluations": self.evaluations, "completion_evals": self.completion_evals}


class _Tree:
    def __init__(self, length: int, max_span: int):
        self.max_span = max_span
        self.nodes = [_Node(0, length, -1)]

    def children(self, i: int) -> list[int]:
        n = self.nodes[i]
        if n.children or n.end - n.start <= self.max_span:
            return n.children
        a, b = n.start, n.end
        mid = (a + b) // 2
        o = self.max_span - 1
        spans = [(a, min(b, mid + (o + 1) // 2)), (max(a, mid - o // 2), b)]
        for s, e in spans:
            self.nodes.append(_Node(s, e, i))
            n.children.append(len(self.nodes) - 1)
        return n.children

    def is_leaf(self, i: int) -> bool:
        n = self.nodes[i]
        return n.end - n.start <= self.max_span


class MCTSFuzzer:
    """MCTS vulnerable-area search (Sec. 4.3) over a ``predict_proba`` model.

    Args:
        predict_proba: ``list[list[str]] -> float[B, C]`` (the fine-tuned model θ_F).
        max_span: Λ, the largest vulnerable-area length in tokens (default 3).
        iterations: I, MCTS iterations (model evaluations) per text (default 32).
        c: UCT exploration constant C on rewards normalised to [0, 1] (default 0.5 [design]; the
            spec's placeholder √2 explores so much that I = 16 iterations rarely reach the
            trigger's leaf — the reproduction reports the hit rate at √2 too).
        seed: run seed of the mutations: text ``key`` of :meth:`search_many` draws them from a numpy
            generator seeded by ``(seed, key)`` (independent of global RNGs and of the other texts
            searched in the same call).
        mask_token: token used by the substitute / insert operators.
        operators: the DL operators used in mutations (subset of :data:`OPERATORS`; default the
            token-erasing ones, substitute and delete [design]: transposing or inserting next to
            a one-token trigger leaves it intact, so those rewards carry no signal about it; the
            reproduction reports the hit rate with all four operators too).

    Raises:
        ValueError: max_span or iterations < 1, c not finite or < 0, unknown operators.
    """

    def __init__(self, predict_proba: Callable[[list[list[str]]], np.ndarray], max_span: int = 3,
                 iterations: int = 32, c: float = 0.5, seed: int = 0, mask_token: str = "[MASK]",
                 operators: Sequence[str] = ERASING_OPERATORS):
        if int(max_span) != max_span or max_span < 1:
            raise ValueError(f"max_span (Lambda) must be an integer >= 1, got {max_span!r}")
        if int(iterations) != iterations or iterations < 1:
            raise ValueError(f"iterations (I) must be an integer >= 1, got {iterations!r}")
        if not (isinstance(c, (int, float)) and math.isfinite(c) and c >= 0):
            raise ValueError(f"c (UCT exploration constant) must be finite and >= 0, got {c!r}")
        bad = [o for o in operators if o not in OPERATORS]
        if bad or not operators:
            raise ValueError(f"operators must be a non-empty subset of {OPERATORS}, got {list(operators)}")
        self.predict_proba, self.max_span, self.iterations, self.c = predict_proba, int(max_span), int(iterations), float(c)
        self.mask_token, self.operators = mask_token, tuple(operators)
        self.seed = int(seed)
        self.last_trace: SearchTrace | None = None

    # ---- public API ------------------------------------------------------------------------

    def search(self, tokens: Sequence[str]) -> tuple[int, int]:
        """The vulnerable area ``(start, end)`` (end exclusive, ``end − start <= max_span``) of one text;
        the trace is kept in :attr:`last_trace`.

        Raises:
            ValueError: an empty text.
        """
        seg, trace = self.search_many([tokens])[0]
        self.last_trace = trace
        return seg

    def search_with_trace(self, tokens: Sequence[str]) -> tuple[tuple[int, int], SearchTrace]:
        """:meth:`search` returning ``(segment, trace)``."""
        return self.search_many([tokens])[0]

    def search_many(self, texts: Sequence[Sequence[str]], base_proba: np.ndarray | None = None,
                    keys: Sequence[int] | None = None) -> list[tuple[tuple[int, int], SearchTrace]]:
        """Search all ``texts`` in lock-step: each iteration is one batched model call.

        Args:
            texts: B non-empty token lists.
            base_proba: optional ``float[B, C]`` = ``predict_proba(texts)`` (saves one call).
            keys: the texts' indices in the data (default ``0..B-1``); text b's mutations come from
                a generator seeded by ``(seed, keys[b])``, so its search does not depend on the
                other texts of the call.

        Returns:
            ``[(segment, trace)]`` per text.

        Raises:
            ValueError: an empty text (its index is given).
        """
        texts = [list(t) for t in texts]
        for i, t in enumerate(texts):
            if len(t) == 0:
                raise ValueError(f"text {i} is empty; MCTS needs at least one token")
        if not texts:
            return []
        keys = list(range(len(texts))) if keys is None else [int(k) for k in keys]
        if len(keys) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(keys)} keys")
        rngs = [np.random.default_rng([self.seed, 2, k]) for k in keys]
        p0 = np.asarray(self.predict_proba(texts) if base_proba is None else base_proba, dtype=np.float64)
        trees = [_Tree(len(t), self.max_span) for t in texts]
        its: list[list[tuple[int, int, float]]] = [[] for _ in texts]
        maxr = np.zeros(len(texts))
        done = [trees[b].is_leaf(0) for b in range(len(texts))]  # text no longer than Λ: T = whole text
        for _ in range(self.iterations):
            active = [b for b in range(len(texts)) if not done[b]]
            if not active:
                break
            paths = [self._select(trees[b], maxr[b]) for b in active]
            self._evaluate(texts, p0, trees, active, paths, its, maxr, rngs)
        out = []
        compl = [0] * len(texts)
        # completion: make sure every text has a visited leaf on its greedy path
        while True:
            need, paths = [], []
            for b in range(len(texts)):
                if done[b] and trees[b].is_leaf(0):
                    continue
                if any(trees[b].is_leaf(i) and n.visits for i, n in enumerate(trees[b].nodes)):
                    continue
                need.append(b)
                paths.append(self._greedy_path(trees[b]))
            if not need:
                break
            for b in need:
                compl[b] += 1
            self._evaluate(texts, p0, trees, need, paths, its, maxr, rngs)
        for b, tree in enumerate(trees):
            if tree.is_leaf(0):
                seg, mean = (0, len(texts[b])), 0.0
            else:
                leaves = [n for i, n in enumerate(tree.nodes) if tree.is_leaf(i) and n.visits]
                best = max(leaves, key=lambda n: (n.mean, -(n.end - n.start), -n.start))
                seg, mean = (best.start, best.end), best.mean
            leaves_d = {(n.start, n.end): (n.visits, n.mean) for i, n in enumerate(tree.nodes)
                        if tree.is_leaf(i) and n.visits}
            trace = SearchTrace(seg, float(mean), its[b], leaves_d, len(its[b]), compl[b])
            out.append((seg, trace))
        return out

    # ---- internals -------------------------------------------------------------------------

    def _select(self, tree: _Tree, maxr: float) -> list[int]:
        path = [0]
        i = 0
        while not tree.is_leaf(i):
            ch = tree.children(i)
            unvisited = [j for j in ch if tree.nodes[j].visits == 0]
            if unvisited:
                path.append(unvisited[0])
                return path
            parent_n = max(tree.nodes[i].visits, 1)
            scale = maxr if maxr > 0 else 1.0

            scores = [tree.nodes[j].mean / scale + self.c * math.sqrt(math.log(parent_n) / tree.nodes[j].visits)
                      for j in ch]
            i = ch[int(np.argmax(scores))]
            path.append(i)
        return path

    def _greedy_path(self, tree: _Tree) -> list[int]:
        path, i = [0], 0
        while not tree.is_leaf(i):
            ch = tree.children(i)
            unvisited = [j for j in ch if tree.nodes[j].visits == 0]
            if unvisited:
                path.append(unvisited[0])
                return path
            i = max(ch, key=lambda j: tree.nodes[j].mean)
            path.append(i)
        return path

    def _evaluate(self, texts, p0, trees, which, paths, its, maxr, rngs) -> None:
        batch = []
        for b, path in zip(which, paths):
            n = trees[b].nodes[path[-1]]
            batch.append(mutate_segment(texts[b], n.start, n.end, rngs[b], self.mask_token, self.operators))
        q = np.asarray(self.predict_proba(batch), dtype=np.float64)
        r = kl_divergence(p0[list(which)], q)
        for k, (b, path) in enumerate(zip(which, paths)):
            rew = float(r[k])
            for i in path:
                trees[b].nodes[i].visits += 1
                trees[b].nodes[i].total += rew
            n = trees[b].nodes[path[-1]]
            its[b].append((n.start, n.end, rew))
            maxr[b] = max(maxr[b], rew)
