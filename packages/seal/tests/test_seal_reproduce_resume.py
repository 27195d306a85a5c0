"""reproduce on the core's runner: one record per (task, seed) job, reused by --resume, damaged ones refused."""

from __future__ import annotations

import importlib
import json

import pytest

rep = importlib.import_module("iclr25.seal.reproduce")
exp = importlib.import_module("iclr25.seal.experiment")
plots = importlib.import_module("iclr25.seal.plots")


@pytest.fixture
def fake(monkeypatch):
    calls = []

    def job(settings, seed, deps):
        calls.append((settings["task"], seed))
        return {"task": settings["task"], "seed": seed, "n_ft": settings["n_ft"], "keeps": settings["keeps"],
                "value": 10 * seed + 1, "runs": [], "selection": {}, "seconds": {"total": 0.0}}

    monkeypatch.setattr(exp, "task_seed_job", job)
    # the claim code needs real runs; here only the bookkeeping around the jobs is under test
    monkeypatch.setattr(rep, "claims_from_runs", lambda rs, **kw: [])
    monkeypatch.setattr(rep, "details_md", lambda rs, title: "")
    monkeypatch.setattr(plots, "plot_synthetic", lambda rs, out: [])
    return calls


def test_records_written_and_reused(tmp_path, fake):
    rep.reproduce(True, tmp_path, seeds=(0, 1, 2), workers=1, quiet=True)
    files = sorted(p.name for p in (tmp_path / "records").glob("*.json"))
    assert files == [f"synthetic_n450_seed{s}_keeps0.8.json" for s in (0, 1, 2)]
    assert json.loads((tmp_path / "records" / files[2]).read_text())["record"]["value"] == 21
    assert fake == [("synthetic", 0), ("synthetic", 1), ("synthetic", 2)]
    # a run killed after seed 0 and 2: --resume runs only seed 1 and keeps the seed order in details.json
    (tmp_path / "records" / files[1]).unlink()
    fake.clear()
    rep.reproduce(True, tmp_path, seeds=(0, 1, 2), workers=1, resume=True, quiet=True)
    assert fake == [("synthetic", 1)]
    assert [r["seed"] for r in json.loads((tmp_path / "details.json").read_text())] == [0, 1, 2]
    # without --resume, old records are discarded and every job runs again
    fake.clear()
    rep.reproduce(True, tmp_path, seeds=(0, 1, 2), workers=1, quiet=True)
    assert fake == [("synthetic", 0), ("synthetic", 1), ("synthetic", 2)]


def test_damaged_record_is_refused(tmp_path, fake):
    rep.reproduce(True, tmp_path, seeds=(0,), workers=1, quiet=True)
    path = tmp_path / "records" / "synthetic_n450_seed0_keeps0.8.json"
    path.write_text('{"job": "synth')
    with pytest.raises(ValueError):
        rep.reproduce(True, tmp_path, seeds=(0,), workers=1, resume=True, quiet=True)


def test_no_private_pool_in_src():
    from pathlib import Path

    src = Path(rep.__file__).parent
    for f in src.glob("*.py"):
        text = f.read_text()
        for bad in ("ProcessPoolExecutor", "multiprocessing", "signal.signal"):
            assert bad not in text, f"{f.name} uses {bad}: run jobs with iclr25.core.runner"
        assert len(text.splitlines()) <= 600, f"{f.name} is over 600 lines"

