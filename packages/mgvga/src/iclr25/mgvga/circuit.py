"""And-Inverter Graphs: the in-memory :class:`Circuit` and :class:`AigBuilder` (structural hashing).

A :class:`Circuit` uses AIGER literals: variable ``v`` has literal ``2v`` (plain) and ``2v+1``
(inverted); variable 0 is constant FALSE (so literal 1 is TRUE), variables ``1..I`` are the
primary inputs and ``I+1..I+A`` the AND gates, in topological order (each AND's fanins are
smaller variables). Sequential elements are cut (MGVGA Sec. 1.2 / OpenABC-D convention): a latch
output becomes an extra primary input and its next-state function an extra primary output.

The file readers live in :mod:`iclr25.mgvga.parsers`, bit-parallel simulation in
:mod:`iclr25.mgvga.simulate` and the ``aigverse`` bridge (re-synthesis, SAT equivalence) in
:mod:`iclr25.mgvga.synthesis`; their names are still importable from here (deprecated, one release).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Circuit", "CircuitFormatError", "AigBuilder"]


class CircuitFormatError(ValueError):
    """A circuit file that cannot be read; the message names the file, the line and a fix."""

    def __init__(self, path: str | Path | None, line: int | None, msg: str):
        where = f"{path}" if path is not None else "<circuit>"
        if line is not None:
            where += f":{line}"
        super().__init__(f"{where}: {msg}")
        self.path, self.line = path, line


@dataclass
class Circuit:
    """A combinational AIG in AIGER-literal form.

    Attributes:
        num_pis: number of primary inputs ``I`` (latch outputs included after cutting).
        ands: ``int64[A, 2]`` fanin literals of AND gate ``k`` (variable ``I+1+k``); each literal
            refers to a smaller variable (topological order).
        pos: ``int64[O]`` literals driving the primary outputs (latch next-states included).
        pi_names / po_names: optional names (``None`` entries when the file has none).
        num_latches: number of latches that were cut into PI/PO pairs (the last ``num_latches``
            PIs and POs).
        name: a label (file stem by default).
    """

    num_pis: int
    ands: np.ndarray
    pos: np.ndarray
    pi_names: list[str | None] = field(default_factory=list)
    po_names: list[str | None] = field(default_factory=list)
    num_latches: int = 0
    name: str = "circuit"

    def __post_init__(self) -> None:
        self.ands = np.asarray(self.ands, dtype=np.int64).reshape(-1, 2)
        self.pos = np.asarray(self.pos, dtype=np.int64).reshape(-1)
        if not self.pi_names:
            self.pi_names = [None] * self.num_pis
        if not self.po_names:
            self.po_names = [None] * len(self.pos)

    @property
    def num_ands(self) -> int:
        """Number of AND gates ``A``."""
        return int(self.ands.shape[0])

    @property
    def num_pos(self) -> int:
        """Number of primary outputs ``O``."""
        return int(self.pos.shape[0])

    @property
    def num_vars(self) -> int:
        """``1 + I + A`` (constant, inputs, ANDs)."""
        return 1 + self.num_pis + self.num_ands

    def var_levels(self) -> np.ndarray:
        """``int64[1+I+A]`` logic level of every variable: constant and PIs 0, AND = 1 + max fanin."""
        lev = np.zeros(self.num_vars, dtype=np.int64)
        base = 1 + self.num_pis
        f = (self.ands >> 1).tolist()
        for k, (a, b) in enumerate(f):  # topological order: one pass
            la, lb = lev[a], lev[b]
            lev[base + k] = 1 + (la if la > lb else lb)
        return lev

    @property
    def levels(self) -> int:
        """Depth of the AIG: the maximum level over the primary outputs (0 when there are none)."""
        if self.num_pos == 0:
            return 0
        return int(self.var_levels()[self.pos >> 1].max())

    def constant_refs(self) -> int:
        """Number of fanin/PO references to the constant node (literals 0 or 1)."""
        return int(((self.ands >> 1) == 0).sum() + ((self.pos >> 1) == 0).sum())

    def stats(self) -> dict[str, int]:
        """``{"pis", "pos", "ands", "levels", "latches"}``."""
        return {"pis": self.num_pis, "pos": self.num_pos, "ands": self.num_ands, "levels": self.levels,
                "latches": self.num_latches}

    def __repr__(self) -> str:  # compact
        s = self.stats()
        return f"Circuit({self.name!r}, pis={s['pis']}, pos={s['pos']}, ands={s['ands']}, levels={s['levels']})"


class AigBuilder:
    """Incremental AIG construction with structural hashing and constant propagation.

    ``AND(a, 0) = 0``, ``AND(a, 1) = a``, ``AND(a, a) = a``, ``AND(a, ~a) = 0`` and identical
    fanin pairs are shared (the same normalisation as ABC ``strash``).
    """

    def __init__(self) -> None:
        self.num_pis = 0
        self.ands: list[tuple[int, int]] = []
        self._hash: dict[tuple[int, int], int] = {}
        self._pis_closed = False
        self.pi_names: list[str | None] = []

    def pi(self, name: str | None = None) -> int:
        """Add a primary input; returns its literal. All PIs must be created before any AND."""
        if self._pis_closed:
            raise RuntimeError("AigBuilder: create every primary input before the first AND gate")
        self.num_pis += 1
        self.pi_names.append(name)
        return 2 * self.num_pis

    def AND(self, a: int, b: int) -> int:  # noqa: N802
        """Literal of ``a AND b``."""
        self._pis_closed = True
        if a > b:
            a, b = b, a
        if a == 0:
            return 0
        if a == 1:
            return b
        if a == b:
            return a
        if a ^ 1 == b:
            return 0
        key = (a, b)
        lit = self._hash.get(key)
        if lit is None:
            self.ands.append(key)
            lit = 2 * (self.num_pis + len(self.ands))
            self._hash[key] = lit
        return lit

    @staticmethod
    def NOT(a: int) -> int:  # noqa: N802
        return a ^ 1

    def OR(self, a: int, b: int) -> int:  # noqa: N802
        return self.AND(a ^ 1, b ^ 1) ^ 1

    def XOR(self, a: int, b: int) -> int:  # noqa: N802
        return self.OR(self.AND(a, b ^ 1), self.AND(a ^ 1, b))

    def MUX(self, s: int, t: int, e: int) -> int:  # noqa: N802
        """``s ? t : e``."""
        return self.OR(self.AND(s, t), self.AND(s ^ 1, e))

    def MAJ(self, a: int, b: int, c: int) -> int:  # noqa: N802
        return self.OR(self.AND(a, b), self.AND(c, self.OR(a, b)))

    def nary(self, op: str, lits: list[int]) -> int:
        """Balanced n-ary AND/OR/XOR tree (``op`` in ``{"and", "or", "xor"}``)."""
        f = {"and": self.AND, "or": self.OR, "xor": self.XOR}[op]
        if not lits:
            return {"and": 1, "or": 0, "xor": 0}[op]
        cur = list(lits)
        while len(cur) > 1:
            nxt = [f(cur[i], cur[i + 1]) for i in range(0, len(cur) - 1, 2)]
            if len(cur) % 2:
                nxt.append(cur[-1])
            cur = nxt
        return cur[0]

    def build(self, pos: list[int], po_names: list[str | None] | None = None, *, name: str = "circuit",
              num_latches: int = 0, cleanup: bool = True) -> Circuit:
        """Freeze into a :class:`Circuit`; ``cleanup`` drops ANDs outside the POs' cones (ABC-like)."""
        ands = np.asarray(self.ands, dtype=np.int64).reshape(-1, 2)
        c = Circuit(self.num_pis, ands, np.asarray(pos, dtype=np.int64), list(self.pi_names),
                    list(po_names) if po_names else [None] * len(pos), num_latches, name)
        return _cleanup(c) if cleanup else c


def _cleanup(c: Circuit) -> Circuit:
    """Remove AND gates not in the transitive fanin of any PO and renumber (order kept)."""
    nv = c.num_vars
    live = np.zeros(nv, dtype=bool)
    live[c.pos >> 1] = True
    base = 1 + c.num_pis
    fan = c.ands >> 1
    for k in range(c.num_ands - 1, -1, -1):
        if live[base + k]:
            live[fan[k, 0]] = True
            live[fan[k, 1]] = True
    keep = live[base:]
    if keep.all():
        return c
    new_var = np.arange(nv, dtype=np.int64)
    new_var[base:][keep] = base + np.arange(int(keep.sum()))
    remap = lambda lits: 2 * new_var[lits >> 1] + (lits & 1)  # noqa: E731
    ands = remap(c.ands[keep])
    return Circuit(c.num_pis, ands, remap(c.pos), c.pi_names, c.po_names, c.num_latches, c.name)



# Names that moved out of this module (kept importable for one release).
_MOVED = {
    "load_circuit": "parsers", "read_aiger": "parsers", "read_bench": "parsers", "read_blif": "parsers",
    "read_verilog": "parsers", "simulate": "simulate", "to_aigverse": "synthesis", "from_aigverse": "synthesis",
    "equivalent": "synthesis", "apply_recipe": "synthesis", "RECIPE_OPS": "synthesis", "encode_recipe": "synthesis",
}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib
        import warnings

        mod = _MOVED[name]
        warnings.warn(f"iclr25.mgvga.circuit.{name} moved to iclr25.mgvga.{mod}.{name}; the old path goes away "
                      "in the next minor release", FutureWarning, stacklevel=2)
        return getattr(importlib.import_module(f"iclr25.mgvga.{mod}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
