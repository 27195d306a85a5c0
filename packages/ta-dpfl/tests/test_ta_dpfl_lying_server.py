"""A server that lies: the client books (σ, q, K) per round as released, prices every round with what
it actually used, refuses a message that contradicts its booked run, and never ends above its budget.

The reference ε of every test is computed independently with Opacus' own ``RDPAccountant`` over what
the client released: the σ and K of the messages it trained on and the rate it replied with."""

import logging

import pytest
import torch
from opacus.accountants import RDPAccountant

from iclr25.ta_dpfl.client import (
    ClientState,
    NodeConfig,
    PublicConfig,
    UntrustedRound,
    booked_epsilon,
    client_train,
)
from iclr25.ta_dpfl.dp_sgd import build_model

BUDGET = 2.0


def _node(**kw):
    return NodeConfig(partition_id=0, num_partitions=2, epsilon=BUDGET, dataset="digits", insecure_seed=1, **kw)


def _pub(**kw):
    base = dict(method="idp", hidden=0, dataset="digits", min_expected_batch=1.0, run_key="lie")
    return PublicConfig(**{**base, **kw})


def _sd():
    torch.manual_seed(0)
    return build_model("digits", 64, 10, 0).state_dict()


def _drive(node, msgs):
    """Send ``msgs`` in turn; return (state, released [(σ, q, K)], refusals [str])."""
    state, sd, released, refused = ClientState(), _sd(), [], []
    for pub in msgs:
        try:
            sd, met, state = client_train(node, pub, state, sd)
        except UntrustedRound as e:
            refused.append(str(e))
            continue
        released.append((pub.sigma, met["sample-rate"], pub.local_steps))
    return state, released, refused


def _opacus_eps(released, delta=1e-5):
    acc = RDPAccountant()
    acc.history = list(released)
    return acc.get_epsilon(delta) if released else 0.0


def test_server_changing_sigma_and_steps_is_refused_and_priced_as_released(caplog):
    """The issue's attack: round 1 at σ=1, K=8, T=2; round 2 at σ=3, K=1. The old client re-priced
    round 1 with round 2's σ and K (reported 1.388, true 2.162 > 2.0)."""
    node = _node()
    msgs = [_pub(sigma=1.0, local_steps=8, rounds=2, round=1), _pub(sigma=3.0, local_steps=1, rounds=2, round=2)]
    with caplog.at_level(logging.WARNING, logger="iclr25.ta_dpfl"):
        state, released, refused = _drive(node, msgs)
    assert len(released) == 1 and len(refused) == 1
    assert "sigma: 1.0 -> 3.0" in refused[0] and "local_steps: 8 -> 1" in refused[0]
    assert any("refuses" in r.message and "sigma: 1.0 -> 3.0" in r.message for r in caplog.records)
    assert state.history() == [(1.0, released[0][1], 8)]
    ref = _opacus_eps(released)
    assert booked_epsilon(node, state) == pytest.approx(ref, rel=1e-9) and ref <= BUDGET + 1e-9
    # what the old accountant would have reported for the two rounds, had the client trained round 2:
    # its rate at σ=3, K=1 is far higher, so the *true* ε of both rounds exceeds the budget
    q2 = client_train(node, msgs[1], ClientState(), _sd())[1]["sample-rate"]
    assert _opacus_eps([released[0], (3.0, q2, 1)]) > BUDGET


def test_server_lying_about_rounds_is_refused():
    """T=2 in round 1 (a short schedule: high rates), then rounds 3.. announced as T=30, or as T=2."""
    node = _node()
    msgs = [_pub(rounds=2, local_steps=2, round=1), _pub(rounds=2, local_steps=2, round=2),
            _pub(rounds=30, local_steps=2, round=3), _pub(rounds=2, local_steps=2, round=3)]
    state, released, refused = _drive(node, msgs)
    assert len(released) == 2 and len(refused) == 2
    assert "rounds: 2 -> 30" in refused[0] and "outside 1..2" in refused[1]
    ref = _opacus_eps(released)
    assert booked_epsilon(node, state) == pytest.approx(ref, rel=1e-9)
    assert 0.99 * BUDGET < ref <= BUDGET + 1e-9  # the client spent its budget, and not a hair more


def test_server_lying_about_the_round_index_never_overspends():
    """Round indices out of order: forward jumps are re-solved from what was booked, backward ones and
    indices outside 1..T refused; whatever the sequence, the released ε stays within the budget."""
    node = _node(saving_factor=0.5)
    idx = [1, 5, 3, 0, 6, 7, 8, 99]
    msgs = [_pub(method="ta", rounds=8, local_steps=2, round=t) for t in idx]
    state, released, refused = _drive(node, msgs)
    assert state.rounds == [1, 5, 6, 7, 8] and len(refused) == 3
    assert "round 3 was already run" in refused[0] or "already run" in refused[0]
    assert any("outside 1..8" in r for r in refused)
    ref = _opacus_eps(released)
    assert booked_epsilon(node, state) == pytest.approx(ref, rel=1e-9) and ref <= BUDGET + 1e-9


def test_replayed_round_is_refused_also_after_a_restart(tmp_path):
    """An old round's message sent again — to the same process, or to the node restarted from its
    state-dir — is refused; the booked ε does not move."""
    node = _node(state_dir=str(tmp_path))
    msgs = [_pub(rounds=3, local_steps=2, round=t) for t in (1, 2)]
    state, released, _ = _drive(node, msgs)
    before = booked_epsilon(node, state)
    with pytest.raises(UntrustedRound, match="round 1 was already run"):
        client_train(node, msgs[0], state, _sd())
    restarted = ClientState.load(node, "lie")
    assert restarted == state
    with pytest.raises(UntrustedRound, match="round 2 was already run"):
        client_train(node, msgs[1], restarted, _sd())
    assert booked_epsilon(node, restarted) == pytest.approx(before) == pytest.approx(_opacus_eps(released))


def test_state_without_sigma_and_steps_is_not_trusted(tmp_path):
    """A state file of the old format (rates only) cannot be priced without trusting the server."""
    node = _node(state_dir=str(tmp_path))
    (tmp_path / "lie.json").write_text('{"rounds": [1], "rates": [0.1]}')
    with pytest.raises(ValueError, match=r"lack their \(sigma, K\)"):
        ClientState.load(node, "lie")
