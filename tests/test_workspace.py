"""Cross-package checks: layout, registration, CLIs, and the README/CI commands."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from iclr25_repo_packages import ROOT, changed, packages
from iclr25_uvkit import uv_command

from iclr25.core.registry import discover

PKGS = packages()
METHODS = [p for p in PKGS if p.slug != "core"]
BIN = Path(sys.executable).parent


def test_no_namespace_init_anywhere():
    offenders = [str(p.relative_to(ROOT)) for p in ROOT.glob("packages/*/src/iclr25/__init__.py")]
    assert offenders == [], "iclr25 is a PEP 420 namespace: remove " + ", ".join(offenders)


@pytest.mark.parametrize("pkg", PKGS, ids=lambda p: p.slug)
def test_package_shape(pkg):
    for f in ("pyproject.toml", "README.md", "CHANGELOG.md", "tests"):
        assert (pkg.path / f).exists(), f"{pkg.path}/{f} is missing"
    assert pkg.distribution == f"iclr25-{pkg.slug}"
    src = pkg.path / "src" / "iclr25" / pkg.slug.replace("-", "_")
    assert (src / "__init__.py").is_file() and (src / "_version.py").is_file()
    if pkg.slug != "core":
        assert pkg.script == f"iclr25-{pkg.slug}", "console script iclr25-<slug> missing"
        assert pkg.method == f"{pkg.module}.reproduce:reproduce", "iclr25.methods entry point missing"


@pytest.mark.parametrize("pkg", METHODS, ids=lambda p: p.slug)
def test_method_is_registered(pkg):
    found = discover()
    assert pkg.slug in found, f"{pkg.slug} not in the iclr25.methods entry points: {sorted(found)}"
    assert found[pkg.slug].distribution == pkg.distribution
    assert callable(found[pkg.slug].load())


@pytest.mark.parametrize("pkg", METHODS, ids=lambda p: p.slug)
def test_cli_answers_help(pkg):
    exe = BIN / pkg.script
    assert exe.exists(), f"{exe} not installed"
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "reproduce" in r.stdout


def test_umbrella_lists_every_method():
    r = subprocess.run([str(BIN / "iclr25"), "list"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for p in METHODS:
        assert re.search(rf"^{re.escape(p.slug)}\s+{re.escape(p.distribution)}\s", r.stdout, re.M), r.stdout


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^python3 -m pip install -q uv && .+$", text, re.M)


def test_readme_has_the_two_commands_and_ci_runs_the_test_one():
    cmds = _readme_commands()
    assert len(cmds) == 2, cmds
    main_cmd, test_cmd = cmds
    assert "iclr25 reproduce --quick" in main_cmd and "pytest" in test_cmd
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci.splitlines(), ".ci/run must run exactly the README's test command"


def test_readme_table_lists_every_package():
    text = (ROOT / "README.md").read_text()
    for p in METHODS:
        assert f"packages/{p.slug}" in text, f"README table lacks {p.slug}"


def test_changed_packages_selection():
    slugs = sorted(p.slug for p in PKGS)
    assert changed(["packages/core/src/x.py"]) == slugs
    assert changed(["pyproject.toml"]) == slugs
    assert changed(["README.md"]) == []
    if METHODS:
        one = METHODS[0].slug
        assert changed([f"packages/{one}/README.md"]) == [one]
    with pytest.raises(SystemExit):
        changed(["packages/not-a-package/x.py"])




def _uv():
    return uv_command()


@pytest.mark.parametrize("pkg", METHODS, ids=lambda p: p.slug)
def test_package_alone_imports_and_answers_help(pkg, tmp_path):
    """Each package installs with only its own dependencies (as the CI matrix job does), imports,
    answers --help and is registered: a package that secretly needs a sibling's dependency fails."""
    env_dir = tmp_path / "env"
    import os

    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(env_dir)}
    r = subprocess.run([*_uv(), "sync", "--locked", "--offline", "--quiet", "--package", pkg.distribution,
                        "--no-dev"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0 and "offline" in r.stderr.lower():
        r = subprocess.run([*_uv(), "sync", "--locked", "--quiet", "--package", pkg.distribution, "--no-dev"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    py = env_dir / "bin" / "python"
    code = (f"import {pkg.module}, iclr25.core.registry as r; "
            f"assert {pkg.slug!r} in r.discover(); print({pkg.module}.__version__)")
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(env_dir / "bin" / pkg.script), "--help"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
