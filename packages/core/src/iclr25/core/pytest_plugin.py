"""pytest plugin that registers the iclr25 test markers (entry point ``pytest11``: ``iclr25``).

Installing ``iclr25-core`` makes pytest load this plugin, so the markers travel with every
package: the tests shipped in an sdist run with ``--strict-markers`` outside the monorepo, whose
root ``pyproject.toml`` registers the same markers. Nothing else is changed (no options, no
collection hooks); selection is up to the caller, e.g. ``pytest -m "not slow and not gpu"``.

Markers:

- ``slow``: a long reproduction run (minutes); the monorepo deselects it by default.
- ``realdata``: needs the mirrored data under ``ICLR25_DATA``; the test skips with a message
  naming the missing file when the mirror is absent.
- ``gpu``: needs a CUDA device; the test skips when none is visible.
"""

from __future__ import annotations

MARKERS: dict[str, str] = {
    "slow": "long reproduction runs (deselect with -m 'not slow')",
    "realdata": "needs the mirrored data under ICLR25_DATA (skips with a message when absent)",
    "gpu": "needs a CUDA device (skips when none is visible)",
}


def pytest_configure(config) -> None:  # pytest hook; `config` is a pytest.Config
    for name, help_text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {help_text}")
