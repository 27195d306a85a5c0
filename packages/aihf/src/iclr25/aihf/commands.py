"""The work behind ``iclr25-aihf train / evaluate / demo`` (imported only when a command runs).

``train`` writes into ``--out``: ``config.json`` (the resolved config), ``checkpoint.pt`` (tabular: reward
parameters, policy state, optimiser, iteration and RNG; tiny LM: model and AdamW state, round and RNGs; loaded with
``weights_only=True``), ``policy/`` (tiny LM: ``save_pretrained``), ``results.json`` / ``results.md``.
``--resume`` continues from ``checkpoint.pt``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import AIHFConfig, DemoConfig, EvaluateConfig, TinyLMConfig, TrainConfig

__all__ = ["tabular_task", "tabular_data", "run_train", "run_evaluate", "run_demo"]

log = logging.getLogger("iclr25.aihf")
TABULAR_METHODS = ("aihf", "rlhf", "irl", "sft", "sft-rlhf")
LM_METHODS = ("aihf", "dpo", "sft", "sft-dpo", "self-play")


def _fields(cls: type, cfg: Any) -> dict:
    return {k: getattr(cfg, k) for k in cls.__dataclass_fields__}


def tabular_task(task: str, seed: int, beta: float = 1.0):
    """The synthetic task of ``--task bandit|gridworld`` for ``seed`` (the reproduction's tasks)."""
    from .tasks import BanditTask, GridworldMDP

    if task == "bandit":
        return BanditTask.random(beta=beta, seed=seed)
    if task == "gridworld":
        return GridworldMDP.grid(beta=beta, seed=seed)
    raise ValueError(f"not a tabular task: {task!r}")


def tabular_data(task, seed: int, n_demo: int | None, n_pref: int, biased: bool = False) -> tuple[Any, Any]:
    """Demonstrations and preference pairs, drawn as in the reproduction (same seeds, same streams)."""
    from .tasks import BanditTask

    if isinstance(task, BanditTask):
        if biased:
            g = np.random.default_rng([seed, 9])
            demos = task.sample_demos(n_demo or 400, g, log_pi=task.biased_demo_policy(0.7, g))
        else:
            demos = task.sample_demos(n_demo or 400, np.random.default_rng([seed, 1]))
        prefs = task.sample_prefs(n_pref, np.random.default_rng([seed, 2, n_pref])) if n_pref else None
        return demos, prefs
    if biased:
        raise ValueError("--biased-demos is a bandit setting; drop it for the gridworld")
    demos = task.sample_demos(n_demo or 20, np.random.default_rng([seed, 2]))
    prefs = task.sample_prefs(n_pref, np.random.default_rng([seed, 3, n_pref])) if n_pref else None
    return demos, prefs


def _save_ckpt(path: Path, state: dict) -> None:
    """``torch.save`` of the tabular / tiny-LM state, written with the core's atomic writer (old or new, never torn)."""
    import io

    from iclr25.core.checkpoint import atomic_write_bytes

    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def _load_ckpt(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no checkpoint to resume from (run without --resume first)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError) as e:  # torn or foreign file
        raise ValueError(f"{path}: unreadable checkpoint ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                         "delete it and train again without --resume") from None


# Fields a --resume may change: the horizon and how the run is executed, not what is trained.
RESUME_FREE = frozenset({"iters", "rounds", "resume", "quiet", "threads", "device", "out", "checkpoint_every"})


def check_resume_config(out: Path, cfg: TrainConfig) -> None:
    """Refuse ``--resume`` when ``out/config.json`` was written with other training settings.

    Raises:
        ValueError: names every differing field with its stored and new value (only ``RESUME_FREE`` may change).
    """
    import dataclasses
    import json

    prev_file = out / "config.json"
    if not cfg.resume or not prev_file.is_file():
        return
    prev = json.loads(prev_file.read_text())
    prev = prev.get("config", prev)
    now = json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
    diff = [f"{k}={prev[k]!r} -> {now[k]!r}" for k in now if k not in RESUME_FREE and k in prev and prev[k] != now[k]]
    if diff:
        raise ValueError(f"--resume: {out} was trained with other settings ({'; '.join(diff)}); resume with the same "
                         f"settings (only {', '.join(sorted(RESUME_FREE - {'resume'}))} may change) or use a new --out")


def _md(rows: dict) -> str:
    lines = ["| metric | value |", "|---|---|"]
    for k, v in rows.items():
        if isinstance(v, (int, float)):
            lines.append(f"| {k} | {v:.4g} |")
    return "\n".join(lines) + "\n"


def _train_tabular(cfg: TrainConfig, out: Path) -> dict:
    from .tabular import sft_policy, train_aihf

    if cfg.method not in TABULAR_METHODS:
        raise ValueError(f"--method {cfg.method} is not a {cfg.task} method; choose one of {TABULAR_METHODS}")
    torch.set_num_threads(1)  # tiny tensors: more threads only add overhead
    task = tabular_task(cfg.task, cfg.seed, cfg.beta)
    demos, prefs = tabular_data(task, cfg.seed, cfg.n_demo, cfg.n_pref, cfg.biased_demos)
    ckpt = out / "checkpoint.pt"
    if cfg.method == "sft":
        log_pi, theta, it = sft_policy(task, demos), None, 0
        _save_ckpt(ckpt, {"log_pi": log_pi, "iteration": 0})
    else:
        w = {"rlhf": 0.0, "irl": 1.0, "sft-rlhf": 0.0}.get(cfg.method, cfg.w)
        acfg = AIHFConfig(**{**_fields(AIHFConfig, cfg), "w": w})
        resume = _load_ckpt(ckpt) if cfg.resume else None
        if resume is not None:
            log.info("resuming from %s at iteration %d", ckpt, int(resume["iteration"]))
        res = train_aihf(task, demos if w > 0 else None, prefs if w < 1 else None, acfg, seed=cfg.seed,
                         resume=resume, checkpoint=lambda st: _save_ckpt(ckpt, st),
                         checkpoint_every=cfg.checkpoint_every, progress=not cfg.quiet)
        theta, log_pi, it = res.theta, res.log_pi, res.iteration
        if cfg.method == "sft-rlhf":
            log_pi = _staged(task, demos, theta)
        st = dict(res.state)
        st["log_pi"] = log_pi
        _save_ckpt(ckpt, st)
    metrics = task.evaluate(log_pi)
    if theta is not None:
        from .tabular import cosine_distance

        metrics["reward_cosine_distance"] = cosine_distance(theta, task.theta_star)
    metrics["iteration"] = it
    return metrics


def _staged(task, demos, theta):
    """SFT->RLHF: the KL-regularised policy of the preference reward toward the SFT policy."""
    from .soft import soft_policy, soft_value_iteration
    from .tabular import sft_policy
    from .tasks import BanditTask

    ref = sft_policy(task, demos)
    if isinstance(task, BanditTask):
        return soft_policy(ref, task.reward(theta), task.beta)
    return soft_value_iteration(task.P, task.reward(theta), task.gamma, task.beta, log_pi_ref=ref, check=False)[0]


def _lm_task(cfg) -> Any:
    from .tinylm import TinyLMTask

    return TinyLMTask(TinyLMConfig(**_fields(TinyLMConfig, cfg)))


def _train_tinylm(cfg: TrainConfig, out: Path) -> dict:
    from .tinylm import run_lm_method

    if cfg.method not in LM_METHODS:
        raise ValueError(f"--method {cfg.method} is not a tinylm method; choose one of {LM_METHODS}")
    torch.set_num_threads(cfg.threads or 1)
    torch.manual_seed(cfg.seed)
    task = _lm_task(cfg)
    data = task.make_data(cfg.n_demo or 512, cfg.n_pref, cfg.seed)
    ckpt = out / "checkpoint.pt"
    resume = _load_ckpt(ckpt) if cfg.resume and cfg.method != "sft" else None
    if resume is not None:
        log.info("resuming from %s after round %d", ckpt, int(resume["round"]))
    lm = TinyLMConfig(**_fields(TinyLMConfig, cfg))
    res = run_lm_method(cfg.method, task, data, AIHFConfig(**_fields(AIHFConfig, cfg)), lm, seed=cfg.seed,
                        resume=resume, checkpoint=lambda st: _save_ckpt(ckpt, st))
    res.model.save_pretrained(out / "policy")
    return dict(res.metrics, rounds=len(res.history), demo_reward=float(task.true_reward(data.demos).mean()))


def run_train(cfg: TrainConfig) -> int:
    """``iclr25-aihf train``: train one method on one task; prints a one-line summary."""
    from iclr25.core.runinfo import write_run_files

    t0 = time.perf_counter()
    out = Path(cfg.out)  # type: ignore[arg-type]
    out.mkdir(parents=True, exist_ok=True)
    check_resume_config(out, cfg)
    write_run_files(out, cfg)
    if cfg.task in ("bandit", "gridworld"):
        metrics = _train_tabular(cfg, out)
    elif cfg.task == "tinylm":
        metrics = _train_tinylm(cfg, out)
    else:
        from .text import train_text

        metrics = train_text(cfg)
    write_run_files(out, cfg, metrics, started=t0)
    (out / "results.md").write_text(_md(metrics))
    key = {"bandit": "regret", "gridworld": "normalized_return", "tinylm": "reward"}.get(cfg.task, "pref_accuracy")
    val = metrics.get(key, float("nan"))
    print(f"aihf train: {cfg.task} {cfg.method} (w={cfg.w:g}) {key} {val:.4f} -> {out}/results.json")
    return 0


def run_evaluate(cfg: EvaluateConfig) -> int:
    """``iclr25-aihf evaluate --run DIR``: re-evaluate a train run from its saved state (writes ``eval.json``)."""
    from iclr25.core.runinfo import run_info

    run = Path(cfg.run)
    cj = run / "config.json"
    if not cj.is_file():
        raise FileNotFoundError(f"{cj}: not a train run folder (no config.json); pass the --out of 'iclr25-aihf train'")
    tc = json.loads(cj.read_text())
    if "config" in tc and "task" not in tc:
        tc = tc["config"]
    task_name = tc["task"]
    if task_name in ("bandit", "gridworld"):
        torch.set_num_threads(1)
        task = tabular_task(task_name, int(tc["seed"]), float(tc["beta"]))
        ck = _load_ckpt(run / "checkpoint.pt")
        metrics = task.evaluate(ck["log_pi"] if "log_pi" in ck else ck["policy"]["log_pi"])
    elif task_name == "tinylm":
        from transformers import GPT2LMHeadModel

        class _C:
            pass

        c = _C()
        for k in TinyLMConfig.__dataclass_fields__:
            setattr(c, k, tc[k])
        task = _lm_task(c)
        folder = run / "policy"
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder}: no saved policy")
        model = GPT2LMHeadModel.from_pretrained(folder).eval()
        metrics = task.evaluate(model, int(tc["n_eval"]))
    else:
        res = run / "results.json"
        if not res.is_file():
            raise FileNotFoundError(f"{res}: the text run has no results yet")
        metrics = {k: v for k, v in json.loads(res.read_text()).items() if isinstance(v, (int, float))}
    out = Path(cfg.out) if cfg.out is not None else run
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(dict(metrics, train_run=str(run), info=run_info()), indent=1,
                                              default=str) + "\n")
    (out / "eval.md").write_text(_md(metrics))
    shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
    print(f"aihf evaluate: {task_name} {tc.get('method')}: {shown} -> {out}/eval.json")
    return 0


def run_demo(cfg: DemoConfig) -> int:
    """``iclr25-aihf demo``: RLHF, AIHF, IRL, SFT and SFT->RLHF on one bandit with scarce preferences."""
    from .tabular import run_baseline

    torch.set_num_threads(1)
    task = tabular_task("bandit", cfg.seed)
    demos, prefs = tabular_data(task, cfg.seed, None, cfg.n_pref)
    rows = {}
    for m in ("rlhf", "aihf", "irl", "sft", "sft-rlhf"):
        rows[m] = task.regret(run_baseline(m, task, demos, prefs)["log_pi"])
    print(f"bandit X={task.X}, Y={task.Y}, d={task.d}: 400 demonstrations, {cfg.n_pref} preference pairs, seed "
          f"{cfg.seed}\n")
    print("| method | regret (KL-regularised true objective) |\n|---|---|")
    for m, v in rows.items():
        print(f"| {m} | {v:.4f} |")
    if cfg.out is not None:
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
        (Path(cfg.out) / "demo.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(f"\naihf demo: AIHF regret {rows['aihf']:.3f} vs RLHF {rows['rlhf']:.3f} vs SFT->RLHF "
          f"{rows['sft-rlhf']:.3f} with {cfg.n_pref} preference pairs")
    return 0
