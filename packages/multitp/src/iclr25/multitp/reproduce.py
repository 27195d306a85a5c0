"""CPU-scale reproduction of MultiTP's measurement pipeline (``iclr25-multitp reproduce [--quick]``).

No LLM weights can be downloaded, so the reproduction checks the pipeline against known truth and on
the real data that exists offline:

- scripted agents (known p*, refusal, either-rate, left bias) answer the 460 English vignettes in 8
  languages (quick: af, xh, zu, az, yo, de, fr, en; full: every language with a human value) — **the
  English text stands in for the translations** — in free text, through the rule-based parser;
- the three real GPT files (GPT-4 en, GPT-3 de/zh, older pipeline) and the back-translated GPT-3 answers;
- the reference numbers transcribed from the official notebooks;
- a scripted agent behind a local OpenAI-compatible stub server, queried by the ``query`` command in a
  subprocess that is killed halfway and resumed;
- the untrained tiny core GPT-2 (byte tokenizer, 16 new tokens) as model and as LLM parser (extra ``[hf]``),
  which drives the ``other`` label end to end.

Arms share the vignettes and the seeds; margin claims report mean ± sd over seeds and whether the gap
exceeds the larger sd.

The experiments are jobs of the core's runner (:mod:`iclr25.core.runner`; bodies in
:mod:`iclr25.multitp.experiments`): per seed ``profiles``, ``global``, ``left_bias``, ``projection``,
``refusal``; once ``real``, ``analysis`` and ``evaluation`` (first seed). Records land in
``out_dir/records/<job>.json`` (``--workers N``, ``--resume``); the claims are a pure function of them
(:func:`iclr25.multitp.claims.claims_from_records`); the radar plot is drawn from the ``evaluation`` record.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iclr25.core import Claim
from iclr25.core.runner import Job, run_jobs

from .experiments import LEFT_BIAS, REFUSAL_RHOS, global_human_vector, run_agent
from .human import approximate_weights, human_by_language
from .spec import LANGUAGES
from .vignettes import category_counts, generate_vignettes

__all__ = ["reproduce", "jobs", "QUICK_LANGS", "run_agent"]

log = logging.getLogger(__name__)

QUICK_LANGS = ("af", "xh", "zu", "az", "yo", "de", "fr", "en")
PIPELINE_LANGS = ("de", "zu")
_EXP = "iclr25.multitp.experiments:"


def jobs(seeds: Sequence[int], langs: Sequence[str], quick: bool) -> list[Job]:
    """The reproduction's jobs: five per seed (profiles, global, left_bias, projection -- only with fr and
    en --, refusal), then ``real``, ``analysis`` and ``evaluation`` (first seed); no dependencies."""
    lg = list(langs)
    out: list[Job] = []
    for s in seeds:
        out += [Job(f"profiles_seed{s}", _EXP + "profiles_job", seed=int(s), settings={"langs": lg}),
                Job(f"global_seed{s}", _EXP + "global_job", seed=int(s), settings={"langs": lg}),
                Job(f"left_bias_seed{s}", _EXP + "left_bias_job", seed=int(s), settings={"langs": lg, "b": LEFT_BIAS})]
        if "fr" in lg and "en" in lg:
            out.append(Job(f"projection_seed{s}", _EXP + "projection_job", seed=int(s), settings={"langs": lg}))
        out.append(Job(f"refusal_seed{s}", _EXP + "refusal_job", seed=int(s),
                       settings={"langs": lg, "rhos": list(REFUSAL_RHOS)}))
    out += [Job("real", _EXP + "real_job", settings={"n_boot": 500 if quick else 2000}),
            Job("analysis", _EXP + "analysis_job", settings={}),
            Job("evaluation", _EXP + "evaluation_job", seed=int(seeds[0]), settings={"langs": lg})]
    return out


def reproduce(quick: bool, out_dir: Path, *, seeds: Sequence[int] | None = None, device: str = "auto",
              workers: int | None = None, resume: bool = False, quiet: bool | None = None) -> list[Claim]:
    """Run the reproduction; write ``details.json``, ``records/`` (and ``radar.png`` with ``[plot]``) into ``out_dir``.

    Args:
        quick: CPU-scale quick mode (8 languages, 5 seeds, bootstrap 500).
        out_dir: output folder.
        seeds: agent seeds (default: 0..4 quick, 0..19 full).
        device: unused by the scripted agents (kept for the common reproduce flags).
        workers: jobs run in parallel processes (default: the CPUs, at most the jobs; 1: in this process).
        resume: keep the jobs an interrupted run in ``out_dir`` finished (changed settings are refused).
        quiet: no progress bar (``None``: the core's ``--quiet`` / ``ICLR25_QUIET``).

    Returns:
        The claims (``holds`` computed from the measured numbers).
    """
    from .claims import claims_from_records
    from .plots import reproduction_plot

    t_start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(seeds) if seeds is not None else list(range(5 if quick else 20))
    if len(seeds) < 2:
        raise ValueError("reproduce needs at least two seeds (margin claims report a spread)")
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    W = approximate_weights()
    H_lang = human_by_language(W)
    langs = list(QUICK_LANGS) if quick else [lg for lg in LANGUAGES if lg in H_lang and lg != "iw"]
    res = run_jobs(jobs(seeds, langs, quick), out, workers=workers, resume=resume, threads=1,
                   desc="multitp reproduce", quiet=quiet, run_settings={"quick": quick})
    plotted = reproduction_plot(res.records["evaluation"]["preferences"], H_lang, out / "radar.png")
    claims, found = claims_from_records(res.records, seeds, langs, quick, global_human_vector(),
                                        global_human_vector("unweighted_mean_over_languages"), plotted)
    V = generate_vignettes("en", 0, 0)
    details: dict[str, Any] = {"quick": quick, "seeds": seeds, "langs": langs, "weights": W.source,
                               "n_vignettes": len(V), "category_counts": category_counts(V),
                               "note": "English text stands in for the translations of every language",
                               **found, "runner": res.summary(), "seconds": time.perf_counter() - t_start}
    (out / "details.json").write_text(json.dumps(details, indent=1) + "\n", encoding="utf-8")
    return claims
