"""One experiment runner (issue #48): no package runs its own process pool, run-state or signal handling.

Outside ``packages/core`` (whose :mod:`iclr25.core.runner` is the one runner), the code of
``packages/*/src`` must not mention ``ProcessPoolExecutor``, ``multiprocessing``, ``mp.get_context``,
``forkserver`` or ``signal.signal`` (comments and docstrings aside: tokens of the code and its string
arguments). :data:`PENDING` lists the packages not migrated yet; each must still contain one (the set only
shrinks: a migrated package leaves it).
"""

from __future__ import annotations

import io
import re
import tokenize

import pytest
from iclr25_repo_packages import ROOT

FORBIDDEN = re.compile(r"ProcessPoolExecutor|\bmultiprocessing\b|\bmp\.get_context\b|\bforkserver\b"
                       r"|\bsignal\.signal\b|\bfrom\s+signal\s+import\b")
#: packages whose src still runs a private pool or handles signals (migrating to iclr25.core.runner)
PENDING: set[str] = set()
SLUGS = sorted(p.parent.name for p in (ROOT / "packages").glob("*/src") if p.parent.name != "core")


def code_text(source: str) -> str:
    """``source`` with comments and docstrings (a string that is a statement of its own) blanked out; the
    line numbers stay those of the file."""
    lines = source.splitlines(keepends=True)
    offs = [0]
    for line in lines:
        offs.append(offs[-1] + len(line))
    text = list(source)
    starts_line = True
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            starts_line = True
            continue
        blank = tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and starts_line)
        starts_line = False
        if blank:
            a = offs[tok.start[0] - 1] + tok.start[1]
            b = offs[tok.end[0] - 1] + tok.end[1]
            text[a:b] = [c if c == "\n" else " " for c in text[a:b]]
    return "".join(text)


def offenders(slug: str) -> list[str]:
    """``path:line: text`` for each forbidden use in the package's src."""
    hits = []
    for p in sorted((ROOT / "packages" / slug / "src").rglob("*.py")):
        for i, line in enumerate(code_text(p.read_text(encoding="utf-8")).splitlines(), 1):
            if FORBIDDEN.search(line):
                hits.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    return hits


@pytest.mark.parametrize("slug", SLUGS)
def test_no_private_pool(slug):
    hits = offenders(slug)
    if slug in PENDING:
        assert hits, f"{slug} no longer runs a private pool: remove it from PENDING in {__file__}"
    else:
        assert not hits, ("run experiments with iclr25.core.runner (Job/run_jobs), not a private pool or "
                          "signal handler:\n" + "\n".join(hits))


def test_pending_are_packages():
    assert PENDING <= set(SLUGS), sorted(PENDING - set(SLUGS))


def test_scanner_skips_comments_and_docstrings():
    src = ('"""Runs in a multiprocessing pool? No."""\nimport os  # not multiprocessing\n'
           'def f():\n    """forkserver"""\n    return "ok"\n')
    assert not FORBIDDEN.search(code_text(src))
    src = 'import multiprocessing as mp\nctx = mp.get_context("forkserver")\n'
    assert len([x for x in code_text(src).splitlines() if FORBIDDEN.search(x)]) == 2
    assert FORBIDDEN.search(code_text("import signal\nsignal.signal(signal.SIGTERM, h)\n"))


#: packages whose reproduce.py does not run its experiments as jobs of iclr25.core.runner yet (the set only
#: shrinks: a migrated package leaves it)
NOT_ON_RUNNER: set[str] = set()
RUNNER_USE = re.compile(r"\bfrom\s+iclr25\.core\.runner\s+import\b|\bimport\s+iclr25\.core\.runner\b"
                        r"|\bfrom\s+iclr25\.core\s+import\s+[^\n]*\brunner\b")


@pytest.mark.parametrize("slug", SLUGS)
def test_reproduce_runs_on_the_core_runner(slug):
    """Issue #48: every package's ``reproduce.py`` declares jobs for :mod:`iclr25.core.runner`."""
    (repro,) = (ROOT / "packages" / slug / "src").rglob("reproduce.py")
    uses = bool(RUNNER_USE.search(code_text(repro.read_text(encoding="utf-8"))))
    if slug in NOT_ON_RUNNER:
        assert not uses, f"{slug} runs on iclr25.core.runner now: remove it from NOT_ON_RUNNER"
        pytest.xfail(f"{slug}: reproduce.py not on iclr25.core.runner yet (issue #48)")
    assert uses, f"{repro.relative_to(ROOT)} does not run its experiments with iclr25.core.runner (issue #48)"
