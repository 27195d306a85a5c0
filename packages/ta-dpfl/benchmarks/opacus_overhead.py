"""Opacus DP-SGD step / plain SGD step, one thread, at the batch sizes training actually uses.

The issue's performance figure (target <= 3x). Two modes:

- ``--setting adult digits`` (default): for each reproduction setting, the expected Poisson batch
  sizes ``q_t·m_n`` that its federations use are computed from the code (the clients' schedules,
  :func:`iclr25.ta_dpfl.federation.plan`, of every method of :mod:`iclr25.ta_dpfl.reproduce`; the
  quick and full presets share the settings, so they use the same batches), each rounded to an
  integer, with the number of DP-SGD steps run at it in one seed of the reproduction. The step is
  timed at each of them on that setting's model (adult: MLP 108 -> 64 -> 2; digits: linear 64 -> 10),
  and the step-weighted ratio ``Σ steps·dp_ms / Σ steps·plain_ms`` is what training pays.
- ``--batches 32 64 ...``: given batch sizes on the Adult MLP, with the breakdown ``ghost+torch``
  (``torch.normal`` noise: Opacus' own cost) and ``hooks+secure`` (classic per-sample gradients)
  beside ``ghost+secure`` (what clients run: ghost clipping, noise from the OS CSPRNG).

Every ratio is a ratio of *mean* process-CPU milliseconds per step from this one run (robust on
shared cores). Usage::

    python packages/ta-dpfl/benchmarks/opacus_overhead.py [--setting adult digits] [--repeats 20]
    python packages/ta-dpfl/benchmarks/opacus_overhead.py --batches 64 256 [--repeats 50]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch

from iclr25.ta_dpfl.dp_sgd import per_sample_overhead
from iclr25.ta_dpfl.noise import SecureRandom

#: the model of each setting: (in_features, hidden, num_classes)
MODELS = {"adult": (108, 64, 2), "digits": (64, 0, 10)}


def training_batches(setting: str) -> Counter:
    """``{round(q_t·m_n): DP-SGD steps}`` over every method of the reproduction (one seed, every client,
    every round, ``K`` steps a round), from the clients' solved schedules."""
    from iclr25.ta_dpfl.data import load_federated
    from iclr25.ta_dpfl.federation import plan
    from iclr25.ta_dpfl.reproduce import METHODS, _spec

    out = Counter()
    for m in METHODS:
        spec = _spec(Path("unused"), setting, m, 0, 1.0)
        sizes = load_federated(spec.dataset, spec.num_clients, spec.split_seed, spec.csv_path, spec.val_fraction).sizes
        for sched, m_n in zip(plan(spec), sizes):
            for q in sched.rates:
                out[round(float(q) * m_n)] += sched.local_steps
    return out


def noise_draw_ms(numel: int, repeats: int = 200) -> float:
    """Mean CPU ms of one secure noise draw over ``numel`` coordinates."""
    src, ref = SecureRandom(), torch.empty(numel)
    src.normal(1.0, ref)
    c0 = time.process_time()
    for _ in range(repeats):
        src.normal(1.0, ref)
    return (time.process_time() - c0) / repeats * 1e3


def _numel(in_f: int, hidden: int, classes: int) -> int:
    return in_f * hidden + hidden + hidden * classes + classes if hidden else in_f * classes + classes


def by_setting(settings: list[str], repeats: int) -> dict:
    res = {}
    for st in settings:
        in_f, hidden, classes = MODELS[st]
        steps = training_batches(st)
        rows = []
        print(f"\n{st}: model {in_f} -> {hidden or '-'} -> {classes}; expected batches q*m "
              f"{min(steps)}..{max(steps)} ({sum(steps.values())} DP-SGD steps per seed over the 4 methods)")
        print(f"{'batch':>5}  {'steps':>6}  {'plain ms':>8}  {'DP ms':>7}  {'ratio':>6}")
        for b in sorted(steps):
            p = per_sample_overhead(in_features=in_f, hidden=hidden, num_classes=classes, batch=b, repeats=repeats)
            rows.append({"batch": b, "steps": steps[b], **p})
            print(f"{b:>5}  {steps[b]:>6}  {p['plain_step_cpu_ms']:>8.3f}  {p['dp_step_cpu_ms']:>7.3f}  "
                  f"{p['ratio']:>5.2f}x")
        w = sum(r["steps"] for r in rows)
        dp = sum(r["steps"] * r["dp_step_cpu_ms"] for r in rows) / w
        pl = sum(r["steps"] * r["plain_step_cpu_ms"] for r in rows) / w
        nd = noise_draw_ms(_numel(in_f, hidden, classes))
        print(f"{st}: step-weighted DP/plain = {dp / pl:.2f}x CPU ({dp:.2f} vs {pl:.2f} ms per step; "
              f"target <= 3x: {'met' if dp / pl <= 3 else 'not met'}); secure noise draw "
              f"({_numel(in_f, hidden, classes)} coordinates x 4 Gaussians): {nd:.3f} ms")
        res[st] = {"rows": rows, "weighted_ratio": dp / pl, "weighted_dp_ms": dp, "weighted_plain_ms": pl,
                   "secure_noise_ms": nd}
    return res


def by_batches(batches: list[int], repeats: int) -> dict:
    rows = []
    print(f"{'batch':>5}  {'plain ms':>8}  {'ghost+secure':>14}  {'ghost+torch':>13}  {'hooks+secure':>14}")
    for b in batches:
        gs = per_sample_overhead(batch=b, repeats=repeats, noise="secure")
        gt = per_sample_overhead(batch=b, repeats=repeats, noise="seeded")
        hs = per_sample_overhead(batch=b, repeats=repeats, noise="secure", grad_sample_mode="hooks")
        rows.append({"batch": b, "ghost_secure": gs, "ghost_torch": gt, "hooks_secure": hs})
        print(f"{b:>5}  {gs['plain_step_cpu_ms']:>8.3f}  {gs['ratio']:>6.2f}x {gs['dp_step_cpu_ms']:>5.2f}ms  "
              f"{gt['ratio']:>5.2f}x {gt['dp_step_cpu_ms']:>5.2f}ms  {hs['ratio']:>6.2f}x {hs['dp_step_cpu_ms']:>5.2f}ms")
    nd = noise_draw_ms(_numel(*MODELS["adult"]))
    print(f"secure noise draw (7,106 coordinates x 4 Gaussians): {nd:.3f} ms CPU per step")
    mean = sum(r["ghost_secure"]["ratio"] for r in rows) / len(rows)
    print(f"DP/plain step ratio (ghost clipping, secure noise), mean over batches {batches}: {mean:.2f}x "
          f"(target <= 3x: {'met' if mean <= 3 else 'not met'})")
    return {"rows": rows, "secure_noise_ms": nd, "mean_ratio": mean}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", nargs="+", choices=sorted(MODELS), default=None,
                    help="time at the expected batches of these reproduction settings (default: adult digits)")
    ap.add_argument("--batches", type=int, nargs="+", default=None, help="explicit batch sizes (Adult MLP)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", help="also write the numbers to this file")
    a = ap.parse_args()
    if a.repeats < 1 or (a.batches and min(a.batches) < 1):
        ap.error("--repeats and --batches must be >= 1")
    torch.set_num_threads(1)
    out = by_batches(a.batches, a.repeats) if a.batches else by_setting(a.setting or ["adult", "digits"], a.repeats)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
