"""The ``evaluate`` command's run: summarise an ``attack`` run folder, or re-decode its saved images
with another model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .checkpoint import load_watermark_model
from .config import EvaluateConfig
from .data import load_npz_images
from .evaluation import evaluate_images, summarize_records, summary_table

__all__ = ["evaluate_run"]


def _load_run_images(run: Path, n_batches: int) -> tuple[Tensor, Tensor, Tensor]:
    xs, xa, ms = [], [], []
    for b in range(n_batches):
        f = run / "batches" / f"{b:05d}.npz"
        if not f.is_file():
            raise FileNotFoundError(f"{f} is missing (the run is incomplete; rerun attack with --resume)")
        with np.load(f, allow_pickle=False) as z:
            xs.append(torch.from_numpy(z["x_w"]))
            xa.append(torch.from_numpy(z["x_adv"]))
            ms.append(torch.from_numpy(z["messages"]))
    return torch.cat(xs), torch.cat(xa), torch.cat(ms)


def evaluate_run(cfg: EvaluateConfig) -> dict[str, Any]:
    """The ``evaluate`` command: summarise ``images.jsonl`` of an attack folder, or (``--target``)
    re-decode its saved images with another model. Writes ``eval.json`` and ``eval.md`` in ``--out``
    (default ``runs/wm-transfer/evaluate``).

    Raises:
        FileNotFoundError: not an attack folder. ValueError: bad records (file and line named).
    """
    from iclr25.core.jsonl import read_jsonl
    from iclr25.core.seed import choose_device

    run = Path(cfg.run)
    if not (run / "images.jsonl").is_file() or not (run / "config.json").is_file():
        raise FileNotFoundError(f"{run} is not an attack run folder (needs config.json and images.jsonl; "
                                "run `iclr25-wm-transfer attack --out DIR` first)")
    recs = read_jsonl(run / "images.jsonl", required=("batch", "bit_acc_after", "detected_before", "detected_after"))
    if not recs:
        raise ValueError(f"{run / 'images.jsonl'} has no records")
    if cfg.target is not None:
        model = load_watermark_model(cfg.target, choose_device(cfg.device))
        x_w, x_adv, msgs = _load_run_images(run, max(r["batch"] for r in recs) + 1)
        if cfg.messages is not None:
            msgs = load_npz_images(cfg.messages).messages
            if msgs is None:
                raise ValueError(f"{cfg.messages}: no 'messages' key")
        elif model.message is not None:
            msgs = model.message.cpu()
        cfg_run = json.loads((run / "config.json").read_text())
        recs2 = evaluate_images(model, x_w, x_adv, msgs, fpr=cfg.fpr,
                                ssim_stop=cfg_run.get("params", {}).get("ssim_stop", 0.9))
        for a, b in zip(recs2, recs):
            for k in ("iterations", "stop_reason", "surrogate_bit_acc", "name"):
                if k in b:
                    a[k] = b[k]
        recs = recs2
    s = summarize_records(recs)
    out = Path(cfg.out) if cfg.out is not None else run
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(s, indent=2) + "\n")
    (out / "eval.md").write_text(summary_table(s))
    return s
