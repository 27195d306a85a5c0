"""The packaged presets: ``train --config quick`` (CPU scale, as in ``reproduce --quick``) and ``--config paper``
(the official hyper-parameters), and the accelerate configs for 7-8B bases (``accelerate/fsdp``,
``accelerate/deepspeed-zero2``, ``accelerate/deepspeed-zero3``). They ship in the wheel under
``iclr25/q_adapter/configs/``; ``python -m iclr25.q_adapter.presets NAME`` prints a preset's path (for
``accelerate launch --config_file``).
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["PRESETS", "ACCELERATE_CONFIGS", "preset_path"]

#: ``train --config NAME`` (train settings: evaluate, generate and reproduce refuse a preset name)
PRESETS = ("quick", "paper")
#: accelerate configs (``accelerate launch --config_file "$(python -m iclr25.q_adapter.presets NAME)"``)
ACCELERATE_CONFIGS = ("accelerate/fsdp", "accelerate/deepspeed-zero2", "accelerate/deepspeed-zero3")


def preset_path(name: str) -> Path:
    """The packaged preset ``name`` (one of :data:`PRESETS` or :data:`ACCELERATE_CONFIGS`) as a file path.

    Raises:
        ValueError: an unknown name.
        FileNotFoundError: the installed package lacks the file (a broken install; reinstall it).
    """
    from importlib.resources import files

    if name not in PRESETS + ACCELERATE_CONFIGS:
        raise ValueError(f"unknown preset {name!r}; the packaged presets are {list(PRESETS + ACCELERATE_CONFIGS)} "
                         "(or give a YAML path)")
    res = files("iclr25.q_adapter") / "configs" / f"{name}.yaml"
    if not res.is_file():
        raise FileNotFoundError(f"the packaged preset {name}.yaml is missing from {res}; reinstall iclr25-q-adapter")
    return Path(str(res))


def main(argv: list[str] | None = None) -> int:
    """Print the path of each named preset; exit 2 with one line on an unknown name."""
    names = sys.argv[1:] if argv is None else argv
    try:
        for n in names:
            print(preset_path(n))
    except (ValueError, FileNotFoundError) as e:
        print(f"iclr25.q_adapter.presets: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
