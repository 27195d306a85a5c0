"""Performance figures (``iclr25-multitp bench``): runner throughput, parse rate, analysis time.

1. One language x ``n`` vignettes through :func:`~iclr25.multitp.runner.run_query` (cache writes and fsync
   included) against a local stub server with ``latency_s`` per request: one request at a time vs
   ``concurrency`` in flight (target >= 8x at 16).
2. Rule-based parse rate (rows/s) on free-text answers of a scripted agent.
3. Analysis time for 107 languages x 460 vignettes: aggregation, misalignment (country level both
   projections, language level), sensitivity and k-means (target < 2 s).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["http_throughput", "parse_rate", "analysis_time", "run_bench"]


def http_throughput(n: int = 460, *, latency_s: float = 0.05, concurrency: int = 16) -> dict[str, float]:
    """Vignettes/s of the runner against the stub server: sequential vs ``concurrency`` (one run each)."""
    from iclr25.core.lm.generation import OpenAIChatGenerator

    from .agents import random_chooser
    from .runner import RetryPolicy, run_query
    from .testing import StubChatServer, scripted_reply
    from .vignettes import generate_vignettes

    V = generate_vignettes()[:n]
    out: dict[str, float] = {}
    with StubChatServer(scripted_reply(random_chooser(), V), latency_s=latency_s, max_lifetime_s=900) as srv:
        be = OpenAIChatGenerator("stub", base_url=srv.base_url, api_key="EMPTY", timeout=30, max_retries=0,
                                 concurrency=1)
        for name, c in (("sequential", 1), ("concurrent", concurrency)):
            with tempfile.TemporaryDirectory() as d:
                t0 = time.perf_counter()
                r = run_query(d, be, model="stub", langs=["en"], vignettes=V, concurrency=c,
                              retry=RetryPolicy(0), progress=False)
                dt = time.perf_counter() - t0
            if not r.complete:
                raise RuntimeError(f"bench run incomplete: {len(r.failed)} failures")
            out[name] = n / dt
            out[f"{name}_seconds"] = dt
    out["ratio"] = out["concurrent"] / out["sequential"]
    return out


def parse_rate(n_langs: int = 10) -> dict[str, float]:
    """Rule-based parses per second on scripted free-text answers (``n_langs`` x 460)."""
    from .agents import ScriptedAgent
    from .parser import rule_based_choice
    from .spec import CATEGORIES
    from .vignettes import generate_vignettes

    V = generate_vignettes()
    agent = ScriptedAgent({c: 60.0 for c in CATEGORIES}, refusal=0.2, either=0.05, unparseable=0.05)
    items = [(agent.answer(v, lang), v.left, v.right) for lang in ("en", "de", "fr", "af", "zu", "xh", "yo", "az", "ja",
                                                                  "ko")[:n_langs] for v in V]
    t0 = time.perf_counter()
    labels = [rule_based_choice(a, left, right) for a, left, right in items]
    dt = time.perf_counter() - t0
    return {"rows": len(items), "rows_per_s": len(items) / dt, "seconds": dt,
            "parsed_share": float(np.mean([x is not None for x in labels]))}


def analysis_time(seed: int = 0) -> dict[str, float]:
    """Seconds for the full analysis of 107 languages x 460 parsed vignettes (synthetic labels): aggregation,
    misalignment at both levels and projections, sensitivity, k-means (scikit-learn's import is timed apart)."""
    from .aggregation import aggregate_by, choice_records
    from .human import approximate_weights, human_by_country, human_by_language
    from .metrics import cluster_languages, language_sensitivity, misalignment
    from .spec import LABELS, LANGUAGES
    from .vignettes import generate_vignettes

    V = generate_vignettes()
    rng = np.random.default_rng(seed)
    recs = []
    for lang in LANGUAGES:
        labs = rng.choice(LABELS[:4], size=len(V), p=[0.4, 0.4, 0.05, 0.15])
        recs += choice_records([replace(v, lang=lang) for v in V], list(labs))
    W = approximate_weights()
    hc, hl = human_by_country(), human_by_language(W)
    ti = time.perf_counter()
    import sklearn.cluster  # noqa: F401 - a one-time import, reported apart from the analysis

    t_import = time.perf_counter() - ti
    t0 = time.perf_counter()
    aggs = aggregate_by(recs, "lang")
    prefs = {k: a.preferences for k, a in aggs.items()}
    t1 = time.perf_counter()
    for lv, pj in (("country", "renormalised"), ("country", "official"), ("language", "renormalised")):
        misalignment(prefs, level=lv, projection=pj, weights=W, human_by_country=hc, human_by_lang=hl)
    language_sensitivity(prefs)
    cluster_languages(prefs, k=4)
    t2 = time.perf_counter()
    return {"languages": len(LANGUAGES), "vignettes": len(V), "aggregate_seconds": t1 - t0,
            "metrics_seconds": t2 - t1, "total_seconds": t2 - t0, "sklearn_import_seconds": t_import}


def run_bench(out: Path, *, latency_s: float = 0.05, concurrency: int = 16, n: int = 460) -> dict[str, Any]:
    """All three figures; writes ``out/bench.json``."""
    import json

    res = {"http": http_throughput(n, latency_s=latency_s, concurrency=concurrency),
           "http_settings": {"vignettes": n, "latency_s": latency_s, "concurrency": concurrency},
           "parse": parse_rate(), "analysis": analysis_time()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    return res
