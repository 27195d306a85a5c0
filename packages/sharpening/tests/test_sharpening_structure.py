"""Issue #48 for this package: no private pool, no file over 600 lines, no import cycle between modules."""

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "iclr25" / "sharpening"


def test_no_private_pool_or_run_state_in_src():
    for p in SRC.rglob("*.py"):
        text = p.read_text()
        for word in ("ProcessPoolExecutor", "multiprocessing", "signal.signal", "parallel_stages", "prctl"):
            assert word not in text, f"{p.name} uses {word}: jobs run on iclr25.core.runner"


def test_no_source_file_over_600_lines():
    long = {p.name: n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def _module_imports(p: Path) -> set[str]:
    """The package modules ``p`` imports, at module level or inside functions (a function-level import only
    defers a cycle), relative or absolute."""
    out = set()
    for node in ast.walk(ast.parse(p.read_text())):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1:
                names = [mod.split(".")[0]] if mod else [a.name for a in node.names]
                out.update(names)
            elif mod.startswith("iclr25.sharpening."):
                out.add(mod.split(".")[2])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[2] for a in node.names if a.name.startswith("iclr25.sharpening."))
    return out


def test_no_import_cycle_between_modules():
    mods = {p.stem: p for p in SRC.glob("*.py")}
    graph = {m: _module_imports(p) & set(mods) for m, p in mods.items()}
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for n in graph[m]:
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path, m, n]))
            if n not in state:
                visit(n, [*path, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])
