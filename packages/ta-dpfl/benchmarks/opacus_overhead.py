"""Opacus DP-SGD step / plain SGD step on the Adult MLP (108 -> 64 -> 2), one thread.

The issue's performance figure (target <= 3x), at the expected batch sizes training uses
(q*m_n ranges ~25-400 in the reproduction), with a breakdown of where the time goes:

- ``ghost+secure``: what clients run (Opacus ghost clipping, noise from the OS CSPRNG);
- ``ghost+torch``: the same with ``torch.normal`` noise (Opacus' own cost);
- ``hooks+secure``: Opacus' classic per-sample gradients;
- ``secure noise draw``: one ``SecureRandom.normal`` over the model's 7,106 parameters.

Every ratio is a ratio of *mean* process-CPU milliseconds per step (robust on shared cores; wall
times are printed too) from this one run. Usage::

    python packages/ta-dpfl/benchmarks/opacus_overhead.py [--batches 32 64 128 256 400] [--repeats 50]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from iclr25.ta_dpfl.dp_sgd import per_sample_overhead
from iclr25.ta_dpfl.noise import SecureRandom


def noise_draw_ms(numel: int = 108 * 64 + 64 + 64 * 2 + 2, repeats: int = 200) -> float:
    """Mean CPU ms of one secure noise draw over ``numel`` coordinates."""
    src, ref = SecureRandom(), torch.empty(numel)
    src.normal(1.0, ref)
    c0 = time.process_time()
    for _ in range(repeats):
        src.normal(1.0, ref)
    return (time.process_time() - c0) / repeats * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 64, 128, 256, 400])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--json", help="also write the numbers to this file")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    print(f"{'batch':>5}  {'plain ms':>8}  {'ghost+secure':>14}  {'ghost+torch':>13}  {'hooks+secure':>14}")
    for b in a.batches:
        gs = per_sample_overhead(batch=b, repeats=a.repeats, noise="secure")
        gt = per_sample_overhead(batch=b, repeats=a.repeats, noise="seeded")
        hs = per_sample_overhead(batch=b, repeats=a.repeats, noise="secure", grad_sample_mode="hooks")
        rows.append({"batch": b, "ghost_secure": gs, "ghost_torch": gt, "hooks_secure": hs})
        print(f"{b:>5}  {gs['plain_step_cpu_ms']:>8.3f}  {gs['ratio']:>6.2f}x {gs['dp_step_cpu_ms']:>5.2f}ms  "
              f"{gt['ratio']:>5.2f}x {gt['dp_step_cpu_ms']:>5.2f}ms  {hs['ratio']:>6.2f}x {hs['dp_step_cpu_ms']:>5.2f}ms")
    nd = noise_draw_ms()
    print(f"secure noise draw (7,106 coordinates x 4 Gaussians): {nd:.3f} ms CPU per step")
    mean = sum(r["ghost_secure"]["ratio"] for r in rows) / len(rows)
    print(f"DP/plain step ratio (ghost clipping, secure noise), mean over batches {a.batches}: {mean:.2f}x "
          f"(target <= 3x: {'met' if mean <= 3 else 'not met'})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "secure_noise_ms": nd, "mean_ratio": mean}, f, indent=2)


if __name__ == "__main__":
    main()
