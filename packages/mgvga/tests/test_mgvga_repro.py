"""Smoke test of reproduce() with tiny settings (the full quick run is marked slow)."""

import pytest

from iclr25.mgvga.reproduce import ReproSettings, reproduce

NAMES = ["qor/mgm_lt_input_masking", "qor/mgm_lt_scratch", "vga/paired_text_lt_shuffled", "equivalence/mgvga_ge_mgm"]


@pytest.mark.realdata
def test_reproduce_tiny(tmp_path, mirror):
    s = ReproSettings(hidden_size=16, num_encoder_layers=2, steps=4, n_synthetic=12, n_eval_pairs=6, max_nodes=600,
                      qor_max_recipes=20, qor_seeds=(0,), qor_max_designs=4, eq_max_pairs=12,
                      pretrain_seeds=(0,))
    claims = reproduce(True, tmp_path, settings=s)
    assert [c.name for c in claims] == NAMES
    for c in claims:
        assert c.baseline is not None and c.ours == c.ours  # measured, not NaN
    assert (tmp_path / "raw_metrics.json").is_file()


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick(tmp_path, mirror):
    claims = reproduce(True, tmp_path)
    assert [c.name for c in claims] == NAMES
