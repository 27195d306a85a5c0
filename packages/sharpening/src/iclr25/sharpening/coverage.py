"""The reproduction's ``coverage`` job (full preset): the smallest N at which likelihood-BoN reaches 90%
accuracy vs Prop. C.1's ``ln(1/rho) C_cov``, over ``p_c`` (one base per ``p_c``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .claimkit import jsonable
from .settings import ReproSettings
from .task import TrapArithmeticTask

__all__ = ["coverage_job"]


def coverage_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job. ``settings``: ``{"st", "bases": {p_c: base job name}, "device"}``."""
    import torch

    from .evaluation import bon_accuracy_curve, trap_correct
    from .exact import enumerate_responses, required_samples
    from .pretrain import load_base
    from .rewards import LogLikelihood
    from .sampling import sample_responses

    st = ReproSettings.from_dict(settings["st"])
    torch.manual_seed(seed)
    out = {}
    for pc, nd in st.coverage_tasks:
        task = TrapArithmeticTask(p_correct=pc, n_distractors=nd)
        _, test = task.split(st.n_train, st.n_test, seed=0)
        brec = deps[settings["bases"][f"{pc:g}"]]
        base = load_base(brec, st, settings.get("device", "cpu"))
        lp = enumerate_responses(base.model, base.tokenizer, task.prompts(test), task.candidates).numpy()
        s = sample_responses(base.model, base.tokenizer, task.prompts(test), st.coverage_draws, max_new_tokens=4,
                             batch_size=2048)
        scores = LogLikelihood(base.model, batch_size=4096)(s)
        curve = bon_accuracy_curve(scores, trap_correct(s, test), range(1, st.coverage_draws + 1))
        reach = next((n for n, a in curve.items() if a >= 0.9), None)
        pstar = np.exp(lp.max(-1))
        ccov = float(np.mean(1 / pstar))
        pred = float(math.log(10) * ccov)
        out[f"{pc:g}"] = {"p_correct": pc, "n_distractors": nd, "ccov": ccov, "mean_pstar": float(pstar.mean()),
                          "mode_is_correct": float(np.mean(lp.argmax(-1) == task.correct_index(test))),
                          "required_n": reach, "predicted_n": pred,
                          "predicted_n_mean_pstar": float(required_samples(pstar.mean(), 0.1)),
                          "ratio": (reach / pred) if reach else None,
                          "curve": [[n, a] for n, a in curve.items()], **brec["conv"]}
    return jsonable(out)
