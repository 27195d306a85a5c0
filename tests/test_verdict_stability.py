"""``scripts/verdict_stability.py`` on a fake package CLI (no real package is run here)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap

from iclr25_repo_packages import ROOT

_spec = importlib.util.spec_from_file_location("verdict_stability", ROOT / "scripts" / "verdict_stability.py")
vs = importlib.util.module_from_spec(_spec)
sys.modules["verdict_stability"] = vs
_spec.loader.exec_module(vs)

#: a stand-in for ``iclr25-<slug>``: ``reproduce --quick --out OUT``; the n-th run (counted in a file beside
#: it) measures ``ours`` = 0.5 + n/10 against a baseline of 0.65, so runs 1 and 2 disagree on ``a/x``; it
#: refuses a cache that is not empty (a warm cache) and records the cache folder it was given
FAKE = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path
    from iclr25.core.results import Claim, Report, write_report

    here = Path(__file__).parent
    assert sys.argv[1:4] == ["reproduce", "--quick", "--out"], sys.argv
    out = Path(sys.argv[4])
    cache = Path(os.environ["ICLR25_CACHE"])
    if any(cache.iterdir()):
        sys.exit("warm cache")
    (cache / "base.bin").write_bytes(b"x")
    with open(here / "caches.txt", "a") as f:
        f.write(str(cache) + "\\n")
    n = len((here / "caches.txt").read_text().splitlines())
    t = time.process_time()
    while time.process_time() - t < 0.05:
        pass
    flip = os.environ.get("FAKE_FLIP") == "1"
    ours = 0.5 + n / 10 if flip else 0.9
    claims = [Claim("a/x", "acc", ours, baseline=0.65, paper_ref="Table 1", n_seeds=1),
              Claim("b/y", "loss", 0.1, threshold=1.0, higher_is_better=False, paper_ref="Fig. 1", n_seeds=1)]
    write_report(Report("fake", "0.1.0", True, 0.1, claims, cpu_seconds=0.05), out)
''')


def _cmd(tmp_path):
    (tmp_path / "fake_cli.py").write_text(FAKE)
    return ["--command", sys.executable, str(tmp_path / "fake_cli.py")]


def test_agreeing_runs_exit_0_with_table(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FAKE_FLIP", raising=False)
    assert vs.main(["fake", *_cmd(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| claim | holds (run 1) | holds (run 2) | ours (run 1) | ours (run 2) | agree |" in out
    assert "| a/x | yes | yes | 0.9 | 0.9 | yes |" in out
    assert "verdicts agree" in out and "- run 1:" in out and "- run 2:" in out
    assert "results.json cpu_seconds 0.1" in out  # 0.05 as the run recorded it, printed with one decimal
    caches = (tmp_path / "caches.txt").read_text().split()
    assert len(caches) == 2 and caches[0] != caches[1]  # a fresh cache per run


def test_differing_verdicts_exit_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_FLIP", "1")
    assert vs.main(["fake", "--runs", "3", *_cmd(tmp_path)]) == 1
    out = capsys.readouterr().out
    # run 1: 0.6 < 0.65 (no); runs 2, 3: 0.7, 0.8 (yes)
    assert "| a/x | no | yes | yes | 0.6 | 0.7 | 0.8 | **NO** |" in out
    assert "| b/y | yes | yes | yes |" in out and "verdicts DIFFER" in out


def test_child_cpu_is_counted(tmp_path, monkeypatch):
    monkeypatch.delenv("FAKE_FLIP", raising=False)
    (tmp_path / "fake_cli.py").write_text(FAKE)
    (tmp_path / "w").mkdir()
    run = vs.run_once([sys.executable, str(tmp_path / "fake_cli.py")], tmp_path / "w", 1, 60)
    assert run.cpu_s >= 0.05 and run.report.method == "fake"


def test_failed_run_and_usage_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys; print('boom: no data'); sys.exit(3)")
    assert vs.main(["fake", "--command", sys.executable, str(bad)]) == 2
    err = capsys.readouterr().err
    assert "exited 3" in err and "boom: no data" in err
    assert vs.main(["fake", "--runs", "1", "--command", sys.executable, str(bad)]) == 2
    assert vs.main(["no-such-package-xyz"]) == 2
    assert "iclr25-no-such-package-xyz is not installed" in capsys.readouterr().err


def test_missing_claim_disagrees():
    from iclr25.core.results import Claim, Report

    a = Claim("a", "m", 1.0, threshold=0.0)
    r1 = vs.Run(Report("f", "0", True, 0.0, [a]), 0.0, 0.0)
    r2 = vs.Run(Report("f", "0", True, 0.0, []), 0.0, 0.0)
    table, agree = vs.stability_table([r1, r2])
    assert not agree and "| a | yes | — | 1 | — | **NO** |" in table
