"""No file in ``packages/*/src`` over :data:`MAX_LINES` lines (issue #48 §3: one job per module).

:data:`PENDING` lists the files over the limit today, by path; each must still be over it (a split file
leaves the list, so it only shrinks).
"""

from __future__ import annotations

from iclr25_repo_packages import ROOT

MAX_LINES = 600
#: files still over MAX_LINES (being split by job); paths relative to the repository root
PENDING: set[str] = set()


def sizes() -> dict[str, int]:
    """``{path: line count}`` of every source file under ``packages/*/src``."""
    return {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for p in sorted((ROOT / "packages").glob("*/src/**/*.py"))}


def test_no_file_over_the_limit():
    over = {p: n for p, n in sizes().items() if n > MAX_LINES and p not in PENDING}
    assert not over, (f"over {MAX_LINES} lines (split by job, one job per module named after it): "
                      + ", ".join(f"{p} ({n})" for p, n in sorted(over.items())))


def test_pending_files_are_still_over():
    now = sizes()
    gone = sorted(p for p in PENDING if p not in now)
    assert not gone, f"no longer exist, remove from PENDING in {__file__}: {gone}"
    done = sorted(p for p in PENDING if now[p] <= MAX_LINES)
    assert not done, f"now within {MAX_LINES} lines, remove from PENDING in {__file__}: {done}"
