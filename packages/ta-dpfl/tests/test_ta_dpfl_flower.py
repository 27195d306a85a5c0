"""The Flower ClientApp logic without starting Ray: messages in, messages out."""

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict  # noqa: E402

from iclr25.ta_dpfl.config import FederationSpec  # noqa: E402
from iclr25.ta_dpfl.federation import ServerState  # noqa: E402
from iclr25.ta_dpfl.flower_app import _train, spec_from_run_config  # noqa: E402


@pytest.fixture(autouse=True)
def _task_identity():
    """Messages need a task identity; Flower's simulation sets one (same values as run_simulation)."""
    ti = pytest.importorskip("flwr.supercore.task_identity").TaskIdentity
    ti.task_id, ti.run_id, ti.node_id = 1, 1, 0
    yield


def _msg(state: ServerState, arrays, t: int) -> Message:
    cfg = ConfigRecord(state.client_config())
    cfg["round"] = t
    cfg["rates-matrix"] = [float(v) for v in state.rates.reshape(-1)]
    cfg["num-rounds-total"] = state.rates.shape[1]
    cfg["budgets"] = [float(e) for e in state.spec.epsilons]
    return Message(content=RecordDict({"arrays": arrays, "config": cfg}), dst_node_id=1, message_type="train")


def test_client_app_books_rates_in_context_state_and_reports_epsilon(tmp_path):
    spec = FederationSpec(method="ta", epsilons=[2.0, 4.0], rhos=[0.5, 1.0], rounds=3, local_steps=2,
                          dataset="digits", out_dir=str(tmp_path), min_expected_batch=1.0, progress=False)
    state = ServerState(spec)
    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 0, "num-partitions": 2}, state=RecordDict(),
                  run_config={})
    arrays = ArrayRecord(state.model.state_dict())
    eps = []
    for t in (1, 2, 3):
        reply = _train(_msg(state, arrays, t), ctx)
        met = reply.content["metrics"]
        eps.append(met["epsilon-spent"])
        assert met["sample-rate"] == pytest.approx(state.rates[0, t - 1])
        arrays = reply.content["arrays"]
    assert list(ctx.state["acct:run"]["rates"]) == pytest.approx(list(state.rates[0]))
    assert np.all(np.diff(eps) > 0) and eps[-1] <= 2.0 and eps[-1] > 2.0 * 0.99
    # a 4th round would overspend: the client refuses
    state.rates = np.concatenate([state.rates, state.rates[:, -1:]], axis=1)
    with pytest.raises(Exception, match="would spend"):
        _train(_msg(state, arrays, 4), ctx)


def test_run_config_parsing():
    s = spec_from_run_config({"method": "idp", "epsilons": "1,2,4", "num-clients": 6, "num-server-rounds": 7})
    assert s.epsilons == [1, 1, 2, 2, 4, 4] and s.rounds == 7 and s.method == "idp" and s.transition is None


def test_server_state_checkpoints_and_resume(tmp_path):
    spec = FederationSpec(method="idp", epsilons=[2.0, 4.0], rhos=[1.0, 1.0], rounds=4, local_steps=2,
                          dataset="digits", out_dir=str(tmp_path), min_expected_batch=1.0, progress=False)
    st = ServerState(spec)
    sd = {k: v.clone() for k, v in st.model.state_dict().items()}
    for t in (1, 2, 3):
        st.record_clients(t, {0: 0.1 * t, 1: 0.2 * t})
        st.end_round(t, {k: v + t for k, v in sd.items()})
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3
    (tmp_path / "checkpoints" / "round_003.pt").unlink()
    spec.resume = True
    st2 = ServerState(spec)
    assert st2.start_round == 2 and st2.remaining_rounds == 2
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2
    for k, v in st2.model.state_dict().items():
        assert float((v - (sd[k] + 2)).abs().max()) == 0.0
    with pytest.raises(RuntimeError, match="budget"):
        st2.record_clients(3, {0: 2.5, 1: 0.1})
    with pytest.raises(RuntimeError, match="no reply"):
        st2.record_clients(3, {0: 0.5})


def test_pyproject_version_matches_and_flower_app_declared():
    from pathlib import Path

    from iclr25.ta_dpfl import __version__

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    py = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert py["project"]["version"] == __version__  # static version: `flwr run` requires it
    comp = py["tool"]["flwr"]["app"]["components"]
    assert comp == {"serverapp": "iclr25.ta_dpfl.flower_app:server_app",
                    "clientapp": "iclr25.ta_dpfl.flower_app:client_app"}
    spec = spec_from_run_config(py["tool"]["flwr"]["app"]["config"])
    assert spec.epsilons == [1.0] * 4 + [2.0] * 4 + [4.0] * 4 and spec.rounds == 30
