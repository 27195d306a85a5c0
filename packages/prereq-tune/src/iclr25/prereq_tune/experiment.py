"""The reproduction's experiment: every method on one world and seed (:func:`run_seed`), at a scale
(:class:`ReproSettings`, :data:`QUICK`, :data:`FULL`).

All methods start from the same M0 (pre-trained on statements about R only):

1. **SFT_real** (reference): a skill LoRA on QA about R_train (real task data);
2. **SFT_fictitious** (baseline): a skill LoRA on QA about F (version 1) with no knowledge LoRA,
   trained until its training accuracy reaches 0.9 or for 80 epochs (it must fit its training set
   for the memorisation contrast);
3. **Prereq-Tune, single version**: knowledge LoRA(s) on D_know^(1), then the skill LoRA with them
   frozen, for as many optimiser steps as the multi-version arm (the ablation's equal budget);
4. **Prereq-Tune, multi-version**: knowledge LoRAs on D_know^(1..V), the skill LoRA with version
   routing (one drawn version per micro-batch).

Metric: greedy first answer token (chance = mean(1/24, 1/16, 1/20) = 0.0514). Memorisation (the skill
LoRA alone on the fictitious training questions) is scored the same way in both Prereq-Tune arms: accuracy
against the answers of the versions the arm was trained on, averaged over those versions (single: version 1;
multi: versions 1..V), next to the same predictions scored against versions it was not trained on (single:
versions 2..V; the empirical chance of its predictions).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .data import PromptFormat
from .lora import KNOWLEDGE_TINY, SKILL_TINY, LoraSpec
from .model import M0Spec
from .training import KNOWLEDGE_ARGS_TINY, SKILL_ARGS_TINY, TrainArgs

__all__ = ["ReproSettings", "QUICK", "FULL", "multi_epochs", "single_epochs", "run_seed", "frozen_report"]

log = logging.getLogger("iclr25.prereq_tune")
SLUG = "prereq-tune"


@dataclass(frozen=True)
class ReproSettings:
    """One reproduction scale.

    Args:
        n_real, n_fict, n_versions, n_templates, n_passages: the world (:func:`make_world`).
        formats: knowledge formats trained per version (``("statement",)`` or both; with both, the
            skill stage alternates between the statement and the passage group, as the official bio
            recipe does).
        m0: M0's size and pre-training.
        know_lora, skill_lora: LoRA recipes (knowledge r 32 / α 64, skill r 16 / α 32).
        know_args, skill_args: stage settings (skill_args also serve SFT_real).
        fict_max_epochs, fict_stop_acc, fict_eval_every: SFT_fictitious trains until its training
            accuracy reaches ``fict_stop_acc`` (checked every ``fict_eval_every`` epochs) or for
            ``fict_max_epochs`` epochs.
        multi_epochs: epochs of the multi-version skill LoRA, counted over subjects (one drawn version
            of each question per epoch). ``None``: ``skill_args.epochs × n_versions``, so that every
            (question, version) row is counted about ``skill_args.epochs`` times, as every row of the
            single-version and SFT arms is (the prototype's epochs over all V·|F| rows; with
            ``skill_args.epochs`` subject-epochs each row is counted only epochs / V times).
        single_epochs: epochs of the single-version Prereq-Tune skill LoRA. ``None``: as many optimiser
            steps as the multi-version arm (:func:`multi_epochs`; one row per subject and step in both), so
            the memorisation ablation compares the two arms at the same budget.
        fict_used: train and evaluate the fictitious arms (knowledge LoRAs, SFT_fictitious, both Prereq-Tune skill
            LoRAs, C2/C3) on the first ``fict_used`` entities of F only (``None``: all of F). The world, its
            vocabulary and M0 stay those of ``n_fict`` (M0 never sees F), so the quick world's packaged M0 serves.
        seeds: default seeds.
        share_world: later seeds reuse the first seed's world and M0 (adapter stages only).
        fast: the optimised path (the same method and recipe, float-rounding-level differences):
            M0's ``gelu_new`` replaced by the fused kernel of the same formula (:func:`fuse_gelu`) and
            the Prereq-Tune skill stages with ``knowledge_forward="merged"`` (the frozen knowledge
            LoRA folded into copies of the base weights). ``False``: the straightforward path (PEFT's
            stacked forward, the five-op GELU). Evaluation is the same in both (one forward pass per
            adapter stack, scored against every answer version).
    """

    n_real: int = 200
    n_fict: int = 100
    n_versions: int = 3
    n_templates: int = 3
    n_passages: int = 3
    formats: tuple[str, ...] = ("statement",)
    m0: M0Spec = field(default_factory=M0Spec)
    know_lora: LoraSpec = KNOWLEDGE_TINY
    skill_lora: LoraSpec = SKILL_TINY
    know_args: TrainArgs = KNOWLEDGE_ARGS_TINY
    skill_args: TrainArgs = SKILL_ARGS_TINY
    fict_max_epochs: int = 80
    fict_stop_acc: float = 0.9
    fict_eval_every: int = 5
    fict_used: int | None = None
    multi_epochs: float | None = None
    single_epochs: float | None = None
    seeds: tuple[int, ...] = (0, 1)
    share_world: bool = True
    fast: bool = True


#: Quick uses 50 of the world's 100 fictitious entities (``fict_used``): the fictitious stages cost about half
#: (the quick CPU budget, issue #48 §5), every recipe (epochs, learning rates, ranks) unchanged.
#: Quick: the knowledge LoRAs train 20 epochs instead of the prototype's 40 (measured on the quick
#: world, seed 0: statement completion 0.93 at 20 epochs as at 40, and the multi-version skill LoRA's
#: read-out with those adapters plugged in unchanged, 0.17 vs 0.18; 3 x 21 instead of 3 x 44 CPU-s per
#: seed). Full keeps 40.
QUICK = ReproSettings(know_args=replace(KNOWLEDGE_ARGS_TINY, epochs=20), fict_used=50)
FULL = ReproSettings(n_real=400, n_fict=200, formats=("statement", "passage"), seeds=(0, 1, 2), share_world=False)


def multi_epochs(s: ReproSettings) -> float:
    """Subject-epochs of the multi-version skill LoRA (see :class:`ReproSettings`)."""
    return float(s.multi_epochs) if s.multi_epochs is not None else float(s.skill_args.epochs * s.n_versions)


def fictitious_subset(world: Any, n: int | None) -> Any:
    """``world`` with F cut to its first ``n`` entities (``None``: unchanged). Use it after M0 is loaded: M0's
    cache key and tokenizer belong to the whole world."""
    if n is None or n >= len(world.fictitious):
        return world
    if n < 1:
        raise ValueError(f"fict_used must be >= 1, got {n}")
    return replace(world, fictitious=world.fictitious[:n])


def single_epochs(s: ReproSettings) -> float:
    """Epochs of the single-version skill LoRA (see :class:`ReproSettings`): the multi-version arm's
    subject-epochs by default (the same number of optimiser steps)."""
    return float(s.single_epochs) if s.single_epochs is not None else multi_epochs(s)


#: completion probes score the next word itself (" value"), as :func:`completion_accuracy` does
_VALUE_FMT = PromptFormat(prompt="{question}", answer=" {answer}")


def _know_name(form: str, v: int) -> str:
    return f"know_{form}_v{v}"


def knowledge_version(model: Any, tok: Any, world: Any, s: ReproSettings, v: int, world_seed: int, *,
                      quiet: bool = True) -> tuple[Any, dict[str, dict[str, Any]]]:
    """Stage 1 for version ``v``: one knowledge LoRA per format of ``s`` (seeded by the world: the knowledge LoRAs
    belong to the world, and every train seed on it shares them), each probed in its own training format.

    Returns:
        ``(model with the adapters, {adapter name: probe record})``.
    """
    import torch

    from .evaluation import completion_accuracy, first_token_accuracy, first_token_predictions
    from .lora import add_knowledge_adapter
    from .training import train_knowledge_adapter
    from .world import knowledge_corpus, passage_prompts, probe_ceiling, statement_prompts

    recs: dict[str, dict[str, Any]] = {}
    for i, form in enumerate(s.formats):
        name = _know_name(form, v)
        torch.manual_seed(1000 * world_seed + 10 * v + i)
        model = add_knowledge_adapter(model, name, s.know_lora)
        r = train_knowledge_adapter(model, tok, name, knowledge_corpus(world, v, form),
                                    replace(s.know_args, seed=1000 * world_seed + v), quiet=quiet)
        # probed in the adapter's own training format (stage 1 fits D_know in that format, spec §1.3):
        # statement prefixes for a statement adapter, passage prefixes for a passage adapter
        other = 1 + (v % s.n_versions)
        if form == "passage":
            probes = passage_prompts(world, "fictitious", v)
            probes_other = passage_prompts(world, "fictitious", v, answer_version=other)
        else:
            probes = statement_prompts(world, "fictitious", v)
            probes_other = statement_prompts(world, "fictitious", other)
        pred = first_token_predictions(model, tok, [p for p, _ in probes], adapters=[name])
        acc_own = first_token_accuracy(tok, pred, [[a] for _, a in probes], fmt=_VALUE_FMT)
        acc_other = first_token_accuracy(tok, pred, [[a] for _, a in probes_other], fmt=_VALUE_FMT)
        recs[name] = {"final_loss": r.final_loss, "steps": r.steps, "seconds": round(r.seconds, 2),
                      "probe_format": form, "completion_own_version": acc_own, "completion_other_version": acc_other,
                      "probe_ceiling": probe_ceiling(knowledge_corpus(world, v, form), probes)}
        if form == "passage":  # the cross-format number (statement prompts), for comparison only
            recs[name]["completion_statement_prompts"] = completion_accuracy(
                model, tok, statement_prompts(world, "fictitious", v), adapters=[name])
        log.info("world %d: knowledge LoRA %s: completion own version %.3f, other %.3f", world_seed, name, acc_own,
                 acc_other)
    return model, recs


def run_seed(settings: ReproSettings, world_seed: int, train_seed: int, *, cache: str | None = None,
             device: str = "cpu", quiet: bool = True, threads: int | None = 1,
             knowledge: dict[Any, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Run every method on one world and seed; returns all measured numbers (JSON-ready).

    Args:
        settings: the scale.
        world_seed: the world and M0 seed.
        train_seed: adapter initialisation and sampling seed.
        cache: M0 cache root (default: the user cache).
        device: torch device.
        quiet: no progress bars.
        threads: torch threads in this process.
        knowledge: the knowledge LoRAs of this world, already trained: ``{version: knowledge_job record}``
            (:func:`knowledge_job`: adapter folders and their probe numbers); ``None`` trains them here with
            the same seeds (:func:`knowledge_version`).

    Raises:
        FrozenTensorError: a knowledge-adapter or base tensor changed during the skill trainings (measured
            here, independently of the trainer's own check; :func:`frozen_report`).
    """
    import torch

    from iclr25.core.seed import seed_everything

    from .evaluation import completion_accuracy, first_token_accuracy, first_token_predictions, qa_accuracy
    from .lora import adapter_parameters, add_skill_adapter, load_adapter, tensor_hashes
    from .model import fuse_gelu, pretrain_m0
    from .training import train_skill_adapter
    from .world import (
        TINY_FORMAT,
        chance_accuracy,
        make_world,
        qa_items,
        skill_examples,
        statement_prompts,
    )

    if threads:
        torch.set_num_threads(threads)
    t_all = time.perf_counter()
    cpu0 = time.process_time()
    s = settings
    world = make_world(s.n_real, s.n_fict, s.n_versions, world_seed, n_templates=s.n_templates, n_passages=s.n_passages)
    m0, tok, m0_path, m0_info = pretrain_m0(world, replace(s.m0, seed=world_seed), cache=cache, progress=not quiet)
    world = fictitious_subset(world, s.fict_used)
    m0 = m0.to(device)
    if s.fast:
        fuse_gelu(m0)
    know_fwd = "merged" if s.fast else "stacked"
    out: dict[str, Any] = {"world_seed": world_seed, "train_seed": train_seed, "m0": {
        "path": str(m0_path), "cached": m0_info["cached"], "pretrain_seconds": m0_info.get("seconds"),
        "n_params": m0_info.get("n_params"), "vocab_size": len(tok)}, "chance": chance_accuracy(), "timing": {},
        "scale": {"n_real": s.n_real, "n_fict": s.n_fict, "fict_used": len(world.fictitious), "n_versions": s.n_versions,
                  "formats": list(s.formats)}}
    fmt = TINY_FORMAT
    rtest = qa_items(world, "real_test")
    ftrain = {v: qa_items(world, "fictitious", v) for v in range(1, s.n_versions + 1)}
    out["m0"]["completion_real_test"] = completion_accuracy(m0, tok, statement_prompts(world, "real_test"))
    out["m0"]["completion_real_train"] = completion_accuracy(m0, tok, statement_prompts(world, "real_train"))
    out["m0"]["qa_real_test"] = qa_accuracy(m0, tok, rtest, fmt=fmt)

    cpu_mark = [cpu0]

    def dump(stage: str) -> None:
        out["timing"]["cpu_so_far"] = round(time.process_time() - cpu0, 2)
        out["timing"]["wall_so_far"] = round(time.perf_counter() - t_all, 2)

    def tick(name: str, t0: float) -> None:
        out["timing"][name] = round(time.perf_counter() - t0, 2)
        now = time.process_time()
        out["timing"][f"cpu_{name}"] = round(now - cpu_mark[0], 2)  # this process's CPU-s in the stage
        cpu_mark[0] = now
        dump(name)
        st = out.get(f"{name}_summary", out.get(name, {}))
        nums = {k: v for k, v in (st.items() if isinstance(st, dict) else ()) if isinstance(v, float)}
        log.info("seed (world %d, train %d): %s done in %.0f s wall (%.0f CPU-s so far) %s", world_seed, train_seed,
                 name, out["timing"][name], out["timing"]["cpu_so_far"],
                 " ".join(f"{k}={v:.3f}" for k, v in nums.items()))

    tick("m0", t_all)

    seed_everything(train_seed)
    # --- stage 1: knowledge LoRAs (trained here, or loaded from the world's knowledge jobs) ------------
    model: Any = m0
    know: dict[int, list[str]] = {}
    out["knowledge"] = {}
    t0 = time.perf_counter()
    for v in range(1, s.n_versions + 1):
        if knowledge is not None:
            rec = knowledge[v] if v in knowledge else knowledge[str(v)]
            for name in rec["adapters"]:
                model = load_adapter(model, Path(rec["dir"]) / name, name, role="knowledge")
                know.setdefault(v, []).append(name)
            out["knowledge"].update(rec["knowledge"])
        else:
            model, recs = knowledge_version(model, tok, world, s, v, world_seed, quiet=quiet)
            know[v] = list(recs)
            out["knowledge"].update(recs)
        dump(f"knowledge/v{v}")
    out["knowledge_summary"] = {"min_completion_own": min(k["completion_own_version"] for k in out["knowledge"].values()),
                                "max_completion_other": max(k["completion_other_version"] for k in out["knowledge"].values())}
    tick("knowledge", t0)
    know_names = [_know_name(f, v) for f in s.formats for v in range(1, s.n_versions + 1)]  # statement group, passage group
    know_ids = {id(p) for n in know_names for p in adapter_parameters(model, n).values()}
    hashed_before = tensor_hashes(model)
    skill_names: list[str] = []

    def add_skill(name: str, k: int) -> None:
        nonlocal model
        torch.manual_seed(1000 * train_seed + 500 + k)
        model = add_skill_adapter(model, name, s.skill_lora)
        skill_names.append(name)
        hashed_before.update(tensor_hashes(model, include_only=[name]))  # the skill adapter's initial values

    # --- SFT_real ---------------------------------------------------------------------------------
    t0 = time.perf_counter()
    add_skill("sft_real", 0)
    r = train_skill_adapter(model, tok, skill_examples(world, "real_train"), (), replace(s.skill_args, seed=train_seed),
                            skill="sft_real", fmt=fmt, quiet=quiet)
    out["sft_real"] = {"real_test": qa_accuracy(model, tok, rtest, adapters=["sft_real"], fmt=fmt),
                       "steps": r.steps, "final_loss": r.final_loss}
    tick("sft_real", t0)

    # --- SFT_fictitious ---------------------------------------------------------------------------
    t0 = time.perf_counter()
    add_skill("sft_fict", 1)
    hist: list[dict[str, float]] = []

    def stop_fict(epoch: int, res: Any) -> bool:
        if epoch % s.fict_eval_every and epoch < s.fict_max_epochs:
            return False
        acc = qa_accuracy(model, tok, ftrain[1], adapters=["sft_fict"], fmt=fmt)
        hist.append({"epoch": epoch, "train_acc": acc})
        return acc >= s.fict_stop_acc

    r = train_skill_adapter(model, tok, skill_examples(world, "fictitious", 1), (),
                            replace(s.skill_args, epochs=s.fict_max_epochs, seed=train_seed), skill="sft_fict", fmt=fmt,
                            quiet=quiet, callback=stop_fict)
    last_eval = hist[-1]["train_acc"] if hist and hist[-1]["epoch"] == r.epochs_done else None  # same weights
    out["sft_fict"] = {"real_test": qa_accuracy(model, tok, rtest, adapters=["sft_fict"], fmt=fmt),
                       "own_train": last_eval if last_eval is not None else
                       qa_accuracy(model, tok, ftrain[1], adapters=["sft_fict"], fmt=fmt),
                       "epochs": r.epochs_done, "stopped_early": r.stopped_early, "history": hist, "steps": r.steps}
    tick("sft_fict", t0)

    # --- Prereq-Tune, single version --------------------------------------------------------------
    t0 = time.perf_counter()
    add_skill("skill_single", 2)
    r = train_skill_adapter(model, tok, skill_examples(world, "fictitious", 1), know[1],
                            replace(s.skill_args, epochs=single_epochs(s), seed=train_seed), skill="skill_single",
                            multi_version=True, alternate_groups=len(know[1]) > 1, fmt=fmt, quiet=quiet,
                            knowledge_forward=know_fwd)
    fq = ftrain[1]                      # the fictitious training questions (the same in every version)
    pred_single = first_token_predictions(model, tok, [fmt.render_prompt(it.question) for it in fq],
                                          adapters=["skill_single"])
    single_by_version = {v: first_token_accuracy(tok, pred_single, [it.answers for it in ftrain[v]], fmt) for v in ftrain}
    out["single"] = {"real_test": qa_accuracy(model, tok, rtest, adapters=["skill_single"], fmt=fmt),
                     "epochs": single_epochs(s), "fict_train_by_version": single_by_version,
                     "fict_train_v1": single_by_version[1],
                     "fict_train_untrained_versions": (sum(single_by_version[v] for v in ftrain if v != 1)
                                                       / max(1, len(ftrain) - 1)),
                     "with_know_v1": qa_accuracy(model, tok, ftrain[1], adapters=[know[1][0], "skill_single"], fmt=fmt),
                     "steps": r.steps, "draws": r.draws}
    tick("single", t0)

    # --- Prereq-Tune, multi-version ---------------------------------------------------------------
    t0 = time.perf_counter()
    add_skill("skill_multi", 3)
    r = train_skill_adapter(model, tok, skill_examples(world, "fictitious"), know_names,
                            replace(s.skill_args, epochs=multi_epochs(s), seed=train_seed), skill="skill_multi",
                            multi_version=True,
                            alternate_groups=len(s.formats) > 1, fmt=fmt, quiet=quiet, knowledge_forward=know_fwd)
    multi: dict[str, Any] = {"epochs": multi_epochs(s), "steps": r.steps, "draws": r.draws, "rows_forwarded": r.rows_forwarded,
                             "rows_counted": r.rows_counted}
    multi["real_test"] = qa_accuracy(model, tok, rtest, adapters=["skill_multi"], fmt=fmt)
    # one forward pass per adapter stack over the fictitious training questions (the same questions
    # in every version), scored against each version's answers
    pred_alone = first_token_predictions(model, tok, [fmt.render_prompt(it.question) for it in fq], adapters=["skill_multi"])
    skill_alone = {v: first_token_accuracy(tok, pred_alone, [it.answers for it in ftrain[v]], fmt) for v in ftrain}
    multi["fict_train_by_version"] = skill_alone
    multi["fict_train_max"] = max(skill_alone.values())
    multi["fict_train_mean"] = sum(skill_alone.values()) / len(skill_alone)   # the trained versions, averaged
    # knowledge-controlled QA (Table 2): adapter of version k plugged in, scored against version u
    ctrl: dict[str, dict[int, float]] = {}
    for k in (1, 2):
        adapter = know[k][0]
        pred_k = first_token_predictions(model, tok, [fmt.render_prompt(it.question) for it in fq],
                                         adapters=[adapter, "skill_multi"])
        ctrl[adapter] = {u: first_token_accuracy(tok, pred_k, [it.answers for it in ftrain[u]], fmt) for u in ftrain}
    multi["control"] = ctrl
    out["multi"] = multi
    tick("multi", t0)

    # --- the frozen invariant, measured independently of the trainer's own checks (raises) ----------
    out["frozen"] = frozen_report(model, hashed_before, know_ids, skill_names)
    out["timing"]["total"] = round(time.perf_counter() - t_all, 2)
    out["timing"]["cpu"] = round(time.process_time() - cpu0, 2)
    return json.loads(json.dumps(out, default=str))   # JSON-ready (version keys become strings)


def frozen_report(model: Any, hashed_before: dict[str, str], know_ids: set[int], skill_names: list[str]) -> dict[str, Any]:
    """Hash every tensor of ``model`` now and compare with ``hashed_before`` (sha256 per tensor, taken before
    the first skill training): knowledge-adapter and base tensors must be bit-identical, skill tensors should
    all have changed.

    Args:
        model: the PEFT model after the skill trainings.
        hashed_before: :func:`~iclr25.prereq_tune.lora.tensor_hashes` before them (skill adapters: at creation).
        know_ids: ``id()`` of every knowledge-adapter parameter.
        skill_names: the skill adapters' names.

    Returns:
        ``{"n_knowledge", "n_base", "n_skill", "changed_frozen": [], "skill_unchanged": [names]}``.

    Raises:
        FrozenTensorError: a knowledge-adapter or base tensor changed (naming up to five).
    """
    from .lora import FrozenTensorError, tensor_hashes

    hashed_after = tensor_hashes(model)
    names = [n for n, _ in model.named_parameters()]
    roles = {n: ("knowledge" if id(p) in know_ids else ("skill" if any(f".{sk}." in n for sk in skill_names) else "base"))
             for n, p in model.named_parameters()}
    changed = [n for n in names if hashed_before[n] != hashed_after[n]]
    rep = {"n_knowledge": sum(r == "knowledge" for r in roles.values()), "n_base": sum(r == "base" for r in roles.values()),
           "n_skill": sum(r == "skill" for r in roles.values()),
           "changed_frozen": [n for n in changed if roles[n] != "skill"],
           "skill_unchanged": [n for n in names if roles[n] == "skill" and n not in changed]}
    if rep["changed_frozen"]:
        raise FrozenTensorError(f"{len(rep['changed_frozen'])} knowledge-adapter/base tensor(s) changed during the skill "
                                f"trainings: {rep['changed_frozen'][:5]}")
    return rep


# ------------------------------------------------------------------------------------------------
# runner jobs (``iclr25.core.runner``): settings are JSON-ready dicts, records JSON-ready results

#: a seconds-long smoke scale for tests (a 20 + 10 entity world, one epoch per stage): it checks the plumbing,
#: not the claims
SMOKE = replace(QUICK, n_real=20, n_fict=10, m0=replace(QUICK.m0, epochs=2.0), know_args=replace(QUICK.know_args, epochs=1),
                skill_args=replace(QUICK.skill_args, epochs=1), fict_max_epochs=2, fict_eval_every=1)
#: the scales by name (a job's settings name one; ``settings`` holds the whole scale for ``--resume``)
SCALES = {"quick": QUICK, "full": FULL, "smoke": SMOKE}


def scale_settings(scale: str) -> ReproSettings:
    """:data:`QUICK` or :data:`FULL` by name."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {sorted(SCALES)}")
    return SCALES[scale]


def m0_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job: M0 of world ``seed`` (packaged, cached, or pre-trained once at one thread); the record says
    where it is and whether it was pre-trained in this run."""
    from .model import pretrain_m0
    from .world import make_world

    s = scale_settings(settings["scale"])
    world = make_world(s.n_real, s.n_fict, s.n_versions, seed, n_templates=s.n_templates, n_passages=s.n_passages)
    _, _, path, info = pretrain_m0(world, replace(s.m0, seed=seed), cache=settings.get("cache"), progress=False)
    return {"path": str(path), "cached": bool(info["cached"]), "packaged": bool(info.get("packaged", False)),
            "pretrain_seconds": info.get("seconds")}


def knowledge_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job: the knowledge LoRAs of version ``settings["version"]`` on world ``seed``
    (:func:`knowledge_version`), saved under ``settings["dir"]`` for the seed jobs of that world."""
    from .lora import save_adapter
    from .model import fuse_gelu, pretrain_m0
    from .world import make_world

    s = scale_settings(settings["scale"])
    v = int(settings["version"])
    world = make_world(s.n_real, s.n_fict, s.n_versions, seed, n_templates=s.n_templates, n_passages=s.n_passages)
    m0, tok, _, _ = pretrain_m0(world, replace(s.m0, seed=seed), cache=settings.get("cache"), progress=False)
    world = fictitious_subset(world, s.fict_used)
    if s.fast:
        fuse_gelu(m0)
    model, recs = knowledge_version(m0, tok, world, s, v, seed, quiet=True)
    for name in recs:
        save_adapter(model, name, Path(settings["dir"]) / name, role="knowledge", extra={"version": v})
    return {"dir": settings["dir"], "adapters": list(recs), "knowledge": recs}


def seed_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job: every method on world ``settings["world_seed"]`` with train seed ``seed`` (:func:`run_seed`),
    with the world's knowledge LoRAs from its knowledge jobs (``deps``)."""
    s = scale_settings(settings["scale"])
    knowledge = {int(k.rsplit("-v", 1)[1]): r for k, r in deps.items() if k.startswith("know-")}
    return run_seed(s, int(settings["world_seed"]), int(seed), cache=settings.get("cache"),
                    device=settings.get("device", "cpu"), quiet=True, threads=None, knowledge=knowledge or None)
