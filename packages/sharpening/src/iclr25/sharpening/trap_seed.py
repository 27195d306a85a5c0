"""The reproduction's per-seed job on the trap task: inference-time BoN, SFT-Sharpening and Eq. (8) on the
seed's base (bodies in :mod:`.bon`, :mod:`.sft`, :mod:`.rlhf`)."""

from __future__ import annotations

from typing import Any

from .claimkit import jsonable
from .settings import ReproSettings
from .task import TrapArithmeticTask

__all__ = ["seed_job"]


def seed_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job: one sampling / fine-tuning seed. ``settings``: ``{"st": ReproSettings.to_dict(), "base":
    the base job's name, "device"}``; ``deps[base]`` is that job's record."""
    import time

    import torch

    from iclr25.core.seed import seed_everything

    from .evaluation import bon_experiment
    from .exact import enumerate_responses
    from .pretrain import load_base
    from .rlhf import rlhf_experiment
    from .sft import sft_experiment

    st = ReproSettings.from_dict(settings["st"])
    brec = deps[settings["base"]]
    task = TrapArithmeticTask()
    train, test = task.split(st.n_train, st.n_test, seed=0)
    base = load_base(brec, st, settings.get("device", "cpu"))
    base_lp = enumerate_responses(base.model, base.tokenizer, task.prompts(test), task.candidates)
    seed_everything(1000 + seed)
    torch.manual_seed(1000 + seed)
    r: dict[str, Any] = {"seed": seed, "base_seed": brec["seed"], "base": {**brec["eval"], **brec["conv"]},
                         "seconds": {}}
    t = time.process_time()
    r["bon"] = bon_experiment(base, task, test, base_lp, st.bon_ns)
    r["seconds"]["bon"] = time.process_time() - t
    t = time.process_time()
    r["sft"] = sft_experiment(base, task, train, test, base_lp, n=st.sft_n, epochs=st.sft_epochs, lr=st.sft_lr,
                              batch_size=st.sft_batch, seed=seed, eval_samples=st.eval_samples)
    r["seconds"]["sft"] = time.process_time() - t
    t = time.process_time()
    r["rlhf"] = rlhf_experiment(base, task, train, test, base_lp, betas=st.rlhf_betas,
                                pairs_per_prompt=st.rlhf_pairs_per_prompt, epochs=st.rlhf_epochs, lr=st.rlhf_lr,
                                batch_size=st.rlhf_batch, seed=seed)
    r["seconds"]["rlhf"] = time.process_time() - t
    return jsonable(r)
