"""Test helpers shared by the packages' suites: launching a real multi-process run on CPU.

Torch-free: the launcher is run as a subprocess (``python -m torch.distributed.run``), so importing
this module costs nothing. Used by the two-process data-parallel tests (gradients really synced over a
gloo group on 127.0.0.1), which would otherwise each carry a copy of the port and environment code.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["free_port", "run_torchrun", "single_thread_env"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (bound to port 0, then released).

    A hard-coded rendezvous port collides with a second test run or another service on the machine;
    this one is chosen by the OS. (A race with another process binding it in between is possible but
    rare; the launcher then fails with "address already in use".)
    """
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def single_thread_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``os.environ`` for a CPU worker process: one BLAS/OpenMP thread, no GPU visible, progress bars off.

    ``CUDA_VISIBLE_DEVICES=""`` keeps a GPU machine's test on CPU (gloo), as on the CI machine.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "ICLR25_PROGRESS": "never"}
    env.update(extra or {})
    return env


def run_torchrun(args: Sequence[str | Path], *, nproc: int = 2, timeout: float = 600,
                 env: Mapping[str, str] | None = None, module: bool = False) -> subprocess.CompletedProcess:
    """Run ``args`` under ``torch.distributed.run`` with ``nproc`` CPU processes on 127.0.0.1.

    Args:
        args: the worker: a script path and its arguments, or (``module=True``) a module name and
            its arguments (``["iclr25.aihf", "train", ...]``).
        nproc: processes (``--nproc_per_node``), each one thread (:func:`single_thread_env`).
        timeout: seconds before the run is killed (``subprocess.TimeoutExpired``).
        env: extra environment variables.
        module: run ``args[0]`` as a module (``-m``).

    Returns:
        the finished process (``stdout``/``stderr`` as text).

    Raises:
        AssertionError: a non-zero exit, with the last 4,000 characters of stdout and stderr.
    """
    if nproc < 1:
        raise ValueError(f"nproc={nproc} must be >= 1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
           "127.0.0.1", "--master_port", str(free_port())]
    cmd += (["-m"] if module else []) + [str(a) for a in args]
    r = subprocess.run(cmd, env=single_thread_env(env), capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"torchrun exited {r.returncode}: {' '.join(cmd)}\n--- stdout\n{r.stdout[-4000:]}"
                             f"\n--- stderr\n{r.stderr[-4000:]}")
    return r
