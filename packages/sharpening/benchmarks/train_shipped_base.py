"""Train the base shipped in the wheel (``iclr25/sharpening/weights/trapbase-pc0.4-seed2``).

The full preset's to-convergence recipe (``ReproSettings.preset(quick=False).base``) at seed 2, validation
prompts avoiding the quick split's 200 test prompts. Writes the weights, the training record (with the task
and config) and prints the SHA-256 to put in ``shipped.SHIPPED_BASE_SHA256``. ~260 CPU-s on one thread.

    OMP_NUM_THREADS=1 python packages/sharpening/benchmarks/train_shipped_base.py [OUT_DIR]
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from iclr25.sharpening.base import pretrain_trap_base_to_kl, validation_pairs
from iclr25.sharpening.settings import ReproSettings
from iclr25.sharpening.shipped import SHIPPED_BASE_DIR
from iclr25.sharpening.task import TrapArithmeticTask


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SHIPPED_BASE_DIR
    torch.set_num_threads(1)
    task = TrapArithmeticTask()
    quick = ReproSettings.preset(True)
    cfg = replace(ReproSettings.preset(False).base, seed=2)
    _, test = task.split(quick.n_train, quick.n_test, seed=0)
    model, info = pretrain_trap_base_to_kl(task, cfg, validation_pairs(task, cfg.n_val, test), progress=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    info = {**info, "task": asdict(task), "config": asdict(cfg)}
    (out / "trapbase_train.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    print(hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest(), info["steps"], info["val_kl"])


if __name__ == "__main__":
    main()
