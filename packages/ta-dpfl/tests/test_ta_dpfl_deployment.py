"""A real local deployment on Flower's deployment engine: ``flower-superlink --insecure`` and two
``flower-supernode`` processes on 127.0.0.1, each with its own budget in ``--node-config``, then
``flwr run`` for 2 rounds (one saving, one spending) on a *user's* data and model: a generated CSV with
a label column (``dataset="csv"``) and a model factory imported by path (``model-factory``), through the
app folder ``iclr25-ta-dpfl flwr-app`` writes (it runs the installed package, no checkout). Two nodes,
not three: every message starts a fresh ``flwr-clientapp`` process that imports torch (query + 2 rounds =
3 per node), which is most of the test's time. Checks every client's reported ε against its own budget,
and stops every process it started.

Its deadline follows the work: it waits for ``result.json`` as long as the run makes progress (a new
file or line under the server's output or the processes' logs) and fails only after
``TA_DPFL_DEPLOY_IDLE`` seconds without progress (default 300) or ``TA_DPFL_DEPLOY_TIMEOUT`` in all
(default 1800). Marked slow: ~4 min on a loaded 2-core machine."""

import json
import os
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
DEADLINE_S = float(os.environ.get("TA_DPFL_DEPLOY_TIMEOUT", "1800"))  # the whole run, seconds
IDLE_S = float(os.environ.get("TA_DPFL_DEPLOY_IDLE", "300"))  # without any progress, seconds
USER_MODEL = """import torch.nn as nn


def make(num_features, num_classes):
    return nn.Sequential(nn.Linear(num_features, 16), nn.Tanh(), nn.Linear(16, num_classes))
"""


def _user_csv(path, n=900, seed=0):
    """A user's tabular data: two numeric columns, a categorical one, a string label ('yes'/'no')."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    color = rng.choice(["red", "green", "blue"], size=n)
    logit = 2 * x1 - x2 + (color == "red") * 1.5
    lab = np.where(logit + rng.normal(scale=0.5, size=n) > 0, "yes", "no")
    rows = ["height,weight,color,outcome"] + [f"{a:.4f},{b:.4f},{c},{y}" for a, b, c, y in zip(x1, x2, color, lab)]
    path.write_text("\n".join(rows) + "\n")


def _progress(paths):
    """A fingerprint of the run's progress: (name, size) of every file under ``paths``."""
    out = []
    for p in paths:
        if p.is_file():
            out.append((str(p), p.stat().st_size))
        elif p.is_dir():
            out += [(str(f), f.stat().st_size) for f in sorted(p.rglob("*")) if f.is_file()]
    return tuple(out)


def _wait_for(result, proc, watch):
    """Wait until ``result`` exists; fail after IDLE_S without progress, DEADLINE_S in all, or when
    ``proc`` exits without it."""
    t0 = last = time.monotonic()
    seen = _progress(watch)
    while not result.is_file():
        now = time.monotonic()
        fp = _progress(watch)
        if fp != seen:
            seen, last = fp, now
        if proc.poll() is not None:
            time.sleep(2)  # the ServerApp may still be writing result.json
            if result.is_file():
                return "flwr run exited"
            return f"flwr run exited rc={proc.returncode} without {result}"
        if now - last > IDLE_S:
            return f"no progress for {IDLE_S:g} s (after {now - t0:.0f} s)"
        if now - t0 > DEADLINE_S:
            return f"not finished within {DEADLINE_S:g} s"
        time.sleep(1)
    return None


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


@pytest.mark.slow
def test_local_deployment_superlink_two_supernodes_user_csv_and_model(tmp_path):
    if not (BIN / "flower-superlink").exists() or not (BIN / "flwr").exists():
        pytest.skip("flower-superlink / flwr not installed next to this python")
    home = tmp_path / "flwr-home"
    home.mkdir()
    link, *node_ports = _free_ports(1 + len(NODES))
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "local-deploy"\n\n[superlink.local-deploy]\n'
        f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    mods = tmp_path / "usermods"  # the user's own model, importable where the nodes and the server run
    mods.mkdir()
    (mods / "user_model.py").write_text(USER_MODEL)
    data = tmp_path / "user.csv"
    _user_csv(data)
    pypath = os.pathsep.join([str(mods), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "FLWR_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": pypath}
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
                   f'dataset="csv" csv-path="{data}" label-column="outcome" model-factory="user_model:make" '
                   f'state-dir="{tmp_path / f"node-{n}"}"')
            start(f"supernode-{n}", [str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}",
                                     "--host", "127.0.0.1", "--port", str(node_ports[n]), "--node-config", cfg])
        run_cfg = (f'method="ta" num-clients={len(NODES)} num-server-rounds=2 local-steps=2 '
                   f'dataset="csv" csv-path="{data}" label-column="outcome" model-factory="user_model:make" '
                   f'min-expected-batch=5.0 lr=1.0 out-dir="{out_dir}" run-key="deploy" round-timeout=900.0')
        # the app folder the installed package writes (no checkout): flwr run builds a FAB from it
        r = subprocess.run([sys.executable, "-m", "iclr25.ta_dpfl", "flwr-app", "--out", str(tmp_path / "ta-dpfl-app")],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        app = tmp_path / "ta-dpfl-app"
        assert [p.name for p in app.iterdir()] == ["pyproject.toml"]
        start("flwr-run", [str(BIN / "flwr"), "run", str(app), "local-deploy", "--run-config", run_cfg, "--stream"])
        result = out_dir / "result.json"
        why = _wait_for(result, procs[-1], [out_dir, *(tmp_path / f"{k}.log" for k in logs), tmp_path / "node-0"])
        assert result.is_file(), f"{why}\n" + "\n".join(
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
    assert res["dataset"] == "csv"
    # the user's model (Linear-Tanh-Linear from the factory), not the package's MLP, was trained and averaged
    import torch

    ck = torch.load(out_dir / "checkpoints" / "round_002.pt", weights_only=True)["state_dict"]
    assert sorted(ck) == ["0.bias", "0.weight", "2.bias", "2.weight"] and tuple(ck["0.weight"].shape) == (16, 5)
    sched = json.loads((out_dir / "schedule.json").read_text())
    assert [sched["clients"][k]["rho"] for k in labels] == [r for _, r in NODES] and sched["excluded"] == {}
