"""Issue 43, item 6: Verilog whose module is not named ``top`` (aigverse's reader then returns an empty
network), empty circuits and NaN embeddings are errors (before: ``Circuit(pis=0, pos=0, ands=0)``, a
0-node graph from ``convert`` and an all-NaN embedding from ``embed``, exit 0)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from iclr25.mgvga.circuit import CircuitFormatError
from iclr25.mgvga.cli import main
from iclr25.mgvga.parsers import load_circuit, verilog_modules
from iclr25.mgvga.simulate import simulate

ADDER = """module adder(a, b, c, y);
  input a, b, c;
  output y;
  wire t;
  assign t = a & b;
  assign y = t | c;
endmodule
"""

TWO = """module helper(a, b, y);
  input a, b;
  output y;
  assign y = a & b;
endmodule
module main_mod(p, q, z);
  input p, q;
  output z;
  assign z = p ^ q;
endmodule
"""


def _truth_table(c, n):
    """Output 0 of ``c`` on all 2^n input assignments, by bit-parallel simulation (one 64-bit word)."""
    rows = list(itertools.product([0, 1], repeat=n))
    pats = np.zeros((n, 1), dtype=np.uint64)
    for r, bits in enumerate(rows):
        for i, b in enumerate(bits):
            if b:
                pats[i, 0] |= np.uint64(1) << np.uint64(r)
    out = simulate(c, pats)[0, 0]
    return [int((int(out) >> r) & 1) for r in range(len(rows))]


def test_single_module_not_named_top_is_read(tmp_path):
    p = tmp_path / "adder.v"
    p.write_text(ADDER)
    c = load_circuit(p)
    assert (c.num_pis, c.num_pos) == (3, 1)
    # independent: y = (a & b) | c over all 8 assignments
    want = [(a & b) | cc for a, b, cc in itertools.product([0, 1], repeat=3)]
    assert _truth_table(c, 3) == want


def test_several_modules_need_a_choice(tmp_path):
    p = tmp_path / "two.v"
    p.write_text(TWO)
    assert verilog_modules(TWO) == ["helper", "main_mod"]
    with pytest.raises(CircuitFormatError, match=r"2 modules \['helper', 'main_mod'\].*top=NAME"):
        load_circuit(p)
    with pytest.raises(CircuitFormatError, match="top module 'nope' is not in the file"):
        load_circuit(p, top="nope")
    assert _truth_table(load_circuit(p, top="helper"), 2) == [0, 0, 0, 1]
    assert _truth_table(load_circuit(p, top="main_mod"), 2) == [0, 1, 1, 0]


def test_module_named_top_is_preferred_and_can_be_overridden(tmp_path):
    p = tmp_path / "t.v"
    p.write_text(TWO.replace("main_mod", "top"))
    assert _truth_table(load_circuit(p), 2) == [0, 1, 1, 0]
    assert _truth_table(load_circuit(p, top="helper"), 2) == [0, 0, 0, 1]


@pytest.mark.parametrize("text, message", [
    ("module top(a);\n  input a;\nendmodule\n", "empty circuit"),
    ("// nothing here\n", "no 'module NAME"),
])
def test_empty_verilog_is_refused(tmp_path, text, message):
    p = tmp_path / "e.v"
    p.write_text(text)
    with pytest.raises(CircuitFormatError, match=message):
        load_circuit(p)


def test_empty_aiger_is_refused(tmp_path):
    p = tmp_path / "e.aag"
    p.write_bytes(b"aag 0 0 0 0 0\n")
    with pytest.raises(CircuitFormatError, match="empty circuit"):
        load_circuit(p)


def test_cli_convert_non_top_module_and_multi_module(tmp_path, capsys):
    from iclr25.mgvga.storage import load_graphs

    a = tmp_path / "adder.v"
    a.write_text(ADDER)
    assert main(["convert", "--inputs", str(a), "--out", str(tmp_path / "o1"), "--quiet"]) == 0
    graphs = load_graphs(tmp_path / "o1" / "circuits.safetensors")
    assert graphs[0].num_nodes > 0
    t = tmp_path / "two.v"
    t.write_text(TWO)
    capsys.readouterr()
    code = main(["convert", "--inputs", str(t), "--out", str(tmp_path / "o2"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "none is named 'top'" in err, err
    assert len(err.strip().splitlines()) == 1
    assert main(["convert", "--inputs", str(t), "--top", "main_mod", "--out", str(tmp_path / "o3"), "--quiet"]) == 0


def test_cli_embed_refuses_nan_embedding(tmp_path, capsys):
    from iclr25.mgvga.model import MGVGAConfig, MGVGAEncoder
    from iclr25.mgvga.pretrain import save_encoder

    enc = MGVGAEncoder(MGVGAConfig())
    with torch.no_grad():
        next(enc.parameters()).fill_(float("nan"))
    ck = save_encoder(tmp_path / "nan.encoder.safetensors", enc)
    a = tmp_path / "adder.v"
    a.write_text(ADDER)
    code = main(["embed", "--inputs", str(a), "--checkpoint", str(ck), "--out", str(tmp_path / "e")])
    err = capsys.readouterr().err
    assert code == 2 and "embedding is not finite" in err, err
    assert not (tmp_path / "e" / "embeddings.safetensors").exists()
    assert main(["embed", "--inputs", str(a), "--out", str(tmp_path / "e2"), "--quiet"]) == 0
