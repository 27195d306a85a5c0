"""MGVGA (ICLR 2025): AIG representation learning with masked gate modeling and Verilog-AIG alignment."""

import sys
import types

from ._version import __version__

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

# Imported on first use (module __getattr__), so that `import iclr25.mgvga` and `iclr25-mgvga --help`
# do not load torch & co.
_LAZY = {
    "AigBuilder": "circuit",
    "Circuit": "circuit",
    "CircuitFormatError": "circuit",
    "apply_recipe": "circuit",
    "encode_recipe": "circuit",
    "equivalent": "circuit",
    "load_circuit": "circuit",
    "read_aiger": "circuit",
    "read_bench": "circuit",
    "read_blif": "circuit",
    "read_verilog": "circuit",
    "simulate": "circuit",
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
