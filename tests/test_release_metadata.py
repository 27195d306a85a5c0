"""Release metadata: licence files, project metadata, one version source, CHANGELOG sections.

What PyPI shows and what the release workflow (``.github/workflows/release.yml``) relies on.
"""

import ast
import re

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import pytest
from iclr25_repo_packages import ROOT, packages

PKGS = packages()
METHODS = [p for p in PKGS if p.slug != "core"]
GH = "https://github.com/iclr25/iclr25"
ROOT_LICENSE = (ROOT / "LICENSE").read_text()


def _pyproject(pkg):
    return tomllib.loads((pkg.path / "pyproject.toml").read_text())


def _version_py(pkg) -> str:
    """The literal in ``_version.py`` (parsed, not imported: the release job reads it the same way)."""
    path = pkg.path / "src" / "iclr25" / pkg.slug.replace("-", "_") / "_version.py"
    tree = ast.parse(path.read_text())
    values = [n.value.value for n in tree.body if isinstance(n, ast.Assign)
              and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["__version__"]
              and isinstance(n.value, ast.Constant)]
    assert len(values) == 1, f"{path}: exactly one `__version__ = \"x.y.z\"` literal expected"
    return values[0]


def test_root_license_is_mit():
    assert ROOT_LICENSE.startswith("MIT License\n")
    assert "Copyright (c) 2026 iclr25 developers" in ROOT_LICENSE


@pytest.mark.parametrize("pkg", PKGS, ids=lambda p: p.slug)
def test_license_file_shipped(pkg):
    lic = pkg.path / "LICENSE"
    assert lic.is_file(), f"{lic} missing: cp LICENSE {pkg.path.relative_to(ROOT)}/"
    assert lic.read_text() == ROOT_LICENSE, f"{lic} differs from the root LICENSE"
    meta = _pyproject(pkg)
    assert meta["project"].get("license") == "MIT"
    assert meta["project"].get("license-files") == ["LICENSE"], "set license-files = [\"LICENSE\"]"
    # PEP 639 `license-files` needs hatchling >= 1.27
    req = meta["build-system"]["requires"]
    assert any(re.fullmatch(r"hatchling>=1\.(2[7-9]|[3-9]\d)(\.\d+)*", r) for r in req), req
    sdist = meta.get("tool", {}).get("hatch", {}).get("build", {}).get("targets", {}).get("sdist", {})
    if "include" in sdist:
        assert "LICENSE" in sdist["include"], "the sdist include list must name LICENSE"


@pytest.mark.parametrize("pkg", PKGS, ids=lambda p: p.slug)
def test_project_metadata_complete(pkg):
    proj = _pyproject(pkg)["project"]
    assert proj.get("authors"), "authors missing"
    assert proj.get("keywords"), "keywords missing"
    cls = proj.get("classifiers", [])
    for c in ("Intended Audience :: Science/Research", "Programming Language :: Python :: 3",
              "Typing :: Typed"):
        assert c in cls, f"classifier {c!r} missing"
    assert not any(c.startswith("License ::") for c in cls), "licence classifiers are superseded by `license`"
    urls = proj.get("urls", {})
    assert urls.get("Homepage") == GH and urls.get("Source") == GH
    assert urls.get("Issues") == f"{GH}/issues"
    assert urls.get("Documentation", "").startswith(f"{GH}/tree/main/packages/{pkg.slug}")
    if pkg.slug != "core":
        assert "Paper" in urls, "method packages link their paper ([project.urls] Paper)"
        row = next((ln for ln in (ROOT / "README.md").read_text().splitlines()
                    if ln.startswith(f"| {pkg.slug} |")), "")
        ident = re.search(r"arXiv (\d{4}\.\d{4,5})|OpenReview (\w+)", row)
        if ident:
            assert (ident.group(1) or ident.group(2)) in urls["Paper"], (
                f"Paper URL {urls['Paper']} does not match the root README row: {row}")


@pytest.mark.parametrize("pkg", PKGS, ids=lambda p: p.slug)
def test_one_version_source(pkg):
    """``_version.py`` is the version source. hatchling reads it (dynamic version); the one allowed
    exception is a Flower app (``[tool.flwr.app]``), whose static ``[project].version`` is read by
    ``flwr run``/``flwr build`` and must then equal ``_version.py`` (the release job checks both)."""
    meta = _pyproject(pkg)
    version = _version_py(pkg)
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?", version), version
    init = (pkg.path / "src" / "iclr25" / pkg.slug.replace("-", "_") / "__init__.py").read_text()
    assert "from ._version import __version__" in init
    if "version" in meta["project"]:
        assert "flwr" in meta.get("tool", {}), "static [project].version is allowed only for a Flower app"
        assert meta["project"]["version"] == version, (
            f"[project].version {meta['project']['version']} != _version.py {version}: bump both")
        assert "version" not in meta["project"].get("dynamic", [])
    else:
        assert "version" in meta["project"].get("dynamic", [])
        path = meta["tool"]["hatch"]["version"]["path"]
        assert path == f"src/iclr25/{pkg.slug.replace('-', '_')}/_version.py"


@pytest.mark.parametrize("pkg", PKGS, ids=lambda p: p.slug)
def test_changelog_has_the_current_version(pkg):
    text = (pkg.path / "CHANGELOG.md").read_text()
    version = _version_py(pkg)
    assert re.search(rf"^## \[?{re.escape(version)}\]? ", text, re.M), (
        f"{pkg.path.name}/CHANGELOG.md has no `## {version} ...` section")
