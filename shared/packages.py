#!/usr/bin/env python3
"""The workspace's packages, for CI and the cross-package tests.

usage: python shared/packages.py [--json] [--changed PATH ...]

Prints one line per package: slug, distribution, import module, console script (or, with
``--json``, a JSON list of slugs for a CI matrix). With ``--changed`` and a list of changed paths
(e.g. from ``git diff --name-only``), only the affected packages: a path under
``packages/<slug>/`` selects that package; anything else (core, root config, CI, shared/)
selects all. An unknown folder under ``packages/`` is an error (exit 2).
"""

from __future__ import annotations

import json
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Package:
    slug: str
    path: Path
    distribution: str
    module: str
    script: str | None
    method: str | None  # entry point in iclr25.methods, if any


def packages(root: Path = ROOT) -> list[Package]:
    out = []
    for pp in sorted((root / "packages").glob("*/pyproject.toml")):
        meta = tomllib.loads(pp.read_text())["project"]
        slug = pp.parent.name
        dist = meta["name"]
        scripts = meta.get("scripts", {})
        eps = meta.get("entry-points", {}).get("iclr25.methods", {})
        module = "iclr25." + slug.replace("-", "_")
        out.append(Package(slug, pp.parent, dist, module, f"iclr25-{slug}" if f"iclr25-{slug}" in scripts
                           else next(iter(scripts), None), next(iter(eps.values()), None)))
    return out


def changed(paths: list[str], root: Path = ROOT) -> list[str]:
    pk = {p.slug for p in packages(root)}
    sel: set[str] = set()
    for p in paths:
        parts = Path(p).parts
        if len(parts) >= 2 and parts[0] == "packages":
            if parts[1] not in pk:
                raise SystemExit(f"unknown package folder: packages/{parts[1]} (from {p})")
            sel.add(parts[1])
        elif p.endswith(".md") and len(parts) == 1:
            continue  # root docs change no package
        else:
            return sorted(pk)
    if "core" in sel:
        return sorted(pk)
    return sorted(sel)


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    if "--changed" in argv:
        slugs = changed([a for a in argv[argv.index("--changed") + 1:] if a != "--json"])
    else:
        slugs = [p.slug for p in packages()]
    if as_json:
        print(json.dumps(slugs))
    else:
        by = {p.slug: p for p in packages()}
        for s in slugs:
            p = by[s]
            print(f"{p.slug}\t{p.distribution}\t{p.module}\t{p.script or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
