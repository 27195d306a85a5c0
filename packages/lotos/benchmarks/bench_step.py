"""Training-step time of a LOTOS ensemble over a plain ensemble of the same models (one run).

    python packages/lotos/benchmarks/bench_step.py [--members 2] [--width 16] [--size 16] [--batch 32]

Both arms use the same SmallConvNet members, batch and optimiser; ``lotos`` adds the SpectralClip
wrappers (one PowerQR step per layer per forward, FastClip every ``clip_every`` forwards) and the
LOTOS penalty. Steps of the two arms are interleaved so that load from other processes hits both
alike; the median step time of each (and the mean, which includes the clip events) is reported
and the median ratio printed last.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from iclr25.lotos.config import TrainConfig
from iclr25.lotos.data import ImageData
from iclr25.lotos.train import build_ensemble, model_spec, train_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--clip-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    x = torch.rand(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 10, (a.batch,))
    data = ImageData(x, y, x, y, (0.5,) * 3, (0.25,) * 3, 10, "random")
    arms = {}
    for method in ("orig", "lotos"):
        cfg = TrainConfig(method=method, num_models=a.members, width=a.width, clip_every=a.clip_every)
        models = build_ensemble(model_spec(cfg, data), a.members, 0)
        for m in models:
            m.train()
        opt = torch.optim.SGD([p for m in models for p in m.parameters()], lr=0.01, momentum=0.9)
        arms[method] = (cfg, models, opt, [])
        for _ in range(3):  # warm-up (and PowerQR initialisation of the wrappers)
            train_step(models, x, y, opt, cfg, use_penalty=True)
            opt.step()
    for _ in range(a.steps):
        for cfg, models, opt, times in arms.values():
            t = time.perf_counter()
            train_step(models, x, y, opt, cfg, use_penalty=True)
            opt.step()
            times.append(time.perf_counter() - t)
    med = {k: statistics.median(v[3]) for k, v in arms.items()}
    mean = {k: statistics.fmean(v[3]) for k, v in arms.items()}
    print(f"members={a.members} width={a.width} input={a.size}x{a.size} batch={a.batch} threads={a.threads}")
    print(f"plain ensemble step: {1e3 * med['orig']:.1f} ms (median of {a.steps})")
    print(f"LOTOS ensemble step: {1e3 * med['lotos']:.1f} ms")
    print(f"mean step (includes the FastClip events every {a.clip_every} steps): plain {1e3 * mean['orig']:.1f} ms, "
          f"LOTOS {1e3 * mean['lotos']:.1f} ms, ratio {mean['lotos'] / mean['orig']:.2f}x")
    print(f"ratio LOTOS / plain (median): {med['lotos'] / med['orig']:.2f}x")


if __name__ == "__main__":
    main()
