"""``iclr25-sharpening``: bon / sft / rlhf / report / reproduce / demo.

Only config dataclasses are imported here (``--help`` stays light); each command imports torch when it runs.
``--config quick`` / ``--config paper`` name the packaged presets (:func:`~iclr25.sharpening.config.preset_path`)
when no file of that name exists; ``--config FILE.yaml`` reads the section named after the command when the
file has one (the presets hold a section per command), else the whole file.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import (
    PRESETS,
    BonOptions,
    DemoOptions,
    ReportOptions,
    RlhfOptions,
    SftOptions,
    SharpeningReproduceOptions,
    preset_path,
)

__all__ = ["main", "COMMANDS"]

PROG = "iclr25-sharpening"


def _bon(cfg):
    from .commands import run_bon

    return run_bon(cfg)


def _sft(cfg):
    from .commands import run_sft

    return run_sft(cfg)


def _rlhf(cfg):
    from .commands import run_rlhf

    return run_rlhf(cfg)


def _report(cfg):
    from .commands import run_report

    return run_report(cfg)


def _demo(cfg):
    from .commands import run_demo

    return run_demo(cfg)


COMMANDS = {
    "bon": Command(BonOptions, _bon, "inference-time best-of-N ranked by the model's own likelihood (or majority vote)"),
    "sft": Command(SftOptions, _sft, "SFT-Sharpening: fine-tune on best-of-N outputs (fixed N or adaptive); --resume",
                   {"--save-every": "--checkpoint-every"}),
    "rlhf": Command(RlhfOptions, _rlhf, "RLHF-Sharpening: Eq. (8) on base pairs, or online XPO (--xpo --alpha); --resume",
                    {"--save-every": "--checkpoint-every"}),
    "report": Command(ReportOptions, _report, "how sharp a model is on a prompt file (mode mass, C_cov, greedy)"),
    "reproduce": reproduce_command("sharpening", "iclr25.sharpening.reproduce:reproduce", __version__,
                                   config=SharpeningReproduceOptions),
    "demo": Command(DemoOptions, _demo, "a one-minute look at sharpening on the trap-arithmetic task"),
}


def _section_config(argv: list[str]) -> tuple[list[str], str | None]:
    """If ``--config FILE`` has a top-level section named after the subcommand, pass that section on."""
    if not argv or argv[0] not in COMMANDS:
        return argv, None
    for i, a in enumerate(argv):
        path = argv[i + 1] if a == "--config" and i + 1 < len(argv) else a.split("=", 1)[1] if a.startswith("--config=") else None
        if path is None:
            continue
        p = Path(path)
        if path not in PRESETS and not p.exists():  # the core would say only "config file X does not exist"
            raise ValueError(f"--config {path}: no such file, and not a packaged preset (the presets are "
                             f"{', '.join(PRESETS)}); give a preset name or a YAML file")
        if path in PRESETS and not p.exists():          # a packaged preset by name
            p = preset_path(path)
            argv = list(argv)
            if a == "--config":
                argv[i + 1] = str(p)
            else:
                argv[i] = f"--config={p}"
        if p.suffix.lower() not in (".yaml", ".yml") or not p.is_file():
            return argv, None
        import yaml

        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError:
            return argv, None  # the core loader reports the parse error with its line
        if isinstance(data, dict) and argv[0] in data and set(data) <= set(COMMANDS):
            fh = tempfile.NamedTemporaryFile("w", suffix=f"-{argv[0]}.yaml", delete=False, encoding="utf-8")
            yaml.safe_dump(data[argv[0]] or {}, fh)
            fh.close()
            new = list(argv)
            if a == "--config":
                new[i + 1] = fh.name
            else:
                new[i] = f"--config={fh.name}"
            return new, fh.name
        return argv, None
    return argv, None


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point ``iclr25-sharpening``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        args, tmp = _section_config(args)
    except ValueError as e:
        print(f"{PROG} {args[0]}: error: {e}", file=sys.stderr)
        return 2
    try:
        return run_cli(PROG, "Sharpening (ICLR 2025): self-improvement by best-of-N on a model's own likelihood, "
                       "amortised by SFT or RLHF.", COMMANDS, args, version=__version__)
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
