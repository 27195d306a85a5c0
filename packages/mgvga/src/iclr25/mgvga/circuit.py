"""And-Inverter Graphs: one in-memory :class:`Circuit` and readers for AIGER, BENCH, BLIF, Verilog.

A :class:`Circuit` uses AIGER literals: variable ``v`` has literal ``2v`` (plain) and ``2v+1``
(inverted); variable 0 is constant FALSE (so literal 1 is TRUE), variables ``1..I`` are the
primary inputs and ``I+1..I+A`` the AND gates, in topological order (each AND's fanins are
smaller variables). Sequential elements are cut (MGVGA Sec. 1.2 / OpenABC-D convention): a latch
output becomes an extra primary input and its next-state function an extra primary output.

Re-synthesis and equivalence checking are delegated to ``aigverse`` (mockturtle bindings); the
AIGER/BENCH/BLIF readers are small, strict parsers of our own so that malformed input is
reported with file, line and a fix (``CircuitFormatError``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "Circuit",
    "CircuitFormatError",
    "AigBuilder",
    "load_circuit",
    "read_aiger",
    "read_bench",
    "read_blif",
    "read_verilog",
    "simulate",
    "to_aigverse",
    "from_aigverse",
    "equivalent",
    "apply_recipe",
    "RECIPE_OPS",
    "encode_recipe",
]


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


# ----------------------------------------------------------------------------- AIGER
def _decode_varints(buf: bytes, start: int, count: int, path) -> tuple[np.ndarray, int]:
    out = np.empty(count, dtype=np.int64)
    pos = start
    n = len(buf)
    for i in range(count):
        x = 0
        shift = 0
        while True:
            if pos >= n:
                raise CircuitFormatError(path, None, f"binary AIGER ends inside the delta encoding of AND "
                                         f"{i // 2} (file truncated?); re-export the file")
            ch = buf[pos]
            pos += 1
            x |= (ch & 0x7F) << shift
            if ch < 0x80:
                break
            shift += 7
        out[i] = x
    return out, pos


def read_aiger(path: str | Path | None = None, *, data: bytes | None = None, name: str | None = None) -> Circuit:
    """Read ASCII (``aag``) or binary (``aig``) AIGER 1.9 (combinational or with latches, which are cut).

    Args:
        path: file to read (or give ``data``).
        data: the file's bytes.

    Returns:
        :class:`Circuit` with names from the symbol table when present.

    Raises:
        CircuitFormatError: bad header (``M < I + L + A``, unknown format), a literal out of range
            or odd where it must be even, an AND that refers to an undefined variable (or a cycle,
            i.e. an AND fanin that is not defined before use), truncated data.
    """
    if data is None:
        data = Path(path).read_bytes()
    nm = name or (Path(path).stem if path is not None else "circuit")
    nl = data.find(b"\n")
    header = data[: nl if nl >= 0 else len(data)].decode("ascii", "replace").split()
    if len(header) < 6 or header[0] not in ("aag", "aig"):
        raise CircuitFormatError(path, 1, f"expected header 'aag|aig M I L O A', got {' '.join(header)!r}")
    try:
        M, I, L, O, A = (int(t) for t in header[1:6])
    except ValueError:
        raise CircuitFormatError(path, 1, f"header counts must be integers, got {header[1:6]}") from None
    if any(h > 0 for h in (int(t) for t in header[6:])):
        raise CircuitFormatError(path, 1, "bad-state/constraint/justice/fairness sections (AIGER 1.9 B C J F) "
                                 "are not supported; drop them (e.g. with aigtoaig)")
    if min(M, I, L, O, A) < 0 or M < I + L + A:
        raise CircuitFormatError(path, 1, f"header says M={M} but I+L+A={I + L + A}; M must be >= I+L+A")
    binary = header[0] == "aig"
    maxlit = 2 * M + 1
    lineno = 1
    pos = nl + 1
    lines_iter_pos = pos

    def next_line() -> tuple[str, int]:
        nonlocal pos, lineno
        if pos >= len(data):
            raise CircuitFormatError(path, lineno + 1, "unexpected end of file (header counts too large?)")
        e = data.find(b"\n", pos)
        e = len(data) if e < 0 else e
        s = data[pos:e].decode("ascii", "replace").strip()
        pos = e + 1
        lineno += 1
        return s, lineno

    def lit(tok: str, ln: int, what: str) -> int:
        try:
            v = int(tok)
        except ValueError:
            raise CircuitFormatError(path, ln, f"{what}: {tok!r} is not an integer literal") from None
        if v < 0 or v > maxlit:
            raise CircuitFormatError(path, ln, f"{what}: literal {v} out of range 0..{maxlit} (M={M})")
        return v

    del lines_iter_pos
    # inputs
    in_lits = np.arange(1, I + 1, dtype=np.int64) * 2
    if not binary:
        for i in range(I):
            s, ln = next_line()
            v = lit(s.split()[0] if s else "", ln, f"input {i}")
            if v & 1 or v < 2:
                raise CircuitFormatError(path, ln, f"input {i}: literal {v} must be even and >= 2")
            in_lits[i] = v
    latch_cur = np.zeros(L, dtype=np.int64)
    latch_next = np.zeros(L, dtype=np.int64)
    for i in range(L):
        s, ln = next_line()
        t = s.split()
        if binary:
            latch_cur[i] = 2 * (I + 1 + i)
            latch_next[i] = lit(t[0] if t else "", ln, f"latch {i} next-state")
        else:
            if len(t) < 2:
                raise CircuitFormatError(path, ln, f"latch {i}: expected 'lit next [init]'")
            latch_cur[i] = lit(t[0], ln, f"latch {i}")
            latch_next[i] = lit(t[1], ln, f"latch {i} next-state")
        if len(t) >= (2 if binary else 3) and t[-1] not in ("0",) and len(t) > (1 if binary else 2):
            pass  # non-zero reset values are irrelevant once latches are cut
    outs = np.zeros(O, dtype=np.int64)
    for i in range(O):
        s, ln = next_line()
        outs[i] = lit(s.split()[0] if s else "", ln, f"output {i}")
    ands = np.zeros((A, 3), dtype=np.int64)
    if binary:
        deltas, pos = _decode_varints(data, pos, 2 * A, path)
        lhs = 2 * (I + L + 1 + np.arange(A, dtype=np.int64))
        d0, d1 = deltas[0::2], deltas[1::2]
        r0 = lhs - d0
        r1 = r0 - d1
        bad = np.nonzero((d0 <= 0) | (r0 < 0) | (r1 < 0))[0]
        if bad.size:
            k = int(bad[0])
            raise CircuitFormatError(path, None, f"AND {k} (lhs {int(lhs[k])}): invalid delta encoding "
                                     f"(rhs0 must be < lhs and rhs1 <= rhs0); the file is corrupt")
        ands[:, 0], ands[:, 1], ands[:, 2] = lhs, r0, r1
        # symbol table starts on the next line
        lineno = -1  # line numbers are meaningless after binary data
    else:
        for k in range(A):
            s, ln = next_line()
            t = s.split()
            if len(t) != 3:
                raise CircuitFormatError(path, ln, f"AND {k}: expected 'lhs rhs0 rhs1', got {s!r}")
            ands[k] = [lit(t[0], ln, f"AND {k} lhs"), lit(t[1], ln, f"AND {k}"), lit(t[2], ln, f"AND {k}")]
            if ands[k, 0] & 1 or ands[k, 0] < 2:
                raise CircuitFormatError(path, ln, f"AND {k}: lhs {ands[k, 0]} must be an even literal >= 2")
    # symbols
    pi_names: list[str | None] = [None] * I
    po_names: list[str | None] = [None] * O
    latch_names: list[str | None] = [None] * L
    while pos < len(data):
        e = data.find(b"\n", pos)
        e = len(data) if e < 0 else e
        s = data[pos:e].decode("utf-8", "replace")
        pos = e + 1
        if not s or s.startswith("c"):
            break
        m = re.match(r"([ilo])(\d+) (.*)", s)
        if m:
            kind, idx, nm_ = m.group(1), int(m.group(2)), m.group(3)
            tgt = {"i": pi_names, "o": po_names, "l": latch_names}[kind]
            if idx < len(tgt):
                tgt[idx] = nm_

    # renumber variables into Circuit order: const, inputs, latch outputs (as PIs), ANDs (topo)
    n_pi = I + L
    var_map = np.full(M + 1, -1, dtype=np.int64)
    var_map[0] = 0
    src_vars = np.concatenate([in_lits >> 1, latch_cur >> 1])
    if np.unique(src_vars).size != src_vars.size:
        raise CircuitFormatError(path, None, "a variable is defined twice as input/latch")
    var_map[src_vars] = np.arange(1, n_pi + 1)
    and_vars = ands[:, 0] >> 1
    if np.unique(and_vars).size != A or (var_map[and_vars] >= 0).any():
        raise CircuitFormatError(path, None, "an AND gate redefines a variable already defined")
    # topological order of the ANDs (ASCII files may list them in any order); detects cycles
    order = _topo_order_ands(ands, var_map, M, path)
    var_map[and_vars[order]] = n_pi + 1 + np.arange(A)

    def remap(lits: np.ndarray, what: str) -> np.ndarray:
        v = var_map[lits >> 1]
        if (v < 0).any():
            bad = int(lits[np.nonzero(v < 0)[0][0]])
            raise CircuitFormatError(path, None, f"{what} uses literal {bad} whose variable is never defined")
        return 2 * v + (lits & 1)

    new_ands = remap(ands[order, 1:].reshape(-1), "an AND gate").reshape(-1, 2)
    new_pos = remap(np.concatenate([outs, latch_next]), "an output")
    return Circuit(n_pi, new_ands, new_pos, pi_names + latch_names, po_names + [None] * L, L, nm)


def _topo_order_ands(ands: np.ndarray, var_map: np.ndarray, M: int, path) -> np.ndarray:
    """Order ANDs so that fanins precede uses; raises on cycles / undefined variables."""
    A = ands.shape[0]
    lhs_v = ands[:, 0] >> 1
    if A == 0:
        return np.zeros(0, dtype=np.int64)
    # fast path: already topological (binary AIGER always is)
    idx_of = np.full(M + 1, -1, dtype=np.int64)
    idx_of[lhs_v] = np.arange(A)
    fin = ands[:, 1:] >> 1
    fin_idx = idx_of[fin]  # -1 for non-AND
    undefined = (fin_idx < 0) & (var_map[fin] < 0)
    if undefined.any():
        k = int(np.nonzero(undefined.any(1))[0][0])
        raise CircuitFormatError(path, None, f"AND gate with lhs {int(ands[k, 0])} uses an undefined variable "
                                 f"{int(fin[k][undefined[k]][0])}")
    if (fin_idx < np.arange(A)[:, None]).all():
        return np.arange(A)
    # Kahn's algorithm
    indeg = (fin_idx >= 0).sum(1)
    users: list[list[int]] = [[] for _ in range(A)]
    for k in range(A):
        for j in fin_idx[k]:
            if j >= 0:
                users[j].append(k)
    ready = [k for k in range(A) if indeg[k] == 0]
    out = []
    while ready:
        k = ready.pop()
        out.append(k)
        for u in users[k]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(out) != A:
        stuck = sorted(set(range(A)) - set(out))[:5]
        raise CircuitFormatError(path, None, "combinational cycle through AND gates with lhs "
                                 f"{[int(ands[k, 0]) for k in stuck]}; an AIG must be acyclic")
    return np.asarray(out, dtype=np.int64)


# ----------------------------------------------------------------------------- BENCH
_BENCH_GATES = {"AND", "NAND", "OR", "NOR", "XOR", "XNOR", "NOT", "BUFF", "BUF", "DFF", "VDD", "GND"}


def read_bench(path: str | Path | None = None, *, text: str | None = None, name: str | None = None) -> Circuit:
    """Read an ISCAS / OpenABC-D ``.bench`` netlist into a structurally hashed AIG.

    Gates: AND, NAND, OR, NOR, XOR, XNOR (n-ary), NOT, BUFF/BUF, VDD/GND constants; DFF is cut
    into a PI (its output) and a PO (its input). Dangling logic is removed (as ABC ``strash``).

    Raises:
        CircuitFormatError: syntax errors, unsupported gates, undefined or doubly defined
            signals, combinational cycles — with the line number.
    """
    if text is None:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    nm = name or (Path(path).stem if path is not None else "circuit")
    inputs: list[tuple[str, int]] = []
    outputs: list[tuple[str, int]] = []
    defs: dict[str, tuple[str, list[str], int]] = {}
    rx_io = re.compile(r"^(INPUT|OUTPUT)\s*\(\s*([^)\s]+)\s*\)$", re.I)
    rx_g = re.compile(r"^([^=\s]+)\s*=\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(([^)]*)\)$")
    for ln, raw in enumerate(text.splitlines(), 1):
        s = raw.split("#", 1)[0].strip()
        if not s:
            continue
        m = rx_io.match(s)
        if m:
            (inputs if m.group(1).upper() == "INPUT" else outputs).append((m.group(2), ln))
            continue
        m = rx_g.match(s)
        if not m:
            raise CircuitFormatError(path, ln, f"cannot parse {s!r}; expected INPUT(x), OUTPUT(x) or x = GATE(a, b)")
        out, g, args = m.group(1), m.group(2).upper(), [a.strip() for a in m.group(3).split(",") if a.strip()]
        if g not in _BENCH_GATES:
            raise CircuitFormatError(path, ln, f"unsupported gate {g!r}; supported: {sorted(_BENCH_GATES)}")
        if out in defs:
            raise CircuitFormatError(path, ln, f"signal {out!r} defined twice (first on line {defs[out][2]})")
        defs[out] = (g, args, ln)
    b = AigBuilder()
    lit_of: dict[str, int] = {}
    for nm_i, ln in inputs:
        if nm_i in lit_of:
            raise CircuitFormatError(path, ln, f"INPUT {nm_i!r} declared twice")
        lit_of[nm_i] = b.pi(nm_i)
    dffs = [(o, d) for o, d in defs.items() if d[0] == "DFF"]
    for o, _ in dffs:
        lit_of[o] = b.pi(o)
    visiting: set[str] = set()

    def get(sig: str, ln: int) -> int:
        if sig in lit_of:
            return lit_of[sig]
        if sig not in defs:
            raise CircuitFormatError(path, ln, f"signal {sig!r} is used but never defined (missing INPUT or gate)")
        # iterative DFS to avoid recursion limits on deep netlists
        stack = [sig]
        while stack:
            cur = stack[-1]
            if cur in lit_of:
                stack.pop()
                continue
            if cur not in defs:
                raise CircuitFormatError(path, defs[stack[-2]][2] if len(stack) > 1 else ln,
                                         f"signal {cur!r} is used but never defined")
            g, args, gl = defs[cur]
            pend = [a for a in args if a not in lit_of]
            if pend and cur not in visiting:
                visiting.add(cur)
                for a in pend:
                    if a in visiting:
                        raise CircuitFormatError(path, gl, f"combinational cycle through {cur!r} and {a!r}")
                    stack.append(a)
                continue
            if pend:
                raise CircuitFormatError(path, gl, f"combinational cycle through {cur!r}")
            visiting.discard(cur)
            lit_of[cur] = _bench_gate(b, g, [lit_of[a] for a in args], path, gl)
            stack.pop()
        return lit_of[sig]

    pos_lits, po_names = [], []
    for o, ln in outputs:
        pos_lits.append(get(o, ln))
        po_names.append(o)
    for o, d in dffs:
        if len(d[1]) != 1:
            raise CircuitFormatError(path, d[2], f"DFF {o!r} must have exactly one input")
        pos_lits.append(get(d[1][0], d[2]))
        po_names.append(o + "_next")
    return b.build(pos_lits, po_names, name=nm, num_latches=len(dffs))


def _bench_gate(b: AigBuilder, g: str, ins: list[int], path, ln: int) -> int:
    if g in ("VDD", "GND"):
        return 1 if g == "VDD" else 0
    if g in ("NOT", "BUFF", "BUF"):
        if len(ins) != 1:
            raise CircuitFormatError(path, ln, f"{g} takes exactly one input, got {len(ins)}")
        return ins[0] ^ (g == "NOT")
    if not ins:
        raise CircuitFormatError(path, ln, f"{g} needs at least one input")
    base = {"AND": "and", "NAND": "and", "OR": "or", "NOR": "or", "XOR": "xor", "XNOR": "xor"}[g]
    return b.nary(base, ins) ^ (g in ("NAND", "NOR", "XNOR"))


# ----------------------------------------------------------------------------- BLIF
def read_blif(path: str | Path | None = None, *, text: str | None = None, name: str | None = None) -> Circuit:
    """Read a flat BLIF netlist (``.names`` SOP covers, ``.latch`` cut into PI/PO) into a hashed AIG.

    Each ``.names`` block becomes an OR of AND cubes (``-`` = don't care); an output column of
    ``0`` describes the OFF-set (the function is inverted). ``.subckt``/``.gate`` are rejected.

    Raises:
        CircuitFormatError: with the line for malformed cubes, unsupported constructs,
            undefined signals and cycles.
    """
    if text is None:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    nm = name or (Path(path).stem if path is not None else "circuit")
    # join continuation lines, keep line numbers of the first physical line
    logical: list[tuple[int, str]] = []
    buf, start = "", 0
    for ln, raw in enumerate(text.splitlines(), 1):
        s = raw.split("#", 1)[0].rstrip()
        if not buf:
            start = ln
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        buf += s
        if buf.strip():
            logical.append((start, buf.strip()))
        buf = ""
    inputs: list[str] = []
    outputs: list[str] = []
    latches: list[tuple[str, str, int]] = []
    covers: dict[str, tuple[list[str], list[str], int]] = {}
    cur: tuple[list[str], list[str], int] | None = None
    for ln, s in logical:
        if s.startswith("."):
            t = s.split()
            kw = t[0]
            cur = None
            if kw == ".model" or kw == ".end":
                if kw == ".end":
                    break
            elif kw == ".inputs":
                inputs += t[1:]
            elif kw == ".outputs":
                outputs += t[1:]
            elif kw == ".names":
                if len(t) < 2:
                    raise CircuitFormatError(path, ln, ".names needs at least an output signal")
                if t[-1] in covers:
                    raise CircuitFormatError(path, ln, f"signal {t[-1]!r} defined twice")
                cur = (t[1:-1], [], ln)
                covers[t[-1]] = cur
            elif kw == ".latch":
                if len(t) < 3:
                    raise CircuitFormatError(path, ln, ".latch needs 'input output'")
                latches.append((t[1], t[2], ln))
            elif kw in (".default_input_arrival", ".default_output_required", ".input_arrival", ".output_required",
                        ".default_input_drive", ".default_output_load", ".wire_load_slope"):
                continue
            else:
                raise CircuitFormatError(path, ln, f"unsupported BLIF construct {kw!r} (flatten the design "
                                         "to .names/.latch first, e.g. with ABC 'strash; write_blif')")
        else:
            if cur is None:
                raise CircuitFormatError(path, ln, f"cube {s!r} outside a .names block")
            cur[1].append(s)
            t = s.split()
            nin = len(cur[0])
            if (nin == 0 and (len(t) != 1 or t[0] not in "01")) or (nin > 0 and (len(t) != 2 or len(t[0]) != nin
                                                                                or set(t[0]) - set("01-")
                                                                                or t[1] not in ("0", "1"))):
                raise CircuitFormatError(path, ln, f"malformed cube {s!r} for a .names with {nin} inputs")
    b = AigBuilder()
    lit_of: dict[str, int] = {}
    for s in inputs:
        lit_of[s] = b.pi(s)
    for _, o, _ in latches:
        lit_of[o] = b.pi(o)

    def cover_lit(sig: str) -> int:
        ins, cubes, ln = covers[sig]
        if not cubes:
            return 0
        if not ins:
            return 1 if cubes[0].split()[0] == "1" else 0
        phase = {c.split()[1] for c in cubes}
        if len(phase) != 1:
            raise CircuitFormatError(path, ln, f"cover of {sig!r} mixes ON-set and OFF-set cubes")
        terms = []
        for c in cubes:
            pat = c.split()[0]
            terms.append(b.nary("and", [lit_of[ins[i]] ^ (ch == "0") for i, ch in enumerate(pat) if ch != "-"]))
        f = b.nary("or", terms)
        return f if phase == {"1"} else f ^ 1

    visiting: set[str] = set()

    def get(sig: str, ln: int) -> int:
        stack = [sig]
        while stack:
            cur_s = stack[-1]
            if cur_s in lit_of:
                stack.pop()
                continue
            if cur_s not in covers:
                raise CircuitFormatError(path, ln, f"signal {cur_s!r} is used but never defined")
            pend = [a for a in covers[cur_s][0] if a not in lit_of]
            if pend:
                if cur_s in visiting:
                    raise CircuitFormatError(path, covers[cur_s][2], f"combinational cycle through {cur_s!r}")
                visiting.add(cur_s)
                for a in pend:
                    if a in visiting:
                        raise CircuitFormatError(path, covers[cur_s][2], f"combinational cycle through {cur_s!r}")
                    stack.append(a)
                continue
            visiting.discard(cur_s)
            lit_of[cur_s] = cover_lit(cur_s)
            stack.pop()
        return lit_of[sig]

    pos_lits = [get(o, 0) for o in outputs] + [get(i, ln) for i, _, ln in latches]
    names = list(outputs) + [o + "_next" for _, o, _ in latches]
    return b.build(pos_lits, names, name=nm, num_latches=len(latches))


# ----------------------------------------------------------------------------- Verilog
_SEQ = re.compile(r"\b(always\s*@\s*\(\s*(posedge|negedge)|always_ff|\breg\b[^;]*<=)", re.S)


def read_verilog(path: str | Path, *, name: str | None = None) -> Circuit:
    """Read structural combinational Verilog (``assign`` statements with ``& | ^ ~``) via ``aigverse``.

    Raises:
        CircuitFormatError: for sequential Verilog (``always @(posedge ...)``, non-blocking
            ``<=``), naming the line; or when the ``aigverse`` reader rejects the file (use Yosys
            ``synth; aigmap; write_aiger`` for behavioural RTL).
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8", errors="replace")
    m = _SEQ.search(text)
    if m:
        ln = text.count("\n", 0, m.start()) + 1
        raise CircuitFormatError(p, ln, f"sequential Verilog ({m.group(0).strip()[:30]!r}) is not combinational; "
                                 "synthesise it first (Yosys: synth; aigmap; write_aiger) and load the AIGER")
    from aigverse.io import read_verilog_into_aig

    try:
        aig = read_verilog_into_aig(str(p))
    except Exception as e:  # the reader's own message
        raise CircuitFormatError(p, None, f"aigverse could not parse this Verilog ({e}); only structural "
                                 "assign-statement Verilog is supported — convert RTL with Yosys") from None
    return from_aigverse(aig, name=name or p.stem)


def load_circuit(path: str | Path) -> Circuit:
    """Load ``.aig``/``.aag`` (AIGER), ``.bench``, ``.blif`` or ``.v`` (structural Verilog) by extension.

    Raises:
        FileNotFoundError: missing file. CircuitFormatError: malformed or unsupported content.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"circuit file {p} does not exist")
    ext = p.suffix.lower()
    if ext in (".aig", ".aag"):
        return read_aiger(p)
    if ext == ".bench":
        return read_bench(p)
    if ext == ".blif":
        return read_blif(p)
    if ext in (".v", ".sv"):
        return read_verilog(p)
    raise CircuitFormatError(p, None, f"unknown circuit extension {ext!r}; use .aig, .aag, .bench, .blif or .v")


# ----------------------------------------------------------------------------- simulation
def simulate(c: Circuit, patterns: np.ndarray) -> np.ndarray:
    """Bit-parallel simulation.

    Args:
        patterns: ``uint64[I, W]`` — 64·W input patterns, one bit per pattern.

    Returns:
        ``uint64[O, W]`` output words.
    """
    patterns = np.asarray(patterns, dtype=np.uint64)
    if patterns.shape[0] != c.num_pis:
        raise ValueError(f"patterns has {patterns.shape[0]} rows, the circuit has {c.num_pis} inputs")
    W = patterns.shape[1]
    val = np.zeros((c.num_vars, W), dtype=np.uint64)
    val[1 : 1 + c.num_pis] = patterns
    full = np.uint64(0xFFFFFFFFFFFFFFFF)
    base = 1 + c.num_pis
    a_ = c.ands.tolist()
    for k, (x, y) in enumerate(a_):
        vx = val[x >> 1] ^ full if x & 1 else val[x >> 1]
        vy = val[y >> 1] ^ full if y & 1 else val[y >> 1]
        val[base + k] = vx & vy
    po = val[c.pos >> 1]
    inv = (c.pos & 1).astype(bool)
    po[inv] ^= full
    return po


# ----------------------------------------------------------------------------- aigverse bridge
def to_aigverse(c: Circuit):
    """Convert to an ``aigverse.networks.Aig`` (for re-synthesis and SAT-based equivalence)."""
    from aigverse.networks import Aig

    aig = Aig()
    sig = [aig.get_constant(False)]
    for _ in range(c.num_pis):
        sig.append(aig.create_pi())

    def s(lit: int):
        x = sig[lit >> 1]
        return aig.create_not(x) if lit & 1 else x

    for a, b in c.ands.tolist():
        sig.append(aig.create_and(s(a), s(b)))
    for p in c.pos.tolist():
        aig.create_po(s(p))
    return aig


def from_aigverse(aig, name: str = "circuit") -> Circuit:
    """Convert an ``aigverse`` AIG into a :class:`Circuit` (ANDs in aigverse's topological order)."""
    b_pis = list(aig.pis())
    var_of: dict[int, int] = {aig.node_to_index(aig.get_node(aig.get_constant(False))): 0}
    for i, n in enumerate(b_pis, 1):
        var_of[aig.node_to_index(n)] = i
    ands = []
    nxt = len(b_pis) + 1

    def lit(sg) -> int:
        return 2 * var_of[aig.node_to_index(aig.get_node(sg))] + int(aig.is_complemented(sg))

    for n in aig.gates():
        fs = list(aig.fanins(n))
        ands.append((lit(fs[0]), lit(fs[1])))
        var_of[aig.node_to_index(n)] = nxt
        nxt += 1
    pos = [lit(p) for p in aig.pos()]
    return Circuit(len(b_pis), np.asarray(ands, dtype=np.int64).reshape(-1, 2), np.asarray(pos, dtype=np.int64),
                   name=name)


def equivalent(c1: Circuit, c2: Circuit) -> bool:
    """SAT-based combinational equivalence (``aigverse.algorithms.equivalence_checking``),
    inputs and outputs matched by position.

    Raises:
        ValueError: different numbers of inputs or outputs.
    """
    if (c1.num_pis, c1.num_pos) != (c2.num_pis, c2.num_pos):
        raise ValueError(f"I/O mismatch: {c1.num_pis}/{c1.num_pos} vs {c2.num_pis}/{c2.num_pos} (inputs/outputs)")
    from aigverse.algorithms import equivalence_checking

    r = equivalence_checking(to_aigverse(c1), to_aigverse(c2))
    if r is None:
        raise RuntimeError("equivalence checking did not finish")
    return bool(r)


#: OpenABC-D's synthesis-operation encoding (``synthID2Vec``).
RECIPE_OPS = {"refactor": 0, "refactor -z": 1, "rewrite": 2, "rewrite -z": 3, "resub": 4, "resub -z": 5,
              "balance": 6}


def encode_recipe(recipe: str | list[str]) -> list[int]:
    """Encode ``"resub -z; rewrite -z; ..."`` (or a list of commands) with :data:`RECIPE_OPS`.

    Raises:
        ValueError: an unknown command (naming it and the accepted ones).
    """
    cmds = [s.strip() for s in recipe.split(";")] if isinstance(recipe, str) else [s.strip() for s in recipe]
    out = []
    for c in cmds:
        if not c:
            continue
        c = " ".join(c.split())
        if c not in RECIPE_OPS:
            raise ValueError(f"unknown synthesis command {c!r}; accepted: {sorted(RECIPE_OPS)}")
        out.append(RECIPE_OPS[c])
    return out


def apply_recipe(c: Circuit, recipe: str | list[str]) -> Circuit:
    """Re-synthesise with ``aigverse`` stand-ins for ABC commands (balance → balancing,
    rewrite → cut rewriting, refactor → SOP refactoring, resub → resubstitution; ``-z`` → allow
    zero-gain). The result is functionally equivalent; AND counts differ from ABC's.
    """
    from aigverse import algorithms as al

    aig = to_aigverse(c)
    for cmd in (recipe.split(";") if isinstance(recipe, str) else recipe):
        cmd = " ".join(cmd.split())
        if not cmd:
            continue
        z = cmd.endswith("-z")
        op = cmd.split()[0]
        if op == "balance":
            r = al.balancing(aig)
        elif op == "rewrite":
            r = al.aig_cut_rewriting(aig, allow_zero_gain=z)
        elif op == "refactor":
            r = al.sop_refactoring(aig, allow_zero_gain=z)
        elif op == "resub":
            r = al.aig_resubstitution(aig)
        else:
            raise ValueError(f"unknown synthesis command {cmd!r}; accepted: {sorted(RECIPE_OPS)}")
        if r is not None:
            aig = r
    return from_aigverse(aig, name=c.name)
