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


def test_unknown_slug(fake_methods, tmp_path, capsys):
    assert registry.main(["reproduce", "--out", str(tmp_path), "nope"]) == 2
    assert "unknown method" in capsys.readouterr().err


def test_run_reproduction_rejects_non_claims(tmp_path):
    with pytest.raises(TypeError, match="Claim"):
        registry.run_reproduction("x", lambda q, o: [1.0], quick=True, out_dir=tmp_path)
