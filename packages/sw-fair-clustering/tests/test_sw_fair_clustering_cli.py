"""The CLI as a subprocess (help, exit codes, lower-bound demo) and in process (stream --resume, compare)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def run(*args, check=True):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}  # at call time: the fixture's env
    p = subprocess.run([sys.executable, "-m", "iclr25.sw_fair_clustering", *args], capture_output=True, text=True,
                       env=env, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_help_and_version():
    out = run("--help").stdout
    for sub in ("stream", "compare", "reproduce", "lower-bound-demo"):
        assert sub in out
        assert run(sub, "--help").returncode == 0
    assert "--resume" in run("stream", "--help").stdout
    assert "--relaxed" in run("compare", "--help").stdout
    assert run("--version").stdout.startswith("iclr25-sw-fair-clustering 0.")


def test_help_imports_nothing_heavy():  # numpy comes with iclr25-core itself
    code = ("import sys; from iclr25.sw_fair_clustering.cli import main; import iclr25.sw_fair_clustering as m;"
            "bad = [x for x in ('scipy', 'torch', 'matplotlib') if x in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV).stdout.strip()
    assert out == "[]"


def test_lower_bound_demo(tmp_path):
    p = run("lower-bound-demo", "--out", str(tmp_path))
    res = json.loads((tmp_path / "lower_bound_demo.json").read_text())
    assert [r["feasible"] for r in res["part1"]] == [True, False, True, True]
    assert [r["lp_status"] for r in res["part1"]] == ["optimal", "infeasible", "optimal", "optimal"]
    assert res["flips"] > 0 and res["summary_wrong"] > 0 and res["windows"] == 501
    assert p.stdout.strip().splitlines()[-1].startswith("lower-bound-demo:")


@pytest.mark.parametrize("args,needle", [
    (["stream", "--data", "/nonexistent/x.csv"], "does not exist"),
    (["stream", "--dataset", "drift", "--window", "0"], "window must be >= 1"),
    (["stream", "--dataset", "drift", "--window", "100", "--block-size", "200"], "larger than the window"),
    (["stream", "--dataset", "drift", "--z", "3"], "z must be 1"),
    (["stream", "--dataset", "drift", "--eps", "1.0"], "eps must be in (0, 1)"),
    (["stream", "--dataset", "drift", "--k", "0"], "k must be >= 1"),
    (["stream", "--dataset", "drift", "--lower", "0.6", "0.1", "--upper", "0.5", "0.5"], "lower bound 0.6 > upper"),
    (["stream", "--dataset", "drift", "--lower", "0.1", "--upper", "1.5"], "bounds must be in [0, 1]"),
    (["stream"], "give exactly one of --dataset"),
])
def test_bad_flags_exit_2_with_a_message(args, needle, tmp_path):
    p = run(*args, "--out", str(tmp_path / "out"), check=False)
    assert p.returncode == 2
    assert needle in (p.stderr + p.stdout)
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "out").exists()  # rejected before any output folder is made


def test_default_output_folder_is_relative_to_the_current_directory(tmp_path):
    """Without --out a command writes runs/<slug>/<command> under the current directory (the
    autouse fixture puts every test's current directory in its tmp_path, never the checkout)."""
    p = run("lower-bound-demo")
    assert (tmp_path / "runs" / "sw-fair-clustering" / "lower-bound-demo" / "lower_bound_demo.json").is_file(), \
        p.stdout


def test_bad_csv_line_is_named(tmp_path):
    f = tmp_path / "s.csv"
    rows = ["x,y,g"] + [f"{i},{i % 7},{'ab'[i % 2]}" for i in range(60)]
    rows[31] = "30,oops,a"
    f.write_text("\n".join(rows) + "\n")
    p = run("stream", "--data", str(f), "--color-column", "g", "--window", "20", "--coreset-size", "5",
            "--out", str(tmp_path / "o"), check=False)
    assert p.returncode == 2 and "s.csv:32: feature column 'y' value 'oops' is not a number" in p.stderr


def _csv(tmp_path, n=2400):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 2)) + np.repeat(rng.normal(0, 4, (4, 2)), n // 4, axis=0)
    g = np.where(rng.random(n) < 0.35, "female", "male")
    f = tmp_path / "people.csv"
    f.write_text("a,b,sex\n" + "".join(f"{x:.5f},{y:.5f},{s}\n" for (x, y), s in zip(X, g)))
    return f


def test_stream_resume_continues_identically(tmp_path, monkeypatch):
    from iclr25.sw_fair_clustering import commands
    from iclr25.sw_fair_clustering.cli import main

    f = _csv(tmp_path)
    base = ["stream", "--data", str(f), "--color-column", "sex", "--window", "600", "--coreset-size", "40",
            "--quiet", "--chunk-rows", "500"]
    assert main([*base, "--out", str(tmp_path / "full")]) == 0
    calls = {"n": 0}
    orig = commands._query_record

    def boom(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return orig(*a, **k)

    monkeypatch.setattr(commands, "_query_record", boom)
    assert main([*base, "--out", str(tmp_path / "cut")]) == 130  # run_cli reports the interruption
    monkeypatch.setattr(commands, "_query_record", orig)
    assert main([*base, "--out", str(tmp_path / "cut")]) == 2  # refuses to overwrite the interrupted run
    assert main([*base, "--out", str(tmp_path / "cut"), "--resume"]) == 0
    full = [json.loads(x) for x in (tmp_path / "full" / "queries.jsonl").read_text().splitlines()]
    cut = [json.loads(x) for x in (tmp_path / "cut" / "queries.jsonl").read_text().splitlines()]
    assert [r["t"] for r in cut] == [r["t"] for r in full] == list(range(600, 2401, 120))
    for a, b in zip(full, cut):
        assert a["status"] == b["status"] == "optimal"
        assert a["cost_on_summary"] == pytest.approx(b["cost_on_summary"], rel=1e-12)
    cfg = json.loads((tmp_path / "full" / "config.json").read_text())
    assert cfg["colors"] == ["female", "male"] or cfg["colors"] == ["male", "female"]
    assert cfg["config"]["standardize"] is True and len(cfg["standardization"]["mean"]) == 2
    assert json.loads((tmp_path / "full" / "colors.json").read_text())["0"] in ("female", "male")
    assert main([*base, "--out", str(tmp_path / "cut"), "--resume", "--k", "4"]) == 2  # options must match


@pytest.mark.parametrize("extra,name", [(["--relaxed", "0.2"], "relaxed"), (["--query-every", "50"], "query_every"),
                                        (["--n-init", "3"], "n_init"), (["--evaluate"], "evaluate")])
def test_stream_resume_refuses_changed_query_settings(tmp_path, monkeypatch, capsys, extra, name):
    """Trial s52: --resume accepted a changed --relaxed / --query-every / --n-init / --evaluate and appended
    records of other settings to queries.jsonl (config.json then described only the new ones)."""
    from iclr25.sw_fair_clustering import commands
    from iclr25.sw_fair_clustering.cli import main

    f = _csv(tmp_path, 1200)
    base = ["stream", "--data", str(f), "--color-column", "sex", "--window", "600", "--coreset-size", "40",
            "--quiet", "--out", str(tmp_path / "cut")]
    orig = commands._query_record
    calls = {"n": 0}

    def boom(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return orig(*a, **k)

    monkeypatch.setattr(commands, "_query_record", boom)
    assert main(base) == 130
    monkeypatch.setattr(commands, "_query_record", orig)
    capsys.readouterr()
    assert main([*base, "--resume", *extra]) == 2
    assert f"'{name}'" in capsys.readouterr().err


def test_stream_relaxed_fixed_bounds_and_evaluate(tmp_path, capsys):
    from iclr25.sw_fair_clustering.cli import main

    f = _csv(tmp_path, 1200)
    args = ["stream", "--data", str(f), "--color-column", "sex", "--colors", "female", "male", "--window", "600",
            "--coreset-size", "40", "--lower", "0.5", "0.5", "--upper", "0.5", "0.5", "--out", str(tmp_path / "a")]
    assert main(args) == 0
    recs = [json.loads(x) for x in (tmp_path / "a" / "queries.jsonl").read_text().splitlines()]
    assert all(r["status"] == "infeasible" for r in recs)  # 35 % female cannot be exactly 50 %
    assert "colour 0 ('female') has share" in recs[0]["message"]
    assert "status=infeasible" in capsys.readouterr().out
    args = [a if a != str(tmp_path / "a") else str(tmp_path / "b") for a in args]
    assert main([*args, "--relaxed", "0.5", "--evaluate"]) == 0
    recs = [json.loads(x) for x in (tmp_path / "b" / "queries.jsonl").read_text().splitlines()]
    assert all(r["status"] == "optimal" for r in recs)
    assert all(r["window_eval"]["status"] == "infeasible" for r in recs)  # the exact bounds, on the true window


def test_compare_table(tmp_path, capsys):
    from iclr25.sw_fair_clustering.cli import main

    f = _csv(tmp_path, 1500)
    assert main(["compare", "--data", str(f), "--color-column", "sex", "--window", "600", "--coreset-size", "40",
                 "--n-queries", "2", "--n-center-sets", "2", "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith("compare: mean cost ratio vs offline")
    res = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert set(res["summary"]) == {"offline", "sw", "uniform", "stratified", "insertion"}
    assert res["solver_status"]["sw/fit"]["optimal"] == 2
    assert (tmp_path / "c" / "compare.md").read_text().count("| sw |") == 2


def test_empty_colour_value_is_named_not_a_new_colour(tmp_path):
    """A row whose protected attribute is missing stops the run naming the line (trial s52: it became colour '')."""
    f = tmp_path / "s.csv"
    rows = ["x,y,g"] + [f"{i},{i % 7},{'ab'[i % 2]}" for i in range(60)]
    rows[12] = "11,4,"
    f.write_text("\n".join(rows) + "\n")
    p = run("stream", "--data", str(f), "--color-column", "g", "--window", "20", "--coreset-size", "5",
            "--out", str(tmp_path / "o"), check=False)
    assert p.returncode == 2 and "s.csv:13: colour column 'g' is empty" in p.stderr
    assert "Traceback" not in p.stderr


def test_stream_resume_with_evaluate_matches_an_uninterrupted_run(tmp_path, monkeypatch):
    """--resume --evaluate refills the exact window up to the checkpoint (trial s52: it refilled it from the end
    of the first chunk, so the first queries after the resume had a wrong window_eval), and results.json counts
    the statuses of every query, not only those after the resume."""
    from iclr25.sw_fair_clustering import commands
    from iclr25.sw_fair_clustering.cli import main

    f = _csv(tmp_path)
    base = ["stream", "--data", str(f), "--color-column", "sex", "--window", "600", "--coreset-size", "40",
            "--quiet", "--evaluate"]
    assert main([*base, "--out", str(tmp_path / "full")]) == 0
    calls = {"n": 0}
    orig = commands._query_record

    def boom(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return orig(*a, **k)

    monkeypatch.setattr(commands, "_query_record", boom)
    assert main([*base, "--out", str(tmp_path / "cut")]) == 130
    monkeypatch.setattr(commands, "_query_record", orig)
    assert main([*base, "--out", str(tmp_path / "cut"), "--resume"]) == 0

    def load(d):
        recs = [json.loads(x) for x in (tmp_path / d / "queries.jsonl").read_text().splitlines()]
        for r in recs:
            r.pop("seconds")
        return recs

    full, cut = load("full"), load("cut")
    assert len(full) == len(cut) == 16
    for a, b in zip(full, cut):
        assert a["window_eval"]["fair_cost"] == pytest.approx(b["window_eval"]["fair_cost"], rel=1e-9), a["t"]
        assert a["window_eval"]["color_weight_error"] == pytest.approx(b["window_eval"]["color_weight_error"],
                                                                       abs=1e-12)
    res = json.loads((tmp_path / "cut" / "results.json").read_text())
    assert res["queries"] == 16 and sum(res["statuses"].values()) == 16


def test_csv_with_byte_order_mark_and_non_utf8_text(tmp_path):
    """Trial s52: a spreadsheet's UTF-8 byte-order mark made the first header name '\\ufeffx' (so --features x
    failed), and a Latin-1 file stopped with a bare codec message naming no file."""
    from iclr25.sw_fair_clustering.data import load_csv

    body = "".join(f"{i},{i % 7},{'ab'[i % 2]}\n" for i in range(60))
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + ("x,y,g\n" + body).encode())
    sd = load_csv(tmp_path / "bom.csv", features=["x", "y"], color_column="g")
    assert len(sd) == 60 and sd.feature_names == ["x", "y"]
    big = "".join(f"{i},{i % 7},{'ab'[i % 2]}\n" for i in range(3000))  # > the 8 KB the header check decodes
    late = "x,y,g\n" + big + "3,4,b\u00e4r\n"
    (tmp_path / "latin1.csv").write_bytes(late.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.csv: not UTF-8 text"):
        load_csv(tmp_path / "latin1.csv", color_column="g")
    (tmp_path / "early.csv").write_bytes(("x,y,g\n1,2,\u00e4\n" + body).encode("latin-1"))
    p = run("stream", "--data", str(tmp_path / "early.csv"), "--color-column", "g", "--window", "20",
            "--coreset-size", "5", "--out", str(tmp_path / "o"), check=False)
    assert p.returncode == 2 and "early.csv: not UTF-8 text" in p.stderr and "Traceback" not in p.stderr


def test_compare_bad_input_leaves_no_output_folder(tmp_path):
    """Trial s52: compare created --out before reading the data (stream already checked first)."""
    p = run("compare", "--data", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "o"), check=False)
    assert p.returncode == 2 and "does not exist" in p.stderr
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- follow-up (session 52): silent empty results

def test_stream_window_longer_than_the_stream_is_an_error(tmp_path, capsys):
    """--window 5000 on a 100-point stream ran 0 queries with exit 0 and no warning."""
    from iclr25.sw_fair_clustering.cli import main

    f = _csv(tmp_path, n=100)
    code = main(["stream", "--data", str(f), "--color-column", "sex", "--window", "5000", "--coreset-size", "5",
                 "--quiet", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "--window 5000" in err and "100 points" in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_header_only_csv_says_no_data_rows(tmp_path, capsys):
    """A header line and nothing else was reported as 'the file has no header line' (auto-detection needs
    a data line to compare with)."""
    from iclr25.sw_fair_clustering.cli import main
    from iclr25.sw_fair_clustering.data import load_csv

    f = tmp_path / "h.csv"
    f.write_text("a,b,sex\n")
    code = main(["stream", "--data", str(f), "--color-column", "sex", "--window", "20", "--coreset-size", "5",
                 "--quiet", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "no data rows" in err and "no header line" not in err, err
    with pytest.raises(ValueError, match="no data rows"):
        load_csv(f, color_column=2)  # by index too: the line of names is not a data row
    one = tmp_path / "one.csv"
    one.write_text("1.5,2.5,m\n")  # one data row without a header is still read as data
    assert len(load_csv(one, color_column=2, standardize_features=False)) == 1


def test_wrong_delimiter_says_one_column_and_names_the_delimiter(tmp_path, capsys):
    """--delimiter ';' on a comma file: 'the file has no header line' sent the user to the wrong fix."""
    from iclr25.sw_fair_clustering.cli import main

    f = _csv(tmp_path, n=100)
    code = main(["stream", "--data", str(f), "--delimiter", ";", "--color-column", "sex", "--window", "20",
                 "--coreset-size", "5", "--quiet", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "one column" in err and "--delimiter ','" in err and "no header line" not in err, err
