"""Strict readers for AIGER (ASCII/binary), BENCH, BLIF and structural Verilog into a :class:`Circuit`.

The AIGER/BENCH/BLIF readers are small parsers of our own so that malformed input is reported with
file, line and a fix (:class:`~iclr25.mgvga.circuit.CircuitFormatError`); structural Verilog goes
through ``aigverse``. Sequential elements are cut (latch output → PI, next state → PO).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np

from .circuit import AigBuilder, Circuit, CircuitFormatError

__all__ = ["load_circuit", "read_aiger", "read_bench", "read_blif", "read_verilog"]


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


MAX_AIGER_VARIABLES = 50_000_000
"""Default bound on an AIGER header's M (variables): arrays are sized by it before the body is read."""


def read_aiger(path: str | Path | None = None, *, data: bytes | None = None, name: str | None = None,
               max_variables: int = MAX_AIGER_VARIABLES) -> Circuit:
    """Read ASCII (``aag``) or binary (``aig``) AIGER 1.9 (combinational or with latches, which are cut).

    Args:
        path: file to read (or give ``data``).
        data: the file's bytes.
        max_variables: refuse headers declaring more variables (M) than this (default 50 M, i.e.
            a few GB of index arrays); raise it for larger circuits.

    Returns:
        :class:`Circuit` with names from the symbol table when present.

    Raises:
        CircuitFormatError: bad header (``M < I + L + A``, unknown format), a literal out of range
            or odd where it must be even, an AND that refers to an undefined variable (or a cycle,
            i.e. an AND fanin that is not defined before use), truncated data (checked against the
            header counts before anything is allocated), ``M > max_variables``.
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
    if M > max_variables:
        raise CircuitFormatError(path, 1, f"header declares M={M:,} variables, more than this reader holds "
                                 f"(max_variables={max_variables:,}); pass read_aiger(..., max_variables=N) "
                                 "for a larger circuit")
    # every line the counts announce needs >= 2 bytes (a digit and a newline; a binary AND >= 2 varint
    # bytes): check before allocating anything sized by the header
    need = 2 * (L + O + A) + (0 if binary else 2 * I)
    if need > len(data) - (nl + 1):
        raise CircuitFormatError(path, 1, f"header counts (I={I:,} L={L:,} O={O:,} A={A:,}) need at least "
                                 f"{need:,} bytes after the header, the file has {len(data) - nl - 1:,}: "
                                 "truncated file or wrong header")
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


_MODULE = re.compile(r"\bmodule\s+([A-Za-z_][A-Za-z0-9_$]*)")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def verilog_modules(text: str) -> list[str]:
    """Names of the modules declared in Verilog ``text`` (comments ignored), in file order."""
    return _MODULE.findall(_COMMENTS.sub(lambda m: " " * len(m.group(0)), text))


def _rename_module(text: str, old: str, new: str) -> str:
    return re.sub(rf"\bmodule(\s+){re.escape(old)}\b", rf"module\g<1>{new}", text, count=1)


def read_verilog(path: str | Path, *, name: str | None = None, top: str | None = None) -> Circuit:
    """Read structural combinational Verilog (``assign`` statements with ``& | ^ ~``) via ``aigverse``.

    The ``aigverse`` (mockturtle) reader keeps only a module named ``top`` and returns an empty network
    for any other name. The module read here is ``top`` when given, else the module named ``top``, else
    the only module of the file; it is renamed to ``top`` in a temporary copy before reading.

    Raises:
        CircuitFormatError: for sequential Verilog (``always @(posedge ...)``, non-blocking
            ``<=``), naming the line; no module, several modules and no ``top`` to choose, an unknown
            ``top``; an empty result (no outputs); or when the ``aigverse`` reader rejects the file (use
            Yosys ``synth; aigmap; write_aiger`` for behavioural RTL).
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8", errors="replace")
    m = _SEQ.search(text)
    if m:
        ln = text.count("\n", 0, m.start()) + 1
        raise CircuitFormatError(p, ln, f"sequential Verilog ({m.group(0).strip()[:30]!r}) is not combinational; "
                                 "synthesise it first (Yosys: synth; aigmap; write_aiger) and load the AIGER")
    modules = verilog_modules(text)
    if not modules:
        raise CircuitFormatError(p, None, "no 'module NAME (...)' declaration found; is this a Verilog file?")
    if top is not None:
        if top not in modules:
            raise CircuitFormatError(p, None, f"top module {top!r} is not in the file (modules: {modules})")
        chosen = top
    elif "top" in modules:
        chosen = "top"
    elif len(modules) == 1:
        chosen = modules[0]
    else:
        raise CircuitFormatError(p, None, f"{len(modules)} modules {modules} and none is named 'top'; choose one "
                                 "with top=NAME (CLI: --top NAME)")
    from aigverse.io import read_verilog_into_aig

    src = p
    tmp = None
    if chosen != "top":
        if "top" in modules:  # free the name the reader looks for
            spare = "top_"
            while spare in modules:
                spare += "_"
            text = _rename_module(text, "top", spare)
        text = _rename_module(text, chosen, "top")
        tmp = tempfile.TemporaryDirectory(prefix="mgvga-verilog-")
        src = Path(tmp.name) / p.name
        src.write_text(text, encoding="utf-8")
    try:
        aig = read_verilog_into_aig(str(src))
    except Exception as e:  # the reader's own message
        raise CircuitFormatError(p, None, f"aigverse could not parse this Verilog ({e}); only structural "
                                 "assign-statement Verilog is supported — convert RTL with Yosys") from None
    finally:
        if tmp is not None:
            tmp.cleanup()
    from .synthesis import from_aigverse

    c = from_aigverse(aig, name=name or p.stem)
    if len(c.pos) == 0:
        raise CircuitFormatError(p, None, f"module {chosen!r} read as an empty circuit (inputs={c.num_pis}, "
                                 f"outputs=0, ands={c.num_ands}); only structural assign-statement Verilog is "
                                 "supported — convert RTL with Yosys (synth; aigmap; write_aiger)")
    return c


def load_circuit(path: str | Path, *, top: str | None = None) -> Circuit:
    """Load ``.aig``/``.aag`` (AIGER), ``.bench``, ``.blif`` or ``.v`` (structural Verilog) by extension.

    ``top`` names the Verilog module to read (default: ``top``, else the only module); ignored for the
    other formats.

    Raises:
        FileNotFoundError: missing file. CircuitFormatError: malformed or unsupported content, or an
            empty circuit (no outputs).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"circuit file {p} does not exist")
    ext = p.suffix.lower()
    if ext in (".v", ".sv"):
        return read_verilog(p, top=top)
    readers = {".aig": read_aiger, ".aag": read_aiger, ".bench": read_bench, ".blif": read_blif}
    if ext in readers:
        c = readers[ext](p)
        if len(c.pos) == 0:
            raise CircuitFormatError(p, None, f"empty circuit (inputs={c.num_pis}, outputs=0, ands={c.num_ands}); "
                                     "a circuit needs at least one output")
        return c
    raise CircuitFormatError(p, None, f"unknown circuit extension {ext!r}; use .aig, .aag, .bench, .blif or .v")
