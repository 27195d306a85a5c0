"""The documented installs work from wheels.

For three representative packages (ridge-bias: numpy only; lotos: torch; ta-dpfl: flwr + opacus)
build the core wheel and the package's sdist + wheel (``uv build --package``; the wheel is built
from the sdist), install the package wheel with only the core wheel into a fresh venv, and run the
package's known-answer tests *from its sdist* (``src/`` removed) against the installed wheel, with
``--strict-markers``: the markers must come from the installed core's pytest plugin.

Versions are pinned from ``uv.lock`` (``uv export`` as constraints) and installed from the shared uv
cache, so nothing is downloaded twice. About a minute per package on two cores; deselect with
``-m "not wheels"``.
"""

import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from iclr25_repo_packages import ROOT, packages
from iclr25_uvkit import clean_env, uv_command

pytestmark = pytest.mark.wheels

BY_SLUG = {p.slug: p for p in packages()}
# slug -> (why it is representative, modules that must import from the fresh venv, modules that must
# not even be installed there)
SAMPLE = {
    "ridge-bias": ("numpy only", ["iclr25.ridge_bias.theory"], ["torch", "transformers"]),
    "lotos": ("torch", ["iclr25.lotos.train"], ["transformers", "flwr"]),
    "ta-dpfl": ("flwr + opacus", ["iclr25.ta_dpfl.dp_sgd", "iclr25.ta_dpfl.flower_app"], ["transformers"]),
}


def _uv() -> list[str]:
    return uv_command()


def _env() -> dict[str, str]:
    return clean_env()


def _run(cmd, *, cwd=ROOT, timeout=600, check=True):
    t0 = time.perf_counter()
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=_env(), capture_output=True, text=True,
                       timeout=timeout)
    print(f"{time.perf_counter() - t0:6.1f} s  {' '.join(map(str, cmd))[:160]}")  # shown with -s
    if check and r.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


def _uv_online_fallback(args, **kw):
    """``uv ARGS --offline`` (everything is in the cache), then online if that fails. Any failure is
    retried: with ``--quiet`` a file missing from a fresh machine's cache reads only "No solution found ...
    there is no version of contourpy==1.3.3", with no word of the network (seen at stop 38)."""
    r = _run([*_uv(), *args, "--offline"], check=False, **kw)
    if r.returncode != 0:
        r = _run([*_uv(), *args], check=False, **kw)
    if r.returncode != 0:
        pytest.fail(f"uv {' '.join(args)} exited {r.returncode}\n{r.stderr[-4000:]}")
    return r


def _build(slug: str, out: Path) -> tuple[Path, Path]:
    _run([*_uv(), "build", "--package", BY_SLUG[slug].distribution, "--out-dir", out, "--quiet"])
    stem = BY_SLUG[slug].distribution.replace("-", "_")
    (wheel,) = out.glob(f"{stem}-*.whl")
    (sdist,) = out.glob(f"{stem}-*.tar.gz")
    return wheel, sdist


@pytest.fixture(scope="module")
def core_wheel(tmp_path_factory) -> Path:
    wheel, sdist = _build("core", tmp_path_factory.mktemp("dist-core"))
    return wheel


@pytest.mark.parametrize("slug", list(SAMPLE), ids=list(SAMPLE))
def test_wheel_alone_passes_its_known_answer_tests(slug, core_wheel, tmp_path):
    pkg = BY_SLUG[slug]
    module = pkg.slug.replace("-", "_")
    wheel, sdist = _build(slug, tmp_path / "dist")

    # the sdist carries what a user needs to run the tests
    with tarfile.open(sdist) as tf:
        names = tf.getnames()
        top = names[0].split("/")[0]
        for f in ("LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", f"tests/test_{module}_kat.py"):
            assert f"{top}/{f}" in names, f"{sdist.name} lacks {f}"
        tf.extractall(tmp_path / "sdist", filter="data") if sys.version_info >= (3, 12) else tf.extractall(
            tmp_path / "sdist")
    src_tree = tmp_path / "sdist" / top
    shutil.rmtree(src_tree / "src")  # the tests must import the installed wheel, nothing else

    # versions pinned from the lock (package + its extras + its dev group); workspace members excluded
    cons = tmp_path / "constraints.txt"
    dev = tmp_path / "dev.txt"
    base = ["export", "--frozen", "--no-hashes", "--no-emit-workspace", "--package", pkg.distribution]
    _run([*_uv(), *base, "--all-extras", "--quiet", "-o", cons])
    _run([*_uv(), *base, "--only-group", "dev", "--quiet", "-o", dev])

    venv = tmp_path / "venv"
    _run([*_uv(), "venv", "--quiet", "--python", sys.executable, venv])
    py = venv / "bin" / "python"
    _uv_online_fallback(["pip", "install", "--quiet", "--python", str(py), "-c", str(cons), "-r", str(dev),
                         str(core_wheel), str(wheel)])

    # only core + this package, imported from the venv
    probe = "; ".join([
        f"import importlib.metadata as md, iclr25.core, iclr25.{module} as m, " + ", ".join(SAMPLE[slug][1]),
        "print(sorted(d.metadata['Name'] for d in md.distributions() if d.metadata['Name'].startswith('iclr25')))",
        "print(m.__file__)", "print(iclr25.core.__file__)", "print(m.__version__)",
        "import importlib.util as u", f"print([x for x in {SAMPLE[slug][2]!r} if u.find_spec(x)])"])
    lines = _run([py, "-c", probe]).stdout.splitlines()
    assert lines[0] == str(sorted(["iclr25-core", pkg.distribution])), lines[0]
    site = str(venv)
    assert lines[1].startswith(site) and lines[2].startswith(site), lines
    assert wheel.name.startswith(f"{pkg.distribution.replace('-', '_')}-{lines[3]}-")
    assert lines[4] == "[]", f"{slug} ({SAMPLE[slug][0]}) pulled in {lines[4]}"
    r = _run([venv / "bin" / pkg.script, "--help"])
    assert "reproduce" in r.stdout

    # the markers travel with the installed core (no monorepo config here)
    markers = _run([py, "-m", "pytest", "--markers", "--noconftest", "-p", "no:cacheprovider"], cwd=src_tree).stdout
    for m in ("@pytest.mark.slow", "@pytest.mark.realdata", "@pytest.mark.gpu"):
        assert m in markers, markers

    r = _run([py, "-m", "pytest", f"tests/test_{module}_kat.py", "-q", "--strict-markers", "-p", "no:cacheprovider",
              "--import-mode=importlib", "-m", "not slow and not gpu and not realdata", "-W",
              "ignore::DeprecationWarning"], cwd=src_tree, timeout=900, check=False)
    assert r.returncode == 0, f"{slug} KATs failed against the installed wheel:\n{r.stdout[-6000:]}\n{r.stderr[-3000:]}"
    assert " passed" in r.stdout.splitlines()[-1], r.stdout[-2000:]
    print(f"{slug} ({SAMPLE[slug][0]}): {r.stdout.splitlines()[-1]}")
