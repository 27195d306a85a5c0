"""The ``iclr25-wm-transfer`` command: ``train``, ``attack``, ``evaluate``, ``compare``, ``reproduce``, ``demo``.

Only config dataclasses are imported at module level (``--help`` does not import torch).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import AttackConfig, CompareConfig, DemoConfig, EvaluateConfig, ReproduceConfig, TrainConfig

__all__ = ["main", "COMMANDS"]


def _train(cfg: TrainConfig) -> int:
    from .commands import train_command

    return train_command(cfg)


def _attack(cfg: AttackConfig) -> int:
    from .attack_run import run_attack

    s = run_attack(cfg)
    ev = "undefined" if s["evasion_rate"] is None else f"{s['evasion_rate']:.3f}"
    print(f"attacked {s['n_images']} images with {len(cfg.surrogates)} surrogate(s): evasion {ev}, target bit "
          f"accuracy {s['bit_acc_before']:.3f} -> {s['bit_acc_after']:.3f}, SSIM {s['ssim']:.3f}, "
          f"PSNR {s['psnr']:.1f} dB -> {cfg.out}/images.jsonl")
    return 0


def _evaluate(cfg: EvaluateConfig) -> int:
    from .evaluate_run import evaluate_run
    from .evaluation import summary_table

    s = evaluate_run(cfg)
    print(summary_table(s), end="")
    ev = "undefined" if s["evasion_rate"] is None else f"{s['evasion_rate']:.3f}"
    print(f"evaluated {s['n_images']} images: evasion {ev}, detection {s['detection_rate_before']:.3f} -> "
          f"{s['detection_rate_after']:.3f}, SSIM {s['ssim']:.3f} -> {cfg.out}/eval.json")
    return 0


def _compare(cfg: CompareConfig) -> int:
    from .commands import compare_command

    return compare_command(cfg)


def _demo(cfg: DemoConfig) -> int:
    from .toy import GOLDEN_THRESHOLD, linear_toy

    print("linear toy watermark (d=64, k=8 bits), inverse-decode attack run to convergence;")
    print(f"theory: target coefficient 0.5(1 - rho - rho^2), bits flip iff rho > {GOLDEN_THRESHOLD:.4f}")
    print("| rho | target bit acc after | target coef | expected coef |")
    print("|---|---|---|---|")
    rows = []
    for rho in cfg.rho:
        r = linear_toy(rho, seed=cfg.seed)
        rows.append(r)
        print(f"| {rho:.2f} | {r['target_bit_acc']:.3f} | {r['target_coef']:+.5f} | {r['expected_coef']:+.5f} |")
    if cfg.out is not None:
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
        (Path(cfg.out) / "demo.json").write_text(json.dumps(rows, indent=2) + "\n")
    ok = all(abs(r["target_coef"] - r["expected_coef"]) < 1e-6 for r in rows)
    print(f"demo: {len(rows)} overlaps, measured coefficients {'match' if ok else 'DO NOT match'} the closed form")
    return 0 if ok else 1


COMMANDS = {
    "train": Command(TrainConfig, _train, "train a target or surrogate watermark model (epoch checkpoints, --resume)"),
    "attack": Command(AttackConfig, _attack, "watermark images with a target, attack them with surrogates (per-image JSONL)"),
    "evaluate": Command(EvaluateConfig, _evaluate, "bit accuracy, detection, evasion, SSIM, PSNR, l_inf, l_2 of an attack run"),
    "compare": Command(CompareConfig, _compare, "transfer per m vs sign/clip variants, matched post-processing, noise, white-box"),
    "reproduce": reproduce_command("wm-transfer", "iclr25.wm_transfer.reproduce:reproduce", __version__,
                                   config=ReproduceConfig, deprecated={"--jobs": "--workers"}),
    "demo": Command(DemoConfig, _demo, "linear toy with a known answer (bits flip iff rho > 0.618)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-wm-transfer``; returns the exit code."""
    return run_cli("iclr25-wm-transfer", "A Transfer Attack to Image Watermarks (ICLR 2025): no-box evasion of "
                   "learning-based image watermarks with self-trained surrogate decoders.", COMMANDS, argv,
                   version=__version__)
