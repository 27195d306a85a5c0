"""The reproduction on the core runner (issue #48): same records for 1 and 2 workers, --resume, claims from records."""

from __future__ import annotations

import json

import pytest

from iclr25.core.runner import run_jobs
from iclr25.multitp.claims import CLAIM_NAMES, claims_from_records
from iclr25.multitp.experiments import global_human_vector
from iclr25.multitp.reproduce import jobs

LANGS = ["de", "zu"]


def _small(seeds=(0, 1), langs=LANGS):
    """The two left-bias jobs (the cheapest experiment that has a seed) on two languages."""
    return [j for j in jobs(list(seeds), langs, quick=True) if j.name.startswith("left_bias_")]


def test_same_records_for_one_and_two_workers(tmp_path):
    one = run_jobs(_small(), tmp_path / "w1", workers=1, quiet=True)
    two = run_jobs(_small(), tmp_path / "w2", workers=2, quiet=True)
    assert sorted(one.records) == ["left_bias_seed0", "left_bias_seed1"]
    assert one.records == two.records
    assert one.records["left_bias_seed0"] != one.records["left_bias_seed1"]      # the seed reaches the agent


def test_resume_reuses_finished_records_and_refuses_changed_settings(tmp_path):
    first = run_jobs(_small(), tmp_path, workers=1, quiet=True)
    kept = tmp_path / "records" / "left_bias_seed0.json"
    before = kept.read_text()
    (tmp_path / "records" / "left_bias_seed1.json").unlink()                      # killed before seed 1 finished
    again = run_jobs(_small(), tmp_path, workers=1, resume=True, quiet=True)
    assert list(again.reused) == ["left_bias_seed0"] and list(again.ran) == ["left_bias_seed1"]
    assert kept.read_text() == before and again.records == first.records
    with pytest.raises(ValueError, match="langs"):
        run_jobs(_small(langs=["de", "en"]), tmp_path, workers=1, resume=True, quiet=True)


def test_claims_are_a_function_of_the_records(tmp_path):
    """Claims from the records of a two-seed run equal the claims of reading the same records back."""
    langs = ["de", "fr", "en"]
    res = run_jobs(jobs([0, 1], langs, quick=True), tmp_path, workers=1, quiet=True)
    args = ([0, 1], langs, True, global_human_vector(), global_human_vector("unweighted_mean_over_languages"), False)
    claims, details = claims_from_records(res.records, *args)
    assert tuple(c.name for c in claims) == CLAIM_NAMES
    back = {p.stem: json.loads(p.read_text())["record"] for p in (tmp_path / "records").glob("*.json")}
    again, _ = claims_from_records(back, *args)
    assert [(c.ours, c.holds, c.note) for c in claims] == [(c.ours, c.holds, c.note) for c in again]
    assert details["recovery"]["cells"] > 0
