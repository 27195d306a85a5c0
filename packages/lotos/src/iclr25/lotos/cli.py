"""The ``iclr25-lotos`` command: ``train``, ``evaluate``, ``reproduce``, ``demo``."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import DemoConfig, EvalConfig, ReproduceConfig, TrainConfig

__all__ = ["main"]

log = logging.getLogger("iclr25.lotos")


def _train(cfg: TrainConfig) -> int:
    from .train import train_ensemble

    models = train_ensemble(cfg)
    last = (Path(cfg.out) / "metrics.jsonl").read_text().strip().splitlines()[-1]
    rec = json.loads(last)
    print(f"trained {len(models)} {cfg.method} models for {cfg.epochs} epochs -> {cfg.out} "
          f"(train ce {rec['ce']:.3f}, train acc {100 * rec['acc']:.1f}%)")
    return 0


def _evaluate(cfg: EvalConfig) -> int:
    from iclr25.core.seed import choose_device

    from .data import load_data
    from .evaluation import evaluate_ensemble
    from .train import load_ensemble

    device = choose_device(cfg.device)
    models, meta = load_ensemble(cfg.ensemble, device)
    sur = load_ensemble(cfg.surrogate, device)[0] if cfg.surrogate is not None else []
    tc = meta["config"]
    d = load_data(meta["data"], n_train=1, n_test=cfg.n_test, image_size=tc.get("image_size"))
    x, y = d.x_test.to(device), d.y_test.to(device)
    res = evaluate_ensemble(models, x, y, sur, eps=cfg.eps, steps=cfg.steps, step_size=cfg.step_size,
                            seed=cfg.seed)
    res.update(eps=cfg.eps, steps=cfg.steps, n_test=int(x.shape[0]), method=tc["method"])
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(res, indent=2))
    lines = ["| metric | value |", "|---|---|"]
    for k in ("clean_acc_ensemble", "mean_transfer", "mean_robust_acc", "blackbox_robust_acc",
              "mean_cross_gain"):
        if k in res:
            lines.append(f"| {k} | {res[k]:.3f} |")
    (out / "eval.md").write_text("\n".join(lines) + "\n")
    bb = f", black-box robust acc {res['blackbox_robust_acc']:.1f}%" if "blackbox_robust_acc" in res else ""
    print(f"{tc['method']}: clean acc {res['clean_acc_ensemble']:.1f}%, transfer rate "
          f"{res['mean_transfer']:.1f}%, individual robust acc {res['mean_robust_acc']:.1f}%{bb} -> {out}/eval.json")
    return 0


def _demo(cfg: DemoConfig) -> int:
    import torch
    from torch import nn

    from .loss import lotos_similarity
    from .spectral import (
        conv_singular_values_fft,
        dense_singular_values,
        explicit_matrix,
        layer_top_singular,
        linear_operator,
    )

    torch.manual_seed(cfg.seed)
    conv = nn.Conv2d(cfg.c_in, cfg.c_out, 3, padding=1, padding_mode="circular", bias=True)
    shape = (cfg.c_in, cfg.n, cfg.n)
    k = min(cfg.top, cfg.c_in * cfg.n * cfg.n)
    _, s_pqr = layer_top_singular(conv, shape, k=k, n_iters=500, generator=torch.Generator().manual_seed(0))
    s_fft = conv_singular_values_fft(conv.weight, cfg.n)[:k]
    s_svd = dense_singular_values(explicit_matrix(linear_operator(conv), shape))[:k]
    print(f"random {cfg.c_in}->{cfg.c_out} 3x3 conv, circular padding, input {cfg.n}x{cfg.n}: top-{k} singular values")
    print(f"  PowerQR (500 it.) : {[round(float(v), 5) for v in s_pqr]}")
    print(f"  FFT (Sedghi et al): {[round(float(v), 5) for v in s_fft]}")
    print(f"  dense SVD         : {[round(float(v), 5) for v in s_svd]}")
    ones = nn.Conv2d(1, 1, 3, padding=1, bias=False)
    nn.init.ones_(ones.weight)
    _, s1 = layer_top_singular(ones, (1, 8, 8), k=1, n_iters=300)
    print(f"all-ones 3x3 conv, zero padding, 8x8: PowerQR sigma_1 = {float(s1[0]):.6f} "
          f"(closed form (1+2cos(pi/9))^2 = {(1 + 2 * torch.cos(torch.tensor(torch.pi / 9))) ** 2:.6f})")
    A, B = torch.diag(torch.tensor([3.0, 1.0])), torch.diag(torch.tensor([1.0, 2.0]))
    e1, e2 = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    s_ab = lotos_similarity(lambda x: x @ A.T, lambda x: x @ B.T, e1, e2, mal=0.8)
    s_aa = lotos_similarity(lambda x: x @ A.T, lambda x: x @ A.T, e1, e1, mal=0.8)
    print(f"LOTOS S_1 (mal 0.8): A=diag(3,1) vs B=diag(1,2): {float(s_ab):.4f} (expect 0.4); "
          f"A vs A: {float(s_aa):.4f} (expect 4.4)")
    return 0


COMMANDS = {
    "train": Command(TrainConfig, _train, "train an orig / clip / lotos ensemble (checkpoints, --resume)"),
    "evaluate": Command(EvalConfig, _evaluate, "clean acc, transferability, black-box robust acc, cross gains"),
    "reproduce": reproduce_command("lotos", "iclr25.lotos.reproduce:reproduce", __version__, config=ReproduceConfig,
                                   help="train the three arms + surrogate and report the claims"),
    "demo": Command(DemoConfig, _demo, "PowerQR vs FFT vs dense SVD on a toy conv; toy LOTOS penalty values"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-lotos``; returns the exit code."""
    return run_cli("iclr25-lotos", "LOTOS (ICLR 2025): layer-wise orthogonalization for robust ensembles.",
                   COMMANDS, argv, version=__version__)
