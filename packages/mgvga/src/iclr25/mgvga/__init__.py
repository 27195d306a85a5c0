"""MGVGA (ICLR 2025): AIG representation learning with masked gate modeling and Verilog-AIG alignment."""

import sys
import types
import warnings

from ._version import __version__

# torch_geometric's own import calls ``torch.jit.script``, which torch >= 2.10 deprecates with a FutureWarning
# printed on every command; it is not ours (nor the user's) to act on, so only that message is silenced.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning,
                        module=r"torch\.jit\._script")

__all__ = [
    "__version__",
    "AigBuilder",
    "Circuit",
    "CircuitFormatError",
    "apply_recipe",
    "encode_recipe",
    "equivalent",
    "load_circuit",
    "data_dir",
    "read_aiger",
    "read_bench",
    "read_blif",
    "read_verilog",
    "simulate",
    "logic_probability",
    "node_signatures",
    "NodeEquivalenceChecker",
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
    "save_encoder",
    "load_graphs",
    "save_graphs",
    "gate_design",
    "logic_probability_probe",
    "gate_equivalence_pairs",
    "FAMILIES",
    "make_pair",
    "synthetic_pairs",
]

# Imported on first use (module __getattr__), so that `import iclr25.mgvga` and `iclr25-mgvga --help`
# do not load torch & co.
_LAZY = {
    "AigBuilder": "circuit",
    "Circuit": "circuit",
    "CircuitFormatError": "circuit",
    "apply_recipe": "synthesis",
    "encode_recipe": "synthesis",
    "equivalent": "synthesis",
    "load_circuit": "parsers",
    "data_dir": "data",
    "read_aiger": "parsers",
    "read_bench": "parsers",
    "read_blif": "parsers",
    "read_verilog": "parsers",
    "simulate": "simulate",
    "NODE_TYPES": "graph",
    "mask_nodes": "graph",
    "mask_nodes_batched": "graph",
    "to_graph": "graph",
    "MGVGAConfig": "model",
    "MGVGAEncoder": "model",
    "MGVGAPretrainer": "model",
    "QoRHead": "model",
    "load_checkpoint": "pretrain",
    "load_encoder": "pretrain",
    "pretrain": "pretrain",
    "NodeEquivalenceChecker": "synthesis",
    "logic_probability": "simulate",
    "node_signatures": "simulate",
    "save_encoder": "pretrain",
    "load_graphs": "storage",
    "save_graphs": "storage",
    "gate_design": "gates",
    "logic_probability_probe": "gates",
    "gate_equivalence_pairs": "gates",
    "FAMILIES": "synth",
    "make_pair": "synth",
    "synthetic_pairs": "synth",
}

# `pretrain` names both a function of the API and its submodule: importing the submodule must
# not replace the function on the package (as with the eager imports this package used to have).
_SHADOWED = frozenset({"pretrain"})


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
