"""Dataclass configs from files and flags, and subcommand CLIs built from them (tyro).

Precedence: the dataclass defaults < ``--config FILE.yaml|json`` < command-line flags.
Unknown keys in a config file and values of the wrong type are rejected with an error that
names the file, the key and what was expected.

A package's ``cli.py`` is typically::

    from iclr25.core.config import Command, run_cli

    def main(argv=None) -> int:
        return run_cli("iclr25-agpd", "AGPD: poisoned-sample detection.", {
            "train": Command(TrainConfig, train, "train a model on a poisoned data set"),
            "reproduce": Command(ReproduceConfig, reproduce_cmd, "reproduce the paper's claims"),
        }, argv)
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

__all__ = ["ConfigError", "load_config_file", "config_from_dict", "parse_config", "Command", "run_cli"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file or value that does not fit the config dataclass."""


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (``.yaml``/``.yml``) or JSON config file into a dict.

    Raises:
        ConfigError: missing file, parse error (with the line), or a top level that is not a mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}: line {e.lineno}: {e.msg}") from None
    except Exception as e:  # yaml.YAMLError carries its own line info
        raise ConfigError(f"{p}: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of field: value, got {type(data).__name__}")
    return data


def _type_ok(value: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    origin = get_origin(tp)
    if origin is Literal:
        return value in get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in get_args(tp))
    if tp is type(None):
        return value is None
    if origin in (list, tuple, Sequence, set, frozenset) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return all(_type_ok(v, args[0]) for v in value) if args else True
    if origin in (dict, Mapping):
        return isinstance(value, dict)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is bool:
        return isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp is Path:
        return isinstance(value, (str, Path))
    if dataclasses.is_dataclass(tp):
        return isinstance(value, (dict, tp))
    return True  # types we do not check here are checked by the dataclass itself


def _coerce(value: Any, tp: Any) -> Any:
    if tp is Path or (get_origin(tp) in (typing.Union, types.UnionType) and Path in get_args(tp)):
        return Path(value) if isinstance(value, str) else value
    if tp is float and isinstance(value, int):
        return float(value)
    if get_origin(tp) is tuple and isinstance(value, list):
        return tuple(value)
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return config_from_dict(tp, value)
    return value


def config_from_dict(cls: type[T], values: Mapping[str, Any], *, source: str = "config",
                     base: T | None = None) -> T:
    """Build ``cls`` from ``values`` over ``base`` (or the defaults), rejecting unknown keys and
    wrongly typed values.

    Raises:
        ConfigError: naming ``source``, the key and the expected type.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {unknown} for {cls.__name__}; valid keys: {sorted(names)}")
    kw = {}
    for k, v in values.items():
        tp = hints.get(k, Any)
        if not _type_ok(v, tp):
            raise ConfigError(f"{source}: {k}={v!r} is not a valid {getattr(tp, '__name__', tp)}")
        kw[k] = _coerce(v, tp)
    if base is not None:
        return dataclasses.replace(base, **kw)
    return cls(**kw)


def _split_config_flag(argv: list[str]) -> tuple[str | None, list[str]]:
    rest, path = [], None
    it = iter(range(len(argv)))
    for i in it:
        a = argv[i]
        if a == "--config":
            if i + 1 >= len(argv):
                raise ConfigError("--config needs a file path")
            path = argv[i + 1]
            next(it, None)
        elif a.startswith("--config="):
            path = a.split("=", 1)[1]
        else:
            rest.append(a)
    return path, rest


def parse_config(cls: type[T], argv: Sequence[str] | None = None, *, prog: str | None = None,
                 description: str | None = None) -> T:
    """Parse ``argv`` into ``cls`` with defaults < ``--config FILE`` < flags (tyro)."""
    import tyro

    args = list(sys.argv[1:] if argv is None else argv)
    path, rest = _split_config_flag(args)
    default = None
    if path is not None:
        default = config_from_dict(cls, load_config_file(path), source=str(path))
    doc = description or (cls.__doc__ or "").strip()
    if "-h" in rest or "--help" in rest:
        doc += "\n\nAlso: --config FILE.yaml|json sets defaults from a file (flags override it)."
    return tyro.cli(cls, args=rest, default=default, prog=prog, description=doc)


@dataclass(frozen=True)
class Command:
    """A subcommand: its config dataclass, the function that runs it, and a one-line help."""

    config: type
    run: Callable[[Any], int | None]
    help: str = ""


def run_cli(prog: str, description: str, commands: Mapping[str, Command],
            argv: Sequence[str] | None = None) -> int:
    """Dispatch ``prog SUBCOMMAND [--config FILE] [flags]``; returns the exit code.

    ``prog --help`` lists the subcommands; ``prog SUB --help`` lists SUB's flags with defaults.
    A :class:`ConfigError` or ``ValueError`` raised while parsing or validating the config (e.g.
    in the dataclass's ``__post_init__``), and a ``ValueError`` or ``FileNotFoundError`` raised by
    the command itself (bad input data), is printed as ``prog SUB: error: ...`` with exit code 2,
    without a traceback; set ``ICLR25_DEBUG=1`` to get the traceback instead.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    width = max(len(n) for n in commands) if commands else 0
    listing = "\n".join(f"  {n:<{width}}  {c.help}" for n, c in commands.items())
    usage = f"usage: {prog} {{{','.join(commands)}}} [--config FILE] [flags]\n\n{description}\n\n" \
            f"subcommands:\n{listing}\n\nRun '{prog} SUBCOMMAND --help' for its flags."
    if not args or args[0] in ("-h", "--help"):
        print(usage)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name == "--version":
        print(prog)
        return 0
    if name not in commands:
        print(f"{prog}: error: unknown subcommand {name!r}; choose from {list(commands)}", file=sys.stderr)
        return 2
    cmd = commands[name]
    try:
        cfg = parse_config(cmd.config, rest, prog=f"{prog} {name}", description=cmd.help)
    except (ConfigError, ValueError) as e:
        if os.environ.get("ICLR25_DEBUG") == "1":
            raise
        print(f"{prog} {name}: error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # tyro exits on --help (0) and on bad flags (2)
        return int(e.code or 0)
    try:
        code = cmd.run(cfg)
    except (ValueError, FileNotFoundError) as e:
        if os.environ.get("ICLR25_DEBUG") == "1":
            raise
        print(f"{prog} {name}: error: {e}", file=sys.stderr)
        return 2
    return int(code or 0)
