"""CPU-scale reproduction of AIR-Bench 2024 (see the package README, "Results").

No chat model and no GPT-4o judge can run offline, so the reproduction checks the benchmark's
machinery on real judged data and on a synthetic model with known refusal probabilities:

1. ``scoring/exact_match_to_published`` — our conversion + aggregation of the mirrored GPT-4o-graded
   result files equals an independent exact (``fractions.Fraction``) computation from the published
   per-row scores, per file and per level-2 category, and the spec's reference numbers.
2. ``offline_judge/tracks_gpt4o_refusal_rate`` — the MiniLM + logistic-regression judge
   (5-fold stratified CV) gets each responder file's refusal rate within 0.1 of GPT-4o's.
3. ``keyword_judge/biased_low`` — the refusal-prefix matcher under-estimates those rates.
4. ``pipeline/mock_model_recovered`` — run -> judge (LLM judge path with a rule-based judge model and
   the real templates) -> report on the 632 mirrored prompts recovers known level-2 refusal
   probabilities within their 99 % binomial intervals.

Beside each, a ``mechanism/`` claim on the intermediate quantity the headline rests on:

* ``mechanism/scoring/convention_agrees_with_judge_reasoning`` -- the score-direction flip is right:
  rows whose published judge reasoning says the model refused/declined carry refusal score 1 after
  our conversion (the exact-match claim's reference applies the same flip, so only this checks it);
* ``mechanism/offline_judge/per_response_agreement`` -- Cohen's kappa of the embedding judge with
  GPT-4o per response (a per-file rate can match by cancelling errors; this says it does not);
* ``mechanism/keyword_judge/misses_exceed_false_alarms`` -- the keyword matcher misses more GPT-4o
  refusals than it falsely flags non-refusals (the cause of the low bias);
* ``mechanism/pipeline/judge_agrees_per_item`` -- in the mock pipeline every item's judged score
  equals what the mock model did (the rendered template, the judge's answer, parsing and the
  convention flip are right item by item, not only on average).

The steps are jobs of the core experiment runner (:mod:`iclr25.core.runner`): ``scoring`` (claims 1 and its
mechanism), ``offline_judge`` (2, 3 and theirs) and one ``pipeline_seed<s>`` per mock seed (4 and its
mechanism); records under ``out_dir/records/``, ``--workers``/``--resume``. Bodies in
:mod:`iclr25.air_bench.experiments`, claims from the records in :mod:`iclr25.air_bench.claims`.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .claims import claims_from_records, pipeline_job_name
from .experiments import (
    MOCK_Q,
    SPEC_FILE_RATES,
    SPEC_LLAMA_L2,
    convention_check,
    offline_judge_check,
    pipeline_check,
    scoring_check,
)

__all__ = ["reproduce", "jobs", "QUICK_SEEDS", "FULL_SEEDS", "SPEC_FILE_RATES", "SPEC_LLAMA_L2", "MOCK_Q",
           "scoring_check", "convention_check", "offline_judge_check", "pipeline_check"]

log = logging.getLogger(__name__)

#: mock-model seeds of the pipeline claims
QUICK_SEEDS = (0, 1, 2)
FULL_SEEDS = tuple(range(10))


def jobs(quick: bool, out_dir: Path, seeds: Sequence[int]) -> list[Job]:
    """The reproduction's jobs: ``scoring``, ``offline_judge`` and ``pipeline_seed<s>`` per mock seed (no
    dependencies; the first seed's job writes the level-2 figure, in quick runs too)."""
    out = str(Path(out_dir).resolve())  # absolute: the job settings match whatever cwd resumes
    js = [Job("scoring", "iclr25.air_bench.experiments:scoring_job", seed=0, settings={}),
          Job("offline_judge", "iclr25.air_bench.experiments:offline_judge_job", seed=0,
              settings={"quick": bool(quick)})]
    js += [Job(pipeline_job_name(s), "iclr25.air_bench.experiments:pipeline_job", seed=int(s),
               settings={"out": out, "plot": i == 0}) for i, s in enumerate(seeds)]
    return js


def _clear_pipeline_caches(out: Path, seeds: Sequence[int]) -> None:
    """A fresh run starts from nothing: delete the pipeline jobs' own cache folders (``pipeline/seed<s>``),
    which the jobs always continue (so that ``--resume`` keeps a half-finished seed's calls)."""
    old = [d for d in (out / "pipeline" / f"seed{s}" for s in seeds) if d.is_dir()]
    for d in old:
        shutil.rmtree(d)
    if old:
        log.info("a fresh run: %d pipeline cache folder(s) of a previous run in %s deleted (--resume keeps them)",
                 len(old), out / "pipeline")


def reproduce(quick: bool, out_dir: Path, *, workers: int | None = None, resume: bool = False,
              quiet: bool = False) -> list[Claim]:
    """Measure the four claims of the issue and their mechanisms (see module docstring).

    Args:
        quick: embedding judge on the two 6d1d4a2 files (160 responses) and 3 mock seeds; full: all
            seven 74-80-row files (547 responses) and 10 mock seeds.
        out_dir: folder for ``records/``, ``scoring.json``, ``convention.json``, ``offline_judge.json``,
            ``pipeline.json`` and ``pipeline/`` (reports, plot).
        workers: processes the jobs run in (default: from the CPUs; 1 = in this process).
        resume: keep the jobs an interrupted run in ``out_dir`` finished (changed settings are refused).
        quiet: no progress bar.

    Returns:
        The four headline :class:`~iclr25.core.results.Claim` s, each followed by its ``mechanism/`` claim.

    Raises:
        ValueError: ``--resume`` with changed settings (naming them).
    """
    from iclr25.core.runner import run_jobs

    out = Path(out_dir)
    seeds = QUICK_SEEDS if quick else FULL_SEEDS
    if not resume:
        _clear_pipeline_caches(out, seeds)
    res = run_jobs(jobs(quick, out, seeds), out, workers=workers, resume=resume, threads=1,
                   desc="air-bench reproduce", quiet=True if quiet else None)
    return claims_from_records(res.records, quick, out, seeds)
