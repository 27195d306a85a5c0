"""Smoke test of reproduce() with tiny settings (the full quick run is marked slow)."""

import json

import pytest

from iclr25.mgvga.reproduce import ReproSettings, reproduce

NAMES = ["qor/mgm_lt_input_masking", "qor/mgm_lt_scratch", "gate/logicprob_mgm_lt_input_masking",
         "gate/logicprob_mgm_lt_scratch", "gate/logicprob_mgvga_lt_mgm", "gate/equiv_mgm_gt_scratch",
         "gate/equiv_mgvga_gt_mgm", "vga/paired_text_lt_shuffled", "equivalence/mgvga_ge_mgm",
         "mechanism/latent_mask_keeps_circuit"]

TINY = dict(hidden_size=16, num_encoder_layers=2, steps=4, n_synthetic=12, n_eval_pairs=6, max_nodes=600,
            qor_max_recipes=20, qor_seeds=(0,), qor_max_designs=4, eq_max_pairs=12, pretrain_seeds=(0, 1),
            gate_designs=("ctrl", "int2float", "dec"), gate_folds=3, gate_epochs=10, gate_max_pairs=20,
            gate_max_gates=300)


@pytest.mark.realdata
def test_reproduce_tiny(tmp_path, mirror):
    claims = reproduce(True, tmp_path, settings=ReproSettings(**TINY), quiet=True)
    assert [c.name for c in claims] == NAMES
    for c in claims:
        assert c.baseline is not None and c.ours == c.ours  # measured, not NaN
        assert "paired sd" in c.note and c.margin > 0
    raw = json.loads((tmp_path / "raw_metrics.json").read_text())  # strict JSON: no NaN
    assert raw["pool"]["eval_dropped_same_structure"] == 0
    assert len(raw["runs"]) == 2 and set(raw["runs"][0]["gate_lp"]) == {"mgm", "graphmae", "mgvga", "scratch"}
    assert all(v["positives"] > 0 for v in raw["gate_pairs"].values())


def test_reproduce_needs_two_seeds():
    with pytest.raises(ValueError, match="at least 2 pre-training seeds"):
        ReproSettings(pretrain_seeds=(0,))


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick(tmp_path, mirror):
    claims = reproduce(True, tmp_path)
    assert [c.name for c in claims] == NAMES
