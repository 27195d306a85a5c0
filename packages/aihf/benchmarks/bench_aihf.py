"""Benchmarks of issue 22, run once (means over repeated steps; one process, one torch thread).

1. One AIHF-DPO optimiser step (a demonstration-vs-agent pair and a preference pair per example: 4 sequences per
   example in one forward pass) over one DPO step on the same number of preference pairs (2 sequences per example).
   Target: at most 2.5x. Reference and pi_old log-probs are cached once per round (passed in as tensors), so neither
   step runs the reference model.
2. Soft value iteration on the 8x8 gridworld along a single-loop-like sequence of rewards: cold start (V0 = 0)
   vs warm start from the previous solution (the single loop's policy step).

Usage: python packages/aihf/benchmarks/bench_aihf.py [--steps 30] [--batch 64]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch


def bench_steps(steps: int, batch: int) -> dict:
    from iclr25.aihf.implicit import Encoded, implicit_epoch
    from iclr25.core.lm import tiny_causal_lm

    g = torch.Generator().manual_seed(0)
    V, L = 30, 10

    def enc(n: int) -> Encoded:
        ids = torch.randint(2, V, (n, L), generator=g)
        resp = torch.zeros_like(ids)
        resp[:, 2:] = 1
        return Encoded(ids, torch.ones_like(ids), resp)

    n = batch * steps
    demos, agents, chosen, rejected = enc(n), enc(n), enc(n), enc(n)
    cached = [torch.randn(n, generator=g) for _ in range(4)]
    out = {}
    for name, w in (("dpo", 0.0), ("aihf-dpo", 0.5)):
        model = tiny_causal_lm(vocab_size=V, n_positions=16, n_embd=64, n_layer=2, seed=0, eos_token_id=1,
                               pad_token_id=0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        kw = dict(w=w, beta=0.5, demos=demos, agents=agents, demo_old=cached[0], agent_old=cached[1], chosen=chosen,
                  rejected=rejected, ref_chosen=cached[2], ref_rejected=cached[3], batch_size=batch, pad_id=0)
        implicit_epoch(model, opt, rng=np.random.default_rng(0), steps=3, **kw)  # warm-up
        t = time.perf_counter()
        implicit_epoch(model, opt, rng=np.random.default_rng(1), steps=steps, **kw)
        out[name] = (time.perf_counter() - t) / steps
    return {"dpo_step_s": out["dpo"], "aihf_dpo_step_s": out["aihf-dpo"], "ratio": out["aihf-dpo"] / out["dpo"],
            "batch": batch, "steps": steps}


def bench_svi(n_solves: int = 40, drift: float = 0.05) -> dict:
    from iclr25.aihf import GridworldMDP, soft_value_iteration

    mdp = GridworldMDP.grid(seed=0)
    rng = np.random.default_rng(0)
    theta = torch.zeros(mdp.d, dtype=torch.float64)
    thetas = []
    for _ in range(n_solves):  # a drifting reward, like the single loop's reward steps
        theta = theta + drift * (torch.from_numpy(rng.standard_normal(mdp.d)) + 0.4 * mdp.theta_star)
        thetas.append(theta.clone())
    res = {}
    for mode in ("cold", "warm"):
        V = None
        iters, t = 0, time.perf_counter()
        for th in thetas:
            _, Vn, k = soft_value_iteration(mdp.P, mdp.reward(th), mdp.gamma, mdp.beta, V0=V if mode == "warm" else None,
                                            return_iters=True, check=False)
            V, iters = Vn, iters + k
        res[mode] = {"seconds_per_solve": (time.perf_counter() - t) / n_solves, "backups_per_solve": iters / n_solves}
    res["speedup"] = res["cold"]["seconds_per_solve"] / res["warm"]["seconds_per_solve"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(1)
    s = bench_steps(a.steps, a.batch)
    print(f"AIHF-DPO step {1e3 * s['aihf_dpo_step_s']:.1f} ms vs DPO step {1e3 * s['dpo_step_s']:.1f} ms "
          f"(batch {s['batch']}, mean of {s['steps']}): ratio {s['ratio']:.2f}x (target <= 2.5x)")
    v = {}
    for drift in (0.05, 0.002):  # early (large) and late (small) reward steps of the single loop
        v[drift] = r = bench_svi(drift=drift)
        print(f"soft value iteration, 8x8 gridworld, reward drift {drift}: "
              f"cold {1e3 * r['cold']['seconds_per_solve']:.1f} ms "
              f"({r['cold']['backups_per_solve']:.0f} backups) vs warm {1e3 * r['warm']['seconds_per_solve']:.1f} ms "
              f"({r['warm']['backups_per_solve']:.0f} backups) per solve: {r['speedup']:.2f}x")
    print(json.dumps({"steps": s, "svi": {str(k): x for k, x in v.items()}}))


if __name__ == "__main__":
    main()
