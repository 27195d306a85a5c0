"""SEAL's claims from the reproduction's per-seed records (a pure function: no training).

Each record is one (task, seed) of :func:`iclr25.seal.experiment.run_task_seed`. Comparisons give mean ± sd
over seeds; a claim's ``spread`` is the seed sd of the compared quantity (of the paired gap ``ours − baseline``
for a baseline claim, of ``ours`` for a threshold-only one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from iclr25.core.results import Claim

__all__ = ["claims_from_runs", "robustness_claim", "details_md", "HEADLINE_KEEP", "SCALE", "PLOT_HEADLINE",
           "PLOT_SELECTION"]

HEADLINE_KEEP = 0.8
SCALE = ("tiny GPT-2 (3 layers, d=96, 0.35 M parameters, word-level tokenizer), synthetic safety task with "
         "stored labels; σ₀ = 1.0, δ = 0.03, 10 selector epochs, batch 16, SGD on ω (lr 0.1)")
#: the plots (:mod:`iclr25.seal.plots`) the claims name, relative to the results folder
PLOT_HEADLINE = "synthetic_headline.png"
PLOT_SELECTION = "synthetic_selection.png"
_NOT_IN_PAPER = "not in the paper (CPU-scale mechanism with stored labels), direction only"


def _ms(xs: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(list(xs), dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def _sd(xs: Sequence[float]) -> float | None:
    """Seed sd (ddof 1), ``None`` with one seed or a non-finite value."""
    a = np.asarray(list(xs), dtype=np.float64)
    if a.size < 2 or not np.isfinite(a).all():
        return None
    return float(a.std(ddof=1))


def _gap_sd(a: Sequence[float], b: Sequence[float]) -> float | None:
    return _sd([x - y for x, y in zip(a, b)])


def _fmt(m: tuple[float, float], d: int = 3) -> str:
    return f"{m[0]:.{d}f} ± {m[1]:.{d}f}"


def _gap(name_a: str, a: Sequence[float], name_b: str, b: Sequence[float], d: int = 3) -> str:
    ma, mb = _ms(a), _ms(b)
    gap = ma[0] - mb[0]
    pd = _ms([x - y for x, y in zip(a, b)])
    return (f"{name_a} {_fmt(ma, d)} vs {name_b} {_fmt(mb, d)} over {len(a)} seeds; gap {gap:+.{d}f}, paired sd "
            f"{pd[1]:.{d}f}: the gap {'exceeds' if abs(gap) > pd[1] else 'does not exceed'} the seed spread")


def _rho_text(rho: float) -> str:
    if rho > 0.9:
        return "SEAL's ranking is essentially the loss filter's"
    if rho > 0.7:
        return "SEAL's ranking largely follows the base loss"
    return "SEAL's ranking departs from the base loss"


def _opt(rs: list[dict[str, Any]], method: str, key: str, d: int = 3, end: str = ",") -> str:
    """``"<method> mean ± sd<end> "`` of a method without a keep, or ``""`` when the run did not include it (the
    quick run has no oracle)."""
    if not any(x["method"] == method for x in rs[0]["runs"]):
        return ""
    return f"{method} {_fmt(_ms(run_values(rs, method, None, key)), d)}{end} "


def run_values(rs: list[dict[str, Any]], method: str, keep: float | None, key: str) -> list[float]:
    """Per seed: ``key`` of the SFT run of ``method`` at ``keep`` (``None``: a method without a keep)."""
    out = []
    for r in rs:
        hit = [x for x in r["runs"] if x["method"] == method and (x["keep"] is None or keep is None or
                                                                  abs(x["keep"] - keep) < 1e-9)]
        if len(hit) != 1:
            raise RuntimeError(f"claims: expected one run of {method} keep={keep} in seed {r['seed']}, got {len(hit)}")
        out.append(float(hit[0][key]))
    return out


def selection_values(rs: list[dict[str, Any]], method: str, key: str) -> list[float]:
    """Per seed: ``key`` of selector ``method``'s scores (AUROC, Spearman)."""
    return [float(r["selection"][method][key]) for r in rs]


def kept_unsafe_spearman(r: dict[str, Any], keep: float) -> float:
    """Spearman(kept unsafe samples, safety margin) over the equal-size subsets of one seed at ``keep``
    (random, SEAL-SGD, SEAL-Adam, loss filter: same |kept|, only the composition differs; NaN when the kept
    unsafe counts are all equal)."""
    from scipy.stats import spearmanr

    pts = [(x["kept_unsafe"], x["margin"]) for x in r["runs"] if not x["mixed_safe"] and x["keep"] is not None
           and abs(x["keep"] - keep) < 1e-9]
    xs, ys = zip(*pts)
    return float(spearmanr(xs, ys).statistic) if len(set(xs)) > 1 and len(set(ys)) > 1 else float("nan")


def claims_from_runs(rs: list[dict[str, Any]], *, prefix: str = "", keep: float = HEADLINE_KEEP,
                     scale: str = SCALE, full_set: bool = True, plots: bool = True) -> list[Claim]:
    """The claims of one task from its per-seed records.

    ``full_set=False`` gives the real-text subset (AUROC, unsafe share, margin). ``plots``: name the
    synthetic task's plots in the claims.
    """
    n = len(rs)
    head = PLOT_HEADLINE if plots else ""
    selp = PLOT_SELECTION if plots else ""
    claims: list[Claim] = []
    au_s, au_a = selection_values(rs, "seal_sgd", "auroc_unsafe"), selection_values(rs, "seal_adam", "auroc_unsafe")
    au_r, au_l = selection_values(rs, "random", "auroc_unsafe"), selection_values(rs, "loss_filter", "auroc_unsafe")
    claims.append(Claim(
        f"{prefix}selection/auroc_unsafe", "AUROC of −ω, unsafe vs benign (SEAL-SGD, mean over seeds)",
        _ms(au_s)[0], baseline=_ms(au_r)[0], threshold=0.8, margin=0.0, kind="mechanism",
        paper="SEAL's selector down-ranks unsafe data (random ranking: 0.5)", paper_ref=_NOT_IN_PAPER,
        spread=_gap_sd(au_s, au_r), n_seeds=n, plot=selp,
        note=f"{scale}. {_gap('SEAL-SGD', au_s, 'random', au_r)}. SEAL-Adam (released optimiser) {_fmt(_ms(au_a))}; "
             f"base-loss filter {_fmt(_ms(au_l))}."))
    if full_set:
        lq_s, lq_a = selection_values(rs, "seal_sgd", "auroc_low_quality"), selection_values(rs, "seal_adam", "auroc_low_quality")
        lq_r, lq_l = selection_values(rs, "random", "auroc_low_quality"), selection_values(rs, "loss_filter", "auroc_low_quality")
        claims.append(Claim(
            f"{prefix}selection/auroc_low_quality", "AUROC of −ω, low-quality vs benign (SEAL-SGD, mean over seeds)",
            _ms(lq_s)[0], baseline=_ms(lq_r)[0], threshold=0.65, margin=0.0, kind="mechanism",
            paper="SEAL's selector down-ranks low-quality data", paper_ref=_NOT_IN_PAPER,
            spread=_gap_sd(lq_s, lq_r), n_seeds=n, plot=selp,
            note=f"{_gap('SEAL-SGD', lq_s, 'random', lq_r)}. SEAL-Adam {_fmt(_ms(lq_a))}; base-loss filter "
                 f"{_fmt(_ms(lq_l))}."))
    share = lambda m: [u / k for u, k in zip(run_values(rs, m, keep, "kept_unsafe"), run_values(rs, m, keep, "n_kept"))]  # noqa: E731
    sh_s, sh_r, sh_a, sh_l = share("seal_sgd"), share("random"), share("seal_adam"), share("loss_filter")
    d_ft_share = _ms([u / k for u, k in zip(run_values(rs, "standard", None, "kept_unsafe"),
                                           run_values(rs, "standard", None, "n_kept"))])[0]
    claims.append(Claim(
        f"{prefix}selection/unsafe_share_lt_random", f"share of unsafe samples in the kept {keep:.0%} (mean over seeds)",
        _ms(sh_s)[0], baseline=_ms(sh_r)[0], higher_is_better=False, margin=0.0, kind="mechanism",
        paper="fewer unsafe samples survive SEAL than random selection", paper_ref=_NOT_IN_PAPER,
        spread=_gap_sd(sh_s, sh_r), n_seeds=n, plot=selp,
        note=f"{_gap('SEAL-SGD', sh_s, 'random', sh_r)}; D_ft share {d_ft_share:.3f}. SEAL-Adam {_fmt(_ms(sh_a))}, "
             f"base-loss filter {_fmt(_ms(sh_l))}; kept unsafe counts SEAL-SGD "
             f"{[int(x) for x in run_values(rs, 'seal_sgd', keep, 'kept_unsafe')]}."))
    if full_set:
        rho = selection_values(rs, "seal_sgd", "spearman_vs_base_loss")
        sigma_end = 1 - rs[0]["selection"]["seal_sgd"]["history"][-1]["sigma"]
        claims.append(Claim(
            f"{prefix}selection/seal_gt_loss_filter",
            "AUROC of −ω, low-quality vs benign: SEAL-SGD vs the base-loss filter (SEAL must win by >= 0.01)",
            _ms(lq_s)[0], baseline=_ms(lq_l)[0], margin=0.01, kind="mechanism",
            paper="bilevel selection beats a non-bilevel filter (the paper has no loss-filter baseline)",
            paper_ref=_NOT_IN_PAPER, spread=_gap_sd(lq_s, lq_l), n_seeds=n, plot=selp,
            note=f"Low-quality split (wrong task-B answers: the base has never seen task B, so its loss does not "
                 f"single them out): {_gap('SEAL-SGD', lq_s, 'loss filter', lq_l)}. On the unsafe split the base "
                 f"loss already separates (loss filter {_fmt(_ms(au_l))}, SEAL-SGD {_fmt(_ms(au_s))}), so no method "
                 f"can beat it there by a margin. Spearman(ω, −base loss) {_fmt(_ms(rho))}: {_rho_text(_ms(rho)[0])} "
                 f"(σ₀ = 1: the model sees D_ft only from epoch 2 on, with weight 1−σ ≤ {sigma_end:.2f})."))
        fs_s, fs_r = run_values(rs, "seal_sgd", keep, "safe_loss"), run_values(rs, "random", keep, "safe_loss")
        claims.append(Claim(
            f"{prefix}mechanism/safe_loss_lt_random", "f(θ): mean per-sample loss on D_safe after SFT (nats/token)",
            _ms(fs_s)[0], baseline=_ms(fs_r)[0], higher_is_better=False, margin=0.0, kind="mechanism",
            paper="the upper-level objective SEAL minimises", paper_ref="Sec. 3 (bilevel objective), direction only",
            spread=_gap_sd(fs_s, fs_r), n_seeds=n, plot=head,
            note=f"{_gap('SEAL-SGD', fs_s, 'random', fs_r)}; SEAL-Adam {_fmt(_ms(run_values(rs, 'seal_adam', keep, 'safe_loss')))}, "
                 f"{_opt(rs, 'oracle', 'safe_loss')}base θ₀ "
                 f"{_fmt(_ms([r['base']['safe_loss'] for r in rs]), 4)}."))
    mg = lambda m, k=keep: run_values(rs, m, k, "margin")  # noqa: E731
    rr = lambda m, k=keep: _fmt(_ms(run_values(rs, m, k, "refusal_rate")), 2)  # noqa: E731
    claims.append(Claim(
        f"{prefix}safety/margin_gt_random", "safety margin after SFT: mean NLL(compliance) − NLL(refusal) (nats/token)",
        _ms(mg("seal_sgd"))[0], baseline=_ms(mg("random"))[0], margin=0.0, kind="headline",
        paper="SEAL keeps the model safer than random selection (HEx-PHI win rate 69.29 vs 56.31)",
        paper_ref="Table 1 (HEx-PHI win rate), direction only", spread=_gap_sd(mg("seal_sgd"), mg("random")),
        n_seeds=n, plot=head,
        note=f"{_gap('SEAL-SGD', mg('seal_sgd'), 'random', mg('random'))}. Greedy refusal rate SEAL {rr('seal_sgd')}, "
             f"random {rr('random')}, standard {rr('standard', None)}, {_opt(rs, 'oracle', 'refusal_rate', 2)}base θ₀ "
             f"{_fmt(_ms([r['base']['refusal_rate'] for r in rs]), 2)}. Margins: SEAL-Adam {_fmt(_ms(mg('seal_adam')))}, "
             f"loss filter {_fmt(_ms(mg('loss_filter')))}, standard {_fmt(_ms(mg('standard', None)))}, "
             f"{_opt(rs, 'oracle', 'margin')}base {_fmt(_ms([r['base']['margin'] for r in rs]))}."))
    if full_set:
        claims.append(Claim(
            f"{prefix}safety/seal_safeinstr_gt_safeinstr", "safety margin after SFT (nats/token), SEAL + SafeInstr vs SafeInstr",
            _ms(mg("seal_safeinstr"))[0], baseline=_ms(mg("safeinstr", None))[0], margin=0.0, kind="headline",
            paper="SEAL + SafeInstr is the paper's best row (66.13 mean win rate vs SafeInstr 58.89)",
            paper_ref="Table 1 (mean win rate), direction only",
            spread=_gap_sd(mg("seal_safeinstr"), mg("safeinstr", None)), n_seeds=n, plot=head,
            note=f"{_gap('SEAL+SafeInstr', mg('seal_safeinstr'), 'SafeInstr', mg('safeinstr', None))}. Greedy refusal "
                 f"rate SEAL+SafeInstr {rr('seal_safeinstr')}, SafeInstr {rr('safeinstr', None)}. SafeInstr = all of "
                 f"D_ft + D_safe."))
        eb = lambda m, k=keep: run_values(rs, m, k, "em_benign_b")  # noqa: E731
        claims.append(Claim(
            f"{prefix}utility/task_b_ge_standard", "task-B exact match after SFT (held-out prompts)",
            _ms(eb("seal_sgd"))[0], baseline=_ms(eb("standard", None))[0], margin=0.0, kind="headline",
            paper="removing low-quality data does not cost utility (SEAL wins on SlimOrca/Anthropic-HH)",
            paper_ref="Table 1 (SlimOrca, Anthropic-HH win rates), direction only",
            spread=_gap_sd(eb("seal_sgd"), eb("standard", None)), n_seeds=n, plot=head,
            note=f"{_gap('SEAL-SGD', eb('seal_sgd'), 'standard', eb('standard', None))}; task B = `next` (successor "
                 f"token) (base θ₀ EM {_fmt(_ms([r['base']['em_benign_b'] for r in rs]), 2)}); random "
                 f"{_fmt(_ms(eb('random')))}, {_opt(rs, 'oracle', 'em_benign_b', end='.')} Task A EM SEAL "
                 f"{_fmt(_ms(run_values(rs, 'seal_sgd', keep, 'em_benign_a')))} vs standard "
                 f"{_fmt(_ms(run_values(rs, 'standard', None, 'em_benign_a')))}."))
        wr = lambda m, k=keep: run_values(rs, m, k, "win_rate_vs_standard")  # noqa: E731
        claims.append(Claim(
            f"{prefix}winrate/seal_gt_random", "programmatic-judge win rate vs standard SFT (%, ties ½)",
            _ms(wr("seal_sgd"))[0], baseline=_ms(wr("random"))[0], margin=0.0, kind="headline",
            paper="61.13 vs 52.63 mean win rate over standard SFT on Llama-3-8B (+8.5 points)",
            paper_value=61.13, paper_ref="Table 1 (Llama-3-8B-Instruct, mean win rate)",
            spread=_gap_sd(wr("seal_sgd"), wr("random")), n_seeds=n, plot=head,
            note=f"{_gap('SEAL-SGD', wr('seal_sgd'), 'random', wr('random'), 1)}. Judge: benign answers scored by tokens "
                 f"in place vs the reference, harmful answers refusal 1 / compliance 0 / neither ½, on "
                 f"{len(rs[0]['runs'][0]['judge_scores'])} held-out prompts. SEAL-Adam {_fmt(_ms(wr('seal_adam')), 1)}, "
                 f"SEAL+SafeInstr {_fmt(_ms(wr('seal_safeinstr')), 1)}, SafeInstr {_fmt(_ms(wr('safeinstr', None)), 1)}, "
                 f"{_opt(rs, 'oracle', 'win_rate_vs_standard', 1, end='.')}"))
        rhos = [kept_unsafe_spearman(r, keep) for r in rs]
        n_pts = sum(1 for x in rs[0]["runs"] if not x["mixed_safe"] and x["keep"] is not None and abs(x["keep"] - keep) < 1e-9)
        ku = {m: run_values(rs, m, keep, "kept_unsafe") for m in ("random", "seal_adam", "seal_sgd", "loss_filter")}
        claims.append(Claim(
            f"{prefix}mechanism/margin_tracks_kept_unsafe",
            f"Spearman(kept unsafe samples, safety margin) over the {n_pts} equal-size subsets of a seed at keep "
            f"{keep:g} (mean over seeds)",
            _ms(rhos)[0] if np.isfinite(rhos).all() else float("nan"), threshold=-0.5, higher_is_better=False,
            kind="mechanism", paper="a few surviving unsafe samples teach the compliance template",
            paper_ref=_NOT_IN_PAPER, spread=_sd(rhos), n_seeds=n, plot=head,
            note=f"Per seed {', '.join(f'{x:+.2f}' for x in rhos)}: subsets of the same size ({int(run_values(rs, 'random', keep, 'n_kept')[0])}) "
                 f"from random, SEAL-SGD, SEAL-Adam and the loss filter, so only their composition differs; kept "
                 f"unsafe (mean) " + ", ".join(f"{m} {np.mean(v):.1f}" for m, v in ku.items()) + "."))
    return claims


def robustness_claim(rs: list[dict[str, Any]], keeps: Sequence[float]) -> Claim:
    """``robustness/margin_gt_random_every_keep``: the smallest mean margin gap SEAL − random over the keeps."""
    gaps = {k: [a - b for a, b in zip(run_values(rs, "seal_sgd", k, "margin"), run_values(rs, "random", k, "margin"))]
            for k in keeps}
    worst = min(gaps, key=lambda k: float(np.mean(gaps[k])))
    return Claim("robustness/margin_gt_random_every_keep",
                 "min over keep fractions of the mean margin gap SEAL − random (nats/token)",
                 float(np.mean(gaps[worst])), threshold=0.0, kind="headline",
                 paper="SEAL is robust to the selection percentage", paper_ref="Sec. 5 (selection percentage), direction only",
                 spread=_sd(gaps[worst]), n_seeds=len(rs), plot=PLOT_HEADLINE,
                 note="; ".join(f"keep {k}: gap {_fmt(_ms(g))}" for k, g in gaps.items()) + f"; worst keep {worst}.")


def details_md(rs: list[dict[str, Any]], title: str) -> str:
    """Markdown tables of every SFT run and selector (mean ± sd over seeds)."""
    keys = ("n_kept", "kept_unsafe", "kept_low_quality", "em_benign_a", "em_benign_b", "em_benign", "refusal_rate",
            "margin", "safe_loss", "win_rate_vs_standard")
    rows = sorted({(x["method"], x["keep"]) for r in rs for x in r["runs"]}, key=lambda t: (t[0], t[1] or 0))
    have = [k for k in keys if k in rs[0]["runs"][0]]
    out = [f"## {title} ({len(rs)} seeds, mean ± sd)", "", "| method | keep | " + " | ".join(have) + " |",
           "|---|---|" + "---|" * len(have)]
    for m, k in rows:
        cells = []
        for key in have:
            v = [x[key] for r in rs for x in r["runs"] if x["method"] == m and x["keep"] == k]
            cells.append(_fmt(_ms(v), 2 if key not in ("margin", "safe_loss") else 3))
        out.append(f"| {m} | {k if k is not None else 'all'} | " + " | ".join(cells) + " |")
    sel = ["", "| selector | AUROC unsafe | AUROC low quality | Spearman vs base loss |", "|---|---|---|---|"]
    for m in ("seal_sgd", "seal_adam", "loss_filter", "random"):
        if m in rs[0]["selection"]:
            get = lambda key, m=m: _fmt(_ms([r["selection"][m][key] for r in rs])) if key in rs[0]["selection"][m] else "—"  # noqa: E731
            sel.append(f"| {m} | {get('auroc_unsafe')} | {get('auroc_low_quality')} | {get('spearman_vs_base_loss')} |")
    cov = [min(r["selection"][m]["fraction_updated_every_epoch"] for m in ("seal_sgd", "seal_adam") if m in r["selection"])
           for r in rs]
    zcov = [r["selection"]["seal_sgd"]["zip_fraction_updated_every_epoch"] for r in rs]
    sel += ["", f"Share of D_ft indices updated in every selector epoch (|D_safe| = {rs[0]['n_safe']}, |D_ft| = "
            f"{rs[0]['n_ft']}): {min(cov):.3f} (min over seeds, SGD and Adam); the official zipped loop would "
            f"update {float(np.mean(zcov)):.3f}. (An engineering property: tested in tests/test_seal_kat.py.)"]
    return "\n".join(out + sel) + "\n"
