"""The reproduction: a miniature run on the mirror (fast) and the real quick run (slow)."""

import json

import pytest

from iclr25.frs import reproduce as rep


@pytest.mark.realdata
def test_reproduce_miniature(tmp_path, monkeypatch, mirror):
    mirror("sst2/train_sub.tsv")
    small = dict(rep.QUICK, n_attack=300, attack_epochs=1, n_finetune=200, n_clean=20, n_triggered=12, k=2,
                 iterations=4, n_empirical=4, empirical_samples=3, d_model=16, d_ff=32)
    monkeypatch.setattr(rep, "QUICK", small)
    claims = rep.reproduce(True, tmp_path, seeds=[0, 1])
    assert [c.name for c in claims] == list(rep.CLAIM_NAMES)
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert len(m["per_seed"]) == 2 and set(m["aggregate"]) == set(rep.ARM_ORDER)
    assert (tmp_path / "texts" / "seed1_frs.jsonl").is_file() and (tmp_path / "arms.md").is_file()
    assert m["warnings"]  # N = 4 votes -> the few-votes warning is recorded
    for c in claims:
        assert c.note


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick(tmp_path, mirror):
    mirror("sst2/test.tsv")
    from iclr25.core.registry import run_reproduction

    r = run_reproduction("frs", rep.reproduce, quick=True, out_dir=tmp_path)
    assert len(r.claims) == 7
