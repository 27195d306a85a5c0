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
import logging
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

__all__ = [
    "ConfigError",
    "load_config_file",
    "config_from_dict",
    "parse_config",
    "Command",
    "run_cli",
    "CommonOptions",
    "SeedOption",
    "SeedsOption",
    "ReproduceOptions",
    "reproduce_command",
    "validate_device",
    "default_out",
    "changed_settings",
    "guard_resume_settings",
    "expand_presets",
]

T = TypeVar("T")
log = logging.getLogger("iclr25.core")


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
    data = p.read_bytes()
    try:
        text = data.decode("utf-8-sig")  # -sig: a BOM (Notepad) would fail JSON at line 1
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(f"{p}: line {line}: not UTF-8 ({e.reason} at byte {e.start}); save the file as UTF-8") from None
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}: line {e.lineno}: {e.msg}") from None
    except Exception as e:  # a YAML error: one line, at the problem's line and column (1-based)
        m, what = getattr(e, "problem_mark", None), getattr(e, "problem", None) or str(e).splitlines()[0]
        where = f"line {m.line + 1}, column {m.column + 1}: " if m is not None else ""
        raise ConfigError(f"{p}: {where}{what} (not valid YAML)") from None
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
    if get_origin(tp) in (typing.Union, types.UnionType):
        if value is None:
            return value
        args = [a for a in get_args(tp) if a is not type(None)]
        if Path in args:
            return Path(value) if isinstance(value, str) else value
        if len(args) == 1:
            return _coerce(value, args[0])
        return value
    if tp is Path:
        return Path(value) if isinstance(value, str) else value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if get_origin(tp) is tuple and isinstance(value, (list, tuple)):
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]: coerce every element (e.g. Path)
            return tuple(_coerce(v, args[0]) for v in value)
        if args and len(args) == len(value):
            return tuple(_coerce(v, a) for v, a in zip(value, args))
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


def _partial_default(cls: type[T], values: Mapping[str, Any], *, source: str) -> T:
    """An instance of ``cls`` built without ``__init__``: file values (checked like
    :func:`config_from_dict`), field defaults, and ``tyro.MISSING`` for required fields the file
    does not set, so they must come from flags. tyro constructs the final object (validation runs)."""
    import tyro

    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {unknown} for {cls.__name__}; valid keys: {sorted(names)}")
    obj = cls.__new__(cls)
    for f in dataclasses.fields(cls):
        if f.name in values:
            v = values[f.name]
            tp = hints.get(f.name, Any)
            if not _type_ok(v, tp):
                raise ConfigError(f"{source}: {f.name}={v!r} is not a valid {getattr(tp, '__name__', tp)}")
            v = _coerce(v, tp)
        elif f.default is not dataclasses.MISSING:
            v = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            v = f.default_factory()  # type: ignore[misc]
        else:
            v = tyro.MISSING
        object.__setattr__(obj, f.name, v)
    return obj


def parse_config(cls: type[T], argv: Sequence[str] | None = None, *, prog: str | None = None,
                 description: str | None = None) -> T:
    """Parse ``argv`` into ``cls`` with defaults < ``--config FILE`` < flags (tyro)."""
    import tyro

    args = list(sys.argv[1:] if argv is None else argv)
    path, rest = _split_config_flag(args)
    default = None
    if path is not None:
        values = load_config_file(path)
        required = [f.name for f in dataclasses.fields(cls) if f.init and f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
        if all(r in values for r in required):
            default = config_from_dict(cls, values, source=str(path))
        else:  # the file leaves required fields to the flags: a partial default, tyro asks for the rest
            default = _partial_default(cls, values, source=str(path))
    doc = description or (cls.__doc__ or "").strip()
    if "-h" in rest or "--help" in rest:
        doc += "\n\nAlso: --config FILE.yaml|json sets defaults from a file (flags override it)."
    with _value_errors_as_config_errors():
        return tyro.cli(cls, args=rest, default=default, prog=prog, description=doc)


def _value_errors_as_config_errors() -> Any:
    """A ``ValueError`` of a config's ``__post_init__`` (``--k must be >= 1``) as a :class:`ConfigError`, which
    :func:`run_cli` prints as one line, instead of tyro's several-line box. Uses tyro's parse-error hook where
    the installed tyro has it (1.0); other versions keep their box."""
    import contextlib

    try:
        from tyro._errors import InstantiationFailure, on_parse_error
    except ImportError:  # pragma: no cover - a tyro without the hook
        return contextlib.nullcontext()

    def hook(event: Any) -> None:
        if isinstance(event, InstantiationFailure):
            raise ConfigError(event.message)

    return on_parse_error(hook)


_DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")

# the resume guard lives in its own module; imported here for the callers of ``iclr25.core.config``
from .resume import _setting_changes, changed_settings, guard_resume_settings  # noqa: E402, F401


def validate_device(device: str) -> str:
    """Check a ``--device`` value: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.

    Returns:
        ``device`` unchanged.

    Raises:
        ConfigError: any other value (the message lists the valid ones).
    """
    if not isinstance(device, str) or not _DEVICE_RE.match(device):
        raise ConfigError(f"device={device!r} is not valid; use auto, cpu, cuda, cuda:N or mps")
    return device


@dataclass(kw_only=True)
class CommonOptions:
    """Flags every command shares, provided by the core so packages cannot drift.

    Inherit it in each command's config dataclass (fields are keyword-only, so the subclass may
    declare required fields of its own). :func:`run_cli` fills ``out`` when it is ``None``
    (``runs/<slug>/<command>``, or ``results/<slug>`` for :class:`ReproduceOptions`), applies
    ``threads`` (:func:`iclr25.core.threads.set_threads`), validates ``device`` and sets the log
    level from ``quiet`` (which also turns :func:`iclr25.core.progress.progress` bars off).
    """

    out: Path | None = None
    """Output folder (default: runs/<slug>/<command>; results/<slug> for reproduce)."""
    device: str = "auto"
    """Device: auto (CUDA when available, else CPU), cpu, cuda, cuda:N or mps."""
    threads: int | None = None
    """CPU threads for torch/BLAS (None: the library default)."""
    quiet: bool = False
    """Warnings only; no progress bars."""


@dataclass(kw_only=True)
class SeedOption:
    """Mix-in: one seed."""

    seed: int = 0
    """Random seed (>= 0)."""


@dataclass(kw_only=True)
class SeedsOption:
    """Mix-in: several seeds (one type everywhere: a tuple of ints)."""

    seeds: tuple[int, ...] = (0,)
    """Random seeds, e.g. --seeds 0 1 2."""


@dataclass(kw_only=True)
class ReproduceOptions(CommonOptions):
    """Reproduce the paper's claims at CPU scale; write results.json / results.md."""

    quick: bool = False
    """The CPU-scale quick reproduction (minutes on 2 cores) instead of the full CPU run."""
    seeds: tuple[int, ...] | None = None
    """Seeds to run (default: the method's own quick/full seeds)."""


def default_out(prog: str, command: str, cfg: Any) -> Path:
    """The default output folder of ``prog command``: ``results/<slug>`` for a reproduction,
    ``runs/<slug>/<command>`` otherwise (``slug`` = ``prog`` without the ``iclr25-`` prefix)."""
    slug = prog.removeprefix("iclr25-")
    if isinstance(cfg, ReproduceOptions):
        return Path("results") / slug
    return Path("runs") / slug / command


@dataclass(frozen=True)
class Command:
    """A subcommand: its config dataclass, the function that runs it, and a one-line help.

    Args:
        config: the config dataclass (ideally a :class:`CommonOptions` subclass).
        run: ``run(cfg) -> int | None`` (the exit code; ``None`` means 0).
        help: one line shown in ``prog --help``.
        deprecated: old flag -> new flag (e.g. ``{"--output-dir": "--out"}``); an old flag still
            works and logs a deprecation warning naming the new one.
        uses_device: ``False`` for a command that computes on the CPU only (numpy/scipy): a
            ``--device`` other than auto/cpu is then refused instead of being ignored. (A package that
            does not require torch at all refuses it for every command.)
    """

    config: type
    run: Callable[[Any], int | None]
    help: str = ""
    deprecated: Mapping[str, str] = dataclasses.field(default_factory=dict)
    uses_device: bool = True


def _rewrite_deprecated(prog: str, args: list[str], deprecated: Mapping[str, str]) -> list[str]:
    import warnings

    out = []
    for a in args:
        flag, eq, val = a.partition("=")
        if flag in deprecated:
            new = deprecated[flag]
            msg = f"{prog}: {flag} is deprecated and will be removed in the next minor release; use {new}"
            warnings.warn(msg, FutureWarning, stacklevel=3)
            print(f"warning: {msg}", file=sys.stderr)
            a = new + (eq + val if eq else "")
        out.append(a)
    return out


def _can_use_torch(prog: str) -> bool:
    """See :func:`iclr25.core.extras.can_use_torch` (kept here for callers of the old name)."""
    from .extras import can_use_torch

    return can_use_torch(prog)


def _apply_common(prog: str, name: str, cfg: Any, *, uses_device: bool = True) -> Any:
    """Fill ``out``, validate ``device``, apply ``threads`` and the log level (see CommonOptions)."""
    if not isinstance(cfg, CommonOptions):
        return cfg
    validate_device(cfg.device)
    if cfg.device not in ("auto", "cpu") and not uses_device:
        raise ConfigError(f"device={cfg.device!r}: {prog} {name} computes on the CPU only (numpy); "
                          "drop --device or pass --device cpu")
    if cfg.device not in ("auto", "cpu") and not _can_use_torch(prog):
        raise ConfigError(f"device={cfg.device!r}: {prog} runs on the CPU only (it does not use torch, so it "
                          "cannot use a GPU); drop --device or pass --device cpu")
    if cfg.threads is not None and cfg.threads < 1:
        raise ConfigError(f"threads={cfg.threads} must be >= 1 (or omitted for the library default)")
    seed = getattr(cfg, "seed", None)
    if isinstance(seed, int) and seed < 0:
        raise ConfigError(f"seed={seed} must be >= 0")
    seeds = getattr(cfg, "seeds", None)
    if seeds is not None and (len(seeds) == 0 or any(s < 0 for s in seeds)):
        raise ConfigError(f"seeds={seeds} must be a non-empty list of integers >= 0")
    if seeds is not None and len(set(seeds)) != len(seeds):
        dup = sorted({s for s in seeds if list(seeds).count(s) > 1})
        raise ConfigError(f"seeds={list(seeds)} repeats {dup}: a repeated seed is not a second run "
                          "(seed spreads would be understated); give distinct seeds")
    if cfg.out is None:
        cfg.out = default_out(prog, name, cfg)
    if cfg.threads is not None:
        from .threads import set_threads

        set_threads(cfg.threads)
    from .progress import configure_logging

    configure_logging(cfg.quiet)
    return cfg


def run_cli(prog: str, description: str, commands: Mapping[str, Command],
            argv: Sequence[str] | None = None, *, version: str | None = None,
            presets: tuple[Sequence[str], Callable[[str], Path]] | None = None) -> int:
    """Dispatch ``prog SUBCOMMAND [--config FILE] [flags]``; returns the exit code.

    ``prog --help`` lists the subcommands; ``prog SUB --help`` lists SUB's flags with defaults;
    ``prog --version`` prints ``prog <version>``. Configs that inherit :class:`CommonOptions` get
    the shared flags' behaviour (see there). Deprecated flags (:attr:`Command.deprecated`) are
    rewritten with a warning.

    A :class:`ConfigError` or ``ValueError`` raised while parsing or validating the config (e.g.
    in the dataclass's ``__post_init__``), and a ``ValueError``, ``FileNotFoundError``,
    ``FileExistsError`` (bad input data, an output that would be overwritten) or
    ``FloatingPointError`` (a diverged run) raised by the command itself, is printed as
    ``prog SUB: error: ...`` with exit code 2, without a traceback; so is a ``ModuleNotFoundError``
    (a module of an extra that is not installed), naming the extra from the package's own metadata
    (``pip install "iclr25-tie[offline]"``, :mod:`iclr25.core.extras`); set ``ICLR25_DEBUG=1`` to get
    the traceback instead. ``KeyboardInterrupt`` (Ctrl-C, or a command's own clean stop) prints
    ``prog SUB: interrupted`` with the exception's message, exit code 130. A reader that closes the pipe
    early (``prog --help | head``) ends the command quietly, exit code 141 (128 + SIGPIPE), as for other Unix
    tools, instead of a ``BrokenPipeError`` traceback.

    ``presets=(NAMES, path_of)``: ``--config NAME`` with NAME one of the package's packaged presets (and no file
    of that name here) loads ``path_of(NAME)``; a value that is neither a file nor a preset is an error that
    lists the presets (:func:`expand_presets`).
    """
    try:
        return _run_cli(prog, description, commands, argv, version=version, presets=presets)
    except BrokenPipeError:
        # stdout's reader is gone: point stdout at /dev/null so that the interpreter's final flush is quiet too
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout without a file descriptor
            pass
        return 141


def expand_presets(argv: Sequence[str], names: Sequence[str], path_of: Callable[[str], Path]) -> list[str]:
    """``--config NAME`` / ``--config=NAME`` with NAME in ``names`` and no file of that name -> ``path_of(NAME)``.

    Raises:
        ValueError: a ``--config`` value that is neither an existing file nor one of ``names`` (the message
            lists them; without this check the parser would say only that the file does not exist).
    """
    out = list(argv)
    for i, a in enumerate(out):
        value = out[i + 1] if a == "--config" and i + 1 < len(out) else a[9:] if a.startswith("--config=") else None
        if value is None or Path(value).exists():
            continue
        if value not in names:
            raise ValueError(f"--config {value}: no such file, and not a packaged preset (the presets are "
                             f"{', '.join(names)}); give a preset name or a YAML/JSON file")
        if a == "--config":
            out[i + 1] = str(path_of(value))
        else:
            out[i] = f"--config={path_of(value)}"
    return out


def _run_cli(prog: str, description: str, commands: Mapping[str, Command], argv: Sequence[str] | None,
             *, version: str | None, presets: tuple[Sequence[str], Callable[[str], Path]] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    width = max(len(n) for n in commands) if commands else 0
    listing = "\n".join(f"  {n:<{width}}  {c.help}" for n, c in commands.items())
    usage = f"usage: {prog} {{{','.join(commands)}}} [--config FILE] [flags]\n\n{description}\n\n" \
            f"subcommands:\n{listing}\n\nRun '{prog} SUBCOMMAND --help' for its flags; " \
            f"'{prog} --version' for the version."
    if not args or args[0] in ("-h", "--help"):
        print(usage)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name in ("--version", "-V"):
        print(f"{prog} {version}" if version else prog)
        return 0
    if name not in commands:
        print(f"{prog}: error: unknown subcommand {name!r}; choose from {list(commands)}", file=sys.stderr)
        return 2
    cmd = commands[name]
    debug = os.environ.get("ICLR25_DEBUG") == "1"
    try:
        rest = _rewrite_deprecated(f"{prog} {name}", rest, cmd.deprecated)
        if presets is not None:
            rest = expand_presets(rest, *presets)
        cfg = parse_config(cmd.config, rest, prog=f"{prog} {name}", description=cmd.help)
        cfg = _apply_common(prog, name, cfg, uses_device=cmd.uses_device)
    except (ConfigError, ValueError) as e:
        if debug:
            raise
        print(f"{prog} {name}: error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # tyro exits on --help (0) and on bad flags (2)
        return int(e.code or 0)
    try:
        code = cmd.run(cfg)
    except ModuleNotFoundError as e:  # an optional dependency (an extra) that is not installed
        if debug:
            raise
        from .extras import missing_module_message

        print(f"{prog} {name}: error: {missing_module_message(prog, e)}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError, FileExistsError, FloatingPointError) as e:
        if debug:
            raise
        print(f"{prog} {name}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        detail = f" ({e})" if str(e) else ""  # e.g. "stopped at step 25/1500; checkpoint ... holds it"
        print(f"{prog} {name}: interrupted{detail}", file=sys.stderr)
        return 130
    return int(code or 0)


def _load_target(target: Callable[..., Any] | str) -> Callable[..., Any]:
    if callable(target):
        return target
    import importlib

    mod, _, attr = target.partition(":")
    if not attr:
        raise ValueError(f"reproduce target {target!r} must be 'module:function'")
    return getattr(importlib.import_module(mod), attr)


def reproduce_command(slug: str, reproduce: Callable[..., Any] | str, version: str, *,
                      config: type = ReproduceOptions, help: str | None = None,
                      deprecated: Mapping[str, str] | None = None) -> Command:
    """The ``reproduce`` subcommand every method package shares.

    Args:
        slug: the method's slug (``results/<slug>`` is the default ``--out``).
        reproduce: ``reproduce(quick, out_dir, **kw) -> list[Claim]``, or its ``"module:attr"``
            path (imported only when the command runs, so ``--help`` stays light).
        version: the package version recorded in the report.
        config: :class:`ReproduceOptions` or a subclass; fields a subclass adds are passed to
            ``reproduce`` as keyword arguments. ``seeds`` and ``device`` are passed when
            ``reproduce`` accepts them (a non-default value it cannot take is an error);
            ``threads`` and ``quiet`` are passed when set and accepted (``--threads`` is applied
            process-wide by :func:`run_cli` in any case).
        help: the one-line help (default: the config's docstring).
        deprecated: old flag -> new flag, as in :class:`Command`.

    Returns:
        A :class:`Command` that runs :func:`iclr25.core.reproduction.run_reproduction`, prints the
        claims table and ends with a one-line summary.
    """
    if not (isinstance(config, type) and issubclass(config, ReproduceOptions)):
        raise TypeError(f"config must be ReproduceOptions or a subclass, got {config!r}")
    base = {f.name for f in dataclasses.fields(ReproduceOptions)}

    def run(cfg: ReproduceOptions) -> int:
        from .reproduction import _accepts, run_reproduction
        from .results import claims_table

        fn = _load_target(reproduce)
        extra = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in base}
        for name in ("threads", "quiet"):  # passed on when the reproduction takes them
            value = getattr(cfg, name)
            if value not in (None, False) and _accepts(fn, name):
                extra[name] = value
        rep = run_reproduction(slug, fn, quick=cfg.quick, out_dir=cfg.out, version=version,
                               seeds=cfg.seeds, device=cfg.device, strict=True, **extra)
        print(claims_table(rep.claims))
        held = sum(c.holds for c in rep.claims)
        print(f"{slug}: {held}/{len(rep.claims)} claims hold ({'quick' if cfg.quick else 'full'}, "
              f"{rep.seconds:.0f} s) -> {Path(cfg.out) / 'results.json'}")
        return 0

    doc = help or (config.__doc__ or "").strip().splitlines()[0]
    return Command(config, run, doc, dict(deprecated or {}))
