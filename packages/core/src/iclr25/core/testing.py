"""Test helpers shared by the packages' suites: a real multi-process run on CPU, and kill -9 + ``--resume``.

Torch-free: the launcher is run as a subprocess (``python -m torch.distributed.run``), so importing
this module costs nothing. Used by the two-process data-parallel tests (gradients really synced over a
gloo group on 127.0.0.1), which would otherwise each carry a copy of the port and environment code.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["free_port", "run_torchrun", "single_thread_env", "kill_and_resume", "assert_same_files",
           "assert_same_logs"]


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


#: log fields that differ between two identical runs (clocks, CPU time, hosts), dropped by assert_same_logs
VOLATILE_KEYS = ("time", "timestamp", "wall_s", "wall_seconds", "elapsed", "elapsed_s", "cpu_s", "cpu_seconds",
                 "seconds", "started", "finished", "host", "pid")


def assert_same_files(a: str | Path, b: str | Path, patterns: Sequence[str]) -> list[str]:
    """Assert that the files matching each glob ``pattern`` under folders ``a`` and ``b`` are the same set
    (relative paths) and byte-identical. Returns the compared relative paths.

    Raises:
        AssertionError: no file matched (a comparison of nothing proves nothing), a file on one side only,
            or different bytes (for ``.safetensors``, the tensor names and the largest difference).
    """
    a, b = Path(a), Path(b)
    compared: list[str] = []
    for pat in patterns:
        fa = sorted(p.relative_to(a).as_posix() for p in a.glob(pat) if p.is_file())
        fb = sorted(p.relative_to(b).as_posix() for p in b.glob(pat) if p.is_file())
        if not fa and not fb:
            raise AssertionError(f"no file matches {pat!r} under {a} or {b}")
        if fa != fb:
            raise AssertionError(f"{pat!r}: files differ: {sorted(set(fa) ^ set(fb))} on one side only")
        for rel in fa:
            da, db = (a / rel).read_bytes(), (b / rel).read_bytes()
            if da != db:
                raise AssertionError(f"{rel} differs between {a} and {b}{_tensor_diff(a / rel, b / rel)}")
            compared.append(rel)
    return compared


def _tensor_diff(pa: Path, pb: Path) -> str:
    if pa.suffix != ".safetensors":
        return ""
    try:
        from safetensors.numpy import load_file
    except ImportError:  # pragma: no cover - safetensors ships with every torch package here
        return ""
    import numpy as np

    ta, tb = load_file(str(pa)), load_file(str(pb))
    if set(ta) != set(tb):
        return f" (tensors on one side only: {sorted(set(ta) ^ set(tb))[:5]})"
    worst = max(((float(np.max(np.abs(ta[k].astype(np.float64) - tb[k].astype(np.float64)))) if ta[k].size else 0.0,
                 k) for k in ta), default=(0.0, ""))
    return f" (largest |difference| {worst[0]:.3g} in {worst[1]})"


def _read_log(path: Path, ignore: set[str]) -> list[object]:
    def strip(x: object) -> object:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ignore}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [strip(json.loads(line)) for line in text.splitlines() if line.strip()]
    return [strip(json.loads(text))]


def assert_same_logs(a: str | Path, b: str | Path, names: Sequence[str], *,
                     ignore_keys: Sequence[str] = VOLATILE_KEYS) -> None:
    """Assert that JSON / JSONL logs ``names`` (paths relative to ``a`` and ``b``) hold the same records
    once clock fields (``ignore_keys``, at any depth) are dropped: a resumed run must log each step once,
    with the same values as the uninterrupted run."""
    ignore = set(ignore_keys)
    for name in names:
        pa, pb = Path(a) / name, Path(b) / name
        for p in (pa, pb):
            if not p.is_file():
                raise AssertionError(f"log {p} is missing")
        ra, rb = _read_log(pa, ignore), _read_log(pb, ignore)
        if ra != rb:
            detail = f"{len(ra)} vs {len(rb)} records"
            for i, (x, y) in enumerate(zip(ra, rb)):
                if x != y:
                    detail += f"; first difference at record {i}: {x!r} vs {y!r}"
                    break
            raise AssertionError(f"{name} differs between {pa.parent} and {pb.parent}: {detail}")


def kill_and_resume(cmd: Sequence[str | Path], *, out_flag: str = "--out", killed_out: str | Path,
                    reference_out: str | Path, ready: Callable[[Path], bool],
                    compare: Sequence[str] = ("**/*.safetensors",), logs: Sequence[str] = (),
                    resume_args: Sequence[str] = ("--resume",), max_delay: float = 0.5, seed: int | None = None,
                    timeout: float = 600, env: Mapping[str, str] | None = None,
                    ignore_keys: Sequence[str] = VOLATILE_KEYS) -> dict[str, object]:
    """Kill a training command (SIGKILL, as a crash or OOM would) at a random moment, ``--resume`` it, and
    assert that it ends with the same weights and logs as an uninterrupted run.

    1. ``cmd + [out_flag, reference_out]`` runs to completion (the reference).
    2. ``cmd + [out_flag, killed_out]`` starts; once ``ready(killed_out)`` is true (e.g. a first
       checkpoint exists) it runs a further random ``U(0, max_delay)`` seconds (``seed``), then its whole
       process group is killed with SIGKILL.
    3. ``cmd + [out_flag, killed_out] + resume_args`` runs to completion.
    4. Files matching ``compare`` (globs) are byte-identical between the two folders
       (:func:`assert_same_files`), and ``logs`` hold the same records (:func:`assert_same_logs`).

    Args:
        cmd: the command without its output flag, e.g. ``[sys.executable, "-m", "iclr25.cream", "dpo", ...]``.
        ready: called with ``killed_out`` every 20 ms; the kill is armed once it returns true.
        seed: seeds the kill delay (``None``: a fresh one, printed in the assertion message so a failure
            can be replayed).
        timeout: seconds for each of the three runs.
        env: extra environment (each run is one-thread CPU: :func:`single_thread_env`).

    Returns:
        ``{"delay_s", "seed", "compared"}``.

    Raises:
        AssertionError: a run failed, the killed run finished before it could be killed (make it longer or
            ``ready`` earlier: a test that never kills proves nothing), or the results differ.
    """
    killed_out, reference_out = Path(killed_out), Path(reference_out)
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    delay = random.Random(seed).uniform(0.0, max_delay)
    full_env = single_thread_env(env)
    base = [str(c) for c in cmd]

    def run(args: list[str], what: str) -> None:
        r = subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise AssertionError(f"{what} exited {r.returncode} (kill seed {seed}): {' '.join(args)}\n--- stdout\n"
                                 f"{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}")

    run(base + [out_flag, str(reference_out)], "the uninterrupted run")
    args = base + [out_flag, str(killed_out)]
    proc = subprocess.Popen(args, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    t0 = time.monotonic()
    try:
        while not ready(killed_out):
            if proc.poll() is not None:
                raise AssertionError(f"the run to be killed ended (exit {proc.returncode}) before ready() held: "
                                     f"{' '.join(args)}\n{(proc.stderr.read() if proc.stderr else '')[-3000:]}")
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"ready() did not hold within {timeout} s")
            time.sleep(0.02)
        time.sleep(delay)
        if proc.poll() is not None:
            raise AssertionError(f"the run finished (exit {proc.returncode}) before it was killed "
                                 f"{delay:.2f} s after ready() (kill seed {seed}): make it longer or ready() earlier")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()
    run(args + [str(a) for a in resume_args], "the resumed run")
    try:
        compared = assert_same_files(reference_out, killed_out, compare)
        if logs:
            assert_same_logs(reference_out, killed_out, logs, ignore_keys=ignore_keys)
    except AssertionError as e:
        raise AssertionError(f"{e} (killed {delay:.2f} s after ready(); kill seed {seed})") from None
    return {"delay_s": delay, "seed": seed, "compared": compared}
