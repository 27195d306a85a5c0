"""``--help`` is fast and light: no console script imports a heavy library to print its help.

Each console script's ``main(["--help"])`` runs in a fresh interpreter, which then reports the heavy
modules present in ``sys.modules`` and the CPU seconds the help took (imports included). CPU time, not
wall time, is asserted (at most 3 s): it does not grow when other jobs share the machine. The wall time
of the real console script is printed (``-s``).
"""

import json
import subprocess
import sys
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import pytest
from iclr25_repo_packages import packages

HEAVY = ("torch", "transformers", "torch_geometric", "flwr", "open_clip", "scipy", "sklearn", "matplotlib", "pandas")
MAX_HELP_CPU_S = 3.0
BIN = Path(sys.executable).parent


def _scripts():
    out = []
    for p in packages():
        scripts = tomllib.loads((p.path / "pyproject.toml").read_text())["project"].get("scripts", {})
        out += [(name, target) for name, target in sorted(scripts.items())]
    return out


SCRIPTS = _scripts()

PROBE = """
import io, json, sys, time, contextlib
t0 = time.perf_counter()
c0 = time.process_time()
from {module} import {func} as main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    try:
        rc = main(["--help"])
    except SystemExit as e:
        rc = e.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(json.dumps({{"rc": rc, "seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "help": buf.getvalue(),
                  "heavy": sorted({{m.split(".")[0] for m in heavy}})}}))
"""


@pytest.mark.parametrize("script, target", SCRIPTS, ids=[s for s, _ in SCRIPTS])
def test_help_imports_nothing_heavy(script, target):
    module, func = target.split(":")
    r = subprocess.run([sys.executable, "-c", PROBE.format(module=module, func=func, heavy=HEAVY)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["rc"] in (0, None), f"{script} --help exited {res['rc']}: {r.stderr[-2000:]}"
    assert "usage" in res["help"].lower(), res["help"][:500]
    assert res["heavy"] == [], (
        f"{script} --help imports {', '.join(res['heavy'])}: import them inside the command functions "
        f"(cli.py) and make the package __init__ lazy (module __getattr__)")
    assert res["cpu"] <= MAX_HELP_CPU_S, f"{script} --help took {res['cpu']:.2f} CPU-s (> {MAX_HELP_CPU_S})"

    exe = BIN / script
    if exe.exists():
        t0 = time.perf_counter()
        subprocess.run([str(exe), "--help"], capture_output=True, timeout=300, check=True)
        wall = time.perf_counter() - t0
    else:
        wall = float("nan")
    print(f"{script} --help: {wall:.2f} s wall (console script); main(['--help']) {res['seconds']:.2f} s in-process")
