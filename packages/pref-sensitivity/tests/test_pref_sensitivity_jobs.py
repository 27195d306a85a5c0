"""The reproduction on the core runner (issue #48): same records for 1 and 2 workers, --resume."""

from __future__ import annotations

import pytest

from iclr25.core.runner import run_jobs
from iclr25.pref_sensitivity.reproduce import SETTINGS, jobs


def _small(tmp, mle_n=(100,)):
    """The closed-form and BT-MLE jobs at the smallest sizes (one N, two seeds)."""
    cfg = dict(SETTINGS["quick"], mle_n=mle_n, mle_seeds=2)
    return [j for j in jobs(cfg, tmp) if j.name in ("closed_form", "bt_mle")]


def test_same_records_for_one_and_two_workers(tmp_path):
    one = run_jobs(_small(tmp_path), tmp_path / "w1", workers=1, quiet=True)
    two = run_jobs(_small(tmp_path), tmp_path / "w2", workers=2, quiet=True)
    assert sorted(one.records) == ["bt_mle", "closed_form"]
    assert one.records == two.records
    assert {r["seed"] for r in one.records["bt_mle"]["rows"]} == {0, 1}


def test_resume_reuses_finished_records_and_refuses_changed_settings(tmp_path):
    first = run_jobs(_small(tmp_path), tmp_path, workers=1, quiet=True)
    kept = tmp_path / "records" / "closed_form.json"
    before = kept.read_text()
    (tmp_path / "records" / "bt_mle.json").unlink()                             # killed before bt_mle finished
    again = run_jobs(_small(tmp_path), tmp_path, workers=1, resume=True, quiet=True)
    assert list(again.reused) == ["closed_form"] and list(again.ran) == ["bt_mle"]
    assert kept.read_text() == before and again.records == first.records
    with pytest.raises(ValueError, match="mle_n"):
        run_jobs(_small(tmp_path, mle_n=(1000,)), tmp_path, workers=1, resume=True, quiet=True)
