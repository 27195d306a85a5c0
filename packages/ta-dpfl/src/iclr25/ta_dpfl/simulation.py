"""Flower's simulation engine (``flwr.simulation.run_simulation``, Ray backend) and the management of the Ray
processes it starts: a bounded start (:func:`start_ray`, :class:`RayStartupError`) and a shutdown that leaves
no actor behind. Needs the ``[simulation]`` extra (``pip install "iclr25-ta-dpfl[simulation]"``: Ray and
``flwr[simulation]``); the deployment path (:mod:`.flower_app`) does not.

- :func:`simulate`: the simulated SuperNodes' ``node_config`` is built from a :class:`FederationSpec`
  (:func:`~iclr25.ta_dpfl.federation.simulated_nodes`); the ServerApp and ClientApp are :mod:`.flower_app`'s.
"""

from __future__ import annotations

import logging
import os
import time
import warnings

from .config import FederationSpec
from .federation import plan, simulated_nodes
from .flower_app import make_client_app, make_server_app

__all__ = ["simulate", "start_ray", "RayStartupError", "RAY_NODE_START_WAIT_S", "SIMULATION_EXTRA"]

log = logging.getLogger("iclr25.ta_dpfl")

#: the extra that brings Ray and Flower's simulation engine
SIMULATION_EXTRA = 'pip install "iclr25-ta-dpfl[simulation]"'


def _shutdown_ray() -> None:
    """Make sure no Ray actor outlives the simulation (Flower leaves them terminating)."""
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception:  # noqa: BLE001 - best effort
        pass


#: Ray's wait for its raylet to register (``raylet_start_wait_time_s = 30`` in
#: ``ray/_private/node.py``, Ray 2.55; hard-coded, no environment variable or ``ray.init`` argument)
RAY_NODE_START_WAIT_S = 30.0


class RayStartupError(RuntimeError):
    """Ray (the backend of Flower's simulation engine) did not start; nothing of it is left running."""


def _child_pids() -> set[int]:
    """PIDs of this process's direct children (Linux ``/proc``; empty elsewhere)."""
    me, out = os.getpid(), set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:  # field 4: ppid (after "(comm)")
            out.add(int(e))
    return out


def _stop_pids(pids: set[int], grace_s: float = 5.0) -> None:
    """SIGTERM, then after ``grace_s`` SIGKILL, the given child processes (by PID; reaped after)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        t0 = time.monotonic()
        while alive and time.monotonic() - t0 < grace_s:
            for pid in list(alive):
                try:
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        alive.remove(pid)
                except ChildProcessError:  # not ours to reap / already gone
                    if not os.path.exists(f"/proc/{pid}"):
                        alive.remove(pid)
            time.sleep(0.1)
        pids = set(alive)
        if not pids:
            return


def start_ray(num_cpus: int, verbose: bool = False, attempts: int | None = None) -> None:
    """Start Ray for Flower's simulation engine *before* Flower does, so that a failed start is a
    bounded, clearly worded error instead of a hang (Flower 1.42 starts Ray from its simulation thread;
    when ``ray.init`` fails there, the ServerApp thread keeps waiting for nodes).

    Ray waits at most :data:`RAY_NODE_START_WAIT_S` for its raylet to register (hard-coded, no knob);
    on a heavily loaded machine that can run out. Each failed attempt stops every process it started
    (the children of this process that appeared during ``ray.init``: GCS server, raylet, reaper, ...).
    Flower's ``RayBackend`` then reuses this Ray instance (it only calls ``ray.init`` when Ray is not
    initialised), with the same ``runtime_env`` PYTHONPATH Flower would set.

    Args:
        num_cpus: CPUs given to Ray (one ClientApp actor each).
        verbose: forward the workers' logs.
        attempts: tries (default: ``TA_DPFL_RAY_START_ATTEMPTS`` or 2), each bounded by Ray's 30 s.

    Raises:
        RayStartupError: no attempt started Ray; names the cause and the way out (``--engine inprocess``).
    """
    import sys

    import ray

    if ray.is_initialized():
        return
    n = int(os.environ.get("TA_DPFL_RAY_START_ATTEMPTS", "2")) if attempts is None else int(attempts)
    if n < 1:
        raise ValueError(f"attempts must be >= 1, got {n} (TA_DPFL_RAY_START_ATTEMPTS)")
    pythonpath = os.pathsep.join(sys.path)
    if os.environ.get("PYTHONPATH"):
        pythonpath = f"{pythonpath}{os.pathsep}{os.environ['PYTHONPATH']}"
    os.environ["PYTHONPATH"] = pythonpath  # as Flower's RayBackend.init_ray does
    errors = []
    for i in range(n):
        before = _child_pids()
        t0 = time.monotonic()
        try:
            ray.init(num_cpus=int(num_cpus), include_dashboard=False, log_to_driver=verbose,
                     runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
            return
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception on the start-up timeout
            errors.append(f"attempt {i + 1}: {type(e).__name__}: {e} (after {time.monotonic() - t0:.0f} s)")
            log.warning("Ray did not start (%s)", errors[-1])
            _shutdown_ray()
            _stop_pids(_child_pids() - before)
    raise RayStartupError(
        f"Ray (the backend of Flower's simulation engine) did not start in {n} attempt(s): "
        + "; ".join(errors) + f". Ray waits at most {RAY_NODE_START_WAIT_S:g} s for its raylet (hard-coded in "
        "ray/_private/node.py), which a heavily loaded machine can exceed. Retry on a less loaded machine, raise "
        "TA_DPFL_RAY_START_ATTEMPTS, or run the same client/server logic without Ray: --engine inprocess. "
        "Every process the failed start left was stopped.")


def simulate(specs: list[FederationSpec], num_cpus: int = 2, verbose: bool = False) -> list[dict]:
    """Run ``specs`` (same number of clients) in ONE Flower simulation (Ray backend, one ClientApp
    actor per CPU); Ray starts once for all of them. Each simulated SuperNode's configuration is
    :func:`~iclr25.ta_dpfl.federation.simulated_nodes` of the spec being run.

    Returns:
        One ``result.json`` dict per spec.

    Raises:
        ValueError: specs with different numbers of clients or repeated run keys.
        BudgetInfeasibleError: before Ray starts.
        RayStartupError: Ray did not start (:func:`start_ray`; bounded, nothing left running).
        RuntimeError / the server's exception: a run failed.
    """
    try:
        import ray  # noqa: F401 - the [simulation] extra; checked first so the message names it
        from flwr.simulation import run_simulation
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"the Flower simulation engine needs {e.name!r} from the [simulation] extra: "
                                  f"{SIMULATION_EXTRA} (or run without Ray: --engine inprocess)", name=e.name) from None

    if len({s.num_clients for s in specs}) != 1:
        raise ValueError("all specs of one simulation must have the same number of clients")
    if len({s.run_key for s in specs}) != len(specs):
        raise ValueError("the specs of one simulation need distinct run keys")
    for s in specs:  # plan first: infeasible budgets fail here, before Ray starts
        plan(s)
    by_run = {s.run_key: {n.partition_id: n for n in simulated_nodes(s)} for s in specs}
    sink: dict = {}
    if not verbose:
        logging.getLogger("flwr").setLevel(logging.ERROR)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
               "init_args": {"num_cpus": int(num_cpus), "include_dashboard": False, "log_to_driver": verbose}}
    try:
        start_ray(num_cpus, verbose)  # a failed start is an error here, before any Flower thread waits
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_simulation(server_app=make_server_app(specs, sink), client_app=make_client_app(by_run),
                           num_supernodes=specs[0].num_clients, backend_config=backend, verbose_logging=verbose)
    finally:
        _shutdown_ray()
    if "error" in sink:
        raise sink["error"]
    res = sink.get("results", [])
    if len(res) != len(specs):
        raise RuntimeError(f"simulation finished {len(res)} of {len(specs)} runs (see Flower's log above)")
    return res
