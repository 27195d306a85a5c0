"""Template RTL ↔ AIG pairs with exact ground truth (spec Sec. 4.2, synthetic VGA data).

Each family writes a behavioural Verilog module from a template (``assign s = a + b;`` …) with
random module/port names and builds the same function directly as an AIG (our
:class:`~iclr25.mgvga.circuit.AigBuilder`), so the pairing is exact by construction; tests check
every family against Python integer arithmetic by simulation. Bit vectors are LSB first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .circuit import AigBuilder, Circuit

__all__ = ["FAMILIES", "SyntheticPair", "make_pair", "synthetic_pairs", "heldout_pairs", "structural_fingerprint",
           "reference_function"]

FAMILIES = ("add", "sub", "mul", "lt", "eq", "dec", "mux", "parity", "popcount")
_NAMES = ["a", "b", "x", "y", "in0", "in1", "op_a", "op_b", "lhs", "rhs", "data", "din", "p", "q", "u", "v"]
_ONAMES = ["s", "y", "out", "res", "z", "result", "o", "dout"]


@dataclass
class SyntheticPair:
    """A template Verilog text and its AIG; ``family``/``width`` describe the function."""

    verilog: str
    circuit: Circuit
    family: str
    width: int


def _full_add(b: AigBuilder, x: int, y: int, c: int) -> tuple[int, int]:
    return b.XOR(b.XOR(x, y), c), b.MAJ(x, y, c)


def _ripple(b: AigBuilder, xs: list[int], ys: list[int], cin: int = 0) -> list[int]:
    out, c = [], cin
    for x, y in zip(xs, ys):
        s, c = _full_add(b, x, y, c)
        out.append(s)
    return out + [c]


def _build(family: str, n: int) -> tuple[AigBuilder, list[int], int, int]:
    """Returns builder, PO literals, #bits of input a, #bits of input b (0 if none)."""
    b = AigBuilder()
    if family in ("add", "sub", "mul", "lt", "eq"):
        A = [b.pi() for _ in range(n)]
        B = [b.pi() for _ in range(n)]
        if family == "add":
            pos = _ripple(b, A, B)
        elif family == "sub":
            pos = _ripple(b, A, [x ^ 1 for x in B], 1)[:n]
        elif family == "lt":  # a < b  <=> no carry out of a + ~b + 1
            pos = [_ripple(b, A, [x ^ 1 for x in B], 1)[-1] ^ 1]
        elif family == "eq":
            pos = [b.nary("and", [b.XOR(x, y) ^ 1 for x, y in zip(A, B)])]
        else:  # array multiplier
            acc = [b.AND(A[i], B[0]) for i in range(n)] + [0]
            pos = [acc[0]]
            acc = acc[1:]
            for j in range(1, n):
                pp = [b.AND(A[i], B[j]) for i in range(n)]
                acc = _ripple(b, acc[:n], pp)
                pos.append(acc[0])
                acc = acc[1:]
            pos += acc[: n]
            pos = pos[: 2 * n]
        return b, pos, n, n
    if family == "dec":
        A = [b.pi() for _ in range(n)]
        pos = [b.nary("and", [A[i] ^ (0 if (k >> i) & 1 else 1) for i in range(n)]) for k in range(1 << n)]
        return b, pos, n, 0
    if family == "mux":  # 2^n data bits, n select bits
        D = [b.pi() for _ in range(1 << n)]
        S = [b.pi() for _ in range(n)]
        cur = D
        for s in S:
            cur = [b.MUX(s, cur[2 * i + 1], cur[2 * i]) for i in range(len(cur) // 2)]
        return b, cur, 1 << n, n
    if family == "parity":
        A = [b.pi() for _ in range(n)]
        return b, [b.nary("xor", A)], n, 0
    if family == "popcount":
        A = [b.pi() for _ in range(n)]
        vecs = [[x] for x in A]
        while len(vecs) > 1:
            nxt = []
            for i in range(0, len(vecs) - 1, 2):
                u, v = vecs[i], vecs[i + 1]
                w = max(len(u), len(v))
                nxt.append(_ripple(b, u + [0] * (w - len(u)), v + [0] * (w - len(v))))
            if len(vecs) % 2:
                nxt.append(vecs[-1])
            vecs = nxt
        width = int(n).bit_length()
        out = (vecs[0] + [0] * width)[:width]
        return b, out, n, 0
    raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")


def _verilog(family: str, n: int, rng: np.random.Generator, na: int, nb: int, no: int) -> str:
    mod = f"{family}_{rng.integers(0, 1 << 20):05x}"
    a, bb = rng.choice(_NAMES, 2, replace=False)
    o = rng.choice(_ONAMES)
    rng_ = lambda k: f"[{k - 1}:0] " if k > 1 else ""  # noqa: E731
    if family == "mux":
        a, bb = "data", "sel"
    ports = [f"input {rng_(na)}{a}"] + ([f"input {rng_(nb)}{bb}"] if nb else []) + [f"output {rng_(no)}{o}"]
    expr = {
        "add": f"{a} + {bb}", "sub": f"{a} - {bb}", "mul": f"{a} * {bb}", "lt": f"{a} < {bb}",
        "eq": f"{a} == {bb}", "dec": f"1 << {a}", "mux": f"{a}[{bb}]", "parity": f"^{a}",
        "popcount": " + ".join(f"{a}[{i}]" for i in range(n)),
    }[family]
    return f"module {mod}({', '.join(ports)});\n  assign {o} = {expr};\nendmodule\n"


def make_pair(family: str, width: int, rng: np.random.Generator | int = 0) -> SyntheticPair:
    """One template pair. ``width``: operand width (dec/mux: select width, ≤ 6).

    Raises:
        ValueError: unknown family or width < 1 (dec/mux width > 6).
    """
    rng = np.random.default_rng(rng)
    if width < 1 or (family in ("dec", "mux") and width > 6):
        raise ValueError(f"width {width} out of range for family {family!r}")
    b, pos, na, nb = _build(family, width)
    text = _verilog(family, width, rng, na, nb, len(pos))
    c = b.build(pos, name=f"{family}{width}", cleanup=True)
    return SyntheticPair(text, c, family, width)


def synthetic_pairs(n: int, families: Sequence[str] = FAMILIES, widths: tuple[int, int] = (2, 8),
                    seed: int = 0) -> list[SyntheticPair]:
    """``n`` pairs with uniformly drawn family and width in ``widths`` (inclusive; dec/mux use
    ``min(width, 5)`` select bits)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        f = str(rng.choice(list(families)))
        w = int(rng.integers(widths[0], widths[1] + 1))
        if f in ("dec", "mux"):
            w = min(w, 5)
        out.append(make_pair(f, w, rng))
    return out


def heldout_pairs(n: int, families: Sequence[str] = FAMILIES, widths: tuple[int, int] = (7, 8), seed: int = 0,
                  select_width: int = 6) -> list[SyntheticPair]:
    """Pairs with generator parameters outside the training range of :func:`synthetic_pairs`
    (default widths 2–6, select widths ≤ 5): operand widths in ``widths`` and ``select_width``
    select bits for dec/mux — structurally new circuits, not renamed copies. Check with
    :func:`structural_fingerprint`."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        f = str(rng.choice(list(families)))
        w = select_width if f in ("dec", "mux") else int(rng.integers(widths[0], widths[1] + 1))
        out.append(make_pair(f, w, rng))
    return out


def structural_fingerprint(c: Circuit) -> str:
    """sha1 of the AIG structure (input count, AND fanin literals, PO literals), ignoring names:
    two circuits with the same fingerprint are the same graph up to port names."""
    import hashlib

    h = hashlib.sha1()
    h.update(np.asarray([c.num_pis, c.num_ands, c.num_pos], dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(c.ands, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(c.pos, dtype=np.int64).tobytes())
    return h.hexdigest()


def reference_function(family: str, width: int, a: int, b: int = 0) -> int:
    """Integer reference of a family (for tests): output bits packed LSB first."""
    n = width
    m = (1 << n) - 1
    if family == "add":
        return (a + b) & ((1 << (n + 1)) - 1)
    if family == "sub":
        return (a - b) & m
    if family == "mul":
        return (a * b) & ((1 << (2 * n)) - 1)
    if family == "lt":
        return int(a < b)
    if family == "eq":
        return int(a == b)
    if family == "dec":
        return 1 << a
    if family == "mux":
        return (a >> b) & 1
    if family == "parity":
        return bin(a).count("1") & 1
    if family == "popcount":
        return bin(a).count("1")
    raise ValueError(family)
