"""One name per meaning across the command lines (issue #47 §9): the flag table of CONTRIBUTING.md.

For each console script (the 19 packages' and ``iclr25``), one fresh interpreter (a few in parallel)
imports the CLI with :func:`iclr25.core.config.run_cli` wrapped, so that it learns the subcommands and
their :class:`~iclr25.core.config.Command` (``deprecated`` aliases), then prints every subcommand's
``--help`` and parses the flags from it (the umbrella, an argparse CLI, prints each subparser's help).
Checks:

* a synonym in :data:`SYNONYMS` (``--jobs`` for ``--workers``, ...) is never a flag of its own; it may
  only be a deprecated alias (``Command(..., deprecated={"--jobs": "--workers"})``, which ``--help`` does
  not list);
* ``--quick`` only on ``reproduce``;
* ``reproduce`` has ``--workers`` and ``--resume`` (the core runner's, issue #48);
* every training subcommand has ``--seed`` or ``--seeds``: a subcommand is *training* when its name
  contains train/finetune/fit/sft/dpo/rlhf, or it has a learning-rate or epochs flag (``--lr``,
  ``--*-lr``, ``--lr-*``, ``--learning-rate``, ``--epochs``, ``--*-epochs``, ``--grad-accum``,
  ``--max-grad-norm``).

:data:`PENDING` lists today's violations per CLI; each must still be one (the dict only shrinks).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import pytest
from iclr25_repo_packages import ROOT, packages

#: synonym -> the one flag for that meaning
SYNONYMS = {
    "--jobs": "--workers", "--n-workers": "--workers", "--num-workers": "--workers", "--n-jobs": "--workers",
    "--nproc": "--workers", "--processes": "--workers",
    "--learning-rate": "--lr",
    "--save-every": "--checkpoint-every", "--save-steps": "--checkpoint-every", "--ckpt-every": "--checkpoint-every",
    "--checkpoint-interval": "--checkpoint-every", "--save-interval": "--checkpoint-every",
    "--output-dir": "--out", "--output": "--out", "--outdir": "--out", "--out-dir": "--out", "--output-path": "--out",
    "--json-out": "--out",
    "--random-seed": "--seed", "--rng-seed": "--seed",
    "--num-threads": "--threads", "--n-threads": "--threads",
    "--no-progress": "--quiet", "--silent": "--quiet",
    "--n-epochs": "--epochs", "--num-epochs": "--epochs",
    "--bs": "--batch-size",
    "--data-dir": "--data", "--data-path": "--data",
    "--restart": "--resume", "--continue": "--resume",
    "--smoke": "--quick", "--fast": "--quick",
    "--cfg": "--config", "--config-file": "--config",
}
TRAIN_NAME = re.compile(r"train|finetune|fit|sft|dpo|rlhf")
TRAIN_FLAG = re.compile(r"^--((.+-)?lr|lr-.+|learning-rate|(.+-)?epochs|grad-accum|max-grad-norm)$")

#: violations known today, per console script; each must still be one (this dict only shrinks)
PENDING: dict[str, set[str]] = {}

COLLECT = textwrap.dedent('''
    import argparse, contextlib, importlib, io, json, sys
    target = sys.argv[1]
    out = {"commands": {}}
    mod, _, attr = target.partition(":")
    if target == "iclr25.core.registry:main":
        parser = importlib.import_module(mod).build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for name, p in sub.choices.items():
            out["commands"][name] = {"help": p.format_help(), "deprecated": {}}
        print(json.dumps(out)); sys.exit(0)
    import iclr25.core.config as cc
    real, seen = cc.run_cli, {}
    def spy(prog, description, commands, argv=None, **kw):
        seen["commands"] = commands
        return real(prog, description, commands, argv, **kw)
    cc.run_cli = spy
    main = getattr(importlib.import_module(mod), attr)
    def help_of(argv):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            try:
                main(argv)
            except SystemExit:
                pass
        return buf.getvalue()
    help_of(["--help"])
    if "commands" not in seen:
        sys.exit(f"{target} does not dispatch through iclr25.core.config.run_cli")
    for name, cmd in seen["commands"].items():
        out["commands"][name] = {"help": help_of([name, "--help"]), "deprecated": dict(cmd.deprecated)}
    print(json.dumps(out))
''')


def flags_from_help(text: str) -> list[str]:
    """The flags of a tyro/argparse help text: the option column of each line that starts with a flag
    (inside tyro's boxes too); descriptions that mention a flag are not read."""
    found: list[str] = []
    for line in text.splitlines():
        s = line.strip().strip("│|").strip()
        if not (s.startswith("--") or s.startswith("-h, ")):
            continue
        for f in re.findall(r"--[A-Za-z0-9][\w.-]*", re.split(r"\s{2,}", s)[0]):
            if f not in found:
                found.append(f)
    return found


def _targets() -> list[tuple[str, str]]:
    out = [("iclr25", "iclr25.core.registry:main")]
    for p in packages():
        if p.slug == "core":
            continue
        scripts = tomllib.loads((p.path / "pyproject.toml").read_text())["project"].get("scripts", {})
        out.append((f"iclr25-{p.slug}", scripts[f"iclr25-{p.slug}"]))
    return out


def _collect(target: str) -> dict:
    env = dict(os.environ, COLUMNS="200", ICLR25_PROGRESS="never", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", COLLECT, target], capture_output=True, text=True, env=env,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, f"{target}: {r.stderr[-2000:]}"
    data = json.loads(r.stdout.strip().splitlines()[-1])
    for cmd in data["commands"].values():
        if "help" in cmd:
            cmd["flags"] = flags_from_help(cmd.pop("help"))
    return data


@pytest.fixture(scope="module")
def table() -> dict[str, dict]:
    """``{console script: {subcommand: {"flags": [...], "deprecated": {...}}}}``."""
    targets = _targets()
    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as ex:
        results = list(ex.map(lambda t: _collect(t[1]), targets))
    return {name: res["commands"] for (name, _), res in zip(targets, results)}


def violations(commands: dict[str, dict]) -> set[str]:
    """The flag-table violations of one CLI (strings as in :data:`PENDING`)."""
    bad = set()
    for name, cmd in commands.items():
        flags = set(cmd["flags"])
        for f in sorted(flags):
            if f in SYNONYMS:
                bad.add(f"{name}: {f} (use {SYNONYMS[f]})")
        if "--quick" in flags and name != "reproduce":
            bad.add(f"{name}: --quick outside reproduce")
        training = bool(TRAIN_NAME.search(name)) or any(TRAIN_FLAG.match(f) for f in flags)
        if training and not flags & {"--seed", "--seeds"}:
            bad.add(f"{name}: training without --seed/--seeds")
        if name == "reproduce":
            for f in ("--workers", "--resume"):
                if f not in flags:
                    bad.add(f"reproduce: no {f} (a runner flag)")
        for old, new in cmd["deprecated"].items():
            if old in flags:
                bad.add(f"{name}: deprecated {old} is still a flag of its own (keep it only as the alias of {new})")
            if new not in flags and new.split("=")[0] not in flags:
                bad.add(f"{name}: deprecated {old} points to {new}, which is not a flag")
    return bad


def test_every_cli_is_read(table):
    assert len(table) == 20, sorted(table)
    for cli, commands in table.items():
        assert commands, f"{cli}: no subcommands found"
        for name, cmd in commands.items():
            assert "--help" in cmd["flags"], (cli, name, cmd["flags"])
            if cli != "iclr25":
                assert "--out" in cmd["flags"], f"{cli} {name}: no --out read from its --help: {cmd['flags']}"
    assert {"--quick", "--out", "--workers", "--resume", "--seeds"} <= set(table["iclr25"]["reproduce"]["flags"])


def test_one_flag_per_meaning(table):
    new = {cli: sorted(violations(cmds) - PENDING.get(cli, set())) for cli, cmds in table.items()}
    new = {k: v for k, v in new.items() if v}
    assert not new, ("flags that break the table in CONTRIBUTING.md (rename, keeping the old name as "
                     "Command(..., deprecated={old: new})):\n" + json.dumps(new, indent=1))


def test_pending_is_current(table):
    assert set(PENDING) <= set(table), sorted(set(PENDING) - set(table))
    fixed = {cli: sorted(v - violations(table[cli])) for cli, v in PENDING.items()}
    fixed = {k: v for k, v in fixed.items() if v}
    assert not fixed, f"fixed, remove from PENDING in {__file__}: {fixed}"


def test_help_parser_reads_the_option_column():
    text = ("usage: x [-h]\n\nUse --jobs to ...\n╭─ options ──╮\n│ -h, --help   show help │\n"
            "│ --out {None}|PATH  Output folder (see --output-dir). │\n│ --quiet, --no-quiet │\n"
            "│                     Warnings only (was --no-progress). │\n╰──╯\n")
    assert flags_from_help(text) == ["--help", "--out", "--quiet", "--no-quiet"]


def test_violations_rules():
    cmds = {"train": {"flags": ["--help", "--out", "--lr"], "deprecated": {"--learning-rate": "--lr"}},
            "fit-probe": {"flags": ["--help", "--out", "--seed", "--quick"], "deprecated": {}},
            "reproduce": {"flags": ["--quick", "--jobs", "--seeds"], "deprecated": {}},
            "eval": {"flags": ["--sft-epochs"], "deprecated": {"--old": "--gone"}}}
    assert violations(cmds) == {
        "train: training without --seed/--seeds", "fit-probe: --quick outside reproduce",
        "reproduce: --jobs (use --workers)", "reproduce: no --workers (a runner flag)",
        "reproduce: no --resume (a runner flag)", "eval: training without --seed/--seeds",
        "eval: deprecated --old points to --gone, which is not a flag"}
