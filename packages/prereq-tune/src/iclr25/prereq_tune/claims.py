"""The reproduction's claims: a pure function of the per-seed records of :func:`~.experiment.run_seed`.

Every claim fills the core record: ``kind``, ``paper_value``/``paper_ref`` (the paper's number in the claim's
units, from Tables 1–3, or "direction only"), ``spread`` (the seed standard deviation of ``ours - baseline``
for a baseline claim, of ``ours`` for a threshold claim; ``None`` with one seed), ``n_seeds`` and ``plot``.
Notes are computed from the numbers.
"""

from __future__ import annotations

from typing import Any

from iclr25.core import Claim

__all__ = ["claims_from_runs", "CLAIM_NAMES", "PLOTS", "mean_sd", "version_value"]

CLAIM_NAMES = (
    "mechanism/base_knows_real_facts",
    "mechanism/knowledge_adapters_hold_facts",
    "factuality/prereq_gt_sft_fictitious",
    "factuality/close_to_sft_real",
    "control/v1_adapter_follows_v1",
    "control/v2_adapter_follows_v2",
    "memorization/skill_lt_sft_fictitious",
    "ablation/multi_version_memorizes_less",
)
#: the figures :mod:`.plots` writes, by what they show
PLOTS = {"factuality": "factuality.png", "control": "control.png", "memorization": "memorization.png"}
#: the ablation's margin: the single-version arm must memorise at least this much more than the multi-version
#: arm (accuracy on the fictitious training questions; chance 0.0514), so two arms both at chance fail it
ABLATION_MARGIN = 0.02


def mean_sd(xs: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    import numpy as np

    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def version_value(d: dict[Any, float], v: int) -> float:
    """``d[v]`` for a dict keyed by version as int (fresh) or str (after a JSON round trip)."""
    return d[v] if v in d else d[str(v)]


def _spread(xs: list[float]) -> float | None:
    return mean_sd(xs)[1] if len(xs) > 1 else None


def _fmt(xs: list[float]) -> str:
    m, sd = mean_sd(xs)
    return f"{m:.3f} ± {sd:.3f} [{', '.join(f'{x:.3f}' for x in xs)}]"


def _gap_note(ours: list[float], base: list[float], hib: bool, margin: float) -> str:
    gaps = [(o - b) if hib else (b - o) for o, b in zip(ours, base)]
    g, sd = mean_sd(gaps)
    n = len(gaps)
    verdict = ("one seed: no spread" if n < 2 else
               "the gap exceeds the seed spread" if abs(g) > sd else "the gap does not exceed the seed spread")
    return f"gap (claim's direction) {g:+.3f} ± {sd:.3f} over {n} seed(s) [{', '.join(f'{x:+.3f}' for x in gaps)}]; " \
           f"{verdict}; margin {margin}"


def claims_from_runs(runs: list[dict[str, Any]], *, quick: bool, shared_world: bool) -> list[Claim]:
    """The claims (:data:`CLAIM_NAMES`) from :func:`~.experiment.run_seed` records, one per seed (pure)."""
    chance = runs[0]["chance"]
    n = len(runs)
    seeds_note = (f"{n} seed(s) (train seeds {[r['train_seed'] for r in runs]}, world seeds "
                  f"{sorted({r['world_seed'] for r in runs})})")
    if shared_world and n > 1:
        seeds_note += "; the seeds share one world and M0 (the spread is over adapter seeds only)"
    col = lambda f: [float(f(r)) for r in runs]  # noqa: E731
    mean = lambda xs: mean_sd(xs)[0]  # noqa: E731
    m0c = col(lambda r: r["m0"]["completion_real_test"])
    m0qa = col(lambda r: r["m0"]["qa_real_test"])
    know_acc = col(lambda r: min(k["completion_own_version"] for k in r["knowledge"].values()))
    know_other = col(lambda r: max(k["completion_other_version"] for k in r["knowledge"].values()))
    know_ceil = col(lambda r: min(k.get("probe_ceiling", float("nan")) for k in r["knowledge"].values()))
    cross = [k.get("completion_statement_prompts") for r in runs for k in r["knowledge"].values()
             if k.get("completion_statement_prompts") is not None]
    multi_rt = col(lambda r: r["multi"]["real_test"])
    single_rt = col(lambda r: r["single"]["real_test"])
    fict_rt = col(lambda r: r["sft_fict"]["real_test"])
    real_rt = col(lambda r: r["sft_real"]["real_test"])
    diff_real = [a - b for a, b in zip(multi_rt, real_rt)]
    k1 = [k for k in runs[0]["multi"]["control"] if k.endswith("_v1")][0]
    k2 = [k for k in runs[0]["multi"]["control"] if k.endswith("_v2")][0]

    def ctl(k: str, u: int) -> list[float]:
        return col(lambda r: version_value(r["multi"]["control"][k], u))

    c11, c12, c22, c21 = ctl(k1, 1), ctl(k1, 2), ctl(k2, 2), ctl(k2, 1)
    mem_multi = col(lambda r: r["multi"]["fict_train_mean"])
    mem_multi_max = col(lambda r: r["multi"]["fict_train_max"])
    mem_single = col(lambda r: r["single"]["fict_train_v1"])
    single_untrained = col(lambda r: r["single"]["fict_train_untrained_versions"])
    mem_fict = col(lambda r: r["sft_fict"]["own_train"])
    fict_epochs = col(lambda r: r["sft_fict"]["epochs"])
    single_ep = runs[0]["single"].get("epochs")
    multi_ep = runs[0]["multi"].get("epochs")
    skill_unchanged = sum(len(r["frozen"]["skill_unchanged"]) for r in runs)
    n_frozen = runs[0]["frozen"]["n_knowledge"] + runs[0]["frozen"]["n_base"]
    sc = runs[0].get("scale", {})
    scale = (f"{'quick' if quick else 'full'} world |R| {sc.get('n_real')}, |F| {sc.get('n_fict')} "
             f"({sc.get('fict_used')} used), V {sc.get('n_versions')}, {' + '.join(sc.get('formats', []))} knowledge")
    gap = lambda o, b, hib=True: [(x - y) if hib else (y - x) for x, y in zip(o, b)]  # noqa: E731
    common = {"n_seeds": n}
    return [
        Claim("mechanism/base_knows_real_facts", "M0 statement-completion accuracy on R_test (first token)",
              ours=mean(m0c), threshold=0.8, kind="sanity", paper_ref="Method (prerequisite: the base model knows "
              "the facts the skill must learn to read), direction only", spread=_spread(m0c), plot=PLOTS["factuality"], **common,
              note=f"{_fmt(m0c)}; chance {chance:.4f}; M0's QA accuracy on R_test before any SFT (it never saw the QA "
                   f"format) {_fmt(m0qa)}. {scale}; {seeds_note}."),
        Claim("mechanism/knowledge_adapters_hold_facts",
              "completion on F with Δknow⁽ᵛ⁾ in the adapter's own training format, worst adapter",
              ours=mean(know_acc), threshold=0.8, kind="mechanism", spread=_spread(know_acc),
              paper_ref="Method, stage 1 (knowledge LoRAs learn the facts), direction only",
              plot=PLOTS["control"], **common,
              note=f"min over knowledge adapters of own-version completion, each probed with prefixes of its own corpus "
                   f"format: {_fmt(know_acc)}; the probes' corpus ceiling (a predictor fitting the corpus exactly) min "
                   f"{_fmt(know_ceil)}; against another version's facts (max over adapters) {_fmt(know_other)}"
                   + (f"; passage adapters on statement prompts {min(cross):.3f}–{max(cross):.3f}" if cross else "")
                   + f". Knowledge and base tensors bit-identical through every skill training ({n_frozen} tensors per "
                   f"seed, checked by sha256, a change raises); skill tensors left unchanged: {skill_unchanged}."),
        Claim("factuality/prereq_gt_sft_fictitious", "R_test QA accuracy, no knowledge adapter (θ₀+Δskill)",
              ours=mean(multi_rt), baseline=mean(fict_rt), margin=0.1, kind="headline", paper_value=0.4791,
              paper="Table 1 (PopQA): Prereq-Tune 47.91 vs SFT_fictitious 44.98; persons 45.30 vs 15.44",
              paper_ref="Table 1 (PopQA)", spread=_spread(gap(multi_rt, fict_rt)), plot=PLOTS["factuality"], **common,
              note=f"multi-version Prereq-Tune {_fmt(multi_rt)} vs SFT_fictitious {_fmt(fict_rt)} (trained "
                   f"{_fmt(fict_epochs)} epochs); single-version Prereq-Tune {_fmt(single_rt)}; "
                   f"{_gap_note(multi_rt, fict_rt, True, 0.1)}; chance {chance:.4f}."),
        Claim("factuality/close_to_sft_real", "R_test QA accuracy: Prereq-Tune minus SFT_real (trained on real QA)",
              ours=mean(diff_real), threshold=-0.15, kind="headline", paper_value=0.4791 - 0.4642,
              paper="Table 1 (PopQA): Prereq-Tune 47.91 vs SFT (real data) 46.42", paper_ref="Table 1 (PopQA)",
              spread=_spread(diff_real), plot=PLOTS["factuality"], **common,
              note=f"Prereq-Tune {_fmt(multi_rt)} vs SFT_real {_fmt(real_rt)}; difference {_fmt(diff_real)}; "
                   f"ratio {mean(multi_rt) / max(1e-9, mean(real_rt)):.2f}."),
        Claim("control/v1_adapter_follows_v1", f"accuracy of {k1}+Δskill vs version-1 answers (baseline: vs version 2)",
              ours=mean(c11), baseline=mean(c12), margin=0.5, kind="headline", paper_value=0.9483,
              paper="Table 2: 94.83 vs 6.90", paper_ref="Table 2", spread=_spread(gap(c11, c12)),
              plot=PLOTS["control"], **common,
              note=f"vs V1 {_fmt(c11)}, vs V2 {_fmt(c12)}; {_gap_note(c11, c12, True, 0.5)}; fictitious training "
                   f"questions with the knowledge LoRA plugged back in (multi-version skill LoRA, {multi_ep} "
                   f"subject-epochs, {runs[0]['multi'].get('steps')} steps)."),
        Claim("control/v2_adapter_follows_v2", f"accuracy of {k2}+Δskill vs version-2 answers (baseline: vs version 1)",
              ours=mean(c22), baseline=mean(c21), margin=0.5, kind="headline", paper_value=0.9540,
              paper="Table 2: 95.40 vs 13.22", paper_ref="Table 2", spread=_spread(gap(c22, c21)),
              plot=PLOTS["control"], **common,
              note=f"vs V2 {_fmt(c22)}, vs V1 {_fmt(c21)}; {_gap_note(c22, c21, True, 0.5)}."),
        Claim("memorization/skill_lt_sft_fictitious",
              "accuracy on the fictitious training questions: Δskill alone (mean over its trained versions) vs "
              "SFT_fictitious on its own", ours=mean(mem_multi), baseline=mean(mem_fict), higher_is_better=False,
              margin=0.5, kind="headline", paper_value=0.0399, paper="Table 3: θ₀+Δskill 3.99 vs SFT_fictitious 58.01",
              paper_ref="Table 3", spread=_spread(gap(mem_multi, mem_fict, False)), plot=PLOTS["memorization"], **common,
              note=f"multi-version Δskill alone {_fmt(mem_multi)} (mean over the V answer versions; max "
                   f"{_fmt(mem_multi_max)}) vs SFT_fictitious {_fmt(mem_fict)}; "
                   f"{_gap_note(mem_multi, mem_fict, False, 0.5)}; chance {chance:.4f}."),
        Claim("ablation/multi_version_memorizes_less",
              "accuracy on the fictitious training questions, Δskill alone, mean over the versions each arm trained on: "
              "multi-version vs single-version (same optimiser steps)",
              ours=mean(mem_multi), baseline=mean(mem_single), higher_is_better=False, margin=ABLATION_MARGIN,
              kind="mechanism", paper="several knowledge versions keep the skill LoRA from memorising answers",
              paper_ref="Method, multi-version fictitious data, direction only",
              spread=_spread(gap(mem_multi, mem_single, False)), plot=PLOTS["memorization"], **common,
              note=f"multi-version {_fmt(mem_multi)} (versions 1..V, {multi_ep} subject-epochs) vs single-version "
                   f"{_fmt(mem_single)} (version 1, {single_ep} epochs); the single-version arm's predictions against "
                   f"the versions it never saw {_fmt(single_untrained)} (its chance level; world chance {chance:.4f}), "
                   f"so it memorised {mean(mem_single) - mean(single_untrained):+.3f} above chance; "
                   f"{_gap_note(mem_multi, mem_single, False, ABLATION_MARGIN)}."),
    ]
