"""A missing optional dependency is one line naming the extra that brings it (from the installed metadata)."""

from dataclasses import dataclass

from iclr25.core.config import Command, run_cli
from iclr25.core.extras import extras_providing, missing_module_message


def test_extras_read_from_the_installed_metadata():
    # iclr25-core's own pyproject: openai only in [http], torch in [lm], numpy in the base install
    assert extras_providing("iclr25-core", "openai") == (["http"], False)
    assert extras_providing("iclr25-core", "torch") == (["lm"], False)
    assert extras_providing("iclr25-core", "numpy") == ([], True)
    assert extras_providing("iclr25-core", "sklearn") == ([], False)
    assert extras_providing("no-such-distribution-xyz", "torch") is None


def test_message_names_the_extra_and_the_command():
    e = ModuleNotFoundError("No module named 'openai'", name="openai")
    msg = missing_module_message("iclr25-core", e)
    assert 'pip install "iclr25-core[http]"' in msg and "\n" not in msg
    assert "not installed" in missing_module_message("no-such-distribution-xyz", e)


@dataclass
class _Cfg:
    n: int = 1


def _needs_openai(cfg):
    raise ModuleNotFoundError("No module named 'openai'", name="openai")


def test_run_cli_exits_2_with_one_line(capsys):
    rc = run_cli("iclr25-core", "test", {"serve": Command(_Cfg, _needs_openai, "needs openai")}, ["serve"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("iclr25-core serve: error: this needs the [http] extra")


def _noop(cfg):
    return 0


def test_device_refused_where_a_command_cannot_use_it(capsys):
    from iclr25.core.config import CommonOptions

    @dataclass(kw_only=True)
    class Cfg(CommonOptions):
        n: int = 1

    cmds = {"np": Command(Cfg, _noop, "numpy only", uses_device=False), "any": Command(Cfg, _noop, "torch")}
    # iclr25-core does not require torch in its base install, but its [lm] extra does: 'any' may take cuda
    assert run_cli("iclr25-core", "t", cmds, ["np", "--device", "cpu"]) == 0
    assert run_cli("iclr25-core", "t", cmds, ["np", "--device", "cuda"]) == 2
    assert "computes on the CPU only" in capsys.readouterr().err
    from iclr25.core.config import _can_use_torch

    assert _can_use_torch("iclr25-core") and _can_use_torch("not-installed-xyz")
    assert not _can_use_torch("pyyaml")  # an installed distribution without torch
