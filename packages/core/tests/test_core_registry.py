import sys
import types
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from iclr25.core import registry
from iclr25.core.results import Claim, read_report


def _fake_module(name, fn):
    mod = types.ModuleType(name)
    mod.reproduce = fn
    sys.modules[name] = mod
    return EntryPoint(name=name.split("_")[-1], value=f"{name}:reproduce", group=registry.GROUP)


@pytest.fixture
def fake_methods(monkeypatch):
    def good(quick, out_dir):
        assert isinstance(out_dir, Path) and out_dir.is_dir()
        return [Claim("g/holds", "m", ours=1.0, threshold=0.5), Claim("g/fails", "m", ours=0.0, threshold=0.5)]

    def bad(quick, out_dir):
        raise RuntimeError("boom")

    eps = [_fake_module("fake_good", good), _fake_module("fake_bad", bad)]
    monkeypatch.setattr(registry, "entry_points", lambda group: [e for e in eps if group == registry.GROUP])
    yield
    sys.modules.pop("fake_good", None)
    sys.modules.pop("fake_bad", None)


def test_discover_and_list(fake_methods, capsys):
    found = registry.discover()
    assert list(found) == ["bad", "good"]
    assert registry.main(["list"]) == 0
    assert "good" in capsys.readouterr().out


def test_reproduce_writes_results_and_claims_do_not_fail(fake_methods, tmp_path, capsys):
    assert registry.main(["reproduce", "--quick", "--quiet", "--out", str(tmp_path), "good"]) == 0
    out = capsys.readouterr().out
    assert "g/holds" in out and "1/2 claims hold" in out
    rep = read_report(tmp_path / "good")
    assert rep.quick and [c.holds for c in rep.claims] == [True, False]
    assert (tmp_path / "good" / "results.md").is_file()


def test_reproduce_exits_nonzero_on_crash_but_runs_the_rest(fake_methods, tmp_path, capsys):
    assert registry.main(["reproduce", "--quiet", "--out", str(tmp_path)]) == 1
    io = capsys.readouterr()
    assert "CRASHED: bad" in io.out and "boom" in io.err
    assert (tmp_path / "good" / "results.json").is_file()
    import json

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(m["method"], m["status"]) for m in summary["methods"]] == [("bad", "crashed"), ("good", "ok")]
    assert summary["claims"] == 2 and summary["holding"] == 1 and summary["total_cpu_seconds"] >= 0
    assert "| bad | crashed |" in (tmp_path / "summary.md").read_text()
    assert "CPU: " in io.out and "per method: bad " in io.out


def test_unknown_slug(fake_methods, tmp_path, capsys):
    assert registry.main(["reproduce", "--out", str(tmp_path), "nope"]) == 2
    assert "unknown method" in capsys.readouterr().err


def test_run_reproduction_rejects_non_claims(tmp_path):
    with pytest.raises(TypeError, match="Claim"):
        registry.run_reproduction("x", lambda q, o: [1.0], quick=True, out_dir=tmp_path)


def test_terminal_table_fits_100_columns_and_keeps_verdicts():
    from iclr25.core.registry import terminal_table

    long = "mechanism/" + "a_very_long_claim_identifier_" * 4
    rows = [("sw-fair-clustering", Claim(long, "metric " * 30, 0.123456, baseline=0.1, note="n " * 200)),
            ("agpd", Claim("clean/no_target_class", "m", 1e-7, threshold=0.5, higher_is_better=False))]
    text = terminal_table(rows)
    assert max(len(x) for x in text.splitlines()) <= 100
    lines = text.splitlines()[2:]
    assert lines[0].endswith("yes") and lines[1].endswith("yes") and "…" in lines[0]
    assert "n n n" not in text  # notes go to results.md / the page


def test_umbrella_passes_workers_resume_and_knows_its_version(capsys):
    from iclr25.core.registry import _pass_through, build_parser

    def with_workers(quick, out_dir, workers=1, resume=False, quiet=False):
        return []

    def with_jobs(quick, out_dir, jobs=1):
        return []

    passed = {"workers": 3, "resume": True, "quiet": None}
    assert _pass_through("a", with_workers, passed) == {"workers": 3, "resume": True}
    assert _pass_through("b", with_jobs, passed) == {"jobs": 3}  # resume not taken: logged, left out
    args = build_parser().parse_args(["reproduce", "--workers", "2", "--resume", "x"])
    assert args.workers == 2 and args.resume and args.slugs == ["x"]
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("iclr25-core ")
    from iclr25.core.registry import main

    assert main(["reproduce", "--workers", "0", "nothing"]) == 2


def test_third_party_loggers_quiet_and_log_lines_go_through_tqdm(capsys):
    import logging

    from iclr25.core.progress import THIRD_PARTY_LOGGERS, _TqdmHandler, setup_logging

    setup_logging(logging.INFO)
    setup_logging(logging.INFO)  # idempotent: one handler
    root = logging.getLogger()
    assert sum(isinstance(h, _TqdmHandler) for h in root.handlers) == 1
    assert "httpx" in THIRD_PARTY_LOGGERS
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert logging.getLogger("iclr25.x").isEnabledFor(logging.INFO)
    logging.getLogger("httpx").info("HTTP Request: POST http://127.0.0.1/v1/chat/completions")
    logging.getLogger("iclr25.x").info("a line of ours")
    err = capsys.readouterr().err
    assert "HTTP Request" not in err and "INFO iclr25.x: a line of ours" in err


def test_umbrella_resume_keeps_a_finished_method_with_the_same_settings(monkeypatch, tmp_path, capsys):
    """`iclr25 reproduce --resume` after a kill must not re-run a method whose results.json was already
    written with the same settings (ridge-bias ran again from scratch); other settings do re-run it."""
    calls = []

    def once(quick, out_dir):
        calls.append(quick)
        return [Claim("g/holds", "m", ours=1.0, threshold=0.5)]

    eps = [_fake_module("fake_once", once)]
    monkeypatch.setattr(registry, "entry_points", lambda group: [e for e in eps if group == registry.GROUP])
    try:
        out = ["--quiet", "--out", str(tmp_path), "once"]
        assert registry.main(["reproduce", "--quick", *out]) == 0 and calls == [True]
        first = (tmp_path / "once" / "results.json").read_text()
        capsys.readouterr()
        assert registry.main(["reproduce", "--quick", "--resume", *out]) == 0 and calls == [True]
        io = capsys.readouterr()
        assert "1/1 claims hold" in io.out and "g/holds" in io.out and "already finished" in io.err
        # its CPU seconds are the earlier run's, not part of this run's total: the CPU line says so
        assert "per method: once " in io.out and "(earlier run)" in io.out
        assert "| once | ok (earlier run) |" in (tmp_path / "summary.md").read_text()
        assert (tmp_path / "once" / "results.json").read_text() == first
        assert registry.main(["reproduce", "--resume", *out]) == 0 and calls == [True, False]  # full: re-run
        assert registry.main(["reproduce", "--quick", *out]) == 0 and calls == [True, False, True]  # no --resume
    finally:
        sys.modules.pop("fake_once", None)


def test_umbrella_bad_threads_or_out_is_one_line_and_exit_2(fake_methods, tmp_path, capsys):
    """--threads 0 was a ValueError traceback (exit 1); --out naming a file ran every method, then died
    on a FileExistsError traceback when writing the summary."""
    calls = []
    monkeypatch_fn = registry.run_reproduction
    try:
        registry.run_reproduction = lambda *a, **k: calls.append(a) or monkeypatch_fn(*a, **k)
        assert registry.main(["reproduce", "--quiet", "--threads", "0", "--out", str(tmp_path), "good"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and "--threads" in err and len(err.strip().splitlines()) == 1
        f = tmp_path / "afile"
        f.write_text("x")
        assert registry.main(["reproduce", "--quiet", "--out", str(f), "good"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and "not a folder" in err and len(err.strip().splitlines()) == 1
        assert calls == []  # refused before running anything
    finally:
        registry.run_reproduction = monkeypatch_fn


def test_umbrella_interrupt_is_one_line_and_exit_130(monkeypatch, tmp_path, capsys):
    """Ctrl-C / SIGTERM during `iclr25 reproduce` was a traceback ending in RunInterrupted, exit 1."""
    from iclr25.core.runner import RunInterrupted

    def stopped(quick, out_dir):
        raise RunInterrupted("1/2 jobs finished, their records kept under X; rerun with --resume to run the 1 left")

    eps = [_fake_module("fake_stopped", stopped)]
    monkeypatch.setattr(registry, "entry_points", lambda group: [e for e in eps if group == registry.GROUP])
    try:
        assert registry.main(["reproduce", "--quick", "--quiet", "--out", str(tmp_path), "stopped"]) == 130
    finally:
        sys.modules.pop("fake_stopped", None)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["iclr25 reproduce: interrupted (1/2 jobs finished, their records kept under X; rerun with "
                   "--resume to run the 1 left)"], err
