"""Issue 45: ``mechanism/residual_ranks_heldout_pairs`` is computed from the curves and can fail."""

from __future__ import annotations

import math

import pytest

from iclr25.q_adapter.reproduce import _residual_claim, residual_gain


def _pts(last: dict[str, list[float]]) -> dict:
    return {m: {seed: [{"step": 0, "test_accuracy": 0.5}, {"step": 50, "test_accuracy": a}]
                for seed, a in zip((0, 1), accs)} for m, accs in last.items()}


def test_residual_gain_known_answer():
    g = residual_gain(_pts({"q-adapter-code": [0.70, 0.66]}), 0.5, (0, 1), 100)
    assert g["gains"] == pytest.approx([20.0, 16.0])
    assert g["binomial_se"] == pytest.approx(5.0)  # 100 * sqrt(0.25 / 100)
    assert g["sd"] == pytest.approx(math.sqrt(8.0))  # sd of (20, 16), ddof=1
    assert g["bar"] == pytest.approx(9.8) and g["holds"]


@pytest.mark.parametrize("accs", [[0.5, 0.5], [0.55, 0.53], [0.40, 0.45]])
def test_residual_claim_fails_when_residual_does_not_beat_base(accs):
    pts = _pts({"q-adapter-code": accs, "q-adapter-paper": accs})
    c = _residual_claim(pts, {"pair_accuracy": 0.5}, (0, 1), 100, "toy")
    assert c.kind == "mechanism" and not c.holds and "misses" in c.note


def test_residual_claim_seed_spread_raises_the_bar():
    # mean gain 12 > 1.96 s.e. (9.8) but the seeds disagree (sd 14.1): the claim must not hold
    pts = _pts({"q-adapter-code": [0.72, 0.52], "q-adapter-paper": [0.72, 0.52]})
    c = _residual_claim(pts, {"pair_accuracy": 0.5}, (0, 1), 100, "toy")
    assert c.threshold == pytest.approx(math.sqrt(200.0)) and not c.holds
