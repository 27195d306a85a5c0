"""CPU-scale reproduction of TIE's claims: the offline CLIP-style pair and the synthetic paper-model.

``reproduce(quick, out_dir)`` returns eight claims (issue #30; the covariance check is a test since #45):

* offline pair (superclass animal/vehicle × frame colour, 4 groups, prediction = superclass of the
  predicted class; mean ± sd over encoder seeds): ``tie_wga_gt_zero_shot``, ``tie_keeps_average``,
  ``tie_star_near_tie``, ``tie_ge_projection``, and ``mechanism/text_direction_matches_image_shift``;
* synthetic paper-model: ``mechanism/tie_matches_oracle_translation``,
  ``synthetic/tie_wga_gt_zero_shot``,
  ``synthetic/tie_star_tracks_attribute_inference``.

Every arm of one seed shares the encoder, the pool, the test renders and the prompts. The encoders and the
synthetic model are jobs of the core's experiment runner (worker processes, one torch thread each; records
under ``out_dir/records``, ``--resume``); encoders are cached under ``out_dir/encoders`` (a rerun reuses
finished checkpoints; an interrupted one resumes).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .evaluate import LABELS, METHODS, evaluate_methods
from .synthetic import make_synthetic, oracle_translation
from .tie import (
    TIE,
    group_metrics,
    normalize_rows,
    project_out,
    projection_directions,
    spurious_vectors,
    translate,
    zero_shot_predict,
)

__all__ = ["reproduce", "jobs", "offline_job", "synthetic_job", "claims_from_records", "QUICK", "FULL", "CLAIM_NAMES",
           "run_offline_seed", "synthetic_results"]

log = logging.getLogger("iclr25.tie")

CLAIM_NAMES = (
    "offline_pair/tie_wga_gt_zero_shot",
    "offline_pair/tie_keeps_average",
    "offline_pair/tie_star_near_tie",
    "offline_pair/tie_ge_projection",
    "mechanism/text_direction_matches_image_shift",
    "mechanism/tie_matches_oracle_translation",
    "synthetic/tie_wga_gt_zero_shot",
    "synthetic/tie_star_tracks_attribute_inference",
)

#: σ values of the â-accuracy sweep (â accuracy ≈ 0.99 → 0.7 at s = 0.6)
SWEEP_SIGMAS = (0.25, 0.33, 0.45, 0.6, 0.85, 1.2)
SYNTH_SETTINGS = {
    "default": {},
    "kappa=0.3": {"kappa": 0.3},
    "kappa=0.6": {"kappa": 0.6},
    "noise-free": {"sigma": 0.0, "tau": 0.0, "c": 1.0, "s": 1.5},
}
QUICK = dict(encoder_seeds=(0, 1), rhos=(0.95,), epochs=6, synth_seeds=(0, 1), synth_settings=("default", "kappa=0.3"),
             sweep_scale=10, control_images=300)
FULL = dict(encoder_seeds=(0, 1, 2), rhos=(0.9, 0.95, 0.99), epochs=15, synth_seeds=(0, 1, 2, 3, 4),
            synth_settings=tuple(SYNTH_SETTINGS), sweep_scale=10, control_images=1000)
HEADLINE_RHO = 0.95
OFFLINE_PLOT = "offline_pair_wga.png"
SYNTH_PLOT = "synthetic_wga.png"
SWEEP_PLOT = "tie_star_share.png"


# ---------------------------------------------------------------------------------------------
# offline pair: one encoder seed (runs in a worker process)
# ---------------------------------------------------------------------------------------------

def run_offline_seed(seed: int, rho: float, epochs: int, ck_dir: str, data_path: str | None, device: str,
                     control_images: int, threads: int | None = 1, quiet: bool = True) -> dict[str, Any]:
    """Train (or resume/reuse) one offline pair and return its embeddings (numpy, float32).

    Returns: ``pool_emb [4000, D]``, ``pool_a [4000]`` (the training correlation, drawn from the seed),
    ``test_emb [2000, D]`` (each test image rendered green then blue), ``test_y``, ``test_a``,
    ``text_emb_class [10, D]``, ``text_emb_spurious [2, D]`` (green, blue), control renders and prompts,
    ``seconds`` and the parameter counts.
    """
    import torch

    from .offline_pair import (
        CLASS_NAMES,
        CONTROL_PAIRS,
        PairConfig,
        _load_cifar,
        _rng,
        draw_colours,
        n_parameters,
        render_frames,
        train_offline_pair,
    )

    if threads is not None:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    cfg = PairConfig(seed=seed, rho=rho, epochs=epochs)
    pair = train_offline_pair(cfg, ck_dir, resume=True, data_path=Path(data_path) if data_path else None,
                              device=device, quiet=quiet)
    t_train = time.perf_counter() - t0
    _, d = _load_cifar(Path(data_path) if data_path else None)
    xt, yt, xtr, ytr = d["x_test"], d["y_test"].astype(np.int64), d["x_train"], d["y_train"].astype(np.int64)
    pool_a = draw_colours(ytr, rho, _rng(seed, 10**6, 0))                    # the λ pool's own colour draw
    t1 = time.perf_counter()
    pool_emb = pair.encode_images(render_frames(xtr, np.array(["green", "blue"])[pool_a], cfg.frame))
    test_emb = np.concatenate([pair.encode_images(render_frames(xt, c, cfg.frame)) for c in ("green", "blue")])
    t_embed_test = time.perf_counter() - t1
    sub = xt[:control_images]
    controls = {}
    for c1, c2 in CONTROL_PAIRS:
        for c in (c1, c2):
            if c not in controls:
                controls[c] = pair.encode_images(render_frames(sub, c, cfg.frame))
    colours = ["green", "blue", *controls]
    out = {
        "seed": seed, "rho": rho, "pool_emb": pool_emb, "pool_a": pool_a, "test_emb": test_emb,
        "test_y": np.concatenate([yt, yt]), "test_a": np.repeat([0, 1], yt.size),
        "text_emb_class": pair.encode_text([f"a photo of a {c}." for c in CLASS_NAMES]),
        "text_emb_spurious": pair.encode_text(["a photo with a green frame", "a photo with a blue frame"]),
        "colour_text": dict(zip(colours, pair.encode_text([f"a photo with a {c} frame" for c in colours]))),
        "control_img": controls, "n_params": n_parameters(pair), "train_seconds": t_train,
        "embed_test_seconds": t_embed_test, "n_test_renders": int(2 * yt.size),
        "epochs_done": json.loads((Path(ck_dir) / "config.json").read_text())["epochs_done"],
        "temperature": float(1.0 / pair.logit_scale.detach().exp()),
    }
    return out


def _cos(u: np.ndarray, v: np.ndarray) -> float:
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


def image_shift_alignment(h_from: np.ndarray, h_to: np.ndarray, s_from: np.ndarray, s_to: np.ndarray) -> float:
    """Cosine of the mean paired image shift ``E[ĥ(x, to) − ĥ(x, from)]`` with ``ŝ_to − ŝ_from``."""
    shift = (normalize_rows(h_to) - normalize_rows(h_from)).mean(axis=0)
    s = spurious_vectors(np.stack([s_from, s_to]))
    return _cos(shift, s[1] - s[0])


def _gk(key: tuple) -> str:
    """Group key ``(y, a)`` → ``"y<y>_a<a>"`` (the JSON file's convention)."""
    return f"y{key[0]}_a{key[1]}"


def _str_keys(d: dict) -> dict:
    return {_gk(k): v for k, v in d.items()}


def _offline_metrics(r: dict[str, Any], n_random: int = 20000) -> dict[str, Any]:
    from .offline_pair import CONTROL_PAIRS, superclass

    sup = superclass(np.arange(10))
    args = (r["pool_emb"], r["test_emb"], r["test_y"], r["test_a"], r["text_emb_class"], r["text_emb_spurious"])
    ten = evaluate_methods(*args, pool_a=r["pool_a"], classes=list(range(10)), attributes=[0, 1])
    superc = evaluate_methods(*args, pool_a=r["pool_a"], classes=[0, 1], attributes=[0, 1],
                              label_map=lambda p: sup[np.asarray(p)])
    n = r["test_y"].size // 2
    g, b = r["test_emb"][:n], r["test_emb"][n:]
    ct = r["colour_text"]
    cos_trained = image_shift_alignment(g, b, ct["green"], ct["blue"])
    cos_prompts = image_shift_alignment(g, b, r["text_emb_spurious"][0], r["text_emb_spurious"][1])
    controls = {f"{c1}->{c2}": image_shift_alignment(r["control_img"][c1], r["control_img"][c2], ct[c1], ct[c2])
                for c1, c2 in CONTROL_PAIRS}
    shift = (normalize_rows(b) - normalize_rows(g)).mean(axis=0)
    rnd = np.random.default_rng(r["seed"] + 12345).standard_normal((n_random, shift.size))
    p99 = float(np.quantile(np.abs(normalize_rows(rnd) @ shift) / np.linalg.norm(shift), 0.99))
    def strip(res: dict) -> dict:
        return {m: {k: (_str_keys(v) if isinstance(v, dict) else [_gk(g) for g in v] if k == "empty_groups"
                        else _gk(v) if k == "worst_group_key" else v)
                    for k, v in x.items() if k != "pred"} for m, x in res["methods"].items()}

    return {"ten_class": strip(ten), "superclass": strip(superc), "lambda": superc["lambda"],
            "a_hat_accuracy": superc["a_hat_accuracy"], "a_hat_accuracy_pool": superc.get("a_hat_accuracy_pool"),
            "cos_shift_text": cos_prompts, "cos_shift_text_colour_prompts": cos_trained, "cos_controls": controls,
            "cos_random_p99": p99, "control_baseline": max(max(abs(v) for v in controls.values()), p99),
            "seed": r["seed"], "rho": r["rho"], "n_params": r["n_params"], "train_seconds": r["train_seconds"],
            "embed_test_seconds": r["embed_test_seconds"], "epochs_done": r["epochs_done"],
            "temperature": r["temperature"]}


# ---------------------------------------------------------------------------------------------
# synthetic paper-model
# ---------------------------------------------------------------------------------------------

def _synthetic_one(seed: int, **kw) -> dict[str, Any]:
    d = make_synthetic(seed, **kw)
    res = evaluate_methods(d.pool_emb, d.test_emb, d.test_y, d.test_a, d.text_emb_class, d.text_emb_spurious,
                           pool_a=d.pool_a, classes=[0, 1], attributes=[0, 1])
    out = {m: {"worst_group": x["worst_group"], "average": x["average"]} for m, x in res["methods"].items()}
    v = oracle_translation(d)
    orc = zero_shot_predict(normalize_rows(d.test_emb) + v[d.test_a], d.text_emb_class)
    om = group_metrics(orc, d.test_y, d.test_a, classes=[0, 1], attributes=[0, 1])
    out["oracle"] = {"worst_group": om["worst_group"], "average": om["average"]}
    lam = np.asarray(res["lambda"]["tie"])
    S = spurious_vectors(d.text_emb_spurious)
    tie_shift = lam[:, None] * S                                           # λ_a s_a
    out["oracle_cos"] = [_cos(tie_shift[a], -v[a]) if np.linalg.norm(v[a]) > 0 else float("nan") for a in (0, 1)]
    out["oracle_norm_ratio"] = [float(np.linalg.norm(tie_shift[a]) / max(np.linalg.norm(v[a]), 1e-300)) for a in (0, 1)]
    out["lambda"] = lam.tolist()
    out["a_hat_accuracy"] = res["a_hat_accuracy"]
    return out


def covariance_check(seed: int = 0) -> dict[str, float]:
    """Within-group covariance of ``ĥ`` before/after TIE's translation and after projection (synthetic).

    Returns ``tie_max_abs_dcov`` (max over groups and entries of ``|Cov(ĥ − λ_a s_a) − Cov(ĥ)|``),
    ``projection_max_abs_dcov``, and the variance along the projected direction before / after.
    """
    d = make_synthetic(seed)
    t = TIE(d.text_emb_spurious, "true").fit(d.pool_emb, d.pool_a)
    h = normalize_rows(d.test_emb)
    ht = translate(d.test_emb, d.test_a, d.text_emb_spurious, t.lam_)
    hp = project_out(d.test_emb, d.text_emb_spurious)
    v = projection_directions(d.text_emb_spurious)[0]
    out = {"tie_max_abs_dcov": 0.0, "projection_max_abs_dcov": 0.0, "var_along_v_before": 0.0, "var_along_v_after": 0.0}
    for yy in (0, 1):
        for aa in (0, 1):
            m = (d.test_y == yy) & (d.test_a == aa)
            c0 = np.cov(h[m].T)
            out["tie_max_abs_dcov"] = max(out["tie_max_abs_dcov"], float(np.abs(np.cov(ht[m].T) - c0).max()))
            out["projection_max_abs_dcov"] = max(out["projection_max_abs_dcov"], float(np.abs(np.cov(hp[m].T) - c0).max()))
            out["var_along_v_before"] = max(out["var_along_v_before"], float(np.var(h[m] @ v, ddof=1)))
            out["var_along_v_after"] = max(out["var_along_v_after"], float(np.var(hp[m] @ v, ddof=1)))
    return out


def synthetic_results(seeds: tuple[int, ...], settings: tuple[str, ...], sweep_scale: int = 10) -> dict[str, Any]:
    """Synthetic paper-model: every setting × seed, the â-accuracy sweep (σ), the covariance check."""
    res: dict[str, Any] = {"settings": {}, "sweep": []}
    for name in settings:
        res["settings"][name] = [_synthetic_one(s, **SYNTH_SETTINGS[name]) for s in seeds]
    sizes = tuple(n * sweep_scale for n in (2255, 2255, 642, 642))
    for sigma in SWEEP_SIGMAS:
        runs = [_synthetic_one(s, sigma=sigma, test_sizes=sizes) for s in seeds]
        res["sweep"].append({"sigma": sigma, "runs": runs})
    res["covariance"] = covariance_check(seeds[0])
    return res


# ---------------------------------------------------------------------------------------------
# aggregation and claims
# ---------------------------------------------------------------------------------------------

def _ms(vals) -> tuple[float, float]:
    v = np.asarray(list(vals), dtype=float)
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def _fmt(m: float, s: float, pct: bool = True) -> str:
    k = 100 if pct else 1
    return f"{k * m:.1f} ± {k * s:.1f}" if pct else f"{m:.3f} ± {s:.3f}"


def _gap_note(name_a: str, a: tuple[float, float], name_b: str, b: tuple[float, float]) -> str:
    gap = a[0] - b[0]
    big = max(a[1], b[1])
    return (f"{name_a} {_fmt(*a)} vs {name_b} {_fmt(*b)} (%, mean ± sd over seeds); gap {100 * gap:+.1f} points "
            f"{'exceeds' if abs(gap) > big else 'does not exceed'} the larger sd ({100 * big:.1f})")


def _sd(x) -> float | None:
    """Seed standard deviation (``None`` with one seed)."""
    a = np.asarray(list(x), dtype=float)
    return float(a.std(ddof=1)) if a.size > 1 else None


def tie_star_share(run: dict) -> float:
    """TIE*'s share of TIE's worst-group gain over zero-shot: ``(WGA(TIE*) − WGA(zs)) / (WGA(TIE) − WGA(zs))``
    (NaN when TIE gains nothing)."""
    gain = run["tie"]["worst_group"] - run["zero_shot"]["worst_group"]
    return float((run["tie_star"]["worst_group"] - run["zero_shot"]["worst_group"]) / gain) if gain > 0 else float("nan")


def _claims(off: list[dict], syn: dict[str, Any], p: dict) -> list[Claim]:
    head = [r for r in off if r["rho"] == HEADLINE_RHO]
    n = len(head)
    S = {m: (_ms(r["superclass"][m]["worst_group"] for r in head), _ms(r["superclass"][m]["average"] for r in head))
         for m in METHODS}
    scale = (f"offline pair (frozen MiniLM + linear head, {head[0]['n_params']['image'] / 1e6:.2f} M-param CNN), "
             f"{p['epochs']} epochs on the 4,000 cifar10-subset training images, rho={HEADLINE_RHO}, {n} encoder seed(s); "
             "superclass (animal/vehicle = superclass of the predicted class) x frame colour, 2,000 paired test renders")
    wga = {m: S[m][0] for m in METHODS}
    avg = {m: S[m][1] for m in METHODS}

    def per_seed(m: str, k: str = "worst_group") -> np.ndarray:
        return np.asarray([r["superclass"][m][k] for r in head], dtype=float)

    d_avg = _ms(per_seed("tie", "average") - per_seed("zero_shot", "average"))
    star = np.abs(per_seed("tie_star") - per_seed("tie"))
    d_star = _ms(star)
    ahat = _ms(r["a_hat_accuracy"] for r in head)
    cos_t = _ms(r["cos_shift_text"] for r in head)
    ctrl = _ms(r["control_baseline"] for r in head)
    ctrl_detail = "; ".join(f"seed {r['seed']}: controls " + ", ".join(f"{k} {v:.2f}" for k, v in r["cos_controls"].items())
                            + f", random p99 {r['cos_random_p99']:.3f}" for r in head)
    claims = [
        Claim("offline_pair/tie_wga_gt_zero_shot", "worst-group accuracy (%), superclass x colour",
              100 * wga["tie"][0], baseline=100 * wga["zero_shot"][0], margin=10, kind="headline",
              paper_value=78.82, paper_ref="Table 1 (Waterbirds, ViT-L/14, TIE WGA; official saved run)",
              spread=_sd(100 * (per_seed("tie") - per_seed("zero_shot"))), n_seeds=n, plot=OFFLINE_PLOT,
              note=f"{scale}. {_gap_note('TIE', wga['tie'], 'zero-shot', wga['zero_shot'])}."),
        Claim("offline_pair/tie_keeps_average", "average accuracy TIE − zero-shot (points)",
              100 * d_avg[0], threshold=-1.0, kind="headline", paper_value=None,
              paper_ref="Tables 1-2 (TIE keeps average accuracy), direction only",
              spread=_sd(100 * (per_seed("tie", "average") - per_seed("zero_shot", "average"))), n_seeds=n,
              plot=OFFLINE_PLOT,
              note=f"TIE {_fmt(*avg['tie'])} vs zero-shot {_fmt(*avg['zero_shot'])}; difference "
                   f"{100 * d_avg[0]:+.1f} ± {100 * d_avg[1]:.1f} points over {n} seed(s)."),
        Claim("offline_pair/tie_star_near_tie", "|WGA(TIE*) − WGA(TIE)| (points)", 100 * d_star[0], threshold=3.0,
              higher_is_better=False, kind="headline", paper_value=None,
              paper_ref="Tables 1-2 (TIE* close to TIE), direction only", spread=_sd(100 * star), n_seeds=n,
              plot=OFFLINE_PLOT,
              note=f"TIE* {_fmt(*wga['tie_star'])} vs TIE {_fmt(*wga['tie'])}; â accuracy on the test renders "
                   f"{_fmt(*ahat, pct=False)}."),
        Claim("offline_pair/tie_ge_projection", "worst-group accuracy (%), superclass x colour",
              100 * wga["tie"][0], baseline=100 * wga["projection"][0], margin=0, kind="headline", paper_value=None,
              paper_ref="Tables 1-2 (TIE vs RoboShot-style projection), direction only",
              spread=_sd(100 * (per_seed("tie") - per_seed("projection"))), n_seeds=n, plot=OFFLINE_PLOT,
              note=f"{_gap_note('TIE', wga['tie'], 'projection', wga['projection'])}."),
        Claim("mechanism/text_direction_matches_image_shift",
              "cos(E[ĥ(x,blue) − ĥ(x,green)], ŝ_blue − ŝ_green)", cos_t[0], baseline=ctrl[0], margin=0,
              kind="mechanism", paper_value=None, paper_ref="Sec. 3 (modality alignment), direction only",
              spread=_sd(np.asarray([r["cos_shift_text"] - r["control_baseline"] for r in head])), n_seeds=n,
              plot=OFFLINE_PLOT,
              note=f"mean ± sd {cos_t[0]:.3f} ± {cos_t[1]:.3f}; baseline = max(|cos| of untrained control colour "
                   f"pairs, 99th pct of |cos| with random directions) {ctrl[0]:.3f} ± {ctrl[1]:.3f}. {ctrl_detail}."),
    ]
    sy = syn["settings"]

    def agg(setting: str, m: str, k: str = "worst_group") -> tuple[float, float]:
        return _ms(r[m][k] for r in sy[setting])

    g0 = [abs(r["tie"]["worst_group"] - r["oracle"]["worst_group"]) for r in sy["default"]]
    gap0 = _ms(g0)
    gap3 = _ms(abs(r["tie"]["worst_group"] - r["oracle"]["worst_group"]) for r in sy["kappa=0.3"]) \
        if "kappa=0.3" in sy else (float("nan"), 0.0)
    ocos = _ms(np.mean(r["oracle_cos"]) for r in sy["default"])
    oratio = _ms(np.mean(r["oracle_norm_ratio"]) for r in sy["default"])
    nsy = len(sy["default"])
    claims.append(Claim(
        "mechanism/tie_matches_oracle_translation", "|WGA(TIE) − WGA(oracle v*)| at κ=0 (points)", 100 * gap0[0],
        threshold=2.0, higher_is_better=False, kind="mechanism", paper_value=None,
        paper_ref="Sec. 3 (optimal translation v*_a = −E[P h | a]), direction only", spread=_sd(100 * np.asarray(g0)),
        n_seeds=nsy, plot=SYNTH_PLOT,
        note=f"synthetic, {nsy} seeds; cos(λ_a s_a, −v*_a) {ocos[0]:.4f} ± {ocos[1]:.4f}, ‖λ_a s_a‖/‖v*_a‖ "
             f"{oratio[0]:.3f}; TIE {_fmt(*agg('default', 'tie'))} vs oracle {_fmt(*agg('default', 'oracle'))}; "
             f"at κ=0.3 the gap is {100 * gap3[0]:.1f} ± {100 * gap3[1]:.1f} points (the spurious prompt leaks core "
             "semantics, so λ_a s_a leaves the spurious block)."))
    zs, ti, ts, pr = (agg("default", m) for m in ("zero_shot", "tie", "tie_star", "projection"))
    d_syn = [r["tie"]["worst_group"] - r["zero_shot"]["worst_group"] for r in sy["default"]]
    claims.append(Claim(
        "synthetic/tie_wga_gt_zero_shot", "worst-group accuracy (%), synthetic κ=0", 100 * ti[0],
        baseline=100 * zs[0], margin=30, kind="headline", paper_value=None,
        paper_ref="Sec. 3 (paper-model), direction only", spread=_sd(100 * np.asarray(d_syn)), n_seeds=nsy,
        plot=SYNTH_PLOT,
        note=f"{_gap_note('TIE', ti, 'zero-shot', zs)}; TIE* {_fmt(*ts)}. Projection {_fmt(*pr)} beats TIE on this "
             "idealised geometry — not a claim against RoboShot."))
    sw = syn["sweep"]
    acc = [float(np.mean([r["a_hat_accuracy"] for r in e["runs"]])) for e in sw]
    shares = [[tie_star_share(r) for r in e["runs"]] for e in sw]
    hi, lo = int(np.argmax(acc)), int(np.argmin(acc))
    d_share = np.asarray(shares[hi]) - np.asarray(shares[lo])
    n_sw = len(sw[0]["runs"])
    claims.append(Claim(
        "synthetic/tie_star_tracks_attribute_inference",
        f"TIE*'s share of TIE's WGA gain over zero-shot at the lowest â accuracy ({acc[lo]:.2f})",
        float(np.mean(shares[lo])), baseline=float(np.mean(shares[hi])), higher_is_better=False,
        margin=float(np.std(d_share, ddof=1) / np.sqrt(n_sw)) if n_sw > 1 else 0.0, kind="mechanism",
        paper_value=None, paper_ref="Sec. 4 (TIE* with inferred attributes), direction only",
        spread=_sd(d_share), n_seeds=n_sw, plot=SWEEP_PLOT,
        note=f"share = (WGA(TIE*) − WGA(zero-shot)) / (WGA(TIE) − WGA(zero-shot)); baseline = the share at the "
             f"highest â accuracy ({acc[hi]:.3f}); holds if the share falls by more than its s.e. σ sweep: "
             + ", ".join(f"σ={sw[i]['sigma']}: â {acc[i]:.3f}, share {np.mean(shares[i]):.3f}"
                         for i in np.argsort(acc)[::-1])
             + f" (mean over {n_sw} seeds, test groups ×{p['sweep_scale']})."))
    return claims


def _tables(off: list[dict], syn: dict[str, Any], p: dict, quick: bool) -> str:
    lines = [f"# TIE reproduction tables ({'quick' if quick else 'full'})", ""]
    for rho in p["rhos"]:
        rs = [r for r in off if r["rho"] == rho]
        for view, title in (("superclass", "superclass × colour (4 groups; headline)"),
                            ("ten_class", "10 classes × colour (20 groups; reported only)")):
            lines += [f"## Offline pair, ρ = {rho}, {title} — mean ± sd over {len(rs)} seed(s), %", "",
                      "| method | WGA | average |", "|---|---|---|"]
            for m in METHODS:
                w, a = _ms(r[view][m]["worst_group"] for r in rs), _ms(r[view][m]["average"] for r in rs)
                lines.append(f"| {LABELS[m]} | {_fmt(*w)} | {_fmt(*a)} |")
            lines.append("")
        keys = list(rs[0]["superclass"]["zero_shot"]["per_group"])
        names = {"y0_a0": "animal-green", "y0_a1": "animal-blue (minority)", "y1_a0": "vehicle-green (minority)",
                 "y1_a1": "vehicle-blue"}
        lines += [f"### per group (superclass, colour), ρ = {rho}", "", "| group | n | " +
                  " | ".join(LABELS[m] for m in METHODS) + " |", "|---|---|" + "---|" * len(METHODS)]
        for k in keys:
            lines.append(f"| {names.get(k, k)} | {rs[0]['superclass']['zero_shot']['sizes'][k]} | " + " | ".join(
                _fmt(*_ms(r["superclass"][m]["per_group"][k] for r in rs)) for m in METHODS) + " |")
        lines += ["", "λ (TIE, green/blue): " + "; ".join(f"seed {r['seed']}: {np.round(r['lambda']['tie'], 4).tolist()}"
                                                        for r in rs),
                  "â accuracy (test renders): " + ", ".join(f"{r['a_hat_accuracy']:.3f}" for r in rs),
                  "cos(image shift, text direction): " + ", ".join(f"{r['cos_shift_text']:.3f}" for r in rs), ""]
    lines += ["## Synthetic paper-model — WGA / average (%), mean ± sd over seeds", "",
              "| setting | zero-shot | TIE | TIE* | projection | oracle v* |", "|---|---|---|---|---|---|"]
    for name, runs in syn["settings"].items():
        row = [f"{_fmt(*_ms(r[m]['worst_group'] for r in runs))} / {_fmt(*_ms(r[m]['average'] for r in runs))}"
               for m in ("zero_shot", "tie", "tie_star", "projection", "oracle")]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += ["", "## â-accuracy sweep (σ; test groups ×10) — WGA %", "",
              "| σ | â accuracy | zero-shot | TIE | TIE* | TIE − TIE* |", "|---|---|---|---|---|---|"]
    for e in syn["sweep"]:
        rs = e["runs"]
        lines.append(f"| {e['sigma']} | {np.mean([r['a_hat_accuracy'] for r in rs]):.3f} | " + " | ".join(
            _fmt(*_ms(r[m]["worst_group"] for r in rs)) for m in ("zero_shot", "tie", "tie_star"))
            + f" | {100 * np.mean([r['tie']['worst_group'] - r['tie_star']['worst_group'] for r in rs]):+.1f} |")
    cv = syn["covariance"]
    lines += ["", f"Covariance (synthetic seed 0): TIE max |ΔCov| {cv['tie_max_abs_dcov']:.2e}; projection max |ΔCov| "
              f"{cv['projection_max_abs_dcov']:.2e}, variance along the direction {cv['var_along_v_before']:.2e} → "
              f"{cv['var_along_v_after']:.2e}.", ""]
    return "\n".join(lines)


def reproduce(quick: bool, out_dir: Path, *, seeds: tuple[int, ...] | None = None, device: str = "auto",
              workers: int = 2, worker_threads: int = 1, data: Path | None = None,
              quiet: bool | None = None, resume: bool = False) -> list[Claim]:
    """Run the reproduction and return the claims in :data:`CLAIM_NAMES`.

    The experiments are jobs of the core's runner (:func:`iclr25.core.runner.run_jobs`, see :func:`jobs`):
    one per offline-pair encoder (ρ × seed: train, embed, metrics) and one for the synthetic paper-model;
    their records land in ``out_dir/records/``; the claims come from the records
    (:func:`claims_from_records`, a pure function).

    Args:
        quick: :data:`QUICK` (2 encoder seeds × 6 epochs at ρ = 0.95; synthetic 2 seeds at κ ∈ {0, 0.3}
            and the sweep) instead of :data:`FULL` (3 seeds × ρ ∈ {0.9, 0.95, 0.99} × 15 epochs; synthetic
            5 seeds × 4 settings).
        out_dir: results folder: ``metrics.json``, ``tables.md``, ``records/``, ``encoders/`` (checkpoints,
            reused by a rerun; an interrupted training resumes).
        seeds: encoder and synthetic seeds (default: the preset's; quick needs ≥ 2 for the sd).
        device: torch device for the encoders (``auto``: CPU at this scale).
        workers: jobs run in parallel processes (1: in this process).
        worker_threads: torch threads per job (1: fastest on small shared CPUs).
        quiet: no progress bar (``None``: the core's ``--quiet`` / ``ICLR25_QUIET``).
        data: ``cifar10_subset.npz`` (default: the ``ICLR25_DATA`` mirror).
        resume: keep the jobs an interrupted run in ``out_dir`` finished (changed settings are refused).

    Returns:
        The nine claims.
    """
    from iclr25.core.runner import run_jobs
    from iclr25.core.seed import choose_device

    p = dict(QUICK if quick else FULL)
    if seeds is not None:
        seeds = tuple(int(s) for s in seeds)
        if len(seeds) < 1 or min(seeds) < 0:
            raise ValueError(f"seeds must be non-negative integers, got {seeds}")
        p["encoder_seeds"] = p["synth_seeds"] = seeds
    if workers < 1 or worker_threads < 1:
        raise ValueError(f"workers and worker_threads must be >= 1, got {workers}, {worker_threads}")
    dev = "cpu" if device == "auto" else choose_device(device)
    out = Path(out_dir).resolve()  # absolute: the jobs' ck_dir / data_path match on --resume from any cwd
    out.mkdir(parents=True, exist_ok=True)
    if data is None:
        from .offline_pair import cifar10_subset_path

        data = cifar10_subset_path()                      # fails early, naming the missing mirror
    data = Path(data).resolve()
    res = run_jobs(jobs(p, out, data, dev), out, workers=workers, resume=resume, threads=worker_threads,
                   desc="tie reproduce", quiet=quiet)
    return claims_from_records(res.records, p, out, quick, dev, data, workers, worker_threads, res.summary())


def _offline_name(rho: float, seed: int) -> str:
    return f"offline_rho{rho}_seed{seed}"


def jobs(p: dict[str, Any], out: Path, data: Path, device: str) -> list[Job]:
    """The reproduction's jobs: one per encoder (:func:`offline_job`, longest first), then the synthetic
    paper-model (:func:`synthetic_job`); no dependencies between them."""
    enc = [Job(_offline_name(rho, s), offline_job, seed=int(s),
               settings={"rho": rho, "epochs": p["epochs"], "ck_dir": str(Path(out) / "encoders" / f"rho{rho}_seed{s}"),
                         "data_path": str(data), "device": device, "control_images": p["control_images"]})
           for rho in p["rhos"] for s in p["encoder_seeds"]]
    syn = Job("synthetic", synthetic_job, settings={"seeds": list(p["synth_seeds"]),
                                                    "settings": list(p["synth_settings"]),
                                                    "sweep_scale": p["sweep_scale"]})
    return [*enc, syn]


def offline_job(settings: dict[str, Any], seed: int, deps: dict) -> dict[str, Any]:
    """Runner job: train (or reuse) one offline pair (:func:`run_offline_seed`) and return its metrics
    (:func:`_offline_metrics`, JSON-ready; the embeddings stay in the worker)."""
    raw = run_offline_seed(seed, settings["rho"], settings["epochs"], settings["ck_dir"], settings["data_path"],
                           settings["device"], settings["control_images"], threads=None, quiet=True)
    return _offline_metrics(raw)


def synthetic_job(settings: dict[str, Any], seed: int | None, deps: dict) -> dict[str, Any]:
    """Runner job: the synthetic paper-model (:func:`synthetic_results`); an undefined cosine (NaN: a zero
    oracle translation) is recorded as ``None`` and read back as NaN."""
    from iclr25.core.runner import nan_to_none

    return nan_to_none(synthetic_results(tuple(settings["seeds"]), tuple(settings["settings"]),
                                         settings["sweep_scale"]))


def claims_from_records(records: dict[str, Any], p: dict[str, Any], out: Path, quick: bool, device: str,
                        data: Path | str, workers: int | None = None, worker_threads: int | None = None,
                        runner: dict[str, Any] | None = None) -> list[Claim]:
    """The claims (and ``metrics.json``, ``tables.md``) from the jobs' records: no training."""
    from iclr25.core.runner import none_to_nan

    from .offline_pair import PairConfig

    off = [records[_offline_name(rho, s)] for rho in p["rhos"] for s in p["encoder_seeds"]]
    syn = none_to_nan(records["synthetic"])
    claims = _claims(off, syn, p)
    job_wall = (runner or {}).get("job_wall_seconds", {})
    meta = {"quick": quick, "preset": p, "device": device, "workers": workers, "worker_threads": worker_threads,
            "data": str(data),
            "pair_config": {k: v for k, v in asdict(PairConfig()).items() if k not in ("seed", "rho", "epochs")},
            "seconds": {"offline_pair": sum(v for k, v in job_wall.items() if k.startswith("offline_")),
                        "synthetic": job_wall.get("synthetic")},
            "runner": runner, "offline_pair": off, "synthetic": syn}
    (out / "metrics.json").write_text(json.dumps(meta, indent=1, default=_json))
    (out / "tables.md").write_text(_tables(off, syn, p, quick))
    from .plots import write_plots

    write_plots(off, syn, out, headline_rho=HEADLINE_RHO, share_fn=tie_star_share)
    return claims


def _json(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    return str(o)
