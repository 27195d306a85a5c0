"""Stage 2 of Prereq-Tune (spec §1.3–§1.6): the skill LoRA with frozen knowledge LoRAs active
(:func:`train_skill_adapter`: multi-version routing or the official all-versions sampler, mixed real/fictitious
mode, alternating groups, stacked or merged knowledge forward)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .data import OFFICIAL_FORMAT, EncodedRows, PromptFormat, SkillExample, encode_completions, finite_in
from .groups import _activate, _draw, _prepare, _Roles
from .loop import SKILL_ARGS_TINY, TrainArgs, TrainResult, _dist, _Loop, _progress
from .lora import FrozenTensorError, changed_tensors, tensor_hashes
from .losses import _finite, completion_loss
from .merged_forward import merged_knowledge_weights
from .samplers import _Order, _plan

__all__ = ["train_skill_adapter"]


def train_skill_adapter(model: Any, tokenizer: Any, examples: Sequence[SkillExample], knowledge: Sequence[str] = (),
                        args: TrainArgs = SKILL_ARGS_TINY, *, skill: str = "skill", multi_version: bool = True,
                        real_knowledge: Sequence[str] | None = None, real_weight: float = 1.0,
                        alternate_groups: bool = False, sampler: Literal["routed", "all_versions"] = "routed",
                        fmt: PromptFormat = OFFICIAL_FORMAT, checkpoint_dir: str | Path | None = None,
                        resume: bool = False, accelerator: Any = None, quiet: bool = False,
                        callback: Callable[[int, TrainResult], bool | None] | None = None,
                        encoded: EncodedRows | None = None,
                        knowledge_forward: Literal["stacked", "merged"] = "stacked") -> TrainResult:
    """Stage 2: train the skill LoRA with frozen knowledge LoRAs active (spec §1.3–§1.6).

    Args:
        model: a ``peft.PeftModel`` holding ``skill`` and every adapter in ``knowledge``.
        tokenizer: its tokenizer.
        examples: task rows (:class:`SkillExample`); ``version`` routes a fictitious row to a
            knowledge adapter of that version, ``fake=False`` marks real rows (mixed mode).
        knowledge: ordered knowledge-adapter names (empty: plain single-LoRA SFT). In multi-version
            mode each fictitious adapter's version is its name's last ``_`` field.
        args: :class:`TrainArgs` (default: the CPU-scale skill recipe).
        skill: the skill adapter's name.
        multi_version: route each micro-batch to one drawn version (official
            ``multi_version_training``); off, any fictitious adapter is used with any fictitious row.
        real_knowledge: the real knowledge adapters in mixed mode (default: names without ``fake``).
        real_weight: weight of the skill-only CE on real rows (>= 0; official default 1.0, PopQA 0.5).
        alternate_groups: alternate between the halves of ``knowledge`` per loss computation.
        sampler: ``"routed"`` (ours: only the drawn version's rows are forwarded) or
            ``"all_versions"`` (official: all V rows of every sampled subject are forwarded and the
            other versions' labels masked).
        fmt: the :class:`PromptFormat`.
        checkpoint_dir, resume, accelerator, quiet: as :func:`train_knowledge_adapter`.
        callback: ``callback(epoch, result)`` after every completed epoch; returning ``True``
            stops training (e.g. SFT_fictitious stops at training accuracy 0.9).
        encoded: pre-encoded rows of ``examples`` (skips tokenisation).
        knowledge_forward: ``"stacked"`` (default, the official code's forward: the drawn knowledge
            LoRA and the skill LoRA both active in PEFT) or ``"merged"`` (the drawn frozen knowledge
            LoRA folded into copies of the base weights once per adapter, only the skill LoRA active:
            the same function at a plain SFT step's cost; small models only, see
            :func:`merged_knowledge_weights`; not with DeepSpeed).

    Returns:
        :class:`TrainResult` (``draws`` counts the adapters drawn; ``rows_forwarded /
        rows_counted`` is 1 with routing and V with the official sampler).

    Raises:
        ValueError: unknown adapters, a row version without an adapter, an adapter name without a
            version, a fictitious subject missing versions (multi-version), ``real_weight < 0``,
            mixed mode without a real adapter, bad settings, a mismatching checkpoint.
        FrozenTensorError: a knowledge or base tensor changed or became trainable.
    """
    import hashlib

    import torch

    t0 = time.perf_counter()
    finite_in("real_weight", real_weight, 0.0)
    if sampler not in ("routed", "all_versions"):
        raise ValueError(f"sampler={sampler!r} must be 'routed' or 'all_versions'")
    if knowledge_forward not in ("stacked", "merged"):
        raise ValueError(f"knowledge_forward={knowledge_forward!r} must be 'stacked' or 'merged'")
    if not examples:
        raise ValueError("train_skill_adapter: no skill rows")
    _prepare(model, skill)
    if skill in knowledge:
        raise ValueError(f"the skill adapter {skill!r} cannot also be a knowledge adapter")
    plan = _plan(examples, knowledge, real_knowledge, multi_version, alternate_groups, model)
    rows = encoded if encoded is not None else encode_completions(tokenizer, examples, fmt, max_length=args.max_length)
    if len(rows.kept) != len(examples):
        raise ValueError(f"{len(examples) - len(rows.kept)} skill rows are longer than max_length={args.max_length}; "
                         "raise max_length or shorten them (rows are never silently dropped from routed training)")
    rank, world = _dist(accelerator)
    routed_mv = bool(knowledge) and multi_version
    items: list[tuple[str, int]] = ([("s", i) for i in range(len(plan.fake_subjects))] if routed_mv
                                    else [("f", i) for i in plan.fake_rows]) + [("r", i) for i in plan.real_rows]
    order = _Order(len(items), args.batch_size, args.seed, rank, world)
    n_steps = max(1, math.ceil(args.epochs * order.per_epoch / args.grad_accum))
    roles = _Roles(model, skill)
    before = tensor_hashes(model, exclude=[skill])
    data_sha = hashlib.sha256(json.dumps([asdict(e) for e in examples]).encode()).hexdigest()[:16]
    fp = {"adapter": skill, "data": data_sha, "knowledge": list(knowledge), "multi_version": multi_version,
          "real_weight": real_weight, "alternate_groups": alternate_groups, "sampler": sampler, "frozen_hashes": before}
    loop = _Loop(model, roles, args, n_steps, accelerator=accelerator, checkpoint_dir=checkpoint_dir, kind="skill",
                 fingerprint=fp)
    merged: dict[str, dict[str, Any]] | None = None
    if knowledge_forward == "merged" and knowledge:
        if loop.engine is not None:
            raise ValueError("knowledge_forward='merged' does not work under DeepSpeed; use 'stacked'")
        merged = {k: merged_knowledge_weights(model, k) for k in dict.fromkeys(
            list(knowledge) + list(plan.real_groups[0]) + list(plan.real_groups[1]))}
    draw_rng = np.random.default_rng([args.seed, 2, rank])
    res = TrainResult(adapter=skill, n_frozen=len(roles.frozen), n_trainable=len(roles.trainable),
                      draws={k: 0 for k in knowledge})
    counter = 0
    start_w = {n: p.detach().clone() for n, p in roles.trainable}
    if resume:
        st = loop.load()
        order.load(st["order"])
        draw_rng.bit_generator.state = st["draw_rng"]
        counter = int(st["counter"])
        res.losses = list(st.get("losses", []))
        res.draws.update(st.get("draws", {}))
        res.history = list(st.get("history", []))
        res.resumed_from = loop.step
    V_all = sorted({examples[i].version for i in plan.fake_rows})

    def extra() -> dict[str, Any]:
        return {"order": order.state(), "draw_rng": draw_rng.bit_generator.state, "counter": counter,
                "losses": res.losses, "draws": res.draws, "history": res.history}

    def loss_with(k: str | None, ids: Any, att: Any, lab: Any, where: str) -> tuple[Any, Any]:
        """Completion loss with knowledge adapter ``k`` (or none) and the skill adapter."""
        if k is not None and merged is not None:
            _activate(model, [skill], roles, where)
            return completion_loss(model, ids, att, lab, param_overrides=merged[k])
        _activate(model, [k, skill] if k else [skill], roles, where)
        return completion_loss(model, ids, att, lab)

    def micro(idx: np.ndarray, last: bool) -> float:
        nonlocal counter
        sel = [items[j] for j in idx.tolist()]
        real = [i for kind, i in sel if kind == "r"]
        group = plan.groups[counter % 2]
        k_fake = _draw(draw_rng, group) if (knowledge and group) else None
        fake: list[int] = []
        masked: list[int] = []
        if routed_mv:
            v = plan.versions[k_fake]
            subj = [plan.fake_subjects[i] for kind, i in sel if kind == "s"]
            fake = [d[v] for d in subj]
            if sampler == "all_versions":
                masked = [d[u] for d in subj for u in V_all if u != v]
        else:
            fake = [i for kind, i in sel if kind == "f"]
        counter += 1
        total_s = torch.zeros((), dtype=torch.float32)
        total_n = torch.zeros((), dtype=torch.long)
        if fake:
            ids, att, lab = rows.batch(torch.as_tensor(fake + masked))
            if masked:
                lab = lab.clone()
                lab[len(fake):] = -100            # other versions: forwarded (official sampler), not counted
            s, n = loss_with(k_fake, ids, att, lab, f"skill micro-batch {counter}")
            total_s, total_n = s, n
            res.rows_forwarded += len(fake) + len(masked)
            res.rows_counted += len(fake)
            if k_fake:
                res.draws[k_fake] += 1
        loss_real_s = None
        if real:
            rg = plan.real_groups[(counter - 1) % 2]
            k_real = _draw(draw_rng, rg) if (knowledge and rg) else None
            ids, att, lab = rows.batch(torch.as_tensor(real))
            s, n = loss_with(k_real, ids, att, lab, f"skill micro-batch {counter} (real)")
            total_s = total_s.to(s.device) + s
            total_n = total_n.to(n.device) + n
            res.rows_forwarded += len(real)
            res.rows_counted += len(real)
            if k_real:
                res.draws[k_real] += 1
                _activate(model, [skill], roles, f"skill micro-batch {counter} (real, skill only)")
                s2, n2 = completion_loss(model, ids, att, lab)
                loss_real_s = s2 / n2.clamp(min=1)
                res.rows_forwarded += len(real)
        loss = total_s / total_n.clamp(min=1)
        if loss_real_s is not None:
            loss = loss + real_weight * loss_real_s
        v = _finite(loss, f"skill step {loop.step}")
        roles.check(f"skill micro-batch {counter} before backward")
        loop.backward(loss, last)
        return v

    model.train()
    bar = _progress(n_steps - loop.step, f"skill LoRA {skill}" + (f" + {len(knowledge)} knowledge" if knowledge else ""), quiet)
    epoch_seen = order.completed
    try:
        for _ in bar:
            tot = 0.0
            for _m in range(args.grad_accum):
                tot += micro(order.next(), _m == args.grad_accum - 1) / args.grad_accum
            loop.optimizer_step()
            res.losses.append(tot)
            if loop.step % 25 == 0:
                bar.set_postfix(loss=f"{tot:.3f}")
            if args.save_every and loop.step % args.save_every == 0:
                loop.save(extra())
            if order.completed > epoch_seen:
                epoch_seen = order.completed
                stop = False
                if callback is not None:
                    roles.freeze_all()
                    model.eval()
                    stop = bool(callback(epoch_seen, res))
                    model.train()
                if loop.ckpt is not None and not args.save_every:
                    loop.save(extra())
                if stop:
                    res.stopped_early = True
                    break
    finally:
        roles.freeze_all()
        model.eval()
    after = tensor_hashes(model, exclude=[skill])
    res.frozen_changed = changed_tensors(before, after)
    if res.frozen_changed:
        raise FrozenTensorError(f"skill training changed {len(res.frozen_changed)} knowledge/base tensor(s): "
                                f"{res.frozen_changed[:5]}")
    res.trainable_unchanged = [n for n, p in roles.trainable if torch.equal(p.detach(), start_w[n])]
    res.frozen_hashes = after
    if loop.ckpt is not None:
        loop.save(extra())
    res.steps = loop.step
    res.epochs_done = loop.step * args.grad_accum / order.per_epoch
    res.final_loss = res.losses[-1] if res.losses else float("nan")
    res.seconds = time.perf_counter() - t0
    return res
