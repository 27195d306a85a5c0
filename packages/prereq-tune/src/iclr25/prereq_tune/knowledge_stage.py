"""Stage 1 of Prereq-Tune (spec §1.3): one knowledge LoRA on a knowledge corpus, causal-LM loss on every token, the
base and every other adapter frozen (:func:`train_knowledge_adapter`)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .data import encode_texts
from .groups import _activate, _prepare, _Roles
from .loop import KNOWLEDGE_ARGS_TINY, TrainArgs, TrainResult, _dist, _Loop, _progress
from .lora import FrozenTensorError, changed_tensors, tensor_hashes
from .losses import _finite, completion_loss
from .samplers import _Order

__all__ = ["train_knowledge_adapter"]


def train_knowledge_adapter(model: Any, tokenizer: Any, name: str, texts: Sequence[str], args: TrainArgs = KNOWLEDGE_ARGS_TINY,
                            *, checkpoint_dir: str | Path | None = None, resume: bool = False,
                            accelerator: Any = None, quiet: bool = False) -> TrainResult:
    """Stage 1: train the knowledge LoRA ``name`` on ``texts`` (causal-LM loss on every token;
    spec §1.3, Eq. "min Σ −log p(d; θ₀ + Δθ_know)").

    Only ``name`` is active and trainable; the base weights and every other adapter are frozen and
    hashed before and after (a change raises).

    Args:
        model: a ``peft.PeftModel`` holding the adapter (see :func:`add_knowledge_adapter`).
        tokenizer: its tokenizer (BOS added by its post-processor, if any).
        name: the adapter to train.
        texts: the knowledge corpus (non-empty strings).
        args: :class:`TrainArgs` (default: the CPU-scale recipe).
        checkpoint_dir: checkpoints for ``resume`` (``<dir>/last``).
        resume: continue from the last checkpoint (same data and settings, same frozen tensors).
        accelerator: an ``accelerate.Accelerator`` for multi-process runs.
        quiet: no progress bar.

    Returns:
        :class:`TrainResult`.

    Raises:
        ValueError: no such adapter, empty texts, bad settings, a mismatching checkpoint.
        FrozenTensorError: a frozen tensor changed or became trainable.
    """
    import hashlib

    import torch

    t0 = time.perf_counter()
    _prepare(model, name)
    rows = encode_texts(tokenizer, texts, max_length=args.max_length)
    rank, world = _dist(accelerator)
    order = _Order(len(rows), args.batch_size, args.seed, rank, world)
    n_steps = max(1, math.ceil(args.epochs * order.per_epoch / args.grad_accum))
    roles = _Roles(model, name)
    before = tensor_hashes(model, exclude=[name])
    data_sha = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    fp = {"adapter": name, "data": data_sha, "frozen_hashes": before}
    loop = _Loop(model, roles, args, n_steps, accelerator=accelerator, checkpoint_dir=checkpoint_dir,
                 kind="knowledge", fingerprint=fp)
    res = TrainResult(adapter=name, n_frozen=len(roles.frozen), n_trainable=len(roles.trainable),
                      n_dropped_rows=rows.n_dropped)
    start_w = {n: p.detach().clone() for n, p in roles.trainable}
    if resume:
        st = loop.load()
        order.load(st["order"])
        res.losses = list(st.get("losses", []))
        res.resumed_from = loop.step
    model.train()
    _activate(model, [name], roles, f"knowledge {name}")
    bar = _progress(n_steps - loop.step, f"knowledge LoRA {name}", quiet)
    try:
        for _ in bar:
            tot = 0.0
            for _m in range(args.grad_accum):
                ids, att, lab = rows.batch(torch.as_tensor(order.next()))
                s, n = completion_loss(model, ids, att, lab.masked_fill(att == 0, -100))
                loss = s / n.clamp(min=1)
                tot += _finite(loss, f"knowledge {name} step {loop.step}") / args.grad_accum
                roles.check(f"knowledge {name} step {loop.step} before backward")
                loop.backward(loss, _m == args.grad_accum - 1)
                res.rows_forwarded += int(ids.shape[0])
                res.rows_counted += int(ids.shape[0])
            loop.optimizer_step()
            res.losses.append(tot)
            if loop.step % 25 == 0:
                bar.set_postfix(loss=f"{tot:.3f}")
            if loop.ckpt is not None and ((args.save_every and loop.step % args.save_every == 0)
                                          or (order.pos >= len(order._perm) and not args.save_every)):  # epoch end
                loop.save({"order": order.state(), "losses": res.losses})
    finally:
        roles.freeze_all()
        model.eval()
    after = tensor_hashes(model, exclude=[name])
    res.frozen_changed = changed_tensors(before, after)
    if res.frozen_changed:
        raise FrozenTensorError(f"knowledge training changed {len(res.frozen_changed)} frozen tensor(s): "
                                f"{res.frozen_changed[:5]}")
    res.trainable_unchanged = [n for n, p in roles.trainable if torch.equal(p.detach(), start_w[n])]
    res.frozen_hashes = after
    if loop.ckpt is not None:
        loop.save({"order": order.state(), "losses": res.losses})
    res.steps = loop.step
    res.epochs_done = loop.step * args.grad_accum / order.per_epoch
    res.final_loss = res.losses[-1] if res.losses else float("nan")
    res.seconds = time.perf_counter() - t0
    return res
