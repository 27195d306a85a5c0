"""One self-contained HTML page of every reproduced claim (``iclr25 report``).

:func:`load_results` reads every ``<results>/<slug>/results.json`` (written by
:func:`iclr25.core.results.write_report`) with :func:`iclr25.core.results.read_report`, so
``holds`` is recomputed from the numbers and a hand-edited ``holds`` is refused, and collects
the PNG plots the run wrote in that folder. :func:`render_html` turns them into one HTML page
that needs nothing but a browser: inline CSS, plots embedded as ``data:`` URIs, a small inline
script for the "not holding only" filter, and a Content-Security-Policy that forbids every
remote load (the only links out are the papers' pages, followed only when clicked). Every
string taken from a result (claim names, metrics, notes, paths, metadata) is HTML-escaped.

:func:`compare_results` matches the claims of two result folders by package and claim name and
marks claims whose ``holds`` flipped and numbers (``ours``, ``baseline``) that moved by more than
their seed spread — or, for a number without a spread, by more than a relative tolerance; the
page says which rule applied to each mark.

Optional metadata is read defensively, so results written by older cores still render (absent
fields show "—"): ``cpu_seconds``, ``env`` (python, platform, CPU, GPU, torch, git commit, ...)
and ``seeds`` on the report (looked up on the :class:`~iclr25.core.results.Report`, then in the
JSON, then in ``extra``), and ``spread`` / ``seeds`` on a claim. A claim's ``spread`` is the
standard deviation over seeds of ``ours`` (a number) or a mapping ``{"ours": sd, "baseline": sd}``.

Torch-free: standard library only. The modules, one job each: ``load`` (reading results folders),
``compare`` (two runs), ``cells`` (a claim's row, a plot's figure), ``style`` (CSS, script), ``page``
(:func:`render_html`, :func:`write_html_report`).
"""

from .compare import DEFAULT_RTOL, ClaimChange, claim_spread, compare_results
from .load import (
    MAX_PLOT_BYTES,
    OPTIONAL_CLAIM_KEYS,
    PackageResults,
    Plot,
    load_results,
    paper_title,
    paper_url,
)
from .page import render_html, write_html_report

__all__ = [
    "MAX_PLOT_BYTES",
    "OPTIONAL_CLAIM_KEYS",
    "claim_spread",
    "paper_title",
    "DEFAULT_RTOL",
    "Plot",
    "PackageResults",
    "ClaimChange",
    "load_results",
    "paper_url",
    "compare_results",
    "render_html",
    "write_html_report",
]
