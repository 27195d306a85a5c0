"""The reproduction's ``xpo`` job (full preset): samples XPO vs offline Eq. (8) need to sharpen 90% of the
test prompts at ``p_c = 0.1`` with 40 distractors (XPO's ``alpha`` chosen on validation ``J_beta``)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from .claimkit import jsonable
from .settings import ReproSettings
from .task import TrapArithmeticTask

__all__ = ["xpo_job", "XPO_TASK"]

XPO_TASK = TrapArithmeticTask(p_correct=0.1, n_distractors=40)


def _sharpened_fraction(model, base_lp, task, test, tok) -> float:
    from .exact import enumerate_responses

    lp = enumerate_responses(model, tok, task.prompts(test), task.candidates).numpy()
    ystar = base_lp.argmax(-1)
    return float(np.mean(np.exp(lp[np.arange(len(test)), ystar]) > 0.5))


def xpo_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job. ``settings``: ``{"st", "base": the p_c = 0.1 base job's name, "device"}``."""
    import torch

    from .exact import enumerate_responses
    from .pretrain import load_base
    from .rlhf import RLHFConfig, rlhf_sharpen, sample_pairs
    from .training import TrainConfig

    st = ReproSettings.from_dict(settings["st"])
    task = XPO_TASK
    train, test = task.split(st.n_train, st.n_test, seed=0)
    val = train[: max(32, len(train) // 10)]
    brec = deps[settings["base"]]
    base = load_base(brec, st, settings.get("device", "cpu"))
    tok = base.tokenizer
    base_lp = enumerate_responses(base.model, tok, task.prompts(test), task.candidates).numpy()
    val_lp = enumerate_responses(base.model, tok, task.prompts(val), task.candidates).numpy()
    beta = st.xpo_beta
    out: dict = {"beta": beta, "offline": {}, "xpo": {}, **brec["conv"]}
    train_cfg = TrainConfig(epochs=1, lr=st.rlhf_lr, batch_size=st.rlhf_batch, lora_r=0, max_grad_norm=1.0, seed=0)
    torch.manual_seed(seed)
    pool = sample_pairs(base.model, base.model, tok, task.prompts(train), from_policy=False, max_new_tokens=4,
                        batch_size=2048)
    for n in st.offline_pairs:        # offline Eq. (8): the same optimiser budget for every data size
        pairs = pool[:n] if n <= len(pool) else pool
        epochs = max(1, math.ceil(st.offline_steps * st.rlhf_batch / max(1, len(pairs))))
        cfg = RLHFConfig(beta=beta, max_new_tokens=4, sample_batch_size=2048, train=replace(train_cfg, epochs=epochs))
        res = rlhf_sharpen(base.model, tok, task.prompts(train), cfg, pairs=pairs)
        out["offline"][str(n)] = {"samples": 2 * len(pairs),
                                  "sharpened": _sharpened_fraction(res.model, base_lp, task, test, tok)}

    def j_exact(policy) -> float:
        lp = enumerate_responses(policy, tok, task.prompts(val), task.candidates).numpy()
        return float((np.exp(lp) * (val_lp - beta * (lp - val_lp))).sum(-1).mean())

    for alpha in st.xpo_alphas:
        curve: list = []
        cfg = RLHFConfig(beta=beta, algo="xpo", alpha=alpha, iterations=st.xpo_iterations,
                         prompts_per_iteration=st.xpo_prompts_per_iteration,
                         steps_per_iteration=st.xpo_steps_per_iteration, max_new_tokens=4, sample_batch_size=2048,
                         train=train_cfg)
        torch.manual_seed(seed)
        res = rlhf_sharpen(base.model, tok, task.prompts(train), cfg, j_beta=j_exact,
                           on_iteration=lambda t, pol, m, c=curve: c.append(
                               [t, m, _sharpened_fraction(pol, base_lp, task, test, tok)]))
        out["xpo"][f"{alpha:g}"] = {"alpha": alpha, "curve": curve, "best_j": res.stats["best_j_beta"],
                                    "best_iteration": res.stats["best_iteration"]}
    return jsonable(out)
