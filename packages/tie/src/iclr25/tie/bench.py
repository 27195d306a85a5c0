"""``bench``: zero-shot vs TIE on large random embeddings, and TIE's share of the offline pair's
embedding time (issue #30 performance targets; a script, not a timed test)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .tie import TIE, zero_shot_predict

__all__ = ["run_bench"]


def _time(fn, repeats: int) -> tuple[float, list[float]]:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.mean(ts)), ts


def run_bench(cfg) -> dict[str, Any]:
    """Measure, in one run:

    * zero-shot predict on ``n`` float32 embeddings (``dim``, ``classes`` prompts) vs TIE
      (``fit`` on a ``pool`` subset + translate + predict, ``attributes`` values) → ratio of means
      (target ≤ 1.5×);
    * the offline pair's image-embedding time on ``renders`` 32×32 renders (untrained weights; the
      cost does not depend on them) vs TIE on those embeddings → TIE's share (target < 5 %), images/s.
    """
    rng = np.random.default_rng(0)
    x = rng.standard_normal((cfg.n, cfg.dim), dtype=np.float32)
    T = rng.standard_normal((cfg.classes, cfg.dim), dtype=np.float32)
    S = rng.standard_normal((cfg.attributes, cfg.dim), dtype=np.float32)
    a = rng.integers(0, cfg.attributes, cfg.n)
    pool = min(cfg.pool, cfg.n)

    def zs():
        return zero_shot_predict(x, T)

    def tie():
        return TIE(S, "true").fit(x[:pool], a[:pool]).predict(x, T, a)

    def tie_star():
        return TIE(S, "inferred").fit(x[:pool]).predict(x, T)

    zs(), tie()  # warm-up
    t_zs, zs_all = _time(zs, cfg.repeats)
    t_tie, tie_all = _time(tie, cfg.repeats)
    t_star, _ = _time(tie_star, cfg.repeats)
    res: dict[str, Any] = {
        "n": cfg.n, "pool": pool, "dim": cfg.dim, "classes": cfg.classes, "attributes": cfg.attributes,
        "repeats": cfg.repeats, "zero_shot_s": t_zs, "tie_s": t_tie, "tie_star_s": t_star,
        "tie_over_zero_shot": t_tie / t_zs, "tie_star_over_zero_shot": t_star / t_zs,
        "tie_over_zero_shot_min": min(tie_all) / min(zs_all),
        "zero_shot_runs_s": zs_all, "tie_runs_s": tie_all,
    }
    if cfg.renders > 0:
        import torch

        from .offline_pair import OfflinePair, PairConfig, _build_modules, render_frames

        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        pc = PairConfig()
        image, head, scale = _build_modules(pc)
        pair = OfflinePair(pc, image.eval(), head, scale)
        imgs = render_frames(rng.integers(0, 256, (cfg.renders, 32, 32, 3), dtype=np.uint8), "green")
        pair.encode_images(imgs[:64])
        t_emb, _ = _time(lambda: pair.encode_images(imgs), 1)
        e = pair.encode_images(imgs[:cfg.renders])
        Tp = rng.standard_normal((10, pc.dim)).astype(np.float32)
        Sp = rng.standard_normal((2, pc.dim)).astype(np.float32)
        ap = rng.integers(0, 2, cfg.renders)
        t_tp, _ = _time(lambda: TIE(Sp, "true").fit(e, ap).predict(e, Tp, ap), cfg.repeats)
        res.update({"renders": cfg.renders, "embed_renders_s": t_emb, "images_per_s": cfg.renders / t_emb,
                    "tie_on_renders_s": t_tp, "tie_share_of_embedding": t_tp / t_emb})
    return res
