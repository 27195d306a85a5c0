"""Known-answer tests on the mirrored circuits (spec Sec. 6; values from ABC / aigverse)."""

import csv

import numpy as np
import pytest
import torch

from iclr25.mgvga.data import equivalence_pairs, load_cached, qor_labels, usable_qor_designs
from iclr25.mgvga.downstream import zscore_labels
from iclr25.mgvga.graph import to_graph
from iclr25.mgvga.parsers import load_circuit
from iclr25.mgvga.simulate import simulate
from iclr25.mgvga.synthesis import encode_recipe, equivalent

pytestmark = pytest.mark.realdata


@pytest.mark.parametrize("name,stats", [("ctrl", (7, 26, 174, 10)), ("adder", (256, 129, 1020, 255)),
                                        ("router", (60, 30, 257, 54)), ("int2float", (11, 7, 260, 16))])
def test_epfl_sizes(mirror, name, stats):
    c = load_circuit(mirror / "epfl" / f"{name}.aig")
    assert (c.num_pis, c.num_pos, c.num_ands, c.levels) == stats


def test_epfl_sizes_match_shipped_table(mirror):
    for r in csv.DictReader(open(mirror / "labels/epfl_resyn2.csv")):
        c = load_cached(str(mirror / "epfl" / f"{r['circuit']}.aig"))
        assert (c.num_pis, c.num_pos, c.num_ands, c.levels) == tuple(int(r[k]) for k in ("pis", "pos", "ands", "levels"))


def test_ctrl_expansion_counts(mirror):
    c = load_circuit(mirror / "epfl/ctrl.aig")
    inv_and = int((c.ands & 1).sum())
    inv_po = int((c.pos & 1).sum())
    assert (inv_and, inv_po) == (245, 6)
    g = to_graph(c)
    assert int((g.x == 3).sum()) == 251
    assert g.num_nodes == 458 + 1 and int(g.const_node) == 458  # one constant node
    assert g.edge_index.shape[1] == 625
    assert c.constant_refs() == 1


def test_int2float_and_router(mirror):
    g = to_graph(load_circuit(mirror / "epfl/int2float.aig"))
    assert (g.num_nodes, g.edge_index.shape[1], int(g.const_node)) == (569, 818, -1)
    assert load_circuit(mirror / "epfl/router.aig").constant_refs() == 27


@pytest.mark.parametrize("name", ["ctrl", "router", "int2float"])
def test_degrees(mirror, name):
    g = to_graph(load_circuit(mirror / "epfl" / f"{name}.aig"))
    want = torch.tensor([0, 1, 2, 1])[g.x]
    real = torch.ones(g.num_nodes, dtype=torch.bool)
    if int(g.const_node) >= 0:
        real[int(g.const_node)] = False
    assert torch.equal(g.d_in[real], want[real])
    E = g.edge_index.shape[1]
    assert int(g.d_in.sum()) == int(g.d_out.sum()) == E
    # independent recount from the edge list
    assert torch.equal(torch.bincount(g.edge_index[0], minlength=g.num_nodes), g.d_in)


def test_epfl_verilog_equivalent_to_aig(mirror):
    v = load_circuit(mirror / "epfl/ctrl.v")
    a = load_circuit(mirror / "epfl/ctrl.aig")
    assert v.num_ands == 174
    assert equivalent(v, a)


def test_parser_agrees_with_aigverse(mirror):
    from aigverse.io import read_aiger_into_aig

    from iclr25.mgvga.synthesis import from_aigverse

    ours = load_circuit(mirror / "epfl/int2float.aig")
    ref = from_aigverse(read_aiger_into_aig(str(mirror / "epfl/int2float.aig")))
    rng = np.random.default_rng(0)
    pat = rng.integers(0, 2**63, size=(ours.num_pis, 4), dtype=np.uint64)
    assert np.array_equal(simulate(ours, pat), simulate(ref, pat))


def test_qor_label_values(mirror):
    lab = qor_labels()
    for d, (ands, rid) in {"ss_pcm": (393, 0), "spi": (3225, 0), "wb_dma": (3443, 0)}.items():
        assert lab[d][2][list(lab[d][1]).index(rid)] == ands
    assert len(usable_qor_designs(lab)) == 16
    assert "epfl_dec" not in usable_qor_designs(lab) and "epfl_bar" not in usable_qor_designs(lab)


def test_zscore_guard_and_ss_pcm(mirror):
    lab = qor_labels()
    z, mu, sd = zscore_labels(lab["epfl_dec"][2])
    assert np.isfinite(z).all() and (z == 0).all()
    z, mu, sd = zscore_labels(lab["ss_pcm"][2])
    assert len(lab["ss_pcm"][2]) == 300
    assert mu == pytest.approx(394.0, abs=0.5) and sd == pytest.approx(0.87, abs=0.05)
    assert sd == pytest.approx(float(np.sqrt(((lab["ss_pcm"][2] - mu) ** 2).mean())))


def test_recipe_zero_encoding(mirror):
    row = next(csv.DictReader(open(mirror / "openabcd/recipes.csv")))
    want = [int(t) for t in "5 3 0 2 2 6 0 4 3 0 6 4 3 4 2 0 4 4 3 5".split()]
    assert encode_recipe(row["recipe"]) == want == [int(t) for t in row["encoded"].split()]


def test_bench_and_aig_same_circuit(mirror):
    b = load_circuit(mirror / "openabcd/bench/ss_pcm_orig.bench")
    a = load_circuit(mirror / "equiv/oabc_ss_pcm__orig.aig")
    assert b.stats()["pis"] == a.num_pis == 104
    assert (b.num_pos, b.num_ands, b.levels) == (a.num_pos, a.num_ands, a.levels) == (90, 403, 7)


def test_blif_variant_equivalent(mirror):
    b = load_circuit(mirror / "epfl_variants/int2float_size_2024.blif")
    assert equivalent(b, load_circuit(mirror / "epfl/int2float.aig"))


def _check_pairs(rows):
    for p in rows:
        got = equivalent(load_cached(str(p["base"])), load_cached(str(p["variant"])))
        assert got == bool(p["equivalent"]), p


def test_equiv_pairs_subset(mirror):
    rows = equivalence_pairs()
    assert len(rows) == 105 and sum(r["equivalent"] for r in rows) == 75
    small = [r for r in rows if load_cached(str(r["base"])).num_ands <= 1200]
    pick = [r for r in small if r["variant"].stem.endswith(("__r0", "__mut0"))]
    assert len(pick) >= 10
    _check_pairs(pick)


@pytest.mark.slow
def test_equiv_pairs_all(mirror):
    _check_pairs(equivalence_pairs())
