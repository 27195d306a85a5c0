"""``iclr25-vbon``: bon-sample / train / evaluate / reproduce."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from iclr25.core.config import Command, run_cli

from ._version import __version__
from .config import BoNSampleArgs, EvaluateArgs, ReproduceArgs, TrainArgs

__all__ = ["main"]

log = logging.getLogger("iclr25.vbon")


def _jsonable(d):
    return json.loads(json.dumps(d, default=str))


def _bon_sample(a: BoNSampleArgs) -> int:
    import torch

    from .runtime import default_prompts, load_policy, load_reward, setup_threads
    from .sampling import best_of_n

    setup_threads(a.models.threads)
    torch.manual_seed(a.seed)
    prompts = default_prompts(a.num_prompts, "eval", prompts_file=a.prompts_file)
    model, tok = load_policy(a.models)
    reward = load_reward(a.models)
    t = time.perf_counter()
    res = best_of_n(model, tok, reward, prompts, a.n, a.max_new_tokens, a.batch_size)
    a.output.parent.mkdir(parents=True, exist_ok=True)
    with open(a.output, "w", encoding="utf-8") as fh:
        for j, p in enumerate(prompts):
            fh.write(json.dumps({"prompt": p, "best": res.best[j], "best_reward": float(res.best_reward[j]),
                                 "candidates": res.candidates[j], "rewards": res.rewards[j].tolist()}) + "\n")
    print(f"bon-sample: N={a.n}, {len(prompts)} prompts, mean best reward {float(res.best_reward.mean()):.3f} "
          f"(mean candidate {float(res.rewards.mean()):.3f}), {time.perf_counter() - t:.1f} s -> {a.output}")
    return 0


def _train(a: TrainArgs) -> int:
    import torch

    from .cdf import RewardCDFCache
    from .runtime import clone_policy, default_prompts, load_policy, load_reward, setup_threads
    from .sampling import sample_texts
    from .trainer import VBoNTrainer

    cfg = a.vbon
    setup_threads(a.models.threads)
    torch.manual_seed(cfg.seed)
    out = Path(a.output_dir)
    ck = out / "checkpoint"
    if a.resume and not (ck / "trainer_state.pt").is_file():
        print(f"iclr25-vbon train: error: --resume given but no checkpoint in {ck}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(_jsonable(asdict(a)), indent=2))
    prompts = default_prompts(a.num_prompts, "train", prompts_file=a.prompts_file)
    # validate the data (prompts, a given CDF file) before any model loads
    cdf = None
    cdf_file = a.cdf_path or out / "reward_cdf.jsonl"
    if cfg.method == "vbon" and Path(cdf_file).is_file():
        cdf = RewardCDFCache.from_jsonl(cdf_file, smoothing=cfg.smoothing, max_m=cfg.m, ragged=a.ragged_cdf)
        cdf.rows(prompts)  # KeyError naming a training prompt missing from the file
    ref, tok = load_policy(a.models, progress=not a.quiet)
    reward = load_reward(a.models)
    if cfg.method == "vbon":
        if cdf is None:
            cdf = RewardCDFCache.build(lambda p, m: sample_texts(ref, tok, p, m, cfg.max_new_tokens,
                                                                 progress=not a.quiet, desc="reference samples"),
                                       reward, prompts, cfg.m, cfg.smoothing)
            cdf.to_jsonl(cdf_file)
    trainer = VBoNTrainer(clone_policy(ref), ref, tok, reward, prompts, cfg, cdf=cdf)
    metrics = out / "metrics.jsonl"
    if a.resume:
        trainer.load_checkpoint(ck)
        log.info("resumed at step %d", trainer.step)
    elif metrics.exists():
        metrics.unlink()
    t = time.perf_counter()
    hist = trainer.train(progress=not a.quiet, checkpoint_dir=ck, save_every=a.save_every, metrics_path=metrics)
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

    from .runtime import default_prompts, load_policy, load_reward, setup_threads
    from .trainer import evaluate_policy

    setup_threads(a.models.threads)
    if not Path(a.checkpoint, "config.json").is_file():
        print(f"iclr25-vbon evaluate: error: no model in {a.checkpoint} (expected a save_pretrained folder)",
              file=sys.stderr)
        return 2
    torch.manual_seed(a.seed)
    ref, tok = load_policy(a.models)
    policy = AutoModelForCausalLM.from_pretrained(a.checkpoint).to(next(ref.parameters()).device).eval()
    reward = load_reward(a.models)
    prompts = default_prompts(a.num_prompts, "eval", prompts_file=a.prompts_file)
    m = evaluate_policy(policy, ref, tok, reward, prompts, a.samples_per_prompt, a.max_new_tokens)
    out = a.output or Path(a.checkpoint).parent / "eval.json"
    out.write_text(json.dumps(m, indent=2))
    print(f"evaluate: win rate {m['win_rate']:.3f}±{m['win_rate_se']:.3f}, reward {m['reward']:.3f}, "
          f"KL {m['kl']:.3f} -> {out}")
    return 0


def _reproduce(a: ReproduceArgs) -> int:
    from iclr25.core.registry import run_reproduction

    from .reproduce import reproduce

    rep = run_reproduction("vbon", reproduce, quick=a.quick, out_dir=a.out, version=__version__)
    print(rep.to_markdown())
    print(f"reproduce: {sum(c.holds for c in rep.claims)}/{len(rep.claims)} claims hold, {rep.seconds:.1f} s -> {a.out}")
    return 0


COMMANDS = {
    "bon-sample": Command(BoNSampleArgs, _bon_sample, "inference-time Best-of-N from the reference policy"),
    "train": Command(TrainArgs, _train, "fine-tune with vBoN (or --vbon.method rlhf); checkpoints, --resume"),
    "evaluate": Command(EvaluateArgs, _evaluate, "win rate vs reference, mean reward, KL to the reference"),
    "reproduce": Command(ReproduceArgs, _reproduce, "CPU-scale reproduction of the paper's claims (--quick)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point ``iclr25-vbon``; returns the exit code."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return run_cli("iclr25-vbon", "Variational Best-of-N alignment (vBoN, ICLR 2025).", COMMANDS, argv)
    except (ValueError, KeyError, FileNotFoundError) as e:
        print(f"iclr25-vbon: error: {e}", file=sys.stderr)
        return 2
