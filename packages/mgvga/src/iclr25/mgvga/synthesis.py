"""Synthesis and verification bridge: ``aigverse`` (mockturtle) for re-synthesis with ABC-like
recipes, circuit-level SAT equivalence and conversion both ways; ``python-sat`` (CaDiCaL) for
node-level equivalence between two circuits over shared inputs; OpenABC-D's recipe encoding."""

from __future__ import annotations

import numpy as np

from .circuit import Circuit

__all__ = ["to_aigverse", "from_aigverse", "equivalent", "NodeEquivalenceChecker", "apply_recipe", "RECIPE_OPS",
           "encode_recipe"]


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


def _and_clauses(z: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Tseitin clauses of ``z = a AND b`` (signed DIMACS ids, arrays of equal length): (¬z ∨ a),
    (¬z ∨ b), (z ∨ ¬a ∨ ¬b); returned as ``int64[3k, 3]`` rows padded with 0 (dropped later)."""
    zero = np.zeros_like(z)
    return np.concatenate([np.stack([-z, a, zero], 1), np.stack([-z, b, zero], 1), np.stack([z, -a, -b], 1)])


class NodeEquivalenceChecker:
    """SAT check that a node of circuit ``c1`` and a node of ``c2`` compute the same function of the
    shared primary inputs (matched by position), with ``python-sat`` (CaDiCaL 1.5.3 by default).

    Both circuits are Tseitin-encoded once into one incremental solver; :meth:`equivalent` then
    asks two questions under assumptions (``u ∧ ¬v`` and ``¬u ∧ v``): both unsatisfiable ⇔ the
    literals are equivalent. ``c2=None`` compares nodes inside ``c1``.

    Args:
        c1, c2: circuits with the same number of inputs.
        solver: a ``pysat.solvers.Solver`` name.

    Raises:
        ValueError: different numbers of inputs. ImportError: ``python-sat`` missing.
    """

    def __init__(self, c1: Circuit, c2: Circuit | None = None, solver: str = "cadical153"):
        from pysat.solvers import Solver

        if c2 is not None and c2.num_pis != c1.num_pis:
            raise ValueError(f"input mismatch: {c1.num_pis} vs {c2.num_pis} primary inputs")
        self._ids1 = np.arange(1, c1.num_vars + 1, dtype=np.int64)  # var k of c1 -> id k+1 (const -> 1)
        clauses = [_and_clauses(self._ids1[1 + c1.num_pis:], self._sign(self._ids1, c1.ands[:, 0]),
                                self._sign(self._ids1, c1.ands[:, 1]))]
        self._ids2 = self._ids1
        if c2 is not None:
            ids2 = np.empty(c2.num_vars, dtype=np.int64)
            ids2[: 1 + c2.num_pis] = self._ids1[: 1 + c2.num_pis]  # shared constant and inputs
            ids2[1 + c2.num_pis:] = c1.num_vars + 1 + np.arange(c2.num_ands)
            clauses.append(_and_clauses(ids2[1 + c2.num_pis:], self._sign(ids2, c2.ands[:, 0]),
                                        self._sign(ids2, c2.ands[:, 1])))
            self._ids2 = ids2
        cl = np.concatenate(clauses) if clauses else np.zeros((0, 3), np.int64)
        self._solver = Solver(name=solver)
        self._solver.add_clause([-1])  # the constant is FALSE
        self._solver.append_formula([[int(x) for x in row if x != 0] for row in cl.tolist()])
        self.calls = 0

    @staticmethod
    def _sign(ids: np.ndarray, lits: np.ndarray) -> np.ndarray:
        return np.where(lits & 1, -ids[lits >> 1], ids[lits >> 1])

    def equivalent(self, lit1: int, lit2: int) -> bool:
        """Whether literal ``lit1`` of ``c1`` and literal ``lit2`` of ``c2`` are equivalent."""
        u = int(self._sign(self._ids1, np.array([lit1]))[0])
        v = int(self._sign(self._ids2, np.array([lit2]))[0])
        self.calls += 1
        if self._solver.solve(assumptions=[u, -v]):
            return False
        return not self._solver.solve(assumptions=[-u, v])

    def close(self) -> None:
        self._solver.delete()

    def __enter__(self) -> NodeEquivalenceChecker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
