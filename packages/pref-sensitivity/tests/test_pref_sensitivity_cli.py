"""CLI tests: the console script as a subprocess (--help, a tiny analyze run, bad input)."""

import json
import shutil
import subprocess
import sys

import pytest

from iclr25.pref_sensitivity.cli import main


def _run(*args, cwd=None):
    exe = shutil.which("iclr25-pref-sensitivity")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "iclr25.pref_sensitivity", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)


def test_help_lists_subcommands():
    r = _run("--help")
    assert r.returncode == 0
    for sub in ("analyze", "reproduce", "table", "area", "heatmap", "demo", "dpo"):
        assert sub in r.stdout


def test_analyze_subprocess_writes_report_and_png(tmp_path):
    f = tmp_path / "prefs.csv"
    f.write_text("winner,loser,count\ndog,cat,99\ncat,dog,1\ncat,bird,2\nbird,cat,98\nfish,bird,50\nbird,fish,50\n")
    out = tmp_path / "out"
    r = _run("analyze", "--input", str(f), "--out", str(out), "--lam", "2")
    assert r.returncode == 0, r.stderr
    assert "sensitive at lambda=2" in r.stdout.splitlines()[-1]
    rep = json.loads((out / "sensitivity_report.json").read_text())
    assert rep["n_items"] == 4 and rep["n_evaluated"] == 12
    assert rep["n_sensitive"] >= 1
    assert (out / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(json.loads((out / "scores.json").read_text())) == {"dog", "cat", "bird", "fish"}


def test_analyze_bad_input_exit_code_and_message(tmp_path, capsys):
    f = tmp_path / "p.csv"
    f.write_text("item_i,item_j,p\na,b,0.9\nb,a,0.3\nb,c,0.5\n")
    assert main(["analyze", "--input", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "error" in err and "line 3" in err and "Traceback" not in err
    assert main(["analyze", "--input", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "o")]) == 2


def test_table_area_heatmap_in_process(tmp_path, capsys):
    assert main(["table", "--p-ik", "0.01", "--p-kj", "0.99"]) == 0
    assert "25.2525" in capsys.readouterr().out
    assert main(["area", "--lam", "1"]) == 0
    assert "0.346574" in capsys.readouterr().out
    assert main(["heatmap", "--out", str(tmp_path / "h.png")]) == 0
    assert (tmp_path / "h.png").stat().st_size > 1000
    assert main(["table", "--p-ik", "1.5"]) == 2


def test_analyze_probability_table_and_k3(tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text('{"item_i": "a", "item_j": "b", "p": 0.99}\n{"item_i": "b", "item_j": "c", "p": 0.01}\n'
                 '{"item_i": "a", "item_j": "c", "p": 0.6}\n')
    assert main(["analyze", "--input", str(f), "--out", str(tmp_path / "o"), "--no-plot"]) == 0
    rep = json.loads((tmp_path / "o" / "sensitivity_report.json").read_text())
    assert rep["source"] == "matrix" and rep["max_bt_violation"] == pytest.approx(0.405465, abs=1e-4)
    s = tmp_path / "s.csv"
    s.write_text("item,score\n" + "".join(f"x{t},{t * 0.7}\n" for t in range(6)))
    assert main(["analyze", "--input", str(s), "--out", str(tmp_path / "o3"), "--k", "3", "--no-plot"]) == 0
    assert json.loads((tmp_path / "o3" / "sensitivity_report.json").read_text())["k"] == 3
    assert main(["analyze", "--input", str(f), "--out", str(tmp_path / "o4"), "--k", "3"]) == 2


def test_dpo_command_tabular_and_resume(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "dpo"
    args = ["dpo", "--backend", "tabular", "--p23", "0.01", "0.5", "--n-pairs", "200", "--out", str(out), "--quiet"]
    assert main(args) == 0
    lines = (out / "sweep.jsonl").read_text().splitlines()
    assert len(lines) == 2 and (out / "sweep.png").is_file() and (out / "config.json").is_file()
    assert "0.5000" in capsys.readouterr().out  # p23 = 0.01 with p12 = 0.99: implied p13 = g = 0.5
    assert main([*args, "--resume"]) == 0
    assert len((out / "sweep.jsonl").read_text().splitlines()) == 2  # nothing re-run
    assert main(["dpo", "--backend", "hf", "--out", str(out)]) == 2  # no --model: clear error


def test_dpo_command_resume_with_another_beta_is_refused_and_keeps_config(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "dpo"
    args = ["dpo", "--backend", "tabular", "--p23", "0.01", "--n-pairs", "100", "--out", str(out), "--quiet"]
    assert main(args) == 0
    assert main([*args, "--beta", "0.2", "--resume"]) == 2
    assert "beta" in capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["beta"] == 0.1  # still the run's own settings
