"""``iclr25-vbon``: bon-sample / train / evaluate / reproduce (core CLI conventions: ``--out``, ``--seed``,
``--device``, ``--threads``, ``--quiet``, ``--config FILE``, ``--version``)."""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import BoNSampleArgs, EvaluateArgs, ReproduceArgs, TrainArgs

__all__ = ["main", "COMMANDS"]

log = logging.getLogger("iclr25.vbon")


def _jsonable(d):
    return json.loads(json.dumps(d, default=str))


def _out_file(out: Path, default_name: str, suffix: str) -> Path:
    """``out/default_name``; a deprecated ``--output FILE`` (a path ending in ``suffix``) is kept as that file."""
    out = Path(out)
    if out.suffix == suffix:
        warnings.warn(f"--out {out} looks like a file (the old --output meaning); --out is now a folder, "
                      f"write --out {out.parent} to get {out.parent / default_name}", FutureWarning, stacklevel=2)
        out.parent.mkdir(parents=True, exist_ok=True)
        return out
    out.mkdir(parents=True, exist_ok=True)
    return out / default_name


def _n_prompts(a, mirror_default: int) -> int:
    """``--num-prompts``; unset: every prompt of ``--prompts-file`` (0), or ``mirror_default`` mirror prompts."""
    if a.num_prompts is not None:
        return a.num_prompts
    return 0 if a.prompts_file is not None else mirror_default


def _bon_sample(a: BoNSampleArgs) -> int:
    import torch

    from .runtime import default_prompts, load_policy, load_reward
    from .sampling import best_of_n, best_of_n_generator

    torch.manual_seed(a.seed)
    prompts = default_prompts(_n_prompts(a, 8), "eval", prompts_file=a.prompts_file)
    dest = _out_file(a.out, "bon_samples.jsonl", ".jsonl")
    t = time.perf_counter()
    if a.backend == "openai":  # candidates from a vLLM / OpenAI-compatible completions server
        try:
            from iclr25.core.lm import OpenAICompletionGenerator
            gen = OpenAICompletionGenerator(a.model, base_url=a.base_url, timeout=a.request_timeout,
                                            concurrency=a.concurrency)
        except ImportError as e:
            raise ValueError(f"--backend openai needs the openai client: pip install 'iclr25-vbon[vllm]' ({e})") from None
        reward = load_reward(a.models, device=a.device)
        res = best_of_n_generator(gen, reward, prompts, a.n, a.max_new_tokens, a.temperature, seed=a.seed,
                                  progress=not a.quiet)
        source = f"{a.model} @ {gen.base_url}"
    else:
        model, tok = load_policy(a.models, progress=not a.quiet, device=a.device)
        reward = load_reward(a.models, device=a.device)
        res = best_of_n(model, tok, reward, prompts, a.n, a.max_new_tokens, a.batch_size, a.temperature)
        source = a.models.policy or f"embedded LM ({a.models.lm_size})"
    with open(dest, "w", encoding="utf-8") as fh:
        for j, p in enumerate(prompts):
            fh.write(json.dumps({"prompt": p, "best": res.best[j], "best_reward": float(res.best_reward[j]),
                                 "candidates": res.candidates[j], "rewards": res.rewards[j].tolist()}) + "\n")
    print(f"bon-sample: N={a.n}, {len(prompts)} prompts, mean best reward {float(res.best_reward.mean()):.3f} "
          f"(mean candidate {float(res.rewards.mean()):.3f}), {source}, {time.perf_counter() - t:.1f} s -> {dest}")
    return 0


RESUMABLE_SETTINGS = ("out", "device", "threads", "quiet", "resume", "checkpoint_every", "vbon.steps")
"""``train`` settings (``config.json`` keys) a ``--resume`` may change; any other change is refused, naming it."""


def _file_sha256(path) -> str | None:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path is not None else None


def _run_settings(a: TrainArgs, prompts: list[str]) -> dict:
    """``config.json`` of a ``train`` run: its flags (files as absolute paths) plus digests of the training
    prompts and of a given ``--cdf-path`` file, so that ``--resume`` sees a changed file, not only a changed name."""
    import hashlib

    d = _jsonable(asdict(a))
    for k in ("prompts_file", "cdf_path"):
        if d.get(k) is not None:
            d[k] = str(Path(d[k]).resolve())
    d["prompts_sha256"] = hashlib.sha256(json.dumps(prompts).encode()).hexdigest()
    d["cdf_sha256"] = _file_sha256(a.cdf_path)
    return d


def _flat(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _check_resume_settings(saved_file: Path, now: dict) -> None:
    """Refuse a ``--resume`` whose settings differ from the run's ``config.json`` (all but
    :data:`RESUMABLE_SETTINGS`), naming each changed flag. The checkpoint's own key covers only ``--vbon.*``;
    this also covers the models, the prompts and the CDF file (``ValueError``: exit 2)."""
    if not saved_file.is_file():
        return  # a run from before config.json: the checkpoint's key still checks --vbon.*
    try:
        saved = json.loads(saved_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"--resume: {saved_file} is unreadable ({e}); train into another --out") from None
    s, n = dict(_flat(saved)), dict(_flat(now))
    for k in ("prompts_file", "cdf_path"):  # older config.json: paths as typed, relative to the cwd
        if s.get(k) is not None:
            s[k] = str(Path(s[k]).resolve())
    if "prompts_sha256" not in s or "cdf_sha256" not in s:  # written before the digests: compare the names only
        s.pop("prompts_sha256", None), n.pop("prompts_sha256", None), s.pop("cdf_sha256", None), n.pop("cdf_sha256", None)
    changed = [f"--{k.removeprefix('models.').replace('_', '-')}: {s.get(k)!r} -> {n.get(k)!r}"
               for k in sorted(set(s) | set(n)) if k not in RESUMABLE_SETTINGS and s.get(k) != n.get(k)]
    if changed:
        raise ValueError(f"--resume: {saved_file.parent} was trained with other settings ({'; '.join(changed)}); "
                         f"only --vbon.steps (and --device/--threads/--quiet/--checkpoint-every) may change on resume; "
                         f"delete {saved_file.parent} or train into another --out")


def _train(a: TrainArgs) -> int:

    from iclr25.core.seed import seed_everything

    from .cdf import RewardCDFCache
    from .runtime import clone_policy, default_prompts, load_policy, load_reward
    from .sampling import sample_texts
    from .trainer import VBoNTrainer

    cfg = replace(a.vbon, seed=a.seed)  # --seed is the command's seed (VBoNConfig.seed in the library)
    seed_everything(cfg.seed)  # every global generator (Python, NumPy, torch): a run is repeatable in all of them
    out = Path(a.out)
    ck = out / "checkpoint"
    if a.resume:
        from iclr25.core.checkpoint import recover_folder

        recover_folder(ck)  # a kill between atomic_folder's two renames leaves checkpoint.old
    if a.resume and not (ck / "trainer_state.pt").is_file():
        raise FileNotFoundError(f"--resume given but no checkpoint in {ck} (train without --resume first)")
    if not a.resume and (ck / "trainer_state.pt").is_file():  # a fresh run would overwrite it and its log
        raise FileExistsError(f"{ck} holds a checkpoint (step log {out / 'metrics.jsonl'}); pass --resume to continue "
                              "it, or delete it / choose another --out for a new run")
    prompts = default_prompts(_n_prompts(a, 32), "train", prompts_file=a.prompts_file)
    run_cfg = _run_settings(a, prompts)
    if a.resume:
        _check_resume_settings(out / "config.json", run_cfg)  # before config.json is rewritten or a model loads
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(run_cfg, indent=2))
    # validate the data (prompts, a given CDF file) before any model loads
    cdf = None
    cdf_file = a.cdf_path or out / "reward_cdf.jsonl"
    if cfg.method == "vbon" and Path(cdf_file).is_file():
        cdf = RewardCDFCache.from_jsonl(cdf_file, smoothing=cfg.smoothing, max_m=cfg.m, ragged=a.ragged_cdf)
        try:
            cdf.rows(prompts)  # KeyError naming a training prompt missing from the file
        except KeyError as e:
            raise ValueError(f"{cdf_file}: {e.args[0] if e.args else e}") from None
    ref, tok = load_policy(a.models, progress=not a.quiet, device=a.device)
    reward = load_reward(a.models, device=a.device)
    if cfg.method == "vbon":
        if cdf is None:
            cdf = RewardCDFCache.build(lambda p, m: sample_texts(ref, tok, p, m, cfg.max_new_tokens,
                                                                 progress=not a.quiet, desc="reference samples"),
                                       reward, prompts, cfg.m, cfg.smoothing)
            cdf.to_jsonl(cdf_file)
    trainer = VBoNTrainer(clone_policy(ref), ref, tok, reward, prompts, cfg, cdf=cdf)
    metrics = out / "metrics.jsonl"
    if a.resume:
        from iclr25.core.checkpoint import trim_jsonl

        trainer.load_checkpoint(ck)
        # a kill after logging step s but before checkpointing it resumes before s: cut the log back so that
        # each step is logged once
        trim_jsonl(metrics, trainer.step)
        log.info("resumed at step %d", trainer.step)
    elif metrics.exists():
        metrics.unlink()
    t = time.perf_counter()
    hist = trainer.train(progress=not a.quiet, checkpoint_dir=ck, save_every=a.checkpoint_every, metrics_path=metrics)
    trainer.save_checkpoint(ck)
    last = hist[-1] if hist else {}
    res = {"method": cfg.method, "n": cfg.n, "kl_coef": cfg.kl_coef, "steps": trainer.step,
           "final": last, "seconds": time.perf_counter() - t, "version": __version__}
    (out / "results.json").write_text(json.dumps(res, indent=2))
    print(f"train: {cfg.method} step {trainer.step}, reward {last.get('reward', float('nan')):.3f}, "
          f"KL {last.get('kl', float('nan')):.3f} -> {ck}")
    return 0


def _evaluate(a: EvaluateArgs) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from .runtime import default_prompts, load_policy, load_reward
    from .trainer import evaluate_policy

    if not Path(a.checkpoint, "config.json").is_file():
        raise FileNotFoundError(f"no model in {a.checkpoint} (expected a save_pretrained folder; --checkpoint)")
    prompts = default_prompts(_n_prompts(a, 32), "eval", prompts_file=a.prompts_file)
    dest = _out_file(a.out, "eval.json", ".json")
    torch.manual_seed(a.seed)
    ref, tok = load_policy(a.models, progress=not a.quiet, device=a.device)
    policy = AutoModelForCausalLM.from_pretrained(a.checkpoint).to(next(ref.parameters()).device).eval()
    if policy.get_input_embeddings().num_embeddings != ref.get_input_embeddings().num_embeddings:
        raise ValueError(f"--checkpoint {a.checkpoint} has a vocabulary of {policy.get_input_embeddings().num_embeddings} "
                         f"tokens, the reference policy ({a.models.policy or 'embedded'}) "
                         f"{ref.get_input_embeddings().num_embeddings}: pass the --policy it was trained from")
    reward = load_reward(a.models, device=a.device)
    m = evaluate_policy(policy, ref, tok, reward, prompts, a.samples_per_prompt, a.max_new_tokens)
    dest.write_text(json.dumps(m, indent=2))
    print(f"evaluate: win rate {m['win_rate']:.3f}±{m['win_rate_se']:.3f}, reward {m['reward']:.3f}, "
          f"KL {m['kl']:.3f} -> {dest}")
    return 0


COMMANDS = {
    "bon-sample": Command(BoNSampleArgs, _bon_sample, "inference-time Best-of-N from the reference policy",
                          deprecated={"--output": "--out"}),
    "train": Command(TrainArgs, _train, "fine-tune with vBoN (or --vbon.method rlhf); checkpoints, --resume",
                     deprecated={"--output-dir": "--out", "--vbon.seed": "--seed",
                                 "--save-every": "--checkpoint-every"}),
    "evaluate": Command(EvaluateArgs, _evaluate, "win rate vs reference, mean reward, KL to the reference",
                        deprecated={"--output": "--out"}),
    "reproduce": reproduce_command("vbon", "iclr25.vbon.reproduce:reproduce", __version__, config=ReproduceArgs,
                                   help="CPU-scale reproduction of the paper's claims (--quick)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point ``iclr25-vbon``; returns the exit code."""
    return run_cli("iclr25-vbon", "Variational Best-of-N alignment (vBoN, ICLR 2025).", COMMANDS, argv,
                   version=__version__)
