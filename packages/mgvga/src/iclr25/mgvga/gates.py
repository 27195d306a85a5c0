"""Gate-level probes of frozen node embeddings (DeepGate2-style; spec Sec. 1.7, issue 15).

(a) **Logic probability**: the probability that a gate is 1 under uniformly random inputs
(:func:`~iclr25.mgvga.simulate.logic_probability`, 64-bit parallel simulation) is regressed from
the frozen node embedding with a small MLP head; error = mean absolute error per design,
leave-designs-out (K folds over designs, the same folds for every encoder).

(b) **Gate-level functional equivalence**: between a circuit and a re-synthesised variant (inputs
matched by position), node pairs whose simulated truth tables are identical — each confirmed by
SAT (:class:`~iclr25.mgvga.synthesis.NodeEquivalenceChecker`, python-sat) — against *near-miss*
pairs (the variant gate closest in Hamming distance that differs on at least one pattern);
ROC-AUC of the cosine similarity of the two node embeddings.

"Gates" are AND and NOT nodes (PIs have probability ½ by construction; a PO repeats its driver).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from .circuit import Circuit
from .graph import to_graph
from .simulate import logic_probability, node_literals, node_signatures, popcount, random_patterns

__all__ = [
    "GateDesign",
    "gate_design",
    "node_embeddings",
    "hand_node_features",
    "design_folds",
    "logic_probability_probe",
    "GatePairs",
    "gate_equivalence_pairs",
    "gate_equivalence_auc",
]

log = logging.getLogger("iclr25.mgvga")


@dataclass
class GateDesign:
    """A circuit with its graph and gate-level labels.

    Attributes:
        name: design name. circuit / graph: the AIG and ``to_graph(circuit)``.
        prob: ``float64[N]`` logic probability of every graph node.
        gate: ``bool[N]`` AND and NOT nodes (the labelled gates).
    """

    name: str
    circuit: Circuit
    graph: Data
    prob: np.ndarray
    gate: np.ndarray


def gate_design(c: Circuit, name: str | None = None, *, words: int = 64, seed: int = 0,
                direction: str = "fanin") -> GateDesign:
    """Graph and logic-probability labels (``64·words`` random patterns) of ``c``."""
    g = to_graph(c, direction=direction)
    x = g.x.numpy()
    gate = (x == 2) | (x == 3)
    return GateDesign(name or c.name, c, g, logic_probability(c, words=words, seed=seed), gate)


@torch.no_grad()
def node_embeddings(encoder, graphs: Sequence[Data], batch_size: int = 4) -> list[torch.Tensor]:
    """Frozen node embeddings ``Float[N_g, d]`` of each graph (PyG batches; eval mode, no grad)."""
    was = encoder.training
    encoder.eval()
    out: list[torch.Tensor] = []
    for i in range(0, len(graphs), batch_size):
        b = Batch.from_data_list(list(graphs[i : i + batch_size]))
        h = encoder(b.x, b.edge_index)
        out += list(torch.split(h, torch.bincount(b.batch, minlength=b.num_graphs).tolist()))
    encoder.train(was)
    return out


def hand_node_features(d: GateDesign) -> torch.Tensor:
    """``Float[N, 7]`` baseline node features: one-hot type (4), log1p level, log1p fan-in, log1p fan-out."""
    g = d.graph
    oh = torch.nn.functional.one_hot(g.x, 4).float()
    return torch.cat([oh, torch.log1p(torch.stack([g.level, g.d_in, g.d_out], 1).float())], 1)


def design_folds(names: Sequence[str], n_folds: int) -> list[list[str]]:
    """Deterministic folds of designs (sorted, round-robin), identical for every encoder.

    Raises:
        ValueError: fewer than 2 designs, or ``n_folds`` outside ``2..len(names)``.
    """
    names = sorted(names)
    if len(names) < 2:
        raise ValueError(f"leave-designs-out needs at least 2 designs, got {names}")
    if not 2 <= n_folds <= len(names):
        raise ValueError(f"n_folds={n_folds} must be in 2..{len(names)} (the number of designs)")
    return [names[i::n_folds] for i in range(n_folds)]


def logic_probability_probe(node_emb: Mapping[str, torch.Tensor], designs: Mapping[str, GateDesign], *,
                            n_folds: int = 5, seeds: Sequence[int] = (0,), epochs: int = 200, hidden: int = 32,
                            lr: float = 1e-2, max_gates: int | None = 4000) -> dict:
    """Leave-designs-out logic-probability regression from frozen node embeddings.

    For each fold, a head ``Linear(d, hidden) → ReLU → Linear(hidden, 1) → sigmoid`` is trained
    (full batch Adam, L1 loss as DeepGate2) on the gates of the other designs (at most
    ``max_gates`` per design, drawn per seed; embeddings standardised with the training
    statistics) and evaluated on every gate of the held-out designs.

    Args:
        node_emb: ``{design: Float[N, d]}`` node embeddings (rows = graph nodes).
        designs: ``{design: GateDesign}`` with the labels.

    Returns:
        ``{"mae": mean over designs and seeds of the per-design MAE, "per_design": {d: MAE},
        "per_seed": [mean MAE per head seed], "n_gates": labelled gates, "folds": [...]}``.

    Raises:
        ValueError: fewer than 2 designs, a design without gates, embeddings of the wrong length,
            non-finite embeddings (naming the design).
    """
    names = sorted(designs)
    for n in names:
        e, d = node_emb[n], designs[n]
        if e.shape[0] != d.prob.shape[0]:
            raise ValueError(f"design {n}: {e.shape[0]} embedding rows for {d.prob.shape[0]} graph nodes")
        if not d.gate.any():
            raise ValueError(f"design {n} has no AND/NOT gate to label; drop it from the probe")
        if not torch.isfinite(e).all():
            raise ValueError(f"design {n}: node embeddings contain NaN/inf")
    folds = design_folds(names, min(n_folds, len(names)))
    X = {n: node_emb[n][torch.from_numpy(designs[n].gate)].float() for n in names}
    Y = {n: torch.from_numpy(designs[n].prob[designs[n].gate]).float() for n in names}
    per_design = {n: [] for n in names}
    per_seed = []
    for s in seeds:
        rng = np.random.default_rng(s)
        for test in folds:
            train = [n for n in names if n not in test]
            xs, ys = [], []
            for n in train:
                k = X[n].shape[0]
                sel = np.sort(rng.choice(k, max_gates, replace=False)) if max_gates and k > max_gates else slice(None)
                xs.append(X[n][sel])
                ys.append(Y[n][sel])
            xtr, ytr = torch.cat(xs), torch.cat(ys)
            mu, sd = xtr.mean(0), xtr.std(0).clamp_min(1e-6)
            torch.manual_seed(s)
            head = torch.nn.Sequential(torch.nn.Linear(xtr.shape[1], hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, 1))
            opt = torch.optim.Adam(head.parameters(), lr=lr)
            z = (xtr - mu) / sd
            for _ in range(epochs):
                opt.zero_grad()
                loss = (torch.sigmoid(head(z).squeeze(-1)) - ytr).abs().mean()
                loss.backward()
                opt.step()
            with torch.no_grad():
                for n in test:
                    p = torch.sigmoid(head((X[n] - mu) / sd).squeeze(-1))
                    per_design[n].append(float((p - Y[n]).abs().mean()))
        per_seed.append(float(np.mean([per_design[n][-1] for n in names])))
    pd = {n: float(np.mean(v)) for n, v in per_design.items()}
    return {"mae": float(np.mean(list(pd.values()))), "per_design": pd, "per_seed": per_seed,
            "n_gates": int(sum(int(designs[n].gate.sum()) for n in names)), "folds": folds}


@dataclass
class GatePairs:
    """Labelled node pairs between a base circuit and a variant.

    Attributes:
        u, v: ``int64[P]`` node indices in ``to_graph(base)`` / ``to_graph(variant)``.
        y: ``int64[P]`` 1 = functionally equivalent (SAT-confirmed), 0 = near miss.
        counts: candidates, SAT calls, SAT-refuted candidates, near-miss distance statistics.
    """

    u: np.ndarray
    v: np.ndarray
    y: np.ndarray
    counts: dict = field(default_factory=dict)


def gate_equivalence_pairs(base: Circuit, variant: Circuit, *, words: int = 16, seed: int = 0,
                           max_pairs: int = 200, near_miss: float = 0.25, sat: bool = True) -> GatePairs:
    """Equivalent and near-miss gate pairs between ``base`` and ``variant`` (inputs by position).

    1. Simulate both circuits on the same ``64·words`` random patterns; group gates (AND/NOT
       nodes with a non-constant signature) by truth table.
    2. For every truth table present in both circuits pick one random (base gate, variant gate)
       pair; keep at most ``max_pairs``. With ``sat`` each is checked by SAT: confirmed ones are
       positives, refuted ones (simulation aliasing) become negatives and are counted.
    3. For each positive's base gate, the near-miss negative is the variant gate with the
       smallest non-zero Hamming distance to it (at most ``near_miss`` of the patterns; ties at
       random); no negative when none is that close.

    Raises:
        ValueError: different numbers of inputs.
    """
    if base.num_pis != variant.num_pis:
        raise ValueError(f"{base.name} vs {variant.name}: {base.num_pis} vs {variant.num_pis} inputs")
    rng = np.random.default_rng(seed)
    pats = random_patterns(base.num_pis, words, seed)
    P = 64 * words
    sb, sv = node_signatures(base, pats), node_signatures(variant, pats)
    gb = np.flatnonzero(_gate_mask(base) & _nonconstant(sb))
    gv = np.flatnonzero(_gate_mask(variant) & _nonconstant(sv))
    groups_b: dict[bytes, list[int]] = {}
    for i in gb.tolist():
        groups_b.setdefault(sb[i].tobytes(), []).append(i)
    groups_v: dict[bytes, list[int]] = {}
    for i in gv.tolist():
        groups_v.setdefault(sv[i].tobytes(), []).append(i)
    common = [k for k in groups_b if k in groups_v]
    cand = [(int(rng.choice(groups_b[k])), int(rng.choice(groups_v[k]))) for k in common]
    if len(cand) > max_pairs:
        cand = [cand[i] for i in np.sort(rng.choice(len(cand), max_pairs, replace=False))]
    lb, lv = node_literals(base), node_literals(variant)
    pos, refuted = [], []
    if sat and cand:
        from .synthesis import NodeEquivalenceChecker

        with NodeEquivalenceChecker(base, variant) as chk:
            for u, v in cand:
                (pos if chk.equivalent(int(lb[u]), int(lv[v])) else refuted).append((u, v))
    else:
        pos = cand
    neg, dists = [], []
    for u, _ in pos:
        d = popcount(sv[gv] ^ sb[u][None, :])
        ok = np.flatnonzero((d > 0) & (d <= near_miss * P))
        if ok.size == 0:
            continue
        best = ok[d[ok] == d[ok].min()]
        neg.append((u, int(gv[int(rng.choice(best))])))
        dists.append(int(d[ok].min()))
    rows = [(u, v, 1) for u, v in pos] + [(u, v, 0) for u, v in refuted + neg]
    arr = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
    counts = {"candidates": len(cand), "truth_tables_shared": len(common), "positives": len(pos),
              "sat_checked": len(cand) if sat else 0, "sat_refuted": len(refuted), "near_miss": len(neg),
              "near_miss_mean_distance": float(np.mean(dists)) / P if dists else None, "patterns": P}
    return GatePairs(arr[:, 0], arr[:, 1], arr[:, 2], counts)


def _gate_mask(c: Circuit) -> np.ndarray:
    """``bool[N]`` AND/NOT nodes of ``to_graph(c)`` (order of :func:`node_literals`)."""
    I, A, O = c.num_pis, c.num_ands, c.num_pos
    n = node_literals(c).shape[0]
    m = np.zeros(n, dtype=bool)
    m[I : I + A] = True
    m[I + A + O : n - (1 if c.constant_refs() > 0 else 0)] = True
    return m


def _nonconstant(sig: np.ndarray) -> np.ndarray:
    full = np.uint64(0xFFFFFFFFFFFFFFFF)
    return ~((sig == 0).all(1) | (sig == full).all(1))


def gate_equivalence_auc(emb_base: torch.Tensor, emb_var: torch.Tensor, pairs: GatePairs, *,
                         what: str = "gate pairs") -> float | None:
    """ROC-AUC of the cosine similarity of paired node embeddings (``None`` with a warning naming
    ``what`` when only one class is present)."""
    from .downstream import roc_auc

    if pairs.y.size == 0:
        log.warning("%s: no labelled pair; AUC undefined (null)", what)
        return None
    s = torch.nn.functional.cosine_similarity(emb_base[torch.from_numpy(pairs.u)],
                                              emb_var[torch.from_numpy(pairs.v)], dim=-1)
    return roc_auc(pairs.y, s.double().numpy(), what=what)
