"""reproduce's per-job records: written as each job finishes, reused by --resume, checked against the job."""

from __future__ import annotations

import importlib
import json

import pytest

rep = importlib.import_module("iclr25.seal.reproduce")


@pytest.fixture
def fake(monkeypatch):
    calls = []

    def job(args):
        task, n_ft, seed, keeps, _ = args
        calls.append((task, seed))
        return {"task": task, "seed": seed, "n_ft": n_ft, "keeps": list(keeps), "value": 10 * seed + 1, "runs": [],
                "seconds": {"total": 0.0}}

    monkeypatch.setattr(rep, "_job", job)
    # the claim code needs real runs; here only the bookkeeping around the jobs is under test
    monkeypatch.setattr(rep, "claims_from_runs", lambda rs, **kw: [])
    monkeypatch.setattr(rep, "_details_md", lambda rs, title: "")
    monkeypatch.setattr(rep, "_plots", lambda rs, out, tag: None)
    return calls


def test_records_written_and_reused(tmp_path, fake):
    rep.reproduce(True, tmp_path, seeds=(0, 1, 2), workers=1)
    files = sorted(p.name for p in (tmp_path / "jobs").glob("*.json"))
    assert files == [f"synthetic_n450_seed{s}_keeps0.8.json" for s in (0, 1, 2)]
    assert json.loads((tmp_path / "jobs" / files[2]).read_text())["value"] == 21
    assert fake == [("synthetic", 0), ("synthetic", 1), ("synthetic", 2)]
    # a run killed after seed 0 and 2: --resume runs only seed 1 and keeps the seed order in details.json
    (tmp_path / "jobs" / files[1]).unlink()
    fake.clear()
    rep.reproduce(True, tmp_path, seeds=(0, 1, 2), workers=1, resume=True)
    assert fake == [("synthetic", 1)]
    assert [r["seed"] for r in json.loads((tmp_path / "details.json").read_text())] == [0, 1, 2]
    # without --resume, old records are discarded and every job runs again
    fake.clear()
    rep.reproduce(True, tmp_path, seeds=(0, 1, 2), workers=1)
    assert fake == [("synthetic", 0), ("synthetic", 1), ("synthetic", 2)]


def test_mismatched_or_corrupt_record_is_refused(tmp_path, fake):
    rep.reproduce(True, tmp_path, seeds=(0,), workers=1)
    path = tmp_path / "jobs" / "synthetic_n450_seed0_keeps0.8.json"
    rec = json.loads(path.read_text())
    path.write_text(json.dumps({**rec, "seed": 5}))
    with pytest.raises(ValueError, match="expected"):
        rep.reproduce(True, tmp_path, seeds=(0,), workers=1, resume=True)
    path.write_text('{"task": "synth')
    with pytest.raises(ValueError, match="not a valid job record"):
        rep.reproduce(True, tmp_path, seeds=(0,), workers=1, resume=True)
