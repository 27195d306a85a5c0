import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from iclr25.core.config import Command, ConfigError, config_from_dict, load_config_file, run_cli
from iclr25.core.seed import seed_everything


def test_base_is_torch_free():
    code = ("import iclr25.core, iclr25.core.results, iclr25.core.registry, iclr25.core.data, "
            "iclr25.core.seed, iclr25.core.config, iclr25.core.lm, iclr25.core.threads, iclr25.core.jsonl, "
            "iclr25.core.progress, iclr25.core.runinfo, iclr25.core.lm.loading, sys; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_seed_everything_repeats():
    seed_everything(3)
    a = (random.random(), np.random.rand())
    seed_everything(3)
    assert (random.random(), np.random.rand()) == a
    with pytest.raises(ValueError):
        seed_everything(-1)


@dataclass
class TrainConfig:
    """Train something."""

    lr: float = 0.01
    """learning rate"""
    epochs: int = 3
    mode: Literal["paper", "code"] = "paper"
    layers: tuple[int, ...] = (1, 2)
    name: str | None = None
    tags: list[str] = field(default_factory=list)


def test_config_from_dict_validates():
    c = config_from_dict(TrainConfig, {"lr": 1, "layers": [3], "mode": "code"})
    assert c.lr == 1.0 and isinstance(c.lr, float) and c.layers == (3,) and c.mode == "code"
    with pytest.raises(ConfigError, match="unknown key"):
        config_from_dict(TrainConfig, {"lrr": 1})
    with pytest.raises(ConfigError, match="epochs"):
        config_from_dict(TrainConfig, {"epochs": "three"})
    with pytest.raises(ConfigError, match="mode"):
        config_from_dict(TrainConfig, {"mode": "other"})


def test_config_file_errors(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"lr": 0.1,\n "epochs": }')
    with pytest.raises(ConfigError, match="line 2"):
        load_config_file(p)
    p.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="mapping"):
        load_config_file(p)


@pytest.mark.parametrize("name,text", [("c.json", '{"lr": 0.5}'), ("c.yaml", "lr: 0.5  # reason\n")])
def test_config_file_with_a_utf8_bom_is_read(tmp_path, name, text):
    """A JSON config saved with a BOM failed with 'Unexpected UTF-8 BOM' (line 1)."""
    p = tmp_path / name
    p.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_config_file(p) == {"lr": 0.5}
    p.write_bytes(b"lr: 0.5\nname: caf\xe9\n")  # Latin-1, not UTF-8: one line naming the file and line
    with pytest.raises(ConfigError, match=r"c\.(json|yaml): line 2: not UTF-8"):
        load_config_file(p)


def test_run_cli_precedence(tmp_path, capsys):
    seen = []
    cmds = {"train": Command(TrainConfig, lambda c: seen.append(c) or 0, "train it")}
    y = tmp_path / "c.yaml"
    y.write_text("lr: 0.5\nepochs: 7\n")
    assert run_cli("prog", "demo", cmds, ["train", "--config", str(y), "--epochs", "9"]) == 0
    assert seen[-1].lr == 0.5 and seen[-1].epochs == 9
    assert run_cli("prog", "demo", cmds, ["--help"]) == 0
    assert "train it" in capsys.readouterr().out
    assert run_cli("prog", "demo", cmds, ["train", "--help"]) == 0
    assert "--lr" in capsys.readouterr().out
    y.write_text("bogus: 1\n")
    assert run_cli("prog", "demo", cmds, ["train", "--config", str(y)]) == 2
    assert "unknown key" in capsys.readouterr().err
    assert run_cli("prog", "demo", cmds, ["nope"]) == 2


@dataclass
class PositiveConfig:
    n: int = 1

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")


def test_run_cli_turns_bad_input_into_clean_errors(capsys, monkeypatch):
    def run(cfg):
        raise FileNotFoundError("data.jsonl: no such file")

    cmds = {"go": Command(PositiveConfig, run, "go")}
    assert run_cli("prog", "demo", cmds, ["go", "--n", "0"]) == 2
    assert "n must be >= 1" in capsys.readouterr().err
    assert run_cli("prog", "demo", cmds, ["go"]) == 2
    assert "prog go: error: data.jsonl" in capsys.readouterr().err
    monkeypatch.setenv("ICLR25_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        run_cli("prog", "demo", cmds, ["go"])


@dataclass
class PathsConfig:
    """Paths in containers."""

    inputs: tuple[Path, ...] = ()
    extra: tuple[Path, ...] | None = None


def test_config_file_paths_inside_tuples_become_paths(tmp_path):
    """A --config file's strings become Path inside tuple[Path, ...] too (tyro warned about str before)."""
    import warnings

    c = config_from_dict(PathsConfig, {"inputs": ["a", "b/c"], "extra": ["d"]})
    assert c.inputs == (Path("a"), Path("b/c")) and c.extra == (Path("d"),)
    assert all(isinstance(x, Path) for x in (*c.inputs, *c.extra))
    seen = []
    cmds = {"run": Command(PathsConfig, lambda c: seen.append(c) or 0, "run it")}
    y = tmp_path / "c.yaml"
    y.write_text("inputs: [x.txt, y.txt]\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert run_cli("prog", "demo", cmds, ["run", "--config", str(y)]) == 0
    assert seen[-1].inputs == (Path("x.txt"), Path("y.txt"))


def test_choose_device_checks_availability():
    import torch

    from iclr25.core.seed import choose_device

    assert choose_device("cpu") == "cpu"
    assert choose_device("auto") in ("cpu", "cuda", "mps")
    with pytest.raises(ValueError, match="not a device"):
        choose_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            choose_device("cuda")
        with pytest.raises(ValueError, match="no CUDA GPU"):
            choose_device("cuda:1")
    else:
        assert choose_device("cuda") == "cuda"
        with pytest.raises(ValueError, match="CUDA GPU"):
            choose_device(f"cuda:{torch.cuda.device_count()}")


def test_malformed_yaml_config_is_one_line_with_its_line_and_column(tmp_path):
    from iclr25.core.config import ConfigError, load_config_file

    y = tmp_path / "bad.yaml"
    y.write_text("epochs: 3\n  lr: [1, 2\nfoo: bar\n")
    with pytest.raises(ConfigError) as e:
        load_config_file(y)
    msg = str(e.value)
    assert "\n" not in msg and "line 2, column 5" in msg and "not valid YAML" in msg, msg
