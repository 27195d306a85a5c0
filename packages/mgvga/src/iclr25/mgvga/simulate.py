"""Bit-parallel (64 patterns per ``uint64`` word) simulation of a :class:`Circuit`, levelised.

Every AND gate of one logic level is evaluated in one vectorised numpy operation, so the Python
loop runs over levels, not gates. :func:`node_literals` gives, for every node of the graph that
:func:`iclr25.mgvga.graph.to_graph` builds (same order: PIs, ANDs, POs, NOTs, constant), the AIGER
literal the node computes, so simulated values, logic probabilities and SAT checks all refer to
graph nodes directly. Nothing here needs torch.
"""

from __future__ import annotations

import numpy as np

from .circuit import Circuit

__all__ = [
    "random_patterns",
    "simulate_vars",
    "simulate",
    "node_literals",
    "node_signatures",
    "logic_probability",
    "popcount",
]

_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


def random_patterns(num_pis: int, words: int, seed: int | np.random.Generator = 0) -> np.ndarray:
    """``uint64[num_pis, words]`` uniformly random input patterns (64·words patterns).

    Raises:
        ValueError: ``words < 1`` or ``num_pis < 0``.
    """
    if words < 1 or num_pis < 0:
        raise ValueError(f"need words >= 1 and num_pis >= 0, got words={words}, num_pis={num_pis}")
    rng = np.random.default_rng(seed)
    return rng.integers(0, np.iinfo(np.uint64).max, size=(num_pis, words), dtype=np.uint64, endpoint=True)


def _complement_mask(lits: np.ndarray) -> np.ndarray:
    """``uint64[k, 1]``: all ones where the literal is inverted, else 0."""
    return ((lits & 1).astype(np.uint64) * _ONES)[:, None]


def simulate_vars(c: Circuit, patterns: np.ndarray) -> np.ndarray:
    """Values of every AIG variable under the given patterns.

    Args:
        c: the circuit.
        patterns: ``uint64[I, W]`` — bit ``j`` of word ``w`` of row ``i`` is input ``i`` in pattern
            ``64·w + j``.

    Returns:
        ``uint64[1 + I + A, W]``: row 0 the constant FALSE (zeros), rows ``1..I`` the inputs, then
        the AND gates.

    Raises:
        ValueError: ``patterns`` has the wrong number of rows.
    """
    patterns = np.asarray(patterns, dtype=np.uint64)
    if patterns.ndim != 2 or patterns.shape[0] != c.num_pis:
        raise ValueError(f"patterns has shape {patterns.shape}; expected ({c.num_pis}, W) for this circuit's inputs")
    W = patterns.shape[1]
    val = np.zeros((c.num_vars, W), dtype=np.uint64)
    val[1 : 1 + c.num_pis] = patterns
    if c.num_ands == 0:
        return val
    base = 1 + c.num_pis
    lev = c.var_levels()[base:]
    order = np.argsort(lev, kind="stable")
    bounds = np.flatnonzero(np.diff(lev[order])) + 1
    for idx in np.split(order, bounds):
        a, b = c.ands[idx, 0], c.ands[idx, 1]
        val[base + idx] = (val[a >> 1] ^ _complement_mask(a)) & (val[b >> 1] ^ _complement_mask(b))
    return val


def simulate(c: Circuit, patterns: np.ndarray) -> np.ndarray:
    """Primary-output values ``uint64[O, W]`` under ``patterns`` (``uint64[I, W]``, see :func:`simulate_vars`)."""
    val = simulate_vars(c, patterns)
    return val[c.pos >> 1] ^ _complement_mask(c.pos)


def node_literals(c: Circuit, *, expand_not: bool = True) -> np.ndarray:
    """``int64[N]``: the AIGER literal computed by each node of ``to_graph(c, expand_not=...)``.

    PI node ``i`` → ``2(i+1)``; AND node ``k`` → ``2(I+1+k)``; PO node ``j`` → its driving literal;
    NOT node → the inverted fanin literal it stands for (one per inverted edge, in edge order:
    AND fanins, then POs); the constant node (present only when referenced) → 0.
    """
    I, A = c.num_pis, c.num_ands
    parts = [2 * np.arange(1, I + A + 1, dtype=np.int64), c.pos.astype(np.int64)]
    if expand_not:
        lits = np.concatenate([c.ands.reshape(-1), c.pos])
        parts.append(lits[(lits & 1).astype(bool)])
    if c.constant_refs() > 0:
        parts.append(np.zeros(1, dtype=np.int64))
    return np.concatenate(parts)


def node_signatures(c: Circuit, patterns: np.ndarray, *, expand_not: bool = True) -> np.ndarray:
    """``uint64[N, W]`` simulated value of every graph node (order of :func:`node_literals`)."""
    val = simulate_vars(c, patterns)
    lits = node_literals(c, expand_not=expand_not)
    return val[lits >> 1] ^ _complement_mask(lits)


if hasattr(np, "bitwise_count"):

    def _popcount_words(x: np.ndarray) -> np.ndarray:
        return np.bitwise_count(x)

else:  # numpy < 2.0
    _TABLE = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)

    def _popcount_words(x: np.ndarray) -> np.ndarray:
        return _TABLE[np.ascontiguousarray(x).view(np.uint8)].reshape(*x.shape, 8).sum(-1)


def popcount(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Number of set bits of ``uint64`` words summed along ``axis`` (``int64``)."""
    return _popcount_words(np.asarray(x, dtype=np.uint64)).astype(np.int64).sum(axis=axis)


def logic_probability(c: Circuit, *, words: int = 64, seed: int = 0, expand_not: bool = True) -> np.ndarray:
    """Probability that each graph node is 1 under uniformly random inputs (DeepGate2's logic
    probability), estimated from ``64·words`` random patterns by bit-parallel simulation.

    Returns:
        ``float64[N]`` in [0, 1] (order of :func:`node_literals`); the standard error of each entry
        is at most ``0.5 / sqrt(64·words)``.
    """
    sig = node_signatures(c, random_patterns(c.num_pis, words, seed), expand_not=expand_not)
    return popcount(sig) / float(64 * words)
