"""Loaders for the mirrored MGVGA data (``$ICLR25_DATA/mgvga``; see its PROVENANCE.md)."""

from __future__ import annotations

import csv
import functools
from pathlib import Path

import numpy as np

from .circuit import Circuit, load_circuit

__all__ = [
    "DATASET",
    "data_dir",
    "openabcd_recipes",
    "qor_labels",
    "equivalence_pairs",
    "epfl_pairs",
    "rtl_pairs",
    "load_cached",
    "usable_qor_designs",
]

DATASET = "mgvga"


def data_dir() -> Path:
    """The mirror folder ``<root>/mgvga`` from ``ICLR25_DATA`` (or the iclr25 cache).

    Raises:
        FileNotFoundError: naming the places looked in and how to set ``ICLR25_DATA``.
    """
    from iclr25.core.data import cache_dir, data_roots

    tried = []
    for root in [*data_roots(), cache_dir()]:
        p = Path(root) / DATASET
        tried.append(str(p))
        if (p / "PROVENANCE.md").is_file() or (p / "epfl").is_dir():
            return p
    raise FileNotFoundError(
        f"MGVGA data not found (looked in {tried}). Set ICLR25_DATA to the folder holding 'mgvga/' "
        "(e.g. export ICLR25_DATA=/path/to/data); sources are listed in the package README."
    )


def _csv(rel: str) -> list[dict[str, str]]:
    with open(data_dir() / rel, newline="") as f:
        return list(csv.DictReader(f))


@functools.cache
def openabcd_recipes() -> np.ndarray:
    """``int64[1500, 20]`` OpenABC-D recipes in the ``synthID2Vec`` encoding (row = recipe id)."""
    rows = _csv("openabcd/recipes.csv")
    out = np.zeros((len(rows), 20), dtype=np.int64)
    for r in rows:
        out[int(r["recipe_id"])] = [int(t) for t in r["encoded"].split()]
    return out


def qor_labels() -> dict[str, tuple[Path, np.ndarray, np.ndarray]]:
    """QoR labels of all 18 labelled designs.

    Returns:
        ``{design: (start_aig_path, recipe_ids int64[R], ands float64[R])}`` — OpenABC-D designs
        (``openabcd/qor_labels.csv``, start AIG ``openabcd/bench/<d>_orig.bench``) and EPFL
        circuits (``labels/epfl_qor_labels.csv``, prefix ``epfl_``).
    """
    d = data_dir()
    out: dict[str, tuple[Path, list, list]] = {}
    for r in _csv("openabcd/qor_labels.csv"):
        out.setdefault(r["design"], (d / "openabcd/bench" / f"{r['design']}_orig.bench", [], []))
        out[r["design"]][1].append(int(r["recipe_id"]))
        out[r["design"]][2].append(float(r["ands"]))
    for r in _csv("labels/epfl_qor_labels.csv"):
        k = "epfl_" + r["circuit"]
        out.setdefault(k, (d / "epfl" / f"{r['circuit']}.aig", [], []))
        out[k][1].append(int(r["recipe_id"]))
        out[k][2].append(float(r["ands"]))
    return {k: (p, np.asarray(i, np.int64), np.asarray(a, np.float64)) for k, (p, i, a) in out.items()}


def usable_qor_designs(labels: dict, min_std: float = 1e-9) -> list[str]:
    """Designs whose label std exceeds ``min_std`` (drops recipe-insensitive ``dec`` and ``bar``)."""
    return [k for k, (_, _, a) in labels.items() if a.std() > min_std]


def equivalence_pairs() -> list[dict]:
    """Rows of ``equiv/pairs.csv``: ``base``, ``variant`` (absolute paths), ``equivalent`` (int), ``how``."""
    d = data_dir()
    rows = _csv("equiv/pairs.csv")
    return [{"base": d / r["base"], "variant": d / r["variant"], "equivalent": int(r["equivalent"]),
             "how": r["how"]} for r in rows]


def epfl_pairs() -> list[tuple[Path, Path]]:
    """``(verilog, aig)`` path pairs of the EPFL circuits."""
    d = data_dir() / "epfl"
    return [(p, p.with_suffix(".aig")) for p in sorted(d.glob("*.v")) if p.with_suffix(".aig").is_file()]


def rtl_pairs() -> list[tuple[str, Path, str]]:
    """Real RTL ↔ AIG pairs: ``(name, aig_or_bench_path, verilog_text)`` for ``rtl_small/*`` and
    the OpenABC-D designs (RTL files concatenated in name order, top file first)."""
    d = data_dir()
    out = []
    for v in sorted((d / "rtl_small").glob("*.v")):
        out.append((v.stem, v.with_suffix(".aig"), v.read_text(errors="replace")))
    tops = {"ss_pcm": "pcm_slv_top", "usb_phy": "usb_phy", "sasc": "sasc_top", "simple_spi": "simple_spi_top",
            "i2c": "i2c_master_top", "spi": "spi_top", "des3_area": "des3", "wb_dma": "wb_dma_top"}
    for design, top in tops.items():
        folder = d / "openabcd/rtl" / design
        if not folder.is_dir():
            continue
        files = sorted(folder.glob("*.v"), key=lambda p: (p.stem != top, p.name))
        text = "\n".join(p.read_text(errors="replace") for p in files)
        out.append((design, d / "openabcd/bench" / f"{design}_orig.bench", text))
    return out


@functools.lru_cache(maxsize=256)
def load_cached(path: str) -> Circuit:
    """``load_circuit`` with an in-process cache (keyed by path string)."""
    return load_circuit(path)
