"""A real local deployment on Flower's deployment engine: ``flower-superlink --insecure`` and two
``flower-supernode`` processes on 127.0.0.1, each with its own budget in ``--node-config``, then
``flwr run`` for 2 rounds (one saving, one spending) on the digits data. Two nodes, not three: every
message starts a fresh ``flwr-clientapp`` process that imports torch (query + 2 rounds = 3 per node),
which is most of the test's CPU time; two different budgets check the same things. Checks every client's reported ε against its own budget,
and stops every process it started (bounded in time)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

PKG = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NODES = [  # (epsilon, saving factor): client-owned, never in the run config
    (1.0, 0.5), (4.0, 1.0)]
DEADLINE_S = float(os.environ.get("TA_DPFL_DEPLOY_TIMEOUT", "420"))  # flwr run, seconds


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _wait_port(port, proc, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            return
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    t0 = time.monotonic()
    for p in procs:
        try:
            p.wait(timeout=max(1.0, 15 - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


def test_local_deployment_superlink_two_supernodes(tmp_path):
    if not (BIN / "flower-superlink").exists() or not (BIN / "flwr").exists():
        pytest.skip("flower-superlink / flwr not installed next to this python")
    home = tmp_path / "flwr-home"
    home.mkdir()
    link, *node_ports = _free_ports(1 + len(NODES))
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "local-deploy"\n\n[superlink.local-deploy]\n'
        f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    env = {**os.environ, "FLWR_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    out_dir = tmp_path / "server"
    procs, logs = [], {}

    def start(name, cmd):
        f = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed after the processes stop
        logs[name] = f
        procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
                                      start_new_session=True))

    try:
        # flwr >= 1.4x: one HTTP port serves the Fleet, Control and ServerAppIo APIs
        # the app runs in this environment (iclr25-ta-dpfl installed), not in a per-run venv
        start("superlink", [str(BIN / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                            "--host", "127.0.0.1", "--port", str(link),
                            "--database", str(tmp_path / "state.db")])
        _wait_port(link, procs[0], 120)
        for n, (eps, rho) in enumerate(NODES):
            cfg = (f"partition-id={n} num-partitions={len(NODES)} epsilon={eps} delta=1e-5 saving-factor={rho} "
                   f'dataset="digits" state-dir="{tmp_path / f"node-{n}"}"')
            start(f"supernode-{n}", [str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}",
                                     "--host", "127.0.0.1", "--port", str(node_ports[n]), "--node-config", cfg])
        run_cfg = (f'method="ta" num-clients={len(NODES)} num-server-rounds=2 local-steps=2 hidden=0 '
                   f'dataset="digits" min-expected-batch=5.0 lr=1.0 out-dir="{out_dir}" run-key="deploy" '
                   'round-timeout=240.0')
        app = tmp_path / "app"  # a copy: flwr run builds a FAB from the app folder
        shutil.copytree(PKG, app, ignore=shutil.ignore_patterns("tests", "__pycache__", "runs", "results", "*.pt"))
        r = subprocess.run([str(BIN / "flwr"), "run", str(app), "local-deploy", "--run-config", run_cfg, "--stream"],
                           env=env, cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S)
        result = out_dir / "result.json"
        assert result.is_file(), f"flwr run rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n" + "\n".join(
            f"--- {k}\n{(tmp_path / f'{k}.log').read_text()[-1500:]}" for k in logs)
    finally:
        _stop(procs)
        for f in logs.values():
            f.close()
    assert all(p.poll() is not None for p in procs)
    res = json.loads(result.read_text())
    labels = [str(n) for n in range(len(NODES))]
    assert res["clients"] == labels and len(res["accuracy_per_round"]) == 2
    assert res["epsilon_budget"] == [e for e, _ in NODES]  # reported by the nodes themselves
    for spent, (eps, _) in zip(res["epsilon_spent"], NODES):
        assert 0 < spent <= eps + 1e-9
    assert res["noise"] == dict.fromkeys(labels, "secure")
    sched = json.loads((out_dir / "schedule.json").read_text())
    assert [sched["clients"][k]["rho"] for k in labels] == [r for _, r in NODES] and sched["excluded"] == {}
