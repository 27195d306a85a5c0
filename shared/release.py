#!/usr/bin/env python3
"""Release helpers for ``.github/workflows/release.yml`` (see CONTRIBUTING.md, "Releasing").

usage:
  python shared/release.py resolve TAG                 # a pushed tag iclr25-<slug>-v<x.y.z>
  python shared/release.py resolve --package SLUG      # manual dispatch: the version in _version.py
  python shared/release.py resolve --dry-run ...       # the same, but an undated CHANGELOG is fine
  python shared/release.py check-dist DIR SLUG VERSION # DIR holds exactly that wheel + sdist
  python shared/release.py notes SLUG VERSION          # the CHANGELOG section, for the GitHub release
  python shared/release.py requirements SLUG [EXTRA..] # its and the core's declared requirements

``resolve`` prints ``key=value`` lines (slug, distribution, module, version, tag, path, extras) for
``$GITHUB_OUTPUT`` and exits 1 with a message when the tag's version differs from the package's
``_version.py`` (or from a static ``[project].version``), or when the CHANGELOG has no dated section
for the version (``## x.y.z (YYYY-MM-DD)``; "Unreleased" is refused).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path


def _load_packages_module():
    """``shared/packages.py``, loaded by path under a name of its own: a plain ``import packages`` picks up the
    repository's ``packages/`` folder instead when pytest (importlib mode) has registered it as a namespace
    package, as ``pytest packages/core tests`` does."""
    import importlib.util

    name = "iclr25_repo_packages"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "packages.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


_pk = _load_packages_module()
ROOT, Package, packages = _pk.ROOT, _pk.Package, _pk.packages

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TAG_RE = re.compile(r"^iclr25-(?P<slug>[a-z0-9][a-z0-9-]*?)-v(?P<version>\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?)$")


class ReleaseError(ValueError):
    pass


def parse_tag(tag: str) -> tuple[str, str]:
    """``iclr25-ta-dpfl-v0.1.0`` → ``("ta-dpfl", "0.1.0")``; ``refs/tags/`` is stripped."""
    tag = tag.removeprefix("refs/tags/")
    m = TAG_RE.match(tag)
    if not m:
        raise ReleaseError(f"tag {tag!r} is not of the form iclr25-<slug>-v<x.y.z>")
    return m.group("slug"), m.group("version")


def find(slug: str, root: Path = ROOT) -> Package:
    by = {p.slug: p for p in packages(root)}
    if slug not in by:
        raise ReleaseError(f"no package {slug!r} under packages/ (have: {', '.join(sorted(by))})")
    return by[slug]


def version_of(pkg: Package) -> str:
    """The ``__version__`` literal of ``_version.py`` (parsed, not imported)."""
    path = pkg.path / "src" / "iclr25" / pkg.slug.replace("-", "_") / "_version.py"
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)):
            return str(node.value.value)
    raise ReleaseError(f"{path}: no `__version__ = \"x.y.z\"` literal")


def changelog_section(pkg: Package, version: str) -> tuple[str, str]:
    """(heading, body) of the CHANGELOG section ``## <version> ...``."""
    text = (pkg.path / "CHANGELOG.md").read_text()
    m = re.search(rf"^## \[?{re.escape(version)}\]?(?P<rest>[^\n]*)\n(?P<body>.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        raise ReleaseError(f"{pkg.path.name}/CHANGELOG.md has no section `## {version} (YYYY-MM-DD)`")
    return m.group(0).splitlines()[0], m.group("body").strip()


def check(pkg: Package, version: str, *, dry_run: bool = False) -> None:
    """Everything that must agree before ``version`` of ``pkg`` is published (``dry_run``: a build
    and test rehearsal, for which the CHANGELOG section may still say "Unreleased")."""
    ours = version_of(pkg)
    if ours != version:
        raise ReleaseError(f"tag version {version} != {pkg.slug}'s _version.py {ours}: bump _version.py or fix the tag")
    meta = tomllib.loads((pkg.path / "pyproject.toml").read_text())["project"]
    if "version" in meta and meta["version"] != version:  # ta-dpfl: `flwr run` needs a static version
        raise ReleaseError(f"{pkg.slug}/pyproject.toml [project].version {meta['version']} != {version}: bump both")
    heading, _ = changelog_section(pkg, version)
    if dry_run:
        return
    if not re.search(r"\(\d{4}-\d{2}-\d{2}\)", heading) or "unreleased" in heading.lower():
        raise ReleaseError(f"{pkg.path.name}/CHANGELOG.md: {heading!r} must be dated, e.g. `## {version} (2026-05-01)`")


def check_dist(directory: Path, pkg: Package, version: str) -> list[Path]:
    """``directory`` holds exactly one wheel and one sdist, both of ``pkg`` at ``version``."""
    stem = pkg.distribution.replace("-", "_")
    files = sorted(p for p in directory.iterdir() if p.is_file())
    wheels = [p for p in files if p.suffix == ".whl"]
    sdists = [p for p in files if p.name.endswith(".tar.gz")]
    want_w, want_s = f"{stem}-{version}-py3-none-any.whl", f"{stem}-{version}.tar.gz"
    if [p.name for p in wheels] != [want_w] or [p.name for p in sdists] != [want_s] or len(files) != 2:
        raise ReleaseError(f"{directory} must hold exactly {want_w} and {want_s}; it holds "
                           f"{', '.join(p.name for p in files) or 'nothing'}")
    return files


def requirements(pkg: Package, extras: list[str] = ()) -> list[str]:
    """The third-party requirements ``pkg`` declares (base + ``extras``) plus those of the core
    (base + the core extras ``pkg`` asks for), without the ``iclr25-*`` distributions themselves:
    the direct requirements for ``uv pip install --resolution lowest-direct``, which lowers only
    direct requirements (those of a wheel given on the command line count as transitive)."""
    def load(p: Package) -> dict:
        return tomllib.loads((p.path / "pyproject.toml").read_text())["project"]

    meta = load(pkg)
    reqs = list(meta.get("dependencies", []))
    for x in extras:
        if x not in meta.get("optional-dependencies", {}):
            raise ReleaseError(f"{pkg.slug} has no extra [{x}]")
        reqs += meta["optional-dependencies"][x]
    core = load(find("core", pkg.path.parent.parent)) if pkg.slug != "core" else meta
    out, core_extras = [], set()
    for r in reqs:
        m = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", r)
        name = m.group(1).lower().replace("_", "-")
        if name == "iclr25-core":
            core_extras |= {x.strip() for x in (m.group(2) or "").split(",") if x.strip()}
        elif not name.startswith("iclr25-"):
            out.append(r)
    if pkg.slug != "core":
        out += core.get("dependencies", [])
        for x in sorted(core_extras):
            out += core.get("optional-dependencies", {}).get(x, [])
    return sorted(set(out), key=str.lower)


def main(argv: list[str]) -> int:
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    try:
        if argv[:1] == ["resolve"] and len(argv) == 2:
            slug, version = parse_tag(argv[1])
            pkg = find(slug)
        elif argv[:2] == ["resolve", "--package"] and len(argv) == 3:
            pkg = find(argv[2])
            version = version_of(pkg)
        elif argv[:1] == ["check-dist"] and len(argv) == 4:
            for f in check_dist(Path(argv[1]), find(argv[2]), argv[3]):
                print(f)
            return 0
        elif argv[:1] == ["requirements"] and len(argv) >= 2:
            print("\n".join(requirements(find(argv[1]), argv[2:])))
            return 0
        elif argv[:1] == ["notes"] and len(argv) == 3:
            heading, body = changelog_section(find(argv[1]), argv[2])
            print(body)
            return 0
        else:
            print(__doc__, file=sys.stderr)
            return 2
        check(pkg, version, dry_run=dry_run)
    except ReleaseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    extras = tomllib.loads((pkg.path / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    for k, v in {"slug": pkg.slug, "distribution": pkg.distribution, "module": pkg.module, "version": version,
                 "tag": f"iclr25-{pkg.slug}-v{version}", "path": pkg.path.relative_to(ROOT).as_posix(),
                 "extras": ",".join(sorted(extras))}.items():
        print(f"{k}={v}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
