"""Package structure (issue 48): imports between the modules form no cycle, no source file exceeds 600 lines, and no
private process pool, run-state file or signal handling remains (the core runner does that)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "iclr25" / "vbon"


def _module_imports(path: Path) -> set[str]:
    """Sibling modules imported anywhere in the file (``from .x import``/``from . import x``), inside functions
    too: a cycle hidden in a function body is still a cycle (the ``model`` <-> ``trainer`` one was)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("iclr25.vbon."):
            out.add(node.module.split(".")[2])
    return out


def test_no_import_cycle():
    graph = {p.stem: _module_imports(p) for p in SRC.glob("*.py")}
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if n not in graph:
                continue
            assert state.get(n) != 1, f"import cycle: {' -> '.join(stack + [m, n])}"
            if n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_files_at_most_600_lines_and_no_private_pool():
    for p in SRC.rglob("*.py"):
        text = p.read_text(encoding="utf-8")
        assert text.count("\n") <= 600, f"{p.name}: {text.count(chr(10))} lines (> 600: split it by job)"
        for banned in ("ProcessPoolExecutor", "multiprocessing", "import signal", "signal.signal("):
            assert banned not in text, f"{p.name} uses {banned}: run experiments with iclr25.core.runner"
