"""Benchmark: active-set shrinking (only unfinished images are forwarded, the official loop) vs the
full-batch masked loop, in one interleaved run (64 images, m = 4 surrogates, ≤ 300 iterations).

usage: python benchmarks/bench_attack.py [--models DIR] [--repeats 3] [--device cpu]

DIR holds ``target.pt`` and ``surrogate<k>.pt`` (e.g. ``results/wm-transfer/models`` of a full
reproduction); missing models are trained first with the quick recipe and saved there. Reports mean
wall and process-CPU time per attack of each loop, their ratios, the ratio of image-forwards,
max |Δx_adv| between the loops, iterations and images/s.
Target: ratio ≥ 2, max |Δx_adv| ≤ 1e-5.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import iclr25.wm_transfer.reproduce as rep
from iclr25.wm_transfer.attack import transfer_attack
from iclr25.wm_transfer.checkpoint import load_watermark_model
from iclr25.wm_transfer.config import default_alpha
from iclr25.wm_transfer.data import load_cifar_role


def _ensure(models: Path, m: int) -> None:
    specs = []
    q = rep.QUICK
    if not (models / "target.pt").is_file():
        specs.append(dict(name="target", role="target", seed=1000, n_bits=20, robust=True, epochs=q["epochs_target"],
                          n_train=q["n_train"], n_val=q["n_val"], path=str(models / "target.pt")))
    for s in range(m):
        if not (models / f"surrogate{s}.pt").is_file():
            specs.append(dict(name=f"surrogate{s}", role="surrogate", seed=s, n_bits=16, robust=False,
                              epochs=q["epochs_surrogate"], n_train=q["n_train"], n_val=q["n_val"],
                              path=str(models / f"surrogate{s}.pt")))
    if specs:
        models.mkdir(parents=True, exist_ok=True)
        print(f"training {len(specs)} missing model(s) into {models} ...")
        rep._train_all(specs, jobs=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=Path("results/wm-transfer/models"))
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--max-iters", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    _ensure(a.models, a.m)
    dev = torch.device(a.device)
    target = load_watermark_model(a.models / "target.pt", dev)
    surs = [load_watermark_model(a.models / f"surrogate{s}.pt", dev) for s in range(a.m)]
    x = load_cifar_role("test", a.images).images.to(dev)
    with torch.no_grad():
        x_w = target.embed(x)
    kw = dict(alpha=default_alpha(32, 32), r=0.5, eps=0.2, max_iters=a.max_iters, ssim_stop=0.9)

    def timed(active: bool):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t, c = time.perf_counter(), time.process_time()
        res = transfer_attack(x_w, surs, active_set=active, **kw)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        cpu[active].append(time.process_time() - c)
        return time.perf_counter() - t, res

    times: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}  # process CPU time: less sensitive to other load
    diff, same_iters = 0.0, True
    for r in range(a.repeats):
        order = (True, False) if r % 2 == 0 else (False, True)  # interleaved, alternating order
        out = {}
        for active in order:
            t, res = timed(active)
            times[active].append(t)
            out[active] = res
        diff = max(diff, float((out[True].x_adv - out[False].x_adv).abs().max()))
        same_iters &= bool(torch.equal(out[True].iterations, out[False].iterations))
    it = out[True].iterations.float()
    ta, tm = statistics.fmean(times[True]), statistics.fmean(times[False])
    ca, cm = statistics.fmean(cpu[True]), statistics.fmean(cpu[False])
    # image-forwards of each loop: the active set forwards each image once per iteration it runs (+ the
    # final check), the masked loop forwards all B images for as many iterations as the slowest one
    fwd_active = float(it.sum() + it.numel())
    fwd_masked = float(it.numel() * (it.max() + 1))
    fig = {"images": a.images, "m": a.m, "max_iters": a.max_iters, "repeats": a.repeats, "device": a.device,
           "active_set_s": ta, "masked_s": tm, "ratio": tm / ta, "active_set_cpu_s": ca, "masked_cpu_s": cm,
           "cpu_ratio": cm / ca, "forward_ratio": fwd_masked / fwd_active, "max_abs_diff_x_adv": diff,
           "same_iterations": same_iters, "iterations_mean": float(it.mean()), "iterations_max": int(it.max()),
           "stop_reasons": out[True].stop_counts(), "images_per_s_active": a.images / ta,
           "images_per_s_masked": a.images / tm}
    if a.out is not None:
        a.out.write_text(json.dumps(fig, indent=2) + "\n")
    print(json.dumps(fig, indent=2))
    print(f"bench_attack: active-set {ta:.2f} s vs masked {tm:.2f} s per attack -> {tm / ta:.2f}x faster "
          f"(CPU time {cm / ca:.2f}x, image-forwards {fwd_masked / fwd_active:.2f}x; target >= 2x), "
          f"max |dx_adv| {diff:.2e} (target <= 1e-5), iterations mean {it.mean():.1f} / max "
          f"{int(it.max())}, {a.images / ta:.1f} images/s")


if __name__ == "__main__":
    main()
