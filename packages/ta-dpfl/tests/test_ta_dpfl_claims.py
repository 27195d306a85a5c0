"""Claim record (issue 45 §1), figures (issue 47 §2) and the runner layout (issue 48) of the reproduction."""

import ast
from pathlib import Path

import numpy as np
import pytest

import iclr25.ta_dpfl.reproduce as rep
from iclr25.ta_dpfl import tuning

from .test_ta_dpfl_repro import _set

SRC = Path(rep.__file__).parent


def test_every_claim_fills_the_record_and_spread_is_the_paired_sd():
    res = _set()
    cl = {c.name: c for c in rep.claims_from_results(res, plots={"accuracy": "accuracy.png", "rates": "rates.png"})}
    for c in cl.values():
        assert c.kind in ("headline", "mechanism", "sanity") and "direction only" in c.paper_ref, c.name
        assert c.paper_value is None and c.n_seeds >= 1
    c = cl["accuracy/digits/ta_ge_idp"]
    ta = np.array([r["final_accuracy"] for r in res if r["method"] == "ta"])
    idp = np.array([r["final_accuracy"] for r in res if r["method"] == "idp"])
    assert c.kind == "headline" and c.n_seeds == 2 and c.plot == "accuracy.png"
    assert c.spread == pytest.approx(np.std(ta - idp, ddof=1))
    assert cl["mechanism/digits/save_first_gt_spend_first"].kind == "mechanism"
    assert cl["mechanism/digits/ta_total_rate_ge_idp"].plot == "rates.png"
    assert cl["privacy/no_overspend"].kind == "sanity" and cl["privacy/no_overspend"].spread is None


def test_one_seed_has_no_spread():
    res = [r for r in _set() if r["seed"] == 0]
    c = {c.name: c for c in rep.claims_from_results(res)}["accuracy/digits/idp_gt_dpfedavg"]
    assert c.spread is None and c.n_seeds == 1


def _records(cfg, seeds):
    recs = {}
    for st in cfg["settings"]:
        for m in tuning.TUNED:
            for lr in cfg["lr_grid"]:
                recs[f"grid_{st}_{m}_lr{lr:g}"] = {"method": m, "lr": lr, "setting": st, "seed": seeds[0],
                                                  "final_val_accuracy": -abs(lr - 2.0), "final_accuracy": 0.8}
        recs[f"tune_{st}"] = {"lrs": {m: 2.0 for m in tuning.TUNED}, "grid": [0.5, *cfg["lr_grid"]],
                              "extra_runs": [{"method": m, "lr": 0.5, "setting": st, "seed": seeds[0],
                                              "final_val_accuracy": -1.5, "final_accuracy": 0.7}
                                             for m in tuning.TUNED]}
        for m in tuning.TUNED:
            for s in seeds[1:]:
                recs[f"final_{st}_{m}_seed{s}"] = {"method": m, "lr": 2.0, "setting": st, "seed": s,
                                                   "final_accuracy": 0.81}
    return recs


def test_jobs_declare_grid_tune_final_and_results_come_back_from_records():
    cfg = dict(rep.QUICK, settings=("digits",), lr_grid=(1.0, 2.0), perf_batches=(64,))
    jobs = {j.name: j for j in rep.jobs(cfg, Path("out"), (0, 1), None)}
    grid = [n for n in jobs if n.startswith("grid_")]
    assert len(grid) == len(tuning.TUNED) * 2 and set(jobs["tune_digits"].deps) == set(grid)
    assert all(jobs[f"final_digits_{m}_seed1"].deps == ("tune_digits",) for m in tuning.TUNED)
    assert jobs["perf"].fn == "iclr25.ta_dpfl.tuning:perf_job" and jobs["tune_digits"].fn.startswith("iclr25.ta_dpfl.tuning:")
    results, lrs, grids = rep.results_from_records(_records(cfg, (0, 1)), cfg, (0, 1))
    assert lrs == {"digits": {m: 2.0 for m in tuning.TUNED}} and grids["digits"] == [0.5, 1.0, 2.0]
    kept = [r for r in results if not r.get("tuning_only")]
    assert sorted((r["method"], r["seed"]) for r in kept) == sorted((m, s) for m in tuning.TUNED for s in (0, 1))
    assert len(results) == len(tuning.TUNED) * (2 + 1 + 1)  # grid + extension + other seed


def test_plots_written_with_error_bars(tmp_path):
    pytest.importorskip("matplotlib")
    from iclr25.ta_dpfl.plots import write_plots

    names = write_plots(_set(), tmp_path)
    assert names == {"accuracy": "accuracy.png", "curves": "curves.png", "rates": "rates.png"}
    for f in names.values():
        assert (tmp_path / f).stat().st_size > 1000


def test_plots_without_matplotlib_warn_with_the_install_command(tmp_path, monkeypatch, caplog):
    import iclr25.ta_dpfl.plots as plots

    monkeypatch.setattr(plots, "have_matplotlib", lambda: False)
    with caplog.at_level("WARNING"):
        assert plots.write_plots(_set(), tmp_path) == {}
    assert any("iclr25-ta-dpfl[plot]" in r.message for r in caplog.records)


def test_no_private_pool_no_big_file_no_import_cycle():
    graph = {}
    for f in SRC.glob("*.py"):
        text = f.read_text()
        assert "ProcessPoolExecutor" not in text and "multiprocessing" not in text, f.name
        assert len(text.splitlines()) <= 600, f.name
        deps = set()
        for node in ast.parse(text).body:
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        graph[f.stem] = deps
    done, stack = set(), []

    def visit(n):
        assert n not in stack, f"import cycle: {' -> '.join(stack[stack.index(n):] + [n])}"
        if n in done or n not in graph:
            return
        stack.append(n)
        for d in graph[n]:
            visit(d)
        stack.pop()
        done.add(n)

    for n in graph:
        visit(n)
