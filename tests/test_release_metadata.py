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


# ---- shared/release.py, which the release workflow runs ----

def _release_module():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("iclr25_repo_release", ROOT / "shared" / "release.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["iclr25_repo_release"] = mod
    spec.loader.exec_module(mod)
    return mod


release = _release_module()


def test_parse_tag():
    assert release.parse_tag("iclr25-ta-dpfl-v0.1.0") == ("ta-dpfl", "0.1.0")
    assert release.parse_tag("refs/tags/iclr25-core-v1.2.3rc1") == ("core", "1.2.3rc1")
    for bad in ("iclr25-core-0.1.0", "v0.1.0", "iclr25-core-v0.1", "iclr25--v0.1.0", "iclr25-Core-v0.1.0"):
        with pytest.raises(release.ReleaseError):
            release.parse_tag(bad)


def _fake_package(tmp_path, version="0.2.0", changelog="## 0.2.0 (2026-05-01)\n\n### Added\n- x\n",
                  static=None):
    pkg = tmp_path / "packages" / "demo"
    (pkg / "src" / "iclr25" / "demo").mkdir(parents=True)
    (pkg / "src" / "iclr25" / "demo" / "_version.py").write_text(f'__version__ = "{version}"\n')
    head = f'version = "{static}"' if static else 'dynamic = ["version"]'
    (pkg / "pyproject.toml").write_text(f'[project]\nname = "iclr25-demo"\n{head}\n')
    (pkg / "CHANGELOG.md").write_text("# Changelog\n\n" + changelog + "\n## 0.1.0 (2026-01-01)\n- old\n")
    return release.find("demo", tmp_path)


def test_release_check_accepts_a_consistent_package(tmp_path):
    pkg = _fake_package(tmp_path)
    release.check(pkg, "0.2.0")
    assert release.changelog_section(pkg, "0.2.0")[1] == "### Added\n- x"


@pytest.mark.parametrize("kwargs, tag_version, match", [
    ({}, "0.2.1", "_version.py 0.2.0"),
    ({"static": "0.1.9"}, "0.2.0", r"\[project\].version 0.1.9"),
    ({"changelog": "## 0.2.0 (Unreleased)\n- x\n"}, "0.2.0", "must be dated"),
    ({"changelog": "## 0.3.0 (2026-05-01)\n- x\n"}, "0.2.0", "no section"),
])
def test_release_check_refuses_mismatches(tmp_path, kwargs, tag_version, match):
    pkg = _fake_package(tmp_path, **kwargs)
    with pytest.raises(release.ReleaseError, match=match):
        release.check(pkg, tag_version)


def test_release_check_dist(tmp_path):
    pkg = _fake_package(tmp_path)
    d = tmp_path / "dist"
    d.mkdir()
    (d / "iclr25_demo-0.2.0-py3-none-any.whl").write_text("")
    with pytest.raises(release.ReleaseError, match="must hold exactly"):
        release.check_dist(d, pkg, "0.2.0")
    (d / "iclr25_demo-0.2.0.tar.gz").write_text("")
    assert len(release.check_dist(d, pkg, "0.2.0")) == 2
    with pytest.raises(release.ReleaseError):
        release.check_dist(d, pkg, "0.2.1")


@pytest.mark.parametrize("pkg", PKGS, ids=lambda p: p.slug)
def test_release_resolves_every_package(pkg):
    """The tag of each package's current version resolves to that package (the CHANGELOG date is
    checked at release time only: an unreleased version must say so)."""
    version = _version_py(pkg)
    slug, v = release.parse_tag(f"iclr25-{pkg.slug}-v{version}")
    assert (release.find(slug).path, v) == (pkg.path, version)
    heading, _ = release.changelog_section(release.find(slug), version)
    if "unreleased" in heading.lower():
        with pytest.raises(release.ReleaseError, match="must be dated"):
            release.check(release.find(slug), version)
    else:
        release.check(release.find(slug), version)


def test_release_workflow_shape():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    on = wf[True]  # YAML 1.1 reads the key `on` as True
    assert on["push"]["tags"] == ["iclr25-*-v*"]
    assert "package" in on["workflow_dispatch"]["inputs"]
    jobs = wf["jobs"]
    steps = lambda job: " ".join(str(s.get("run", "")) + str(s.get("uses", "")) for s in jobs[job]["steps"])  # noqa: E731
    assert "shared/release.py resolve" in steps("resolve")
    assert "uv build --package" in steps("build") and "twine check" in steps("build")
    assert "pytest" in steps("test") and "pytest" in steps("from-pypi")
    pub = jobs["publish"]
    assert set(pub["needs"]) >= {"resolve", "test", "build", "from-pypi"}
    assert pub["environment"]["name"] == "pypi" and pub["permissions"] == {"id-token": "write"}
    assert "pypa/gh-action-pypi-publish" in steps("publish")
    assert wf["permissions"] == {"contents": "read"}  # the id token only in the publish job


MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|root|home|Users)/[\w.-]+|[A-Za-z]:\\\\Users\\\\")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".txt", ".cfg", ".ini", ".sh"}


@pytest.mark.parametrize("pkg", PKGS, ids=lambda p: p.slug)
def test_no_machine_paths_in_shipped_files(pkg):
    """What ships (sources, tests, README, configs) names no path of one machine (``/work/...``,
    ``/home/<user>``): messages say ``/path/to/data`` or name the environment variable."""
    hits = []
    for f in sorted(pkg.path.rglob("*")):
        if f.suffix not in TEXT_SUFFIXES or not f.is_file() or any(p.startswith(".") for p in f.parts):
            continue
        for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if MACHINE_PATH.search(line):
                hits.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()[:120]}")
    assert not hits, "machine-specific paths in shipped files:\n  " + "\n  ".join(hits)
