"""CPU-scale reproduction of Q-Adapter's claims (paper Sec. 3 and 5): the exact tabular check and the DSP
``literature`` customisation of a tiny pre-trained LM against DPO, SFT and the base model.

A declaration for the core's experiment runner (:mod:`iclr25.core.runner`): the jobs are the base model
(pre-trained once), the tabular check, and one job per (method, learning rate, seed) whose bodies live in
:mod:`iclr25.q_adapter.dsp`; the claims are a pure function of the records (:func:`claims_from_records`),
the figures come from :mod:`iclr25.q_adapter.plots`.

Every method gets the same learning-rate grid, the same steps and the same checkpoint grid; its learning rate
and checkpoint are chosen on a validation split (train-part queries never trained on). Forgetting is
compared at *matched* validation accuracy (:func:`iclr25.q_adapter.matching.matched_forgetting`), so an arm
that hardly learned the preference cannot win by forgetting little.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .dsp import FULL, METHODS, QUICK, ReproSettings, settings_to_dict
from .matching import best_point, matched_forgetting

__all__ = ["ReproSettings", "QUICK", "FULL", "METHODS", "CLAIM_NAMES", "jobs", "claims_from_records", "reproduce"]

log = logging.getLogger(__name__)

_VARIANTS = (("q-adapter-code", "", "official code's loss"), ("q-adapter-paper", "_paper_loss", "paper's loss"))
CLAIM_NAMES = ("tabular/recovers_optimum", "tabular/equals_dpo_when_alphas_equal",
               "dsp/pair_accuracy_vs_dpo", "dsp/forgetting_at_matched_accuracy_lt_dpo",
               "dsp/forgetting_at_matched_accuracy_lt_sft", "dsp/pair_accuracy_vs_dpo_paper_loss",
               "dsp/forgetting_at_matched_accuracy_lt_dpo_paper_loss",
               "dsp/forgetting_at_matched_accuracy_lt_sft_paper_loss", "mechanism/residual_ranks_heldout_pairs")
#: the figure of the DSP claims (written by :func:`iclr25.q_adapter.plots.write_plots`)
HEADLINE_PLOT = "headline.png"


def _job_name(method: str, lr: float, seed: int) -> str:
    return f"{method}-lr{lr:g}-seed{seed}"


def jobs(s: ReproSettings) -> list[Job]:
    """The reproduction's jobs: ``base``, ``tabular`` and one per (method, learning rate, seed) after ``base``."""
    sd = settings_to_dict(s)
    out = [Job("base", "iclr25.q_adapter.dsp:base_job", seed=0, settings=sd),
           Job("tabular", "iclr25.q_adapter.dsp:tabular_job", seed=0, settings={"iters": s.tabular_iters})]
    out += [Job(_job_name(m, lr, seed), "iclr25.q_adapter.dsp:method_job", seed=int(seed),
                settings={"repro": sd, "method": m, "lr": float(lr)}, deps=("base",))
            for seed in s.seeds for m in METHODS for lr in s.lrs]
    return out


def reproduce(quick: bool, out_dir: Path, *, seeds: Sequence[int] | None = None, quiet: bool = False,
              threads: int | None = None, workers: int | None = None, resume: bool = False) -> list[Claim]:
    """Measure the claims of :data:`CLAIM_NAMES`. Writes ``records/`` (one per job), ``raw.json``, ``curve.csv``
    (every method's trade-off curve) and the figures into ``out_dir``.

    Args:
        quick: CPU-scale quick settings (:data:`QUICK`, 2 seeds) or the larger :data:`FULL` ones (3 seeds,
            three learning rates).
        out_dir: output folder.
        seeds: override the seeds.
        quiet: no progress bar.
        threads: torch threads per job (default 1).
        workers: processes the jobs run in (default: the core's, from the cores; 1 = in this process).
        resume: keep the jobs an interrupted run in ``out_dir`` finished (refused if settings changed).

    Raises:
        ValueError: empty ``seeds``, ``workers < 1`` or ``threads < 1``.
    """
    from iclr25.core.runner import HEAP_REUSE_ENV, run_jobs

    s = QUICK if quick else FULL
    if seeds is not None:
        if not seeds:
            raise ValueError("--seeds needs at least one seed")
        s = replace(s, seeds=tuple(int(x) for x in seeds))
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    threads = 1 if threads is None else threads
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    out_dir = Path(out_dir)
    # the workers keep freed evaluation tensors in the heap (HEAP_REUSE_ENV: no mmap + page-fault round trip per
    # [batch, length, vocab] tensor, ~17 % of the quick run's CPU-s) and skip the bitsandbytes import (dsp)
    res = run_jobs(jobs(s), out_dir, workers=workers, resume=resume, threads=threads, desc="q-adapter reproduce",
                   quiet=True if quiet else None, worker_env=HEAP_REUSE_ENV)
    claims, raw = claims_from_records(res.records, s)
    raw["runner"] = res.summary()
    _write_outputs(raw, s, out_dir)
    from .plots import write_plots

    write_plots(raw, out_dir)
    return claims


def _points(records: dict, s: ReproSettings, method: str, seed: int) -> list[dict]:
    """Every (learning rate, checkpoint) point of ``method`` at ``seed``, with its ``lr``."""
    return [{**p, "lr": lr} for lr in s.lrs for p in records[_job_name(method, lr, seed)]["curve"]]


def _sd(x: Sequence[float]) -> float | None:
    return float(np.std(x, ddof=1)) if len(x) > 1 else None


def _fmt(xs: Sequence[float], nd: int = 3) -> str:
    sd = _sd(xs)
    return f"{np.mean(xs):.{nd}f}" + (f"±{sd:.{nd}f}" if sd is not None else "")


def _verdict(gaps: Sequence[float]) -> str:
    sd = _sd(gaps)
    if sd is None:
        return "one seed: no spread"
    return (f"paired gap {np.mean(gaps):+.4f} {'exceeds' if abs(np.mean(gaps)) > sd else 'is within'} its seed "
            f"sd {sd:.4f} ({len(gaps)} seeds)")


def claims_from_records(records: dict, s: ReproSettings) -> tuple[list[Claim], dict[str, Any]]:
    """The claims and the aggregated numbers (``raw``) from the jobs' records: a pure function, no training."""
    tab, base = records["tabular"], records["base"]
    seeds = list(s.seeds)
    n = len(seeds)
    pts = {m: {seed: _points(records, s, m, seed) for seed in seeds} for m in METHODS}
    tuned = {m: [best_point(pts[m][seed], m) for seed in seeds] for m in METHODS}
    first = records[_job_name("dpo", s.lrs[0], seeds[0])]
    scale = (f"tiny GPT-2 ({base['n_layer']}L, d={base['n_embd']}) pre-trained on CPU; DSP {s.domain}, "
             f"{first['n_train_pairs']} train / {first['n_val_pairs']} validation / {first['n_test_pairs']} test "
             f"pairs, {first['steps']} steps, lr grid {list(s.lrs)} and {s.checkpoints} checkpoints for every "
             f"method (picked on validation), seeds {seeds}")
    sane = dict(kind="sanity", paper_value=None, paper_ref="Sec. 3, direction only", n_seeds=1, spread=None)
    claims = [
        Claim("tabular/recovers_optimum", "max TV(pi~, pi_1^(a0/a~) e^(R2/a~)/Z) over 3 (a~, a0)", tab["tv_max"],
              threshold=1e-3, higher_is_better=False, paper="optimum of the residual soft-Q objective",
              note=f"exact population loss, {s.tabular_iters} Adam steps; per setting: "
                   f"{ {k: round(x, 7) for k, x in tab.items() if k.startswith('tv[')} }", **sane),
        Claim("tabular/equals_dpo_when_alphas_equal", "max TV(Q-Adapter, DPO) for a~ = a0 = beta in {1, 0.5}",
              tab["tv_dpo_max"], threshold=1e-3, higher_is_better=False,
              paper="DPO is the special case a~ = a0", note=f"max TV {tab['tv_dpo_max']:.2e}", **sane),
    ]
    acc = {m: [p["test_accuracy"] for p in tuned[m]] for m in METHODS}
    matched: dict[str, list[dict]] = {}
    for m, suffix, label in _VARIANTS:
        gaps = [100 * (a - d) for a, d in zip(acc[m], acc["dpo"])]
        sel = "; ".join(f"{mm}: lr {[p['lr'] for p in tuned[mm]]}, step {[p['step'] for p in tuned[mm]]}"
                        for mm in (m, "dpo"))
        claims.append(Claim(
            f"dsp/pair_accuracy_vs_dpo{suffix}",
            f"held-out test pair accuracy, Q-Adapter ({label}) minus DPO, each tuned on validation (points)",
            float(np.mean(gaps)), threshold=-5.0, higher_is_better=True, kind="headline", paper_value=None,
            paper_ref="Sec. 5.2, direction only", spread=_sd(gaps), n_seeds=n, plot=HEADLINE_PLOT,
            paper="Q-Adapter better or comparable on the new preference",
            note=f"{scale}. Test accuracy at the validation-picked point: Q-Adapter {_fmt(acc[m])}, DPO "
                 f"{_fmt(acc['dpo'])}, SFT {_fmt(acc['sft'])}, base {base['pair_accuracy']:.3f}; {_verdict(gaps)}; "
                 f"'comparable' = at most 5 points below DPO; picked {sel}"))
        for other in ("dpo", "sft"):
            mf = [matched_forgetting(pts[m][seed], pts[other][seed], base["general_nll"], who=(m, other))
                  for seed in seeds]
            matched[f"{m}|{other}"] = mf
            fa, fb = [x["forgetting_a"] for x in mf], [x["forgetting_b"] for x in mf]
            gaps = [a - b for a, b in zip(fa, fb)]
            final = {mm: [pts[mm][seed][-1]["general_nll"] - base["general_nll"] for seed in seeds]
                     for mm in (m, other)}
            claims.append(Claim(
                f"dsp/forgetting_at_matched_accuracy_lt_{other}{suffix}",
                "rise in held-out general-text NLL over the base (nats/token) at matched validation accuracy",
                float(np.mean(fa)), baseline=float(np.mean(fb)), higher_is_better=False, kind="headline",
                paper_value=None, paper_ref="Table 1, direction only", spread=_sd(gaps), n_seeds=n,
                plot=HEADLINE_PLOT,
                paper=f"at comparable success Q-Adapter forgets less than {'PR (DPO)' if other == 'dpo' else 'SFT'}",
                note=f"{scale}. Matched validation accuracy per seed {[round(x['target'], 3) for x in mf]} (the "
                     f"highest both reach); forgetting there: Q-Adapter ({label}) {_fmt(fa, 4)} (steps "
                     f"{[x['a']['step'] for x in mf]}), {other.upper()} {_fmt(fb, 4)} (steps "
                     f"{[x['b']['step'] for x in mf]}); {_verdict(gaps)}. At the last step (unmatched): "
                     f"{_fmt(final[m], 4)} vs {_fmt(final[other], 4)}; base NLL {base['general_nll']:.3f}"))
    claims.append(_residual_claim(pts, base, seeds, first["n_test_pairs"], scale))
    raw = {"settings": settings_to_dict(s), "base": base, "tabular": tab, "points": pts, "tuned": tuned,
           "matched": matched, "records": {k: v for k, v in records.items() if k not in ("base", "tabular")}}
    return claims, raw


def residual_gain(pts: dict, base_accuracy: float, seeds: Sequence[int], n_test: int,
                  method: str = "q-adapter-code") -> dict[str, Any]:
    """Held-out test pair accuracy of ``method``'s implied reward (``alpha~ log pi~ - alpha_0 log pi_1`` = the
    learned residual Q summed over the response, up to the shared ``V(x)``) at the *last* step of each seed,
    minus the base's ``log pi_1`` accuracy (points), and the bar it must clear: the larger of the seed sd of the
    gain and 1.96 binomial standard errors of an accuracy on ``n_test`` pairs at the base's accuracy."""
    gains = [100 * (pts[method][seed][-1]["test_accuracy"] - base_accuracy) for seed in seeds]
    se = 100 * float(np.sqrt(base_accuracy * (1 - base_accuracy) / n_test))
    sd = _sd(gains)
    bar = max(1.96 * se, sd or 0.0)
    return {"gains": gains, "mean": float(np.mean(gains)), "sd": sd, "binomial_se": se, "bar": bar,
            "holds": bool(np.mean(gains) > bar)}


def _residual_claim(pts: dict, base: dict, seeds: Sequence[int], n_test: int, scale: str) -> Claim:
    """``mechanism/residual_ranks_heldout_pairs``: the paper's argument (Sec. 3) is that the residual Q learns the
    new preference ``r_2`` from pairs alone, the base ``pi_1`` supplying the rest. If the residual only memorised
    the training pairs, it would rank held-out pairs no better than ``log pi_1`` does, and the claim fails."""
    g = residual_gain(pts, base["pair_accuracy"], seeds, n_test)
    gp = residual_gain(pts, base["pair_accuracy"], seeds, n_test, method="q-adapter-paper")
    last = [pts["q-adapter-code"][seed][-1]["test_accuracy"] for seed in seeds]
    return Claim(
        "mechanism/residual_ranks_heldout_pairs",
        "held-out test pair accuracy of the learned residual (Q-Adapter implied reward, official code's loss, last "
        "step) minus the base log pi_1's (points)",
        g["mean"], threshold=g["bar"], higher_is_better=True, kind="mechanism", paper_value=None,
        paper_ref="Sec. 3 (residual soft-Q, Eq. for Q^), direction only", spread=g["sd"], n_seeds=len(seeds),
        plot=HEADLINE_PLOT, paper="the residual Q-function learns the new preference without r_1",
        note=f"{scale}. Last-step accuracy {_fmt(last)} vs base {base['pair_accuracy']:.3f}: gain "
             f"{_fmt(g['gains'], 2)} points per seed {[round(x, 2) for x in g['gains']]}; bar {g['bar']:.2f} = "
             f"max(1.96 x binomial s.e. {g['binomial_se']:.2f} on {n_test} pairs, seed sd); "
             f"{'clears' if g['holds'] else 'misses'} it. Paper's loss: gain {_fmt(gp['gains'], 2)} "
             f"({'clears' if gp['holds'] else 'misses'} its bar {gp['bar']:.2f})")


def _write_outputs(raw: dict, s: ReproSettings, out_dir: Path) -> None:
    """``raw.json`` and ``curve.csv`` (every method's points: lr, seed, step, accuracies, NLL)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "raw.json").write_text(json.dumps(raw, indent=2, default=str) + "\n", encoding="utf-8")
    lines = ["method,lr,seed,step,val_accuracy,test_accuracy,general_nll"]
    for m, by_seed in raw["points"].items():
        for seed, pts in by_seed.items():
            lines += [f"{m},{p['lr']:g},{seed},{p['step']},{p['val_accuracy']:.4f},{p['test_accuracy']:.4f},"
                      f"{p['general_nll']:.5f}" for p in pts]
    (out_dir / "curve.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
