"""Issue #48: reproduce() runs on iclr25.core.runner -- equal records for 1 and 2 workers, --resume after a
killed run reuses the finished records and refuses changed settings by name."""

import json

import pytest

import iclr25.sw_fair_clustering.experiments as E
import iclr25.sw_fair_clustering.reproduce as R
from iclr25.core.runner import JobFailed

TINY = dict(configs=[("adult", "sex", 400)], ks=(3,), sizes=(40,), seeds=(0, 1), n_queries=2, n_center_sets=2,
            space=("adult", "sex", 200), drift=dict(n=1600, window=400), uniform_feasibility_draws=3)
JOBS = ["adult-sex-W400-k3", "drift-W400-k3", "space"]


def _untimed(o):
    """A record without its timing fields (each arm's ``seconds``: wall time, never equal between two runs)."""
    if isinstance(o, dict):
        return {k: _untimed(v) for k, v in o.items() if k != "seconds"}
    if isinstance(o, list):
        return [_untimed(v) for v in o]
    return o


def _records(out):
    return {f.stem: _untimed(json.loads(f.read_text())["record"]) for f in sorted((out / "records").glob("*.json"))}


@pytest.mark.realdata
def test_workers_2_gives_the_records_and_claims_of_workers_1(tmp_path, monkeypatch, adult_sex):
    monkeypatch.setattr(R, "settings", lambda quick: dict(TINY))
    a = R.reproduce(True, tmp_path / "a", workers=1, quiet=True)
    b = R.reproduce(True, tmp_path / "b", workers=2, quiet=True)
    ra, rb = _records(tmp_path / "a"), _records(tmp_path / "b")
    assert sorted(ra) == sorted(JOBS)  # >= 2 jobs, so two workers really share them
    assert ra == rb
    assert [(c.name, c.ours, c.baseline, c.holds) for c in a] == [(c.name, c.ours, c.baseline, c.holds) for c in b]
    qa, qb = ((tmp_path / d / "queries.jsonl").read_text().splitlines() for d in "ab")
    assert [_untimed(json.loads(x)) for x in qa] == [_untimed(json.loads(x)) for x in qb]


@pytest.mark.realdata
def test_resume_after_a_killed_run_reuses_records_and_refuses_changed_settings(tmp_path, monkeypatch, adult_sex):
    monkeypatch.setattr(R, "settings", lambda quick: dict(TINY))
    ref = R.reproduce(True, tmp_path / "ref", workers=1, quiet=True)

    def killed(*a, **k):
        raise RuntimeError("killed before the space job finished")

    out = tmp_path / "run"
    monkeypatch.setattr(E, "space_job", killed)
    with pytest.raises(JobFailed, match="space"):
        R.reproduce(True, out, workers=1, quiet=True)
    assert sorted(_records(out)) == ["adult-sex-W400-k3", "drift-W400-k3"]  # finished jobs are kept
    monkeypatch.undo()
    monkeypatch.setattr(R, "settings", lambda quick: dict(TINY))

    def must_not_run(*a, **k):
        raise AssertionError("--resume re-ran a finished job")

    monkeypatch.setattr(E, "config_job", must_not_run)
    monkeypatch.setattr(E, "drift_job", must_not_run)
    got = R.reproduce(True, out, workers=1, quiet=True, resume=True)  # only the space job runs
    assert _records(out) == _records(tmp_path / "ref")
    assert [(c.name, c.ours, c.holds) for c in got] == [(c.name, c.ours, c.holds) for c in ref]
    monkeypatch.setattr(R, "settings", lambda quick: {**TINY, "n_queries": 3})
    with pytest.raises(ValueError, match="n_queries"):
        R.reproduce(True, out, workers=1, quiet=True, resume=True)
