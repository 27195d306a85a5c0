"""Training-step time of a LOTOS ensemble over a plain ensemble of the same models, at the presets'
settings, clip events included (one run).

    python packages/lotos/benchmarks/bench_step.py [--preset quick|full|paper|both|all] [--epochs 1] [--threads 1]

``paper`` is the spec's SmallConvNet at the paper's training settings (3 members, width 32, 32×32,
batch 128, a clip event every 100 forwards with 1 step), timed over ``2 × clip_every`` steps × ``--epochs``
so that the periodic clip events are sampled at their real rate.

Both arms use the same SmallConvNet members, batch and optimiser; ``lotos`` adds the SpectralClip
wrappers (one PowerQR step per layer per forward, a FastClip event with ``clip_opt_iter`` steps and a
warm Ritz refresh every ``clip_every`` forwards) and the LOTOS penalty. One "epoch" is the preset's
number of steps per epoch (2,000 or 4,000 images / batch 32), so clip events occur at their real
rate. Steps of the two arms are interleaved so that load from other processes hits both alike. The
**mean** step time (clip events included) is the figure that matters for wall time; the median is
shown beside it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from iclr25.lotos.config import TrainConfig
from iclr25.lotos.data import ImageData
from iclr25.lotos.reproduce import FULL, QUICK
from iclr25.lotos.train import build_ensemble, model_spec, train_step

#: The spec's SmallConvNet at the paper's training settings (not a reproduce preset).
PAPER = dict(num_models=3, width=32, image_size=32, batch_size=128, clip_every=100, clip_opt_iter=1, n_train=4000)


def bench(preset: dict, epochs: int) -> dict:
    n_train = preset["n_train"] or 4000
    steps = epochs * (n_train // preset["batch_size"])
    if preset is PAPER:
        steps = epochs * 2 * preset["clip_every"]
    size, b = preset["image_size"], preset["batch_size"]
    x = torch.rand(b, 3, size, size)
    y = torch.randint(0, 10, (b,))
    data = ImageData(x, y, x, y, (0.5,) * 3, (0.25,) * 3, 10, "random")
    arms = {}
    for method in ("orig", "lotos"):
        cfg = TrainConfig(method=method, num_models=preset["num_models"], width=preset["width"],
                          clip_every=preset["clip_every"], clip_opt_iter=preset["clip_opt_iter"])
        models = build_ensemble(model_spec(cfg, data), cfg.num_models, 0)
        for m in models:
            m.train()
        opt = torch.optim.SGD([p for m in models for p in m.parameters()], lr=0.01, momentum=0.9)
        for _ in range(3):  # warm-up (and PowerQR initialisation of the wrappers)
            train_step(models, x, y, opt, cfg, use_penalty=True)
            opt.step()
        arms[method] = (cfg, models, opt, [])
    for _ in range(steps):
        for cfg, models, opt, times in arms.values():
            t = time.perf_counter()
            train_step(models, x, y, opt, cfg, use_penalty=True)
            opt.step()
            times.append(time.perf_counter() - t)
    t = {k: v[3] for k, v in arms.items()}
    return {"steps": steps, "mean_ms": {k: 1e3 * statistics.fmean(v) for k, v in t.items()},
            "median_ms": {k: 1e3 * statistics.median(v) for k, v in t.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=("quick", "full", "paper", "both", "all"), default="both")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    names = {"both": ("quick", "full"), "all": ("quick", "full", "paper")}.get(a.preset, (a.preset,))
    for name in names:
        p = {"quick": QUICK, "full": FULL, "paper": PAPER}[name]
        r = bench(p, a.epochs)
        mean, med = r["mean_ms"], r["median_ms"]
        print(f"{name} preset: {p['num_models']} members, width {p['width']}, {p['image_size']}px, batch "
              f"{p['batch_size']}, clip every {p['clip_every']} steps x {p['clip_opt_iter']} steps, {r['steps']} "
              f"steps, {a.threads} thread(s)")
        print(f"  mean step   plain {mean['orig']:.1f} ms, LOTOS {mean['lotos']:.1f} ms -> "
              f"{mean['lotos'] / mean['orig']:.2f}x (clip events included)")
        print(f"  median step plain {med['orig']:.1f} ms, LOTOS {med['lotos']:.1f} ms -> "
              f"{med['lotos'] / med['orig']:.2f}x")


if __name__ == "__main__":
    main()
