"""Every package README's results block is what ``results.md`` writes for its committed snapshot.

A package commits the ``results.json`` of a quick run of its final code as ``docs/results-quick.json``
and carries the matching block between ``<!-- results:quick -->`` and ``<!-- /results:quick -->`` in its
README (``scripts/check_readme_results.py``, CONTRIBUTING.md "Results in the README"). Packages that have
not committed a snapshot yet are in :data:`PENDING`; a pending package that has one must leave the set.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys

import pytest
from iclr25_repo_packages import ROOT, packages

_spec = importlib.util.spec_from_file_location("check_readme_results", ROOT / "scripts" / "check_readme_results.py")
crr = importlib.util.module_from_spec(_spec)
sys.modules["check_readme_results"] = crr
_spec.loader.exec_module(crr)

SLUGS = sorted(p.slug for p in packages() if p.slug != "core")
#: packages without a committed docs/results-quick.json yet (this set only shrinks)
PENDING: set[str] = set()
WITH_SNAPSHOT = [s for s in SLUGS if (ROOT / "packages" / s / "docs" / "results-quick.json").is_file()]
#: documents that are not shipped and must not be cited as the paper's value
UNSHIPPED = re.compile(r"\b(spec|specification|prototype)\b", re.IGNORECASE)


def test_pending_is_current():
    assert PENDING <= set(SLUGS), f"not packages: {sorted(PENDING - set(SLUGS))}"
    done = sorted(PENDING & set(WITH_SNAPSHOT))
    assert not done, f"{done} committed docs/results-quick.json: remove them from PENDING in {__file__}"
    missing = sorted(set(SLUGS) - PENDING - set(WITH_SNAPSHOT))
    assert not missing, f"{missing} have no docs/results-quick.json and are not PENDING"


@pytest.mark.parametrize("slug", WITH_SNAPSHOT or [pytest.param("none", marks=pytest.mark.skip("no snapshot yet"))])
def test_readme_block_matches_snapshot(slug):
    problems = crr.check_package(ROOT / "packages" / slug)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("slug", WITH_SNAPSHOT or [pytest.param("none", marks=pytest.mark.skip("no snapshot yet"))])
def test_snapshot_claim_record(slug):
    path = ROOT / "packages" / slug / "docs" / "results-quick.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    rep = crr.Report.from_dict(raw)  # recomputes holds; a hand-edited verdict raises
    assert rep.method == slug and rep.quick, f"{path}: method {rep.method!r}, quick {rep.quick}"
    assert rep.cpu_seconds is not None, f"{path}: no cpu_seconds (run it with the current core)"
    assert rep.claims, f"{path}: no claims"
    bad = []
    for c in raw["claims"]:
        name = c.get("name")
        if not c.get("kind"):
            bad.append(f"{name}: no kind")
        if not (c.get("paper_ref") or "").strip():
            bad.append(f"{name}: empty paper_ref (a table/figure, or '... direction only')")
        if not isinstance(c.get("n_seeds"), int) or c["n_seeds"] < 1:
            bad.append(f"{name}: n_seeds {c.get('n_seeds')!r} (how many seeds ours comes from)")
        for key in ("paper_ref", "paper"):
            if UNSHIPPED.search(c.get(key) or ""):
                bad.append(f"{name}: {key} {c[key]!r} cites an unshipped document")
    if not any(c.get("plot") for c in raw["claims"]):
        bad.append("no claim names a plot")
    assert not bad, f"{path}:\n" + "\n".join(bad)


# ------------------------------------------------------------------------------------------------
# the script itself, on a fake package


def _fake(tmp_path, *, holds=True, with_markers=True):
    from iclr25.core.results import Claim, Report

    pkg = tmp_path / "packages" / "fake"
    (pkg / "docs").mkdir(parents=True)
    claims = [Claim("a/x", "acc", 0.9, baseline=0.5 if holds else 0.95, paper_value=0.91, paper_ref="Table 1",
                    spread=0.01, n_seeds=3, plot="x.png"),
              Claim("b|y", "loss", 1e-5, threshold=1.0, higher_is_better=False, paper_ref="Fig. 2, direction only",
                    n_seeds=1)]
    rep = Report("fake", "0.1.0", True, 12.3, claims, cpu_seconds=20.5)
    (pkg / "docs" / "results-quick.json").write_text(rep.to_json(), encoding="utf-8")
    body = "# fake\n\n## Results\n\n"
    if with_markers:
        body += "<!-- results:quick -->\nold table\n<!-- /results:quick -->\n"
    (pkg / "README.md").write_text(body + "\nMore text.\n", encoding="utf-8")
    return pkg, rep


def test_script_write_then_check(tmp_path, capsys):
    pkg, rep = _fake(tmp_path)
    assert crr.main([str(pkg)]) == 1
    out = capsys.readouterr().out
    assert "-old table" in out and "+iclr25-fake 0.1.0, 12.3 s wall, 20.5 s CPU" in out
    assert crr.main([str(pkg), "--write"]) == 0
    text = (pkg / "README.md").read_text()
    # the block is results.md's summary line and table, byte for byte
    from iclr25.core.results import write_report

    write_report(rep, tmp_path / "run")
    md = (tmp_path / "run" / "results.md").read_text()
    assert rep.results_block() in md and rep.results_block() in text
    assert "2/2 claims hold." in text and "| b\\|y |" in text and text.endswith("More text.\n")
    assert crr.main([str(pkg)]) == 0
    # an edited number in the README is caught, one line each side
    (pkg / "README.md").write_text(text.replace("| 0.9 |", "| 0.95 |"))
    assert crr.main([str(pkg)]) == 1
    out = capsys.readouterr().out
    assert "\n-| a/x |" in out and "\n+| a/x |" in out


def test_script_compares_verdicts_with_a_run(tmp_path, capsys):
    from iclr25.core.results import write_report

    pkg, rep = _fake(tmp_path)
    assert crr.main([str(pkg), "--write"]) == 0
    write_report(rep, tmp_path / "same" / "fake")
    assert crr.main([str(pkg), str(tmp_path / "same")]) == 0
    _, flipped = _fake(tmp_path / "other", holds=False)
    write_report(flipped, tmp_path / "flip")
    capsys.readouterr()
    assert crr.main([str(pkg), str(tmp_path / "flip")]) == 1
    assert "a/x: holds True in" in capsys.readouterr().out


def test_script_usage_errors(tmp_path, capsys):
    pkg, _ = _fake(tmp_path, with_markers=False)
    assert crr.main([str(pkg)]) == 2
    assert "add the two markers" in capsys.readouterr().err
    assert crr.main([str(tmp_path / "nope")]) == 2
    (pkg / "docs" / "results-quick.json").unlink()
    assert crr.main([str(pkg)]) == 2
    assert "no " in capsys.readouterr().err
    # a full block without its snapshot
    pkg2, _ = _fake(tmp_path / "b")
    (pkg2 / "README.md").write_text((pkg2 / "README.md").read_text() + "<!-- results:full -->\n<!-- /results:full -->\n")
    assert crr.main([str(pkg2), "--write"]) == 2
    assert "results-full.json does not exist" in capsys.readouterr().err
