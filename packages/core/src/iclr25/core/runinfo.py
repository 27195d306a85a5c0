"""What a run records about itself: environment, versions, commit, times.

:func:`run_info` never imports torch: it reports torch (and CUDA) only when torch is already
loaded, which is the case in every run that uses it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["run_info", "git_commit", "cpu_seconds", "cpu_model", "package_libraries", "write_run_files", "to_jsonable"]

_LIBS = ("numpy", "scipy", "torch", "transformers", "peft", "accelerate", "scikit-learn", "flwr",
         "opacus", "torch-geometric", "tokenizers", "iclr25-core")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def git_commit(path: str | Path | None = None) -> str | None:
    """The git commit (with ``-dirty`` when the tree has changes) of the checkout holding
    ``path`` (default: the current folder); ``None`` outside a checkout or without git."""
    where = Path(path) if path is not None else Path.cwd()
    if where.is_file():
        where = where.parent
    try:
        sha = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``); ``None`` if unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def _distribution_of(module: str) -> str | None:
    top = module.split(".")[0]
    if top == "iclr25" and "." in module:  # iclr25.<m>.x -> iclr25-<m with - for _>
        return "iclr25-" + module.split(".")[1].replace("_", "-")
    return None


def package_libraries(distribution: str) -> dict[str, str]:
    """``{dist: version}`` of what ``distribution`` requires that is installed (base and extras), itself
    and iclr25-core included: the libraries a package's run actually rests on."""
    import re

    out: dict[str, str] = {}
    if _version(distribution) is None:
        return out
    for name in (distribution, "iclr25-core"):
        if (v := _version(name)) is not None:
            out[name] = v
    try:
        reqs = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return out
    for line in reqs:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if m and (v := _version(m.group(1))) is not None:
            out.setdefault(m.group(1).lower(), v)
    return dict(sorted(out.items()))


def run_info(source: str | None = None) -> dict[str, Any]:
    """The run environment as a JSON-ready dict.

    Args:
        source: a module name (or file path) whose checkout's git commit is recorded; default
            the current folder.

    Returns:
        ``{"python", "platform", "machine", "cpu" (model, cores), "cpu_count", "gpu" (the CUDA device, or
        "none"), "libraries": {dist: version}, "torch_threads", "cuda", "git_commit"}``. ``libraries`` lists
        what the package of ``source`` (``iclr25.<m>...``) requires, when it is installed; else a fixed set.
    """
    path: str | Path | None = None
    if source:
        mod = sys.modules.get(source)
        path = getattr(mod, "__file__", None) if mod is not None else source
        if path is not None and not Path(path).exists():
            path = None
    dist = _distribution_of(source) if source and not Path(source).exists() else None
    libs = package_libraries(dist) if dist and _version(dist) is not None else {}
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "machine": platform.machine(),
        "cpu": f"{cpu_model() or 'unknown CPU'}, {os.cpu_count()} cores",
        "cpu_count": os.cpu_count(),
        "gpu": "none",
        "libraries": libs or {d: v for d in _LIBS if (v := _version(d)) is not None},
        "git_commit": git_commit(path),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
        try:
            cuda = bool(torch.cuda.is_available())
        except Exception:  # noqa: BLE001 - a broken driver must not break a report
            cuda = False
        info["cuda"] = cuda
        if cuda:
            n = torch.cuda.device_count()
            info["gpu"] = torch.cuda.get_device_name(0) + (f" (x{n})" if n > 1 else "")
            info["cuda_version"] = getattr(torch.version, "cuda", None)
    return info


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, paths, tuples, numpy scalars/arrays -> plain JSON values (NaN -> None)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if hasattr(obj, "tolist"):
        return to_jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return to_jsonable(obj.item())
    return obj


def write_run_files(out: str | Path, config: Any = None, results: Mapping[str, Any] | None = None, *,
                    started: float | None = None) -> Path:
    """Write ``out/config.json`` (the resolved config) and, when ``results`` is given,
    ``out/results.json`` (the results plus ``run_info()``, wall seconds since ``started`` — a
    ``time.perf_counter()`` value — and the finishing time). NaN is written as ``null``.

    Returns:
        ``out`` as a Path (created).
    """
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (o / "config.json").write_text(json.dumps(to_jsonable(config), indent=2, allow_nan=False) + "\n",
                                       encoding="utf-8")
    if results is not None:
        payload = dict(to_jsonable(results))
        payload.setdefault("run", {})
        payload["run"].update(run_info(), finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        if started is not None:
            payload["run"]["wall_seconds"] = time.perf_counter() - started
        (o / "results.json").write_text(json.dumps(payload, indent=2, allow_nan=False) + "\n",
                                        encoding="utf-8")
    return o
