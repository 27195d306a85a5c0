"""bench: encoder vs plain GCN throughput, batched vs per graph (numbers are not asserted, only their bookkeeping)."""

import pytest
import torch

from iclr25.mgvga.bench import PlainGCN, format_bench, run_bench
from iclr25.mgvga.graph import to_graph
from iclr25.mgvga.synth import synthetic_pairs


def test_run_bench_synthetic_bookkeeping():
    torch.set_num_threads(1)
    res = run_bench(hidden_size=8, num_layers=2, batch_size=4, repeats=1, device="cpu", graphs="synthetic",
                    n_synthetic=6)
    want = [to_graph(p.circuit) for p in synthetic_pairs(6, widths=(2, 6), seed=0)]
    assert res["graphs"] == 6 and res["nodes"] == sum(g.num_nodes for g in want)
    for name in ("mgvga_encoder", "plain_gcn"):
        for mode in ("batched", "per_graph"):
            r = res[name][mode]
            assert r["seconds"] > 0
            assert r["graphs_per_s"] == pytest.approx(6 / r["seconds"])
            assert r["nodes_per_s"] == pytest.approx(res["nodes"] / r["seconds"])
    q = res["ratios"]
    assert q["encoder_vs_gcn_batched"] == pytest.approx(res["mgvga_encoder"]["batched"]["seconds"]
                                                        / res["plain_gcn"]["batched"]["seconds"])
    assert q["gcn_batching_speedup"] == pytest.approx(res["plain_gcn"]["per_graph"]["seconds"]
                                                      / res["plain_gcn"]["batched"]["seconds"])
    assert res["parse_all_epfl_s"] is None
    txt = format_bench(res)
    assert "6 synthetic graphs" in txt and txt.splitlines()[-1].startswith("bench:")


def test_run_bench_rejects_bad_arguments():
    with pytest.raises(ValueError, match="graphs"):
        run_bench(graphs="iscas", device="cpu")
    with pytest.raises(ValueError, match=">= 1"):
        run_bench(repeats=0, device="cpu")


def test_plain_gcn_same_depth_and_width():
    m = PlainGCN(16, 3)
    assert len(m.convs) == 3
    g = to_graph(synthetic_pairs(1, seed=0)[0].circuit)
    assert m(g.x, g.edge_index).shape == (g.num_nodes, 16)
