"""Structure of the package's source (issue #48): no module over 600 lines, no private process pool or
run-state machinery, and no import cycle between its modules (counting imports inside functions too, so a
cycle cannot be hidden in a function body; ``if TYPE_CHECKING:`` blocks are skipped)."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "iclr25" / "agpd"
PKG = "iclr25.agpd"


def _modules() -> dict[str, Path]:
    return {p.stem: p for p in SRC.glob("*.py")}


def _imports(path: Path) -> set[str]:
    """Sibling modules ``path`` imports (``from .x import``, ``from . import x``, ``import iclr25.<pkg>.x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    out = set()
    mods = _modules()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                out.add(node.module.split(".")[0])
            elif node.level == 1:
                out |= {a.name for a in node.names if a.name in mods}
            elif node.module and node.module.startswith(PKG + "."):
                out.add(node.module[len(PKG) + 1:].split(".")[0])
        elif isinstance(node, ast.Import):
            out |= {a.name[len(PKG) + 1:].split(".")[0] for a in node.names if a.name.startswith(PKG + ".")}
    return out & set(mods)


def test_no_import_cycle():
    graph = {m: _imports(p) - {m} for m, p in _modules().items()}
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        seen[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if seen.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in seen:
                visit(d)
        stack.pop()
        seen[m] = 2

    for m in sorted(graph):
        if m not in seen:
            visit(m)


def test_no_module_over_600_lines():
    long = {m: n for m, p in _modules().items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, long


def test_no_private_pool():
    bad = [f"{m}: {w}" for m, p in _modules().items() for w in ("ProcessPoolExecutor", "multiprocessing", "signal.signal")
           if w in p.read_text(encoding="utf-8")]
    assert not bad, bad
