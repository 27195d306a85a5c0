"""MGVGA (ICLR 2025): AIG representation learning with masked gate modeling and Verilog-AIG alignment."""

from ._version import __version__
from .circuit import (
    AigBuilder,
    Circuit,
    CircuitFormatError,
    apply_recipe,
    encode_recipe,
    equivalent,
    load_circuit,
    read_aiger,
    read_bench,
    read_blif,
    read_verilog,
    simulate,
)
from .graph import NODE_TYPES, mask_nodes, mask_nodes_batched, to_graph
from .model import MGVGAConfig, MGVGAEncoder, MGVGAPretrainer, QoRHead
from .pretrain import load_checkpoint, load_encoder, pretrain
from .synth import FAMILIES, make_pair, synthetic_pairs

__all__ = [
    "__version__",
    "AigBuilder",
    "Circuit",
    "CircuitFormatError",
    "apply_recipe",
    "encode_recipe",
    "equivalent",
    "load_circuit",
    "read_aiger",
    "read_bench",
    "read_blif",
    "read_verilog",
    "simulate",
    "NODE_TYPES",
    "mask_nodes",
    "mask_nodes_batched",
    "to_graph",
    "MGVGAConfig",
    "MGVGAEncoder",
    "MGVGAPretrainer",
    "QoRHead",
    "pretrain",
    "load_checkpoint",
    "load_encoder",
    "FAMILIES",
    "make_pair",
    "synthetic_pairs",
]
