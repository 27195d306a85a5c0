"""The Flower ClientApp / ServerApp message logic without starting Ray, and the run-config parser."""

import json

import pytest

flwr = pytest.importorskip("flwr")
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict  # noqa: E402

from iclr25.ta_dpfl.client import NodeConfig  # noqa: E402
from iclr25.ta_dpfl.config import FederationSpec  # noqa: E402
from iclr25.ta_dpfl.federation import ServerState  # noqa: E402
from iclr25.ta_dpfl.flower_app import client_app, spec_from_run_config  # noqa: E402


@pytest.fixture(autouse=True)
def _task_identity():
    """Messages need a task identity; Flower's simulation sets one (same values as run_simulation)."""
    ti = pytest.importorskip("flwr.supercore.task_identity").TaskIdentity
    ti.task_id, ti.run_id, ti.node_id = 1, 1, 0
    yield


def _call(app, msg, ctx):
    return app(msg, ctx)


def test_client_app_reads_its_budget_from_node_config_and_refuses_to_overspend(tmp_path):
    spec = FederationSpec(method="ta", epsilons=[2.0, 4.0], rhos=[1.0, 1.0], rounds=3, local_steps=2,
                          dataset="digits", out_dir=str(tmp_path), min_expected_batch=1.0, progress=False)
    state = ServerState(spec)
    node = NodeConfig(partition_id=0, num_partitions=2, epsilon=2.0, saving_factor=0.5, dataset="digits")
    ctx = Context(run_id=1, node_id=1, node_config=node.to_mapping(), state=RecordDict(), run_config={})
    q = client_app(Message(content=RecordDict({"config": ConfigRecord(state.public_config(0).to_record())}),
                           dst_node_id=1, message_type="query"), ctx)
    rep = dict(q.content["report"])
    assert rep["epsilon"] == 2.0 and rep["saving-factor"] == 0.5 and rep["num-examples"] > 0
    state.register({"0": rep})
    sched = state.schedules["0"]
    arrays = ArrayRecord(state.model.state_dict())
    eps = []
    for t in (1, 2, 3):
        cfg = ConfigRecord(state.public_config(t).to_record())
        reply = client_app(Message(content=RecordDict({"arrays": arrays, "config": cfg}), dst_node_id=1,
                                   message_type="train"), ctx)
        met = reply.content["metrics"]
        assert met["sample-rate"] == pytest.approx(sched.rates[t - 1])
        assert met["noise-secure"] == 1
        eps.append(met["epsilon-spent"])
        arrays = reply.content["arrays"]
    booked = json.loads(ctx.state["acct:run"]["json"])
    assert booked["rates"] == pytest.approx(list(sched.rates)) and booked["sigmas"] == [spec.sigma] * 3
    assert eps == sorted(eps) and 0.99 * 2.0 < eps[-1] <= 2.0
    # round 3 again (e.g. a replayed message): the client's own accountant refuses to overspend
    cfg = ConfigRecord(state.public_config(3).to_record())
    bad = client_app(Message(content=RecordDict({"arrays": arrays, "config": cfg}), dst_node_id=1,
                             message_type="train"), ctx)
    assert "status" in bad.content and "already run" in bad.content["status"]["error"]
    # ... and says what its accountant booked, so the server's record is not its last *successful* reply
    assert bad.content["status"]["epsilon-spent"] == pytest.approx(eps[-1])
    state.record_round(2, {"0": {"epsilon-spent": eps[1], "noise-secure": 1}}, {})
    assert state.client_eps["0"] == pytest.approx(eps[1])  # server checkpointed round 2, client booked round 3
    state.record_round(3, {}, {"0": bad.content["status"]["error"]}, {"0": bad.content["status"]["epsilon-spent"]})
    assert state.client_eps["0"] == pytest.approx(eps[-1]) and state.missed["0"] == [3]
    with pytest.raises(RuntimeError, match="budget"):  # a booked figure above the budget is caught as well
        state.record_round(3, {}, {"0": "x"}, {"0": 2.5})


def test_node_config_errors_name_the_key():
    with pytest.raises(ValueError, match="needs 'epsilon'"):
        NodeConfig.from_mapping({"partition-id": 0, "num-partitions": 2})
    with pytest.raises(ValueError, match="unknown key"):
        NodeConfig.from_mapping({"partition-id": 0, "num-partitions": 2, "epsilon": 1, "budget": 3})
    with pytest.raises(ValueError, match="epsilon"):
        NodeConfig.from_mapping({"partition-id": 0, "num-partitions": 2, "epsilon": "nan"})
    n = NodeConfig.from_mapping({"partition-id": 1, "num-partitions": 3, "epsilon": 1.5, "skip-rounds": "2,3"})
    assert n.skip_rounds == (2, 3) and NodeConfig.from_mapping(n.to_mapping()) == n


def test_run_config_parsing_reads_public_fields_only():
    s = spec_from_run_config({"method": "idp", "num-clients": 3, "num-server-rounds": 7, "sigma": 1.2})
    assert s.rounds == 7 and s.method == "idp" and s.transition is None and s.sigma == 1.2 and s.num_clients == 3


def test_pyproject_version_matches_and_flower_app_declared():
    from pathlib import Path

    from iclr25.ta_dpfl import __version__

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    py = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert py["project"]["version"] == __version__  # static version: `flwr run` requires it
    comp = py["tool"]["flwr"]["app"]["components"]
    assert comp == {"serverapp": "iclr25.ta_dpfl.flower_app:server_app",
                    "clientapp": "iclr25.ta_dpfl.flower_app:client_app"}
    cfg = py["tool"]["flwr"]["app"]["config"]
    assert "epsilons" not in cfg and "rhos" not in cfg  # budgets are the nodes', not the run's
    spec_from_run_config(cfg)


def test_ray_startup_failure_is_bounded_clear_and_leaves_no_process(monkeypatch):
    """Ray's 30 s raylet wait running out (heavy load) must be an error naming the way out, after
    stopping every process the failed ``ray.init`` started — not a hang with orphan raylets."""
    import subprocess
    import sys
    import time

    ray = pytest.importorskip("ray")
    from iclr25.ta_dpfl import simulation as flower_app

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    started = []

    def failing_init(**kwargs):  # what Ray does under load: processes started, then the raylet wait expires
        assert kwargs["num_cpus"] == 2 and kwargs["include_dashboard"] is False
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
        raise Exception("The current node timed out during startup.")  # Ray raises a bare Exception

    monkeypatch.setattr(ray, "init", failing_init)
    t0 = time.monotonic()
    with pytest.raises(flower_app.RayStartupError, match=r"2 attempt\(s\).*timed out during startup.*inprocess"):
        flower_app.start_ray(2, attempts=2)
    assert time.monotonic() - t0 < 30
    assert len(started) == 2
    for p in started:
        assert p.poll() is not None  # stopped (and reaped) by start_ray
    with pytest.raises(ValueError, match="attempts"):
        flower_app.start_ray(2, attempts=0)


def test_server_changing_the_run_key_gets_no_fresh_budget(tmp_path, caplog):
    """A SuperNode's accountant was kept per run key, a value the server sends: announcing another run
    key each time got the node a fresh budget (rounds 1-2 under 'a', then again under 'b': Opacus ε of
    what it released 2.94 > 2.0). The run key is pinned like σ/K/T; the second run is refused, logged,
    answered with the booked ε; what the node released stays within its budget (Opacus' accountant)."""
    from opacus.accountants import RDPAccountant

    from iclr25.ta_dpfl.client import PublicConfig
    from iclr25.ta_dpfl.dp_sgd import build_model

    node = NodeConfig(partition_id=0, num_partitions=2, epsilon=2.0, dataset="digits", insecure_seed=1,
                      state_dir=str(tmp_path / "state"))
    ctx = Context(run_id=1, node_id=1, node_config=node.to_mapping(), state=RecordDict(), run_config={})
    arrays = ArrayRecord(build_model("digits", 64, 10, 0).state_dict())
    released, refused = [], []
    for rk in ("a", "b"):
        for t in (1, 2):
            pub = PublicConfig(method="idp", hidden=0, dataset="digits", min_expected_batch=1.0, sigma=1.5,
                               rounds=2, local_steps=2, run_key=rk, round=t)
            rep = client_app(Message(content=RecordDict({"arrays": arrays, "config": ConfigRecord(pub.to_record())}),
                                     dst_node_id=1, message_type="train"), ctx)
            if "metrics" in rep.content:
                released.append((1.5, rep.content["metrics"]["sample-rate"], 2))
            else:
                refused.append(dict(rep.content["status"]))
    acc = RDPAccountant()
    acc.history = released
    assert len(released) == 2 and acc.get_epsilon(1e-5) <= 2.0 + 1e-9
    assert len(refused) == 2 and all("run_key: 'a' -> 'b'" in r["error"] for r in refused)
    assert all(r["epsilon-spent"] == pytest.approx(acc.get_epsilon(1e-5)) for r in refused)
    assert "run_key" in caplog.text
    # a restarted node (empty context) with its state-dir: the booked run's key is still pinned
    ctx2 = Context(run_id=1, node_id=1, node_config=node.to_mapping(), state=RecordDict(), run_config={})
    pub = PublicConfig(method="idp", hidden=0, dataset="digits", min_expected_batch=1.0, sigma=1.5, rounds=2,
                       local_steps=2, run_key="a", round=2)
    rep = client_app(Message(content=RecordDict({"arrays": arrays, "config": ConfigRecord(pub.to_record())}),
                             dst_node_id=1, message_type="train"), ctx2)
    assert "already run" in rep.content["status"]["error"]
    # ... and a restarted node asked for a run key its state folder has never seen gets no fresh budget
    # either (found by the stop-49 trial: rounds 1-2 under 'a', restart, rounds 1-2 under 'b' -> ε 2.53 > 2.0)
    for t in (1, 2):
        ctx3 = Context(run_id=2, node_id=1, node_config=node.to_mapping(), state=RecordDict(), run_config={})
        pub = PublicConfig(method="idp", hidden=0, dataset="digits", min_expected_batch=1.0, sigma=1.5, rounds=2,
                           local_steps=2, run_key="c", round=t)
        rep = client_app(Message(content=RecordDict({"arrays": arrays, "config": ConfigRecord(pub.to_record())}),
                                 dst_node_id=1, message_type="train"), ctx3)
        assert "metrics" not in rep.content and "run_key: 'a' -> 'c'" in rep.content["status"]["error"]
