"""The shared CLI conventions: CommonOptions, reproduce_command, threads, JSONL, progress, run info."""

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from iclr25.core.config import (
    Command,
    CommonOptions,
    ConfigError,
    ReproduceOptions,
    SeedOption,
    SeedsOption,
    reproduce_command,
    run_cli,
    validate_device,
)
from iclr25.core.jsonl import JsonlError, append_jsonl, iter_jsonl, read_jsonl, write_jsonl
from iclr25.core.results import Claim, read_report
from iclr25.core.runinfo import cpu_seconds, git_commit, run_info, to_jsonable, write_run_files
from iclr25.core.threads import THREAD_ENV_VARS, limited_threads, set_threads


@dataclass(kw_only=True)
class TrainCfg(CommonOptions, SeedOption):
    """Train something."""

    data: Path
    lr: float = 0.1


@dataclass(kw_only=True)
class SweepCfg(CommonOptions, SeedsOption):
    """Sweep."""


def _capture(monkeypatch):
    seen = {}

    def run(cfg):
        seen["cfg"] = cfg
        return 0

    return seen, run


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch):
    for v in (*THREAD_ENV_VARS, "ICLR25_QUIET"):
        monkeypatch.delenv(v, raising=False)
    yield


def test_common_options_fill_out_and_validate(monkeypatch, tmp_path, capsys):
    seen, run = _capture(monkeypatch)
    cmds = {"train": Command(TrainCfg, run, "train"), "sweep": Command(SweepCfg, run, "sweep")}
    assert run_cli("iclr25-demo", "demo", cmds, ["train", "--data", "x.npz"]) == 0
    cfg = seen["cfg"]
    assert cfg.out == Path("runs/demo/train") and cfg.device == "auto" and cfg.seed == 0 and cfg.lr == 0.1
    assert run_cli("iclr25-demo", "demo", cmds, ["sweep", "--seeds", "0", "1", "2", "--out", str(tmp_path)]) == 0
    assert seen["cfg"].seeds == (0, 1, 2) and seen["cfg"].out == tmp_path
    assert run_cli("iclr25-demo", "demo", cmds, ["train", "--data", "x", "--device", "gpu"]) == 2
    assert "device='gpu' is not valid" in capsys.readouterr().err
    assert run_cli("iclr25-demo", "demo", cmds, ["train", "--data", "x", "--seed", "-1"]) == 2
    assert run_cli("iclr25-demo", "demo", cmds, ["sweep", "--threads", "0"]) == 2
    assert "threads=0" in capsys.readouterr().err


def test_threads_and_quiet_are_applied(monkeypatch):
    seen, run = _capture(monkeypatch)
    cmds = {"train": Command(TrainCfg, run, "train")}
    assert run_cli("iclr25-demo", "demo", cmds, ["train", "--data", "x", "--threads", "1", "--quiet"]) == 0
    assert os.environ["OMP_NUM_THREADS"] == "1" and os.environ["ICLR25_QUIET"] == "1"
    assert logging.getLogger().level == logging.WARNING
    logging.getLogger().setLevel(logging.INFO)


def test_version_and_deprecated_flags(monkeypatch, capsys):
    seen, run = _capture(monkeypatch)
    cmds = {"train": Command(TrainCfg, run, "train", deprecated={"--output-dir": "--out"})}
    assert run_cli("iclr25-demo", "demo", cmds, ["--version"], version="1.2.3") == 0
    assert capsys.readouterr().out.strip() == "iclr25-demo 1.2.3"
    with pytest.warns(FutureWarning, match="use --out"):
        assert run_cli("iclr25-demo", "demo", cmds, ["train", "--data", "x", "--output-dir=o"]) == 0
    assert seen["cfg"].out == Path("o")
    with pytest.warns(FutureWarning):
        assert run_cli("iclr25-demo", "demo", cmds, ["train", "--data", "x", "--output-dir", "p"]) == 0
    assert seen["cfg"].out == Path("p")


@pytest.mark.parametrize("dev", ["auto", "cpu", "cuda", "cuda:1", "mps"])
def test_validate_device_accepts(dev):
    assert validate_device(dev) == dev


@pytest.mark.parametrize("dev", ["", "gpu", "cuda:", "CPU", "cuda:x"])
def test_validate_device_rejects(dev):
    with pytest.raises(ConfigError):
        validate_device(dev)


def _fake_reproduce(quick, out_dir, *, seeds=None, device="auto", data="a"):
    (Path(out_dir) / "called.json").write_text(json.dumps({"quick": quick, "seeds": seeds, "device": device,
                                                           "data": data}))
    return [Claim("x/y", "m", ours=1.0, baseline=0.5)]


def _fake_plain(quick, out_dir):
    return [Claim("x/y", "m", ours=0.0, threshold=1.0)]


@dataclass(kw_only=True)
class MyRepro(ReproduceOptions):
    """Reproduce with a data choice."""

    data: str = "a"


def test_reproduce_command(tmp_path, capsys):
    cmd = reproduce_command("demo", _fake_reproduce, "0.1.0", config=MyRepro)
    code = run_cli("iclr25-demo", "d", {"reproduce": cmd},
                   ["reproduce", "--quick", "--out", str(tmp_path), "--seeds", "3", "4", "--device", "cpu",
                    "--data", "b"])
    assert code == 0
    called = json.loads((tmp_path / "called.json").read_text())
    assert called == {"quick": True, "seeds": [3, 4], "device": "cpu", "data": "b"}
    rep = read_report(tmp_path)
    assert rep.seeds == [3, 4] and rep.device == "cpu" and rep.cpu_seconds is not None
    assert rep.env["python"] and "libraries" in rep.env
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("demo: 1/1 claims hold (quick,")


def test_reproduce_command_default_out_and_strictness(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cmd = reproduce_command("demo", _fake_plain, "0.1.0")
    assert run_cli("iclr25-demo", "d", {"reproduce": cmd}, ["reproduce", "--quick"]) == 0
    assert (tmp_path / "results" / "demo" / "results.json").is_file()
    assert run_cli("iclr25-demo", "d", {"reproduce": cmd}, ["reproduce", "--seeds", "1"]) == 2
    assert "does not take --seeds" in capsys.readouterr().err


def test_reproduce_command_lazy_target(tmp_path):
    cmd = reproduce_command("demo", "test_core_conventions_target:reproduce", "0.1.0")
    sys.path.insert(0, str(tmp_path))
    (tmp_path / "test_core_conventions_target.py").write_text(
        "from iclr25.core.results import Claim\n"
        "def reproduce(quick, out_dir):\n    return [Claim('a/b', 'm', ours=2.0, threshold=1.0)]\n")
    try:
        assert run_cli("iclr25-demo", "d", {"reproduce": cmd}, ["reproduce", "--out", str(tmp_path / "o")]) == 0
    finally:
        sys.path.remove(str(tmp_path))
    assert read_report(tmp_path / "o").claims[0].holds


def test_set_threads_and_restore():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    with limited_threads(1):
        assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
    assert torch.get_num_threads() == before and "OMP_NUM_THREADS" not in os.environ
    with pytest.raises(ValueError):
        set_threads(0)


def test_read_jsonl_names_the_line(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"prompt": "a", "response": "b"}\n\n{"prompt": "c"}\n')
    with pytest.raises(JsonlError, match=r"a.jsonl:3: missing field\(s\) \['response'\]"):
        read_jsonl(p, required=["prompt", "response"])
    p.write_text('{"prompt": "a"}\n{"prompt": "  "}\n')
    with pytest.raises(JsonlError, match=r":2: field 'prompt' is empty"):
        read_jsonl(p, nonempty=["prompt"])
    p.write_text('{"prompt": "a"}\n[1, 2]\n')
    with pytest.raises(JsonlError, match=r":2: expected a JSON object"):
        read_jsonl(p)
    p.write_text('{"prompt": "a"}\n{"prompt": \n{"x": 1}\n')
    with pytest.raises(JsonlError, match=r":2: invalid JSON"):
        read_jsonl(p, torn_tail="drop")  # not the last line: always an error
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "missing.jsonl")
    p.write_text('{"a": 1}\n\n{"a": 2}\n')
    assert [n for n, _ in iter_jsonl(p)] == [1, 3]


def test_jsonl_with_a_utf8_bom_is_read_not_a_malformed_line(tmp_path):
    """A file saved by Notepad / Excel starts with a UTF-8 BOM: line 1 was reported as invalid JSON."""
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + '{"prompt": "caf\u00e9", "id": 1}\r\n{"prompt": "b", "id": 2}\r\n'.encode())
    assert read_jsonl(p, required=["prompt"]) == [{"prompt": "caf\u00e9", "id": 1}, {"prompt": "b", "id": 2}]
    assert [n for n, _ in iter_jsonl(p)] == [1, 2]
    # only a leading BOM is one: a BOM inside the file is still an error at its line
    p.write_bytes(b'{"id": 1}\n\xef\xbb\xbf{"id": 2}\n')
    with pytest.raises(JsonlError, match=r"bom\.jsonl:2: invalid JSON"):
        read_jsonl(p)


def test_torn_tail_is_dropped_and_append_starts_a_new_line(tmp_path, caplog):
    p = tmp_path / "cache.jsonl"
    append_jsonl(p, [{"id": 1}, {"id": 2}])
    with open(p, "a") as fh:
        fh.write('{"id": 3, "resp')  # a crash mid-write
    with pytest.raises(JsonlError):
        read_jsonl(p)
    with caplog.at_level(logging.WARNING):
        assert [r["id"] for r in read_jsonl(p, torn_tail="drop")] == [1, 2]
    assert "torn last line" in caplog.text
    append_jsonl(p, [{"id": 3}])
    # the torn bytes stay as their own (invalid) line, never merged into the new record
    lines = p.read_text().splitlines()
    assert lines[-1] == '{"id":3}' and lines[-2].startswith('{"id": 3, "resp')
    with pytest.raises(ValueError):
        append_jsonl(p, [{"x": float("nan")}])
    assert write_jsonl(tmp_path / "w.jsonl", [{"a": 1}]) == 1
    assert read_jsonl(tmp_path / "w.jsonl") == [{"a": 1}]


def test_progress_is_sparse_off_a_terminal():
    code = ("import sys; from iclr25.core.progress import progress\n"
            "b = progress(range(3), desc='x'); print(getattr(b, 'mininterval', None), b.disable)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ICLR25_QUIET": "0"}).stdout.split()
    assert out == ["60.0", "False"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ICLR25_QUIET": "1"}).stdout.split()
    assert out[1] == "True"


def test_run_info_and_files(tmp_path):
    info = run_info()
    assert info["python"] and info["cpu_count"] >= 1
    assert "torch" not in sys.modules or "torch_threads" in info
    assert git_commit(tmp_path) is None
    assert cpu_seconds() > 0
    assert to_jsonable({"a": (1, 2), "p": Path("x"), "n": float("nan")}) == {"a": [1, 2], "p": "x", "n": None}
    out = write_run_files(tmp_path / "run", config=TrainCfg(data=Path("d")), results={"acc": 0.5}, started=0.0)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["data"] == "d" and cfg["device"] == "auto"
    res = json.loads((out / "results.json").read_text())
    assert res["acc"] == 0.5 and "python" in res["run"]


def test_umbrella_passes_device_only_where_accepted(tmp_path, monkeypatch, caplog):
    from iclr25.core import registry

    rep = registry.run_reproduction("p", _fake_plain, quick=True, out_dir=tmp_path / "p", device="cuda")
    assert rep.device == "default"
    rep = registry.run_reproduction("r", _fake_reproduce, quick=True, out_dir=tmp_path / "r", device="cpu")
    assert rep.device == "cpu"
    with pytest.raises(ValueError, match="does not take --device"):
        registry.run_reproduction("p", _fake_plain, quick=True, out_dir=tmp_path / "p", device="cuda", strict=True)


@dataclass(kw_only=True)
class _NeedsModel(CommonOptions):
    """Needs a model."""

    model: str
    lr: float = 0.1


def test_config_file_may_leave_required_fields_to_flags(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("lr: 0.5\n")
    seen = {}
    cmds = {"train": Command(_NeedsModel, lambda c: seen.setdefault("c", c) and 0, "t")}
    assert run_cli("iclr25-demo", "d", cmds, ["train", "--config", str(cfg), "--model", "m"]) == 0
    assert seen["c"].model == "m" and seen["c"].lr == 0.5
    assert run_cli("iclr25-demo", "d", cmds, ["train", "--config", str(cfg)]) == 2  # still required, cleanly
    cfg.write_text("lr: 0.5\nbogus: 1\n")
    assert run_cli("iclr25-demo", "d", cmds, ["train", "--config", str(cfg), "--model", "m"]) == 2
    assert "unknown key(s) ['bogus']" in capsys.readouterr().err


def test_progress_postfix_does_not_force_lines_off_a_terminal():
    """set_postfix(...) per step must not print a line per call into a log file (vbon's trainer did)."""
    code = ("from iclr25.core.progress import progress\n"
            "b = progress(total=200, desc='x')\n"
            "for i in range(200):\n"
            "    b.update(); b.set_postfix(loss=f'{i:.3f}'); b.set_postfix_str(str(i))\n"
            "b.close()\n")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ICLR25_QUIET": "0", "ICLR25_PROGRESS": "auto"}).stderr
    assert err.count("\r") + err.count("\n") <= 4, err[:500]  # start, maybe one refresh, close


def test_repeated_seeds_are_refused(tmp_path, capsys):
    """A repeated seed would make a paired seed spread 0 (and every positive gain 'hold')."""
    cmd = reproduce_command("demo", _fake_reproduce, "0.1.0")
    rc = run_cli("iclr25-demo", "d", {"reproduce": cmd},
                 ["reproduce", "--quick", "--out", str(tmp_path), "--seeds", "3", "4", "3"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "repeats [3]" in err and "distinct seeds" in err
    assert not (tmp_path / "called.json").exists()


def test_changed_settings_names_each_change():
    from iclr25.core.config import changed_settings

    assert changed_settings({"lr": 0.1, "steps": 4}, {"lr": 0.1, "steps": 4}) == ""
    assert changed_settings({"lr": 0.1, "steps": 4}, {"lr": 0.5, "steps": 6}) == "lr: 0.1 -> 0.5, steps: 4 -> 6"
    assert changed_settings({}, {"seed": 1}) == "seed: None -> 1"  # missing from the saved record: changed
    assert changed_settings({"device": "cpu"}, {"device": "cuda"}, ignore=("device",)) == ""


def test_guard_resume_settings(tmp_path, caplog):
    from iclr25.core.config import guard_resume_settings

    out = tmp_path / "run"
    s = {"lr": 0.003, "beta": 0.5, "epochs": 2, "data": "a.jsonl"}
    guard_resume_settings(out, s, resume=False)  # fresh run: written
    assert json.loads((out / "run_settings.json").read_text()) == s
    guard_resume_settings(out, s, resume=True)  # same settings: fine
    guard_resume_settings(out, {**s, "epochs": 4}, resume=True, ignore=("epochs",))  # may grow
    with pytest.raises(ValueError, match=r"beta: 0.5 -> 0.25.*start a new --out"):
        guard_resume_settings(out, {**s, "beta": 0.25}, resume=True)
    with pytest.raises(ValueError, match=r"extra: None -> 1"):  # a key on one side only counts
        guard_resume_settings(out, {**s, "extra": 1}, resume=True)
    with pytest.raises(ValueError, match=r"data: 'a.jsonl' -> None"):
        guard_resume_settings(out, {k: v for k, v in s.items() if k != "data"}, resume=True)
    guard_resume_settings(tmp_path / "rank1", s, resume=False, write=False)
    assert not (tmp_path / "rank1").exists()
    with caplog.at_level("WARNING"):
        guard_resume_settings(tmp_path / "old", s, resume=True, missing="cannot check X")
    assert "cannot check X" in caplog.text
    (out / "run_settings.json").write_text("[1, 2")
    with pytest.raises(ValueError, match="is damaged"):
        guard_resume_settings(out, s, resume=True)


def test_bar_and_log_lines_never_share_a_line_off_a_terminal():
    """In a log file, a bar line, a nested bar and a log line each get a line of their own: no carriage
    return clearing, no cursor-up escape (the umbrella's log had `reproduce: 33%|... WARNING iclr25: ...`)."""
    code = ("import logging\n"
            "from iclr25.core.progress import progress, setup_logging\n"
            "setup_logging(logging.INFO)\n"
            "outer = progress(range(2), desc='outer', mininterval=0, miniters=1)\n"
            "for i in outer:\n"
            "    outer.set_postfix_str(str(i))\n"
            "    logging.getLogger('iclr25').warning('log line %d', i)\n"
            "    inner = progress(total=2, desc='inner', mininterval=0, miniters=1)\n"
            "    inner.update(); logging.getLogger('iclr25').info('inside %d', i); inner.update(); inner.close()\n"
            "outer.close()\n")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ICLR25_QUIET": "0", "ICLR25_PROGRESS": "auto"}).stderr
    assert "\r" not in err and "\x1b" not in err, repr(err[:800])
    lines = err.splitlines()
    for msg in ("WARNING iclr25: log line 0", "WARNING iclr25: log line 1", "INFO iclr25: inside 0"):
        assert msg in lines, repr(err[:800])
    assert all(ln.strip() for ln in lines) and any(ln.startswith("inner:") for ln in lines), repr(err[:800])


def test_help_into_a_closed_pipe_is_quiet_exit_141():
    """``prog --help | head``: the reader closes the pipe early; no BrokenPipeError traceback."""
    code = ("import sys, time\nfrom iclr25.core.config import run_cli\ntime.sleep(0.3)\n"
            "sys.exit(run_cli('prog', 'd' * 200000, {}, ['--help']))\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()                                   # the reader is gone before the help is printed
    err = p.stderr.read().decode()
    p.wait(60)
    assert p.returncode == 141 and "Traceback" not in err and "BrokenPipe" not in err, (p.returncode, err)


def test_expand_presets_names_files_and_errors(tmp_path, monkeypatch, capsys):
    """``run_cli(presets=...)``: a preset name loads the packaged file, an existing file of that name wins, and a
    value that is neither lists the presets (exit 2, one line)."""
    from iclr25.core.config import Command, expand_presets, run_cli

    packaged = tmp_path / "pkg"
    packaged.mkdir()
    (packaged / "small.yaml").write_text("x: 3\n")
    path_of = lambda n: packaged / f"{n}.yaml"  # noqa: E731
    assert expand_presets(["--config", "small", "--x", "1"], ["small"], path_of) == [
        "--config", str(packaged / "small.yaml"), "--x", "1"]
    assert expand_presets(["--config=small"], ["small"], path_of) == [f"--config={packaged / 'small.yaml'}"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small").write_text("x: 4\n")                       # a file here named like the preset wins
    assert expand_presets(["--config", "small"], ["small"], path_of) == ["--config", "small"]

    @dataclass
    class Cfg:
        x: int = 0

    seen = {}
    cmds = {"go": Command(Cfg, lambda c: seen.update(x=c.x) or 0)}
    assert run_cli("prog", "d", cmds, ["go", "--config", str(packaged / "small.yaml")], presets=(["small"], path_of)) == 0
    assert seen["x"] == 3
    assert run_cli("prog", "d", cmds, ["go", "--config", "smal"], presets=(["small", "big"], path_of)) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("prog go: error: --config smal: no such file, and not a packaged preset (the presets are small, "
                   "big); give a preset name or a YAML/JSON file"), err


def test_a_flag_value_refused_by_post_init_is_one_line(capsys):
    """``--k 0`` refused in ``__post_init__`` was tyro's several-line box; it is one line, exit 2."""
    from iclr25.core.config import Command, run_cli

    @dataclass
    class Cfg:
        k: int = 1

        def __post_init__(self):
            if self.k < 1:
                raise ValueError(f"--k must be >= 1, got {self.k}")

    assert run_cli("prog", "d", {"go": Command(Cfg, lambda c: 0)}, ["go", "--k", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "prog go: error: --k must be >= 1, got 0", err
