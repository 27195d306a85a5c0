"""CPU-scale reproduction of Prereq-Tune's claims on the synthetic world (spec §4, issue #23).

All methods start from the same M0 (pre-trained on statements about R only):

1. **SFT_real** (reference): a skill LoRA on QA about R_train (real task data);
2. **SFT_fictitious** (baseline): a skill LoRA on QA about F (version 1) with no knowledge LoRA,
   trained until its training accuracy reaches 0.9 or for 80 epochs (it must fit its training set
   for the memorisation contrast);
3. **Prereq-Tune, single version**: knowledge LoRA(s) on D_know^(1), then the skill LoRA with them
   frozen;
4. **Prereq-Tune, multi-version**: knowledge LoRAs on D_know^(1..V), the skill LoRA with version
   routing (one drawn version per micro-batch).

Metric: greedy first answer token (chance = mean(1/24, 1/16, 1/20) = 0.0514). ``quick`` runs the
quick world (|R| 200, |F| 100, V 3, statement knowledge) for two seeds in parallel processes: the
first seed's world and M0; the second seed reuses that cached M0 and world and reruns only the
adapter stages (its own adapter initialisation and sampling), because a second world would need a
second M0 pre-training, which does not fit the quick budget. ``full`` runs |R| 400, |F| 200, V 3,
both knowledge formats (statement and passage, alternating groups), three seeds, each with its own
world and M0 (cached per seed). M0's one-time pre-training is reported separately.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from iclr25.core import Claim

from ._version import __version__
from .data import PromptFormat
from .lora import KNOWLEDGE_TINY, SKILL_TINY, LoraSpec
from .model import M0Spec
from .training import KNOWLEDGE_ARGS_TINY, SKILL_ARGS_TINY, TrainArgs

__all__ = ["ReproSettings", "QUICK", "FULL", "multi_epochs", "run_seed", "reproduce", "claims_from_runs"]

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
    multi_epochs: float | None = None
    seeds: tuple[int, ...] = (0, 1)
    share_world: bool = True
    fast: bool = True


#: Quick: the knowledge LoRAs train 20 epochs instead of the prototype's 40 (measured on the quick
#: world, seed 0: statement completion 0.93 at 20 epochs as at 40, and the multi-version skill LoRA's
#: read-out with those adapters plugged in unchanged, 0.17 vs 0.18; 3 x 21 instead of 3 x 44 CPU-s per
#: seed). Full keeps 40.
QUICK = ReproSettings(know_args=replace(KNOWLEDGE_ARGS_TINY, epochs=20))
FULL = ReproSettings(n_real=400, n_fict=200, formats=("statement", "passage"), seeds=(0, 1, 2), share_world=False)


def multi_epochs(s: ReproSettings) -> float:
    """Subject-epochs of the multi-version skill LoRA (see :class:`ReproSettings`)."""
    return float(s.multi_epochs) if s.multi_epochs is not None else float(s.skill_args.epochs * s.n_versions)


#: completion probes score the next word itself (" value"), as :func:`completion_accuracy` does
_VALUE_FMT = PromptFormat(prompt="{question}", answer=" {answer}")


def _know_name(form: str, v: int) -> str:
    return f"know_{form}_v{v}"


def run_seed(settings: ReproSettings, world_seed: int, train_seed: int, *, cache: str | None = None,
             device: str = "cpu", quiet: bool = True, threads: int | None = 1,
             partial: str | Path | None = None) -> dict[str, Any]:
    """Run every method on one world and seed; returns all measured numbers (JSON-ready).

    Args:
        settings: the scale.
        world_seed: the world and M0 seed.
        train_seed: adapter initialisation and sampling seed.
        cache: M0 cache root (default: the user cache).
        device: torch device.
        quiet: no progress bars.
        threads: torch threads in this process.
        partial: if given, the numbers measured so far are written there (JSON) after M0 and after
            every stage, and a one-line summary is logged, so an interrupted seed still shows what it
            measured (marked ``"partial": true``; the finished seed's checkpoint replaces it).
    """
    import torch

    from iclr25.core.seed import seed_everything

    from .evaluation import completion_accuracy, first_token_accuracy, first_token_predictions, qa_accuracy
    from .lora import adapter_parameters, add_knowledge_adapter, add_skill_adapter, tensor_hashes
    from .model import fuse_gelu, pretrain_m0
    from .training import train_knowledge_adapter, train_skill_adapter
    from .world import (
        TINY_FORMAT,
        chance_accuracy,
        knowledge_corpus,
        make_world,
        passage_prompts,
        probe_ceiling,
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
    m0 = m0.to(device)
    if s.fast:
        fuse_gelu(m0)
    know_fwd = "merged" if s.fast else "stacked"
    out: dict[str, Any] = {"world_seed": world_seed, "train_seed": train_seed, "m0": {
        "path": str(m0_path), "cached": m0_info["cached"], "pretrain_seconds": m0_info.get("seconds"),
        "n_params": m0_info.get("n_params"), "vocab_size": len(tok)}, "chance": chance_accuracy(), "timing": {}}
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
        if partial is not None:
            from iclr25.core.checkpoint import atomic_write_text

            atomic_write_text(Path(partial), json.dumps({"partial": True, "last_stage": stage, **out}, default=str) + "\n")

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
    # --- stage 1: knowledge LoRAs ----------------------------------------------------------------
    model: Any = m0
    know: dict[int, list[str]] = {}
    out["knowledge"] = {}
    t0 = time.perf_counter()
    for v in range(1, s.n_versions + 1):
        for form in s.formats:
            name = _know_name(form, v)
            torch.manual_seed(1000 * train_seed + 10 * v + len(know.get(v, [])))
            model = add_knowledge_adapter(model, name, s.know_lora)
            r = train_knowledge_adapter(model, tok, name, knowledge_corpus(world, v, form),
                                        replace(s.know_args, seed=1000 * train_seed + v), quiet=quiet)
            know.setdefault(v, []).append(name)
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
            out["knowledge"][name] = {"final_loss": r.final_loss, "steps": r.steps, "seconds": round(r.seconds, 2),
                                      "probe_format": form, "completion_own_version": acc_own,
                                      "completion_other_version": acc_other,
                                      "probe_ceiling": probe_ceiling(knowledge_corpus(world, v, form), probes)}
            if form == "passage":  # the cross-format number (statement prompts), for comparison only
                out["knowledge"][name]["completion_statement_prompts"] = completion_accuracy(
                    model, tok, statement_prompts(world, "fictitious", v), adapters=[name])
            dump(f"knowledge/{name}")
            log.info("seed (world %d, train %d): knowledge LoRA %s: completion own version %.3f, other %.3f "
                     "(%.0f CPU-s so far)", world_seed, train_seed, name, acc_own, acc_other, out["timing"]["cpu_so_far"])
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
                            replace(s.skill_args, seed=train_seed), skill="skill_single", multi_version=True,
                            alternate_groups=len(know[1]) > 1, fmt=fmt, quiet=quiet, knowledge_forward=know_fwd)
    out["single"] = {"real_test": qa_accuracy(model, tok, rtest, adapters=["skill_single"], fmt=fmt),
                     "fict_train_v1": qa_accuracy(model, tok, ftrain[1], adapters=["skill_single"], fmt=fmt),
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
    fq = ftrain[1]
    pred_alone = first_token_predictions(model, tok, [fmt.render_prompt(it.question) for it in fq], adapters=["skill_multi"])
    skill_alone = {v: first_token_accuracy(tok, pred_alone, [it.answers for it in ftrain[v]], fmt) for v in ftrain}
    multi["fict_train_by_version"] = skill_alone
    multi["fict_train_max"] = max(skill_alone.values())
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

    # --- the frozen invariant, measured independently of the trainer's own checks -------------------
    hashed_after = tensor_hashes(model)
    names = [n for n, _ in model.named_parameters()]
    roles = {n: ("knowledge" if id(p) in know_ids else ("skill" if any(f".{sk}." in n for sk in skill_names) else "base"))
             for n, p in model.named_parameters()}
    changed = [n for n in names if hashed_before[n] != hashed_after[n]]
    out["frozen"] = {
        "n_knowledge": sum(r == "knowledge" for r in roles.values()), "n_base": sum(r == "base" for r in roles.values()),
        "n_skill": sum(r == "skill" for r in roles.values()),
        "changed_frozen": [n for n in changed if roles[n] != "skill"],
        "skill_unchanged": [n for n in names if roles[n] == "skill" and n not in changed],
    }
    out["timing"]["total"] = round(time.perf_counter() - t_all, 2)
    out["timing"]["cpu"] = round(time.process_time() - cpu0, 2)
    return out


# ------------------------------------------------------------------------------------------------
# claims


def _ms(xs: list[float]) -> tuple[float, float]:
    import numpy as np

    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def _gap_note(ours: list[float], base: list[float], hib: bool, margin: float) -> str:
    gaps = [(o - b) if hib else (b - o) for o, b in zip(ours, base)]
    g, sd = _ms(gaps)
    n = len(gaps)
    exceeds = abs(g) > sd if n > 1 else False
    per = ", ".join(f"{x:+.3f}" for x in gaps)
    return (f"gap (in the claim's direction) {g:+.3f} ± {sd:.3f} over {n} seed(s) [{per}]; "
            + ("the gap exceeds the seed spread" if exceeds else
               ("the gap does not exceed the seed spread" if n > 1 else "one seed: no spread")) +
            f"; margin {margin}")


def _fmt(xs: list[float]) -> str:
    m, sd = _ms(xs)
    return f"{m:.3f} ± {sd:.3f} [{', '.join(f'{x:.3f}' for x in xs)}]"


def claims_from_runs(runs: list[dict[str, Any]], *, quick: bool, shared_world: bool) -> list[Claim]:
    """Build the claims from :func:`run_seed` outputs (one per seed)."""
    chance = runs[0]["chance"]
    n = len(runs)
    seeds_note = (f"{n} seed(s) (train seeds {[r['train_seed'] for r in runs]}, world seeds "
                  f"{sorted({r['world_seed'] for r in runs})})")
    if shared_world and n > 1:
        seeds_note += ("; quick: the later seed(s) reuse the first seed's world and cached M0 and rerun only the adapter "
                       "stages (a second M0 pre-training does not fit the quick budget)")
    col = lambda f: [f(r) for r in runs]  # noqa: E731
    m0c = col(lambda r: r["m0"]["completion_real_test"])
    m0qa = col(lambda r: r["m0"]["qa_real_test"])
    know_acc = col(lambda r: min(k["completion_own_version"] for k in r["knowledge"].values()))
    know_other = col(lambda r: max(k["completion_other_version"] for k in r["knowledge"].values()))
    know_ceil = col(lambda r: min(k.get("probe_ceiling", float("nan")) for k in r["knowledge"].values()))
    cross = [k.get("completion_statement_prompts") for r in runs for k in r["knowledge"].values()
             if k.get("completion_statement_prompts") is not None]
    changed = col(lambda r: len(r["frozen"]["changed_frozen"]))
    unchanged_skill = col(lambda r: len(r["frozen"]["skill_unchanged"]))
    n_frozen = runs[0]["frozen"]["n_knowledge"] + runs[0]["frozen"]["n_base"]
    multi_rt = col(lambda r: r["multi"]["real_test"])
    single_rt = col(lambda r: r["single"]["real_test"])
    fict_rt = col(lambda r: r["sft_fict"]["real_test"])
    real_rt = col(lambda r: r["sft_real"]["real_test"])
    diff_real = [a - b for a, b in zip(multi_rt, real_rt)]
    k1 = [k for k in runs[0]["multi"]["control"] if k.endswith("_v1")][0]
    k2 = [k for k in runs[0]["multi"]["control"] if k.endswith("_v2")][0]

    def ctl(k: str, u: int) -> list[float]:
        return col(lambda r: r["multi"]["control"][k][u] if u in r["multi"]["control"][k] else
                   r["multi"]["control"][k][str(u)])

    c11, c12, c22, c21 = ctl(k1, 1), ctl(k1, 2), ctl(k2, 2), ctl(k2, 1)
    mem_multi = col(lambda r: r["multi"]["fict_train_max"])
    mem_single = col(lambda r: r["single"]["fict_train_v1"])
    mem_fict = col(lambda r: r["sft_fict"]["own_train"])
    fict_epochs = col(lambda r: r["sft_fict"]["epochs"])
    rows_ratio = col(lambda r: r["multi"]["rows_forwarded"] / max(1, r["multi"]["rows_counted"]))
    mean = lambda xs: _ms(xs)[0]  # noqa: E731
    scale = "quick world |R| 200, |F| 100, V 3, statement knowledge" if quick else \
        "full world |R| 400, |F| 200, V 3, statement + passage knowledge"
    claims = [
        Claim("invariant/frozen_bit_identical", "knowledge-adapter and base tensors changed by skill training (sum over seeds)",
              ours=float(sum(changed)), threshold=0.0, higher_is_better=False,
              paper="official code re-freezes knowledge LoRAs after every set_adapter (PEFT issue 1374)",
              note=f"sha256 of all {n_frozen} knowledge-adapter and base tensors before the first and after the last skill "
                   f"training (SFT_real, SFT_fictitious, single- and multi-version Prereq-Tune), measured by the "
                   f"reproduction itself; skill tensors left unchanged: {sum(unchanged_skill)} of "
                   f"{runs[0]['frozen']['n_skill']} per seed (every skill tensor changed: "
                   f"{'yes' if sum(unchanged_skill) == 0 else 'no'}). {seeds_note}."),
        Claim("mechanism/base_knows_real_facts", "M0 statement-completion accuracy on R_test (first token)",
              ours=mean(m0c), threshold=0.8, paper="the base model knows the facts the skill LoRA must learn to read",
              note=f"{_fmt(m0c)}; chance {chance:.4f}; M0's QA accuracy on R_test before any SFT (it never saw the QA "
                   f"format) {_fmt(m0qa)}. {scale}."),
        Claim("mechanism/knowledge_adapters_hold_facts",
              "completion on F with Δknow⁽ᵛ⁾ in the adapter's own training format, worst adapter",
              ours=mean(know_acc), threshold=0.8,
              paper="stage 1 makes the knowledge LoRAs know the fictitious facts (prerequisite for C2/C3)",
              note=f"min over knowledge adapters of completion accuracy under the adapter's own version, each adapter "
                   f"probed with prefixes of its own corpus (statement adapters: statement prefixes; passage adapters: "
                   f"passage prefixes up to each value; stage 1 fits D_know in its format, spec §1.3): {_fmt(know_acc)}; "
                   f"the probes' corpus baseline (a predictor fitting the corpus exactly, ties broken at random; 'X was "
                   f"born in' continues with a city or with 'the year') min {_fmt(know_ceil)}; against another version's facts "
                   f"(max over adapters) {_fmt(know_other)}"
                   + (f"; passage adapters on statement prompts (another format, for comparison) "
                      f"{min(cross):.3f}–{max(cross):.3f}" if cross else "") + "."),
        Claim("factuality/prereq_gt_sft_fictitious", "R_test QA accuracy, no knowledge adapter (θ₀+Δskill)",
              ours=mean(multi_rt), baseline=mean(fict_rt), margin=0.1,
              paper="Table 1: Prereq-Tune 47.91 vs SFT_fictitious 44.98 (PopQA); persons 45.30 vs 15.44",
              note=f"multi-version Prereq-Tune {_fmt(multi_rt)} vs SFT_fictitious {_fmt(fict_rt)} (trained "
                   f"{_fmt(fict_epochs)} epochs); single-version Prereq-Tune {_fmt(single_rt)}; "
                   f"{_gap_note(multi_rt, fict_rt, True, 0.1)}; chance {chance:.4f}."),
        Claim("factuality/close_to_sft_real", "R_test QA accuracy: Prereq-Tune minus SFT_real",
              ours=mean(diff_real), threshold=-0.15,
              paper="prototype: Prereq-Tune reached 74–93 % of SFT_real (trained on real QA)",
              note=f"Prereq-Tune {_fmt(multi_rt)} vs SFT_real {_fmt(real_rt)}; difference {_fmt(diff_real)}; "
                   f"ratio {mean(multi_rt) / max(1e-9, mean(real_rt)):.2f}."),
        Claim("control/v1_adapter_follows_v1", f"accuracy of {k1}+Δskill vs version-1 answers (baseline: vs version 2)",
              ours=mean(c11), baseline=mean(c12), margin=0.5, paper="Table 2: 94.83 vs 6.90",
              note=f"vs V1 {_fmt(c11)}, vs V2 {_fmt(c12)}; {_gap_note(c11, c12, True, 0.5)}; fictitious training "
                   f"questions with the knowledge LoRA plugged back in (multi-version skill LoRA, "
                   f"{runs[0]['multi'].get('epochs', '?')} subject-epochs, {runs[0]['multi'].get('steps', '?')} steps)."),
        Claim("control/v2_adapter_follows_v2", f"accuracy of {k2}+Δskill vs version-2 answers (baseline: vs version 1)",
              ours=mean(c22), baseline=mean(c21), margin=0.5, paper="Table 2: 95.40 vs 13.22",
              note=f"vs V2 {_fmt(c22)}, vs V1 {_fmt(c21)}; {_gap_note(c22, c21, True, 0.5)}."),
        Claim("memorization/skill_lt_sft_fictitious",
              "accuracy on the fictitious training questions: Δskill alone (max over versions) vs SFT_fictitious on its own",
              ours=mean(mem_multi), baseline=mean(mem_fict), higher_is_better=False, margin=0.5,
              paper="Table 3: θ₀+Δskill 3.99 vs SFT_fictitious 58.01",
              note=f"multi-version Δskill alone {_fmt(mem_multi)} (max over the V answer versions) vs SFT_fictitious "
                   f"{_fmt(mem_fict)}; {_gap_note(mem_multi, mem_fict, False, 0.5)}; chance {chance:.4f}."),
        Claim("ablation/multi_version_memorizes_less",
              "accuracy on the fictitious training questions, Δskill alone: multi-version vs single-version",
              ours=mean(mem_multi), baseline=mean(mem_single), higher_is_better=False, margin=0.0,
              paper="§1.4: several versions keep the skill LoRA from memorising answers",
              note=f"multi-version {_fmt(mem_multi)} (max over versions) vs single-version {_fmt(mem_single)} (its "
                   f"version-1 answers); {_gap_note(mem_multi, mem_single, False, 0.0)}. Rows forwarded per counted row "
                   f"in multi-version training: {mean(rows_ratio):.2f} (the official sampler: {runs[0]['multi'].get('V', 3)})."),
    ]
    return claims


def _worker(args: tuple) -> dict[str, Any]:
    settings, ws, ts, cache, quiet, threads = args
    from iclr25.core.threads import set_threads

    set_threads(threads)
    return run_seed(settings, ws, ts, cache=cache, device="cpu", quiet=quiet, threads=threads)


def reproduce(quick: bool = True, out_dir: str | Path = Path("results") / SLUG, *, seeds: list[int] | None = None,
              device: str = "auto", threads: int | None = None, quiet: bool = False,
              cache: str | Path | None = None, resume: bool = False) -> list[Claim]:
    """Reproduce the claims (module docstring); writes ``runs.json`` (every number per seed) and a
    Markdown table of the per-method accuracies to ``out_dir``. Each finished seed is checkpointed at
    once to ``out_dir/seeds/seed-w<world>-t<train>.json`` (with a key of the settings and seeds).

    Args:
        quick: the quick world and two seeds (second seed adapter stages only), else the full run.
        out_dir: output folder.
        seeds: train seeds (default: the scale's). In quick mode every seed uses the first seed's world.
        device: ``auto`` runs on CUDA when available (seeds then run one after another).
        threads: total CPU threads (default: all cores); seeds run in parallel processes, one
            thread each, when there are at least as many threads as seeds. M0's pre-training on
            CPU always uses one thread (see the comment in the body).
        quiet: no progress bars.
        cache: M0 cache root (default: the user cache).
        resume: reuse the seeds an earlier run into ``out_dir`` finished with the same settings
            (a checkpoint with other settings is ignored and recomputed, with a log line).

    Returns:
        The claims.
    """
    import concurrent.futures as cf

    from iclr25.core.seed import choose_device

    from .model import m0_dir, pretrain_m0
    from .world import make_world

    s = QUICK if quick else FULL
    seeds = list(seeds) if seeds else list(s.seeds)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan = [((seeds[0] if s.share_world else sd), sd) for sd in seeds]
    done: dict[tuple[int, int], dict[str, Any]] = {}
    for ws, ts in plan:
        r = _load_seed(out, s, ws, ts) if resume else None
        if r is not None:
            log.info("seed (world %d, train %d): reusing %s (--resume)", ws, ts, _seed_path(out, ws, ts))
            done[(ws, ts)] = r
    todo = [p for p in plan if p not in done]
    n_threads = threads or os.cpu_count() or 1
    # The seed workers fork from a forkserver that imports the training stack (torch, transformers, peft:
    # ~25 CPU-s, most of it peft pulling in torch._dynamo) once; spawned workers paid it once each. When
    # the run will be on CPU it is started first, so that its imports overlap this process's own start-up.
    ctx = None
    if len(todo) > 1 and n_threads >= 2 and _cpu_likely(device):
        ctx = _forkserver_context()
    dev = choose_device(device)
    parallel = dev == "cpu" and len(todo) > 1 and n_threads >= 2
    # M0 first, in this process (one-time pre-training, reported separately). On CPU it runs with ONE
    # intra-op thread whatever --threads says: its ops are tiny (128 x ~11 tokens x d 96), so a second
    # OpenMP thread buys little and, on a shared machine, costs much more (measured under load: 0.96
    # CPU-s and 1.41 s wall per step at 2 threads vs 0.21 CPU-s and 0.41 s at 1 thread; README).
    t0 = time.perf_counter()
    m0_info: dict[int, dict[str, Any]] = {}

    def pretrain(ws: int, *, load: bool = True) -> None:
        if ws in m0_info:
            return
        world = make_world(s.n_real, s.n_fict, s.n_versions, ws, n_templates=s.n_templates, n_passages=s.n_passages)
        spec = replace(s.m0, seed=ws)
        d = m0_dir(world, spec, cache)
        if not load and (d / "config.json").is_file() and (d / "m0_train.json").is_file():
            # cached: the workers load it themselves; this process only records where it is (no torch work
            # here, so nothing but the imports is paid twice)
            info = {**json.loads((d / "m0_train.json").read_text()), "cached": True}
            path = d
        else:
            import torch  # noqa: F401  (imported first so limited_threads also sets torch's count)

            from iclr25.core.threads import limited_threads

            with limited_threads(1 if dev == "cpu" else None):
                _, _, path, info = pretrain_m0(world, spec, cache=cache, progress=not quiet)
        m0_info[ws] = {"path": str(path), "cached": info["cached"], "pretrain_seconds": info.get("seconds"),
                       "threads": 1 if dev == "cpu" else None}

    m0_seconds = 0.0
    if parallel:  # every M0 first, in this process, then the seeds in parallel processes
        for ws in sorted({w for w, _ in todo}):
            pretrain(ws, load=False)
        m0_seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    if parallel:
        per = max(1, n_threads // len(todo))
        ctx = ctx or _forkserver_context()
        try:
            with cf.ProcessPoolExecutor(max_workers=min(len(todo), n_threads), mp_context=ctx) as ex:
                futs = {ex.submit(_worker, (s, ws, ts, cache, True, per)): (ws, ts) for ws, ts in todo}
                for f in cf.as_completed(futs):
                    done[futs[f]] = _save_seed(out, s, *futs[f], f.result())
        finally:
            _stop_forkserver()
    else:  # one seed after another, each with its own M0 just before it (a partial run has whole seeds)
        for ws, ts in todo:
            tm = time.perf_counter()
            pretrain(ws)
            m0_seconds += time.perf_counter() - tm
            part = _seed_path(out, ws, ts).with_suffix(".partial.json")
            done[(ws, ts)] = _save_seed(out, s, ws, ts, run_seed(s, ws, ts, cache=cache, device=dev, quiet=quiet,
                                                                  threads=None, partial=part))
            part.unlink(missing_ok=True)
            log.info("seed (world %d, train %d) done; checkpoint %s", ws, ts, _seed_path(out, ws, ts))
    runs = [done[p] for p in plan]
    for ws, _ in plan:
        m0_info.setdefault(ws, {"path": runs[[w for w, _ in plan].index(ws)]["m0"]["path"], "reused": True})
    stages_seconds = time.perf_counter() - t1 - (0.0 if parallel else m0_seconds)
    claims = claims_from_runs(runs, quick=quick, shared_world=s.share_world)
    meta = {"settings": _jsonable(asdict(s)), "m0": m0_info, "m0_seconds_this_run": round(m0_seconds, 2),
            "stages_seconds": round(stages_seconds, 2), "seeds": seeds, "version": __version__,
            "resumed_seeds": [list(p) for p in plan if p not in todo]}
    (out / "runs.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1, default=str) + "\n")
    (out / "methods.md").write_text(methods_table(runs) + "\n")
    _plot(out, runs)
    return claims


#: what the seed workers' forkserver imports once (see :func:`reproduce`)
_PRELOAD = ["numpy", "torch", "transformers", "tokenizers", "peft", "transformers.models.gpt2.modeling_gpt2",
            "iclr25.core.lm", "iclr25.prereq_tune.reproduce", "iclr25.prereq_tune.training", "iclr25.prereq_tune.lora",
            "iclr25.prereq_tune.evaluation", "iclr25.prereq_tune.model", "iclr25.prereq_tune.world"]


def _forkserver_context() -> Any:
    """A ``forkserver`` multiprocessing context whose server preloads :data:`_PRELOAD` (started now, in the
    background). Workers are forked from that single-threaded server, which has imported the modules but
    run no torch op, so each worker skips the imports a ``spawn`` worker pays."""
    import multiprocessing as mp
    from multiprocessing import forkserver

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    forkserver.ensure_running()
    return ctx


def _stop_forkserver() -> None:
    """Stop the forkserver and wait for it. The workers are its children (it reaps them), so only once this
    process has waited for the server do the workers' and the server's CPU-seconds count among this
    process's finished children (``RUSAGE_CHILDREN``: ``/usr/bin/time`` and ``results.json``'s
    ``cpu_seconds``); without it they would report the parent's CPU alone."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    stop = getattr(server, "_stop", None)
    if stop is None:  # pragma: no cover - a Python without ForkServer._stop
        log.warning("cannot stop the forkserver: the workers' CPU-seconds are missing from cpu_seconds")
        return
    stop()


def _cpu_likely(device: str) -> bool:
    """Whether ``device`` will resolve to the CPU, decided without importing torch (``auto`` on Linux with
    no NVIDIA or ROCm device node); only used to start the workers' forkserver early."""
    if device == "cpu":
        return True
    if device != "auto" or not sys.platform.startswith("linux"):
        return False
    return not (Path("/dev/nvidiactl").exists() or Path("/dev/kfd").exists() or any(Path("/dev").glob("nvidia[0-9]*")))


def _seed_path(out: Path, ws: int, ts: int) -> Path:
    return out / "seeds" / f"seed-w{ws}-t{ts}.json"


def _seed_key(s: ReproSettings, ws: int, ts: int) -> str:
    import hashlib

    return hashlib.sha256(json.dumps([_jsonable(asdict(s)), ws, ts], sort_keys=True).encode()).hexdigest()[:16]


def _save_seed(out: Path, s: ReproSettings, ws: int, ts: int, run: dict[str, Any]) -> dict[str, Any]:
    """Write one finished seed atomically; returns the run as a resumed run would see it (JSON round trip)."""
    from iclr25.core.checkpoint import atomic_write_text

    atomic_write_text(_seed_path(out, ws, ts),
                      json.dumps({"key": _seed_key(s, ws, ts), "version": __version__, "run": run}, default=str) + "\n")
    return _jsonable(run)


def _load_seed(out: Path, s: ReproSettings, ws: int, ts: int) -> dict[str, Any] | None:
    p = _seed_path(out, ws, ts)
    if not p.is_file():
        return None
    try:
        d = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON ({e}); delete it to recompute that seed") from None
    if d.get("key") != _seed_key(s, ws, ts):
        log.warning("%s was written with other settings; recomputing that seed", p)
        return None
    return d["run"]


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def methods_table(runs: list[dict[str, Any]]) -> str:
    """Markdown: per-method accuracies (mean ± sd over seeds)."""
    col = lambda f: [f(r) for r in runs]  # noqa: E731
    rows = [
        ("M0 statement completion, R_test", col(lambda r: r["m0"]["completion_real_test"])),
        ("C1 R_test QA: SFT_real", col(lambda r: r["sft_real"]["real_test"])),
        ("C1 R_test QA: SFT_fictitious", col(lambda r: r["sft_fict"]["real_test"])),
        ("C1 R_test QA: Prereq-Tune single-version", col(lambda r: r["single"]["real_test"])),
        ("C1 R_test QA: **Prereq-Tune multi-version**", col(lambda r: r["multi"]["real_test"])),
    ]
    for k in runs[0]["multi"]["control"]:
        for u in (1, 2):
            rows.append((f"C2 {k}+Δskill vs V{u}", col(lambda r, k=k, u=u: r["multi"]["control"][k].get(u, r["multi"]["control"][k].get(str(u))))))
    rows += [
        ("C2 θ₀+Δskill vs V1 (no knowledge adapter)", col(lambda r: r["multi"]["fict_train_by_version"].get(1, r["multi"]["fict_train_by_version"].get("1")))),
        ("C3 Δskill alone on F train (max over versions)", col(lambda r: r["multi"]["fict_train_max"])),
        ("C3 single-version Δskill alone on F train (v1)", col(lambda r: r["single"]["fict_train_v1"])),
        ("C3 SFT_fictitious on its own training questions", col(lambda r: r["sft_fict"]["own_train"])),
        ("SFT_fictitious epochs trained", col(lambda r: float(r["sft_fict"]["epochs"]))),
    ]
    lines = ["| measurement | mean ± sd | per seed |", "| --- | --- | --- |"]
    for name, xs in rows:
        m, sd = _ms(xs)
        lines.append(f"| {name} | {m:.3f} ± {sd:.3f} | {', '.join(f'{x:.3f}' for x in xs)} |")
    return "\n".join(lines)


def _plot(out: Path, runs: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.info("matplotlib not installed (extra [plot]); no plot written")
        return
    import numpy as np

    names = ["SFT_real", "SFT_fict", "Prereq single", "Prereq multi"]
    keys = ["sft_real", "sft_fict", "single", "multi"]
    rt = np.array([[r[k]["real_test"] for k in keys] for r in runs])
    mem = np.array([[r["sft_fict"]["own_train"], r["single"]["fict_train_v1"], r["multi"]["fict_train_max"]] for r in runs])
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    ax[0].bar(names, rt.mean(0), yerr=rt.std(0, ddof=1) if len(runs) > 1 else None, color=["grey", "tab:red", "tab:blue", "tab:green"])
    ax[0].axhline(runs[0]["chance"], ls=":", c="k", lw=1)
    ax[0].set_title("C1: R_test QA accuracy (no knowledge LoRA)")
    ax[0].tick_params(axis="x", labelsize=7)
    ax[1].bar(["SFT_fict (own)", "single Δskill", "multi Δskill"], mem.mean(0),
              yerr=mem.std(0, ddof=1) if len(runs) > 1 else None, color=["tab:red", "tab:blue", "tab:green"])
    ax[1].axhline(runs[0]["chance"], ls=":", c="k", lw=1)
    ax[1].set_title("C3: accuracy on fictitious training questions")
    ax[1].tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(out / "claims.png", dpi=110)
    plt.close(fig)
