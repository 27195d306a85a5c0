"""CPU-scale reproduction of the FRS claims (``iclr25-frs reproduce [--quick]``).

Setting (spec "CPU-scale reproduction"): a tiny encoder stands in for the PLM; the attacker
"pre-trains" it on SST-2 phrases of which 10 % carry the trigger ``cf`` relabelled positive
(BadNets stand-in for a pre-training backdoor); the defender fine-tunes it on other, clean phrases
with BMPS (σ = 0.01 on the top layer + head, clip 1.0), and — for the −BMPS ablation — with σ = 0
from the same backdoored weights and data order. All arms are evaluated on the same clean test
texts and the same triggered negatives (one ``cf`` at a known random position), with the same
models, and repeated over seeds of the smoothing randomness (BMPS copies, MCTS mutations, text
randomisation). A model trained the same way on the unpoisoned phrases is the backdoor baseline.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path

import numpy as np

from iclr25.core.results import Claim

__all__ = ["reproduce", "QUICK", "FULL", "CLAIM_NAMES", "ARM_ORDER"]

log = logging.getLogger(__name__)

CLAIM_NAMES = (
    "backdoor/survives_clean_finetune",
    "asr/frs_lt_uniform",
    "clean_acc/frs_cost",
    "mechanism/mcts_trigger_hit_rate",
    "ablation/frs_lt_no_bmps",
    "radius/frs_empirical_gt_uniform",
    "radius/frs_certified_gt_uniform",
    "radius/frs_unconditional_ge_uniform",
)
ARM_ORDER = ("none", "uniform", "frs", "ftr-only", "bmps-only")

#: quick preset (issue #26): ~1.5 CPU-minutes
QUICK = dict(
    data="sst2", trigger="cf", target=1, poison_rate=0.1,
    n_attack=2000, attack_epochs=3, attack_lr=1e-3, attack_batch=16, attack_mask_rate=0.15,
    d_model=32, n_heads=4, d_ff=64, n_layers=2, min_count=2,
    n_finetune=2000, ft_epochs=1, ft_lr=1e-3, ft_batch=32, sigma=0.01, top_layers=1, clip_norm=1.0,
    n_clean=150, n_triggered=100, k=4, n_random=2, iterations=16, max_span=3, c=0.5,
    w_mid=0.3, w_high=0.9, alpha=0.05, n_empirical=50, empirical_samples=20, seeds=(0, 1),
)
#: full CPU preset (spec settings): 6,000 phrases, 3 epochs, d = 64, 872 + 428 texts, K = 8, I = 32, 3 seeds
FULL = dict(QUICK, n_attack=6000, d_model=64, d_ff=128, n_clean=872, n_triggered=428, k=8, iterations=32,
            n_empirical=50, seeds=(0, 1, 2))


def _mean_sd(xs) -> tuple[float, float]:
    a = np.asarray([x for x in xs], dtype=float)
    if a.size == 0 or np.all(np.isnan(a)):
        return float("nan"), float("nan")
    return float(np.nanmean(a)), float(np.nanstd(a, ddof=1)) if a.size > 1 else 0.0


def _fmt(m: float, s: float, d: int = 1) -> str:
    return f"{m:.{d}f} ± {s:.{d}f}"


def reproduce(quick: bool, out_dir: Path, *, seeds: list[int] | None = None, device: str = "auto",
              data: str = "sst2", resume: bool = False) -> list[Claim]:
    """Run the reproduction; return the seven claims of :data:`CLAIM_NAMES`.

    Args:
        quick: :data:`QUICK` (2 seeds) instead of :data:`FULL` (3 seeds).
        out_dir: writes ``metrics.json`` (all numbers per arm and seed), ``arms.md`` (mean ± sd table),
            ``texts/seed<s>_<arm>.jsonl`` (per-text certificates) and the models under ``models/``.
        seeds: seeds of the smoothing randomness (default: the preset's); the models are the same.
        device: ``auto``, ``cpu``, ``cuda``...
        data: ``sst2`` (the spec's setting) or ``agnews`` (4 classes; target class ``Sports``).
        resume: continue an earlier run into ``out_dir`` with the same preset and data: reuse its
            models (``models/``) and every finished per-seed stage (``checkpoint/seed<s>.json``: one
            entry per arm, the empirical radii and the hit-rate sensitivity, written as each finishes).
            The smoothing randomness of each stage depends only on its seed, so a resumed run gives the
            numbers an uninterrupted one would.

    Raises:
        ValueError: ``out_dir`` holds an unfinished run and ``resume`` is false (pass ``--resume`` or
            choose another ``--out``); ``resume`` with a checkpoint of other settings.
    """
    from iclr25.core.threads import limited_threads

    threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    with limited_threads(threads):
        return _run(quick, Path(out_dir), seeds, device, data, resume)


def _run(quick: bool, out: Path, seeds, device: str, data: str, resume: bool = False) -> list[Claim]:
    import torch

    from iclr25.core.progress import progress
    from iclr25.core.seed import choose_device

    from .bmps import BMPSConfig, bmps_finetune, sample_parameter_copies, train_classifier
    from .data import load_dataset, poison_dataset, tokenize, triggered_set
    from .evaluate import evaluate_arm
    from .mcts import OPERATORS, MCTSFuzzer, kl_divergence
    from .metrics import random_segment_hit_rate, trigger_hit_rate
    from .models import TinyClassifier, Vocab
    from .smoothing import make_arm

    p = dict(QUICK if quick else FULL, data=data)
    seeds = list(seeds) if seeds is not None else list(p["seeds"])
    dev = choose_device(device)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    ck = _Checkpoint(out, p, quick, resume)
    tr, te = load_dataset(data, "train"), load_dataset(data, "test")
    lower = data == "agnews"
    tok_tr, tok_te = tokenize(tr.texts, lowercase=lower), tokenize(te.texts, lowercase=lower)
    perm = np.random.default_rng(0).permutation(len(tok_tr))
    n_att = min(p["n_attack"], len(perm))
    att = perm[:n_att]
    ft = perm[n_att:n_att + p["n_finetune"]] if n_att + p["n_finetune"] <= len(perm) else perm[:p["n_finetune"]]
    overlap = int(len(set(att.tolist()) & set(ft.tolist())))
    at_x, at_y = [tok_tr[i] for i in att], [tr.labels[i] for i in att]
    px, py, pidx, _ = poison_dataset(at_x, at_y, rate=p["poison_rate"], trigger=p["trigger"], target=p["target"], seed=0)
    vocab = Vocab.build(px, min_count=p["min_count"], extra=[p["trigger"]])
    max_len = max(max(len(t) for t in tok_tr), max(len(t) for t in tok_te)) + len(p["trigger"].split())
    ft_x, ft_y = [tok_tr[i] for i in ft], [tr.labels[i] for i in ft]

    def new_model(seed=0):
        return TinyClassifier.create(vocab, len(tr.label_names), d_model=p["d_model"], n_heads=p["n_heads"],
                                     d_ff=p["d_ff"], n_layers=p["n_layers"], max_len=max_len, seed=seed,
                                     label_names=tr.label_names, device=dev, lowercase=lower)

    bar = progress(total=6 + 5 * len(seeds), desc="frs reproduce", unit="stage")
    names = ("backdoored", "bmps", "sigma0", "clean_only")
    setup = ck.load_setup(names)
    if setup is not None:
        log.info("--resume: reusing the models in %s and the setup numbers of %s", out / "models", ck.dir / "setup.json")
        backdoored, frs_model, s0_model, clean_pre = (TinyClassifier.load(out / "models" / n, device=dev) for n in names)
        bar.update(5)
    else:
        t_setup = time.perf_counter()
        att_kw = dict(epochs=p["attack_epochs"], lr=p["attack_lr"], batch_size=p["attack_batch"],
                      clip_norm=p["clip_norm"], mask_rate=p["attack_mask_rate"], seed=0, quiet=True)
        backdoored = new_model()
        train_classifier(backdoored, px, py, desc="attack", **att_kw)
        backdoored.save(out / "models" / "backdoored")
        bar.update()
        clean_pre = new_model()
        train_classifier(clean_pre, at_x, at_y, desc="clean pre-train", **att_kw)
        bar.update()
        bcfg = BMPSConfig(top_layers=p["top_layers"], sigma=p["sigma"], clip_norm=p["clip_norm"], lr=p["ft_lr"],
                          epochs=p["ft_epochs"], batch_size=p["ft_batch"], num_copies=p["k"], seed=0)
        frs_model = TinyClassifier.load(out / "models" / "backdoored", device=dev)
        bmps_finetune(frs_model, ft_x, ft_y, bcfg, quiet=True)
        frs_model.save(out / "models" / "bmps")
        bar.update()
        s0_model = TinyClassifier.load(out / "models" / "backdoored", device=dev)
        bmps_finetune(s0_model, ft_x, ft_y, BMPSConfig(**{**bcfg.__dict__, "sigma": 0.0}), quiet=True)
        s0_model.save(out / "models" / "sigma0")
        bar.update()
        bmps_finetune(clean_pre, ft_x, ft_y, bcfg, quiet=True)
        clean_pre.save(out / "models" / "clean_only")
        bar.update()
        # evaluate with the saved weights, as a resumed run does
        backdoored, frs_model, s0_model, clean_pre = (TinyClassifier.load(out / "models" / n, device=dev) for n in names)
        setup = {"train_seconds": time.perf_counter() - t_setup}
    for m in (frs_model, s0_model, clean_pre, backdoored):
        m.batch_size = 1024
    # test sets: same texts, triggers and positions for every arm and seed
    order = np.random.default_rng(1).permutation(len(tok_te))[: p["n_clean"]]
    cx, cy = [tok_te[i] for i in order], [te.labels[i] for i in order]
    tx, ty, spans, _ = triggered_set(tok_te, te.labels, trigger=p["trigger"], target=p["target"],
                                     n=p["n_triggered"], seed=0)
    none_pred = frs_model.predict_proba(cx).argmax(1)
    emp_idx = [i for i in range(len(cx)) if none_pred[i] == cy[i]][: p["n_empirical"]]
    ex, ey = [cx[i] for i in emp_idx], [cy[i] for i in emp_idx]
    pool = [t for t in vocab.itos[len(Vocab.specials):] if t != p["trigger"]]
    # seed-independent mechanism numbers: single-token occlusion, backdoor before / after fine-tuning
    if "occlusion_rate" not in setup:
        setup["occlusion_rate"] = _occlusion_rate(frs_model, tx, spans, kl_divergence)
        setup["single_models"] = {"backdoored": _plain(backdoored, cx, cy, tx, ty, p["target"]),
                                  "bmps_finetuned": _plain(frs_model, cx, cy, tx, ty, p["target"]),
                                  "sigma0_finetuned": _plain(s0_model, cx, cy, tx, ty, p["target"]),
                                  "clean_only": _plain(clean_pre, cx, cy, tx, ty, p["target"])}
        setup = ck.save_setup(setup)
    occl, pre = setup["occlusion_rate"], setup["single_models"]
    bar.update()
    smooth_kw = dict(w_high=p["w_high"], w_mid=p["w_mid"], n_random=p["n_random"], iterations=p["iterations"],
                     max_span=p["max_span"], c=p["c"], alpha=p["alpha"])
    per_seed: list[dict] = []
    for s in seeds:
        res = ck.load_seed(s)
        t_seed = time.perf_counter()
        copies = sample_parameter_copies(frs_model, k=p["k"], sigma=p["sigma"], top_layers=p["top_layers"], seed=s)
        for arm in ARM_ORDER:
            if arm in res:
                log.info("--resume: seed %d %s from %s", s, arm, ck.seed_path(s))
                continue
            bar.set_postfix_str(f"seed {s}: {arm}")
            t_arm = time.perf_counter()
            model = s0_model if arm == "ftr-only" else frs_model
            clf = make_arm(arm, model, copies, seed=s, **smooth_kw)
            m, recs = evaluate_arm(clf, cx, cy, tx, ty, spans, target=p["target"], alpha=p["alpha"])
            _write_jsonl(out / "texts" / f"seed{s}_{arm}.jsonl", recs)
            if arm == "frs":
                m["random_segment_hit_rate"] = random_segment_hit_rate(
                    [r["segment"][1] - r["segment"][0] for r in recs if r["set"] == "triggered"],
                    [r["length"] for r in recs if r["set"] == "triggered"], spans)
            m["seconds"] = time.perf_counter() - t_arm
            res[arm] = m
            res = ck.save_seed(s, res)
            log.info("seed %d %s: CA %.1f ASR %.1f (%.0f s)", s, arm, m["CA"], m["ASR"], m["seconds"])
        bar.update(3)
        from .certification import empirical_radius

        for arm in ("uniform", "frs"):
            if "empirical_radius" in res[arm]:
                continue
            bar.set_postfix_str(f"seed {s}: empirical radius {arm}")
            t_arm = time.perf_counter()
            clf = make_arm(arm, frs_model, copies, seed=s, **smooth_kw)
            r = empirical_radius(clf, ex, ey, pool=pool, num_samples=p["empirical_samples"], seed=s)
            res[arm]["empirical_radius"] = float(np.mean(r)) if len(r) else float("nan")
            res[arm]["empirical_radius_max"] = float(np.max(r)) if len(r) else float("nan")
            for c in sorted(set(ey)):  # per true class (issue #40)
                rc = r[np.asarray(ey) == c]
                res[arm][f"empirical_radius_c{c}"] = float(np.mean(rc))
                res[arm][f"n_empirical_c{c}"] = int(len(rc))
            res[arm]["empirical_seconds"] = time.perf_counter() - t_arm
            res = ck.save_seed(s, res)
            log.info("seed %d %s: empirical radius %.3f (%.0f s)", s, arm, res[arm]["empirical_radius"],
                     res[arm]["empirical_seconds"])
        bar.update()
        # hit-rate sensitivity of the MCTS design (same model, texts and seed)
        for name, kw in (("hit_rate_c_sqrt2", dict(c=math.sqrt(2))), ("hit_rate_all_operators", dict(operators=OPERATORS))):
            if name in res["frs"]:
                continue
            fz = MCTSFuzzer(frs_model.predict_proba, max_span=p["max_span"], iterations=p["iterations"],
                            seed=s, mask_token=frs_model.mask_token, **{"c": p["c"], **kw})
            res["frs"][name] = trigger_hit_rate([seg for seg, _ in fz.search_many(tx)], spans)
            res = ck.save_seed(s, res)
        bar.update()
        log.info("seed %d done (%.0f s in this invocation)", s, time.perf_counter() - t_seed)
        per_seed.append(res)
    bar.close()
    seconds = time.perf_counter() - t0
    agg = _aggregate(per_seed)
    warns = sorted({w for r in per_seed for arm in ARM_ORDER for w in r[arm]["warnings"]})
    stage_seconds = setup.get("train_seconds", 0.0) + sum(
        r[a].get(k, 0.0) for r in per_seed for a in ARM_ORDER for k in ("seconds", "empirical_seconds"))
    meta = {"preset": {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.items()}, "quick": quick,
            "seeds": seeds, "device": dev, "seconds": seconds, "resumed": ck.resumed,
            "stage_seconds_all_invocations": stage_seconds, "max_len": max_len, "vocab_size": len(vocab),
            "poisoned": int(len(pidx)), "attack_finetune_overlap": overlap, "occlusion_rate": occl,
            "single_models": pre, "aggregate": agg, "per_seed": per_seed, "warnings": warns,
            "truncated_texts": int(frs_model.truncated),
            "torch_threads": torch.get_num_threads()}
    (out / "metrics.json").write_text(json.dumps(meta, indent=2, default=float))
    (out / "arms.md").write_text(_arms_table(agg, seeds, p) + "\n" + _class_table(agg, list(tr.label_names)))
    ck.finish()
    return _claims(agg, pre, occl, p, seeds, warns, names=list(tr.label_names))


def _write_jsonl(path: Path, recs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


def _atomic_json(path: Path, obj) -> dict:
    """Write ``obj`` as JSON atomically (tmp + fsync + rename); return its JSON round trip, which is
    what a resumed run reads, so that a fresh and a resumed run compute from identical values."""
    text = json.dumps(obj, indent=1, default=float)
    tmp = path.with_suffix(".json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return json.loads(text)


class _Checkpoint:
    """``out/checkpoint/``: ``state.json`` (settings, finished flag), ``setup.json`` (single-model numbers,
    with the models in ``out/models/``) and ``seed<s>.json`` (one entry per finished arm / stage)."""

    def __init__(self, out: Path, preset: dict, quick: bool, resume: bool):
        from ._version import __version__

        self.dir = out / "checkpoint"
        key = {k: (list(v) if isinstance(v, tuple) else v) for k, v in preset.items() if k != "seeds"}
        state_path = self.dir / "state.json"
        old = json.loads(state_path.read_text()) if state_path.is_file() else None
        self.resumed = False
        if old is not None and resume:
            if old.get("preset") != key:
                diff = sorted(k for k in set(key) | set(old.get("preset", {}))
                              if key.get(k) != old.get("preset", {}).get(k))
                raise ValueError(f"--resume: the checkpoint in {self.dir} was made with other settings "
                                 f"(differs in {', '.join(diff)}); choose another --out or drop --resume")
            if old.get("version") != __version__:
                log.warning("--resume: checkpoint written by iclr25-frs %s, this is %s", old.get("version"), __version__)
            self.resumed = True
        elif old is not None and not old.get("finished"):
            raise ValueError(f"{out} holds an unfinished reproduction ({self.dir}); pass --resume to continue it, "
                             "or choose another --out")
        elif resume:
            log.warning("--resume: no checkpoint in %s; starting a new run", self.dir)
        if not self.resumed and self.dir.is_dir():
            for f in self.dir.glob("*.json"):
                f.unlink()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state = {"preset": key, "quick": quick, "version": __version__, "finished": False}
        _atomic_json(state_path, self.state)

    def load_setup(self, model_names) -> dict | None:
        path = self.dir / "setup.json"
        if not (self.resumed and path.is_file()):
            return None
        out = self.dir.parent / "models"
        if not all((out / n / "model.safetensors").is_file() for n in model_names):
            return None
        return json.loads(path.read_text())

    def save_setup(self, setup: dict) -> dict:
        return _atomic_json(self.dir / "setup.json", setup)

    def seed_path(self, s: int) -> Path:
        return self.dir / f"seed{s}.json"

    def load_seed(self, s: int) -> dict:
        path = self.seed_path(s)
        if self.resumed and path.is_file():
            return json.loads(path.read_text())
        return {"seed": s}

    def save_seed(self, s: int, res: dict) -> dict:
        return _atomic_json(self.seed_path(s), res)

    def finish(self) -> None:
        _atomic_json(self.dir / "state.json", {**self.state, "finished": True})


def _plain(model, cx, cy, tx, ty, target) -> dict:
    from .metrics import attack_success_rate

    return {"CA": clean_accuracy_(model, cx, cy), "ASR": attack_success_rate(model.predict_proba(tx).argmax(1), ty, target),
            "p_target_triggered": float(model.predict_proba(tx)[:, target].mean())}


def clean_accuracy_(model, cx, cy) -> float:
    from .metrics import clean_accuracy

    return clean_accuracy(model.predict_proba(cx).argmax(1), cy)


def _occlusion_rate(model, tx, spans, kl) -> float:
    """Share of triggered texts whose single most influential token (KL when masked) is a trigger token."""
    batch, owner = [], []
    for b, t in enumerate(tx):
        for i in range(len(t)):
            batch.append(t[:i] + [model.mask_token] + t[i + 1:])
            owner.append((b, i))
    q = model.predict_proba(batch)
    p0 = model.predict_proba(tx)
    r = kl(p0[[b for b, _ in owner]], q)
    best = {}
    for (b, i), v in zip(owner, r):
        if b not in best or v > best[b][1]:
            best[b] = (i, v)
    return float(np.mean([spans[b][0] <= best[b][0] < spans[b][1] for b in range(len(tx))]))


_KEYS = ("CA", "PA", "ASR", "hit_rate", "random_segment_hit_rate", "hit_rate_c_sqrt2", "hit_rate_all_operators",
         "abstention_clean", "abstention_triggered", "mean_radius_clean", "mean_radius_triggered",
         "mean_radius_tokens_clean", "mean_radius_tokens_triggered", "mean_radius_unconditional_triggered",
         "mean_radius_unconditional_clean",
         "certified_rate_triggered", "empirical_radius", "empirical_radius_max", "tie_rate_clean",
         "tie_rate_triggered", "copy_agreement", "num_votes", "short_texts")


def _class_keys(per_seed: list[dict], arm: str) -> list[str]:
    """The per-class keys (``..._c<class>``) of an arm's results."""
    import re

    return sorted({k for r in per_seed for k in r[arm] if re.fullmatch(r".+_c\d+", k)})


def _aggregate(per_seed: list[dict]) -> dict:
    agg: dict = {}
    for arm in ARM_ORDER:
        agg[arm] = {}
        for k in (*_KEYS, *_class_keys(per_seed, arm)):
            vals = [r[arm].get(k) for r in per_seed if r[arm].get(k) is not None]
            if vals and all(isinstance(v, (int, float)) for v in vals):
                m, s = _mean_sd(vals)
                agg[arm][k] = {"mean": m, "sd": s, "values": vals}
    return agg


def _g(agg, arm, k, what="mean"):
    return agg[arm].get(k, {}).get(what, float("nan"))


def _arms_table(agg: dict, seeds, p) -> str:
    rows = ["| arm | CA (%) | PA (%) | ASR (%) | hit rate | abstain clean / trig. (%) | mean cert. radius trig. "
            "(tokens) | empirical radius |", "|---|---|---|---|---|---|---|---|"]
    for arm in ARM_ORDER:
        def f(k, d=1, arm=arm):
            m, s = _g(agg, arm, k), _g(agg, arm, k, "sd")
            return "—" if not np.isfinite(m) else _fmt(m, s, d)
        rows.append(f"| {arm} | {f('CA')} | {f('PA')} | {f('ASR')} | {f('hit_rate', 2)} | "
                    f"{f('abstention_clean')} / {f('abstention_triggered')} | {f('mean_radius_tokens_triggered', 3)} | "
                    f"{f('empirical_radius', 3)} |")
    return (f"Mean ± sd over smoothing seeds {list(seeds)}; K = {p['k']}, n = {p['n_random']}, I = {p['iterations']}, "
            f"ω_M = {p['w_mid']}, ω_H = {p['w_high']}, α = {p['alpha']}; {p['n_clean']} clean + {p['n_triggered']} "
            f"triggered texts.\n\n" + "\n".join(rows) + "\n")


def _classes(agg: dict, prefix: str, arm: str = "none") -> list[int]:
    """Class indices with a ``<prefix>_c<c>`` entry for ``arm``."""
    return sorted(int(k[len(prefix) + 2:]) for k in agg[arm] if k.startswith(prefix + "_c") and k[len(prefix) + 2:].isdigit())


def _class_table(agg: dict, names: list[str]) -> str:
    """Per-class table (issue #40): clean accuracy, certified accuracy, abstention and mean certified radius on
    the clean texts, and the empirical radius, per true class and arm (mean ± sd over seeds)."""
    rows = ["Per true class (clean texts; certified accuracy = correct, not abstained, radius > 0; radius as a "
            "fraction of L, abstained / wrong texts count 0):", "",
            "| arm | class | n | CA (%) | certified acc. (%) | wrong label certified (%) | abstain (%) | mean cert. radius "
            "| empirical radius |",
            "|---|---|---|---|---|---|---|---|---|"]
    for arm in ARM_ORDER:
        for c in _classes(agg, "CA", arm):
            def f(k, d=1, arm=arm, c=c):
                m, sd = _g(agg, arm, f"{k}_c{c}"), _g(agg, arm, f"{k}_c{c}", "sd")
                return "—" if not np.isfinite(m) else _fmt(m, sd, d)
            name = names[c] if c < len(names) else str(c)
            rows.append(f"| {arm} | {name} | {int(_g(agg, arm, f'n_clean_c{c}'))} | {f('CA')} | "
                        f"{f('certified_accuracy_clean')} | {f('wrong_certified_clean')} | {f('abstention_clean')} | {f('mean_radius_clean', 4)} | "
                        f"{f('empirical_radius', 3)} |")
    return "\n".join(rows) + "\n"


def _claims(agg: dict, pre: dict, occl: float, p: dict, seeds, warns, names: list[str] | None = None) -> list[Claim]:
    def ms(arm, k):
        return _g(agg, arm, k), _g(agg, arm, k, "sd")

    def cname(c):
        return f"class {names[c] if names and c < len(names) else c}"

    def by_class(arm, k, d=1):
        """'neg 12.0 ± 1.0, pos 80.0 ± 2.0' for the per-class values of ``k`` (``k_c<c>``)."""
        return ", ".join(f"{cname(c)} {_fmt(*ms(arm, f'{k}_c{c}'), d)}" for c in _classes(agg, k, arm)) or "n/a"

    def class_verdict(holds_by_class: dict[int, bool]) -> str:
        """Which classes a claim holds on, said outright when it is not all of them."""
        yes = [cname(c) for c, h in holds_by_class.items() if h]
        no = [cname(c) for c, h in holds_by_class.items() if not h]
        if not no:
            return f"holds on every class ({', '.join(yes)})"
        if not yes:
            return f"holds on no single class ({', '.join(no)})"
        return f"holds ONLY on {', '.join(yes)} (not on {', '.join(no)})"

    trig_classes = _classes(agg, "ASR", "frs")
    trig_scope = (f"Triggered texts are all of {', '.join(cname(c) for c in trig_classes)} (the non-target "
                  f"class{'es' if len(trig_classes) > 1 else ''}), so this claim speaks for "
                  f"{'those classes' if len(trig_classes) > 1 else 'that class'} only; per class ASR frs "
                  f"{by_class('frs', 'ASR')}, uniform {by_class('uniform', 'ASR')}.")

    def gap_note(a, b, k, d=1, lower=True):
        (ma, sa), (mb, sb) = ms(a, k), ms(b, k)
        gap = (mb - ma) if lower else (ma - mb)
        big = max(sa, sb)
        return (f"{a} {_fmt(ma, sa, d)} vs {b} {_fmt(mb, sb, d)} over seeds {list(seeds)}; gap {gap:.{d}f} "
                f"{'exceeds' if gap > big else 'does NOT exceed'} the larger sd {big:.{d}f}"), max(big, 1e-9)

    scale = (f"{p['data']}, tiny encoder d={p['d_model']}, attacker {p['n_attack']} phrases ({p['attack_epochs']} ep.), "
             f"BMPS FT on {p['n_finetune']} clean phrases (σ={p['sigma']}, H={p['top_layers']}), K={p['k']}, "
             f"n={p['n_random']}, I={p['iterations']}, N={p['k'] * p['n_random']}, α={p['alpha']}")
    claims = []
    b = pre["bmps_finetuned"]
    claims.append(Claim(
        "backdoor/survives_clean_finetune", "ASR after BMPS clean fine-tuning, no defense (%)", b["ASR"],
        baseline=pre["clean_only"]["ASR"], threshold=95.0, higher_is_better=True, paper="prototype 99.8",
        note=f"{scale}. Backdoored model before fine-tuning: CA {pre['backdoored']['CA']:.1f}, ASR "
             f"{pre['backdoored']['ASR']:.1f}; after: CA {b['CA']:.1f}, mean p(target | triggered) "
             f"{b['p_target_triggered']:.2f}. Baseline = same pipeline on unpoisoned phrases (CA "
             f"{pre['clean_only']['CA']:.1f})."))
    note, marg = gap_note("frs", "uniform", "ASR")
    claims.append(Claim(
        "asr/frs_lt_uniform", "ASR on triggered negatives (%)", _g(agg, "frs", "ASR"), baseline=_g(agg, "uniform", "ASR"),
        higher_is_better=False, margin=marg, paper="prototype 40.7 vs 82.0",
        note=f"{note}. Equal expected randomised tokens (ω_M·L). PA frs {_fmt(*ms('frs', 'PA'))} vs uniform "
             f"{_fmt(*ms('uniform', 'PA'))}; tie rate on triggered texts (ties -> class 0, the true class) frs "
             f"{_fmt(*ms('frs', 'tie_rate_triggered'))}%, uniform {_fmt(*ms('uniform', 'tie_rate_triggered'))}%. "
             + trig_scope))
    ca_none, ca_frs = ms("none", "CA"), ms("frs", "CA")
    drops = [a - b for a, b in zip(agg["none"]["CA"]["values"], agg["frs"]["CA"]["values"])]
    dm, dsd = _mean_sd(drops)
    cls_drop = {c: _g(agg, "none", f"CA_c{c}") - _g(agg, "frs", f"CA_c{c}") for c in _classes(agg, "CA")}
    claims.append(Claim(
        "clean_acc/frs_cost", "CA drop none -> FRS (p.p.)", dm, threshold=5.0, higher_is_better=False,
        paper="prototype 4.5",
        note=f"CA none {_fmt(*ca_none)}, frs {_fmt(*ca_frs)}, uniform {_fmt(*ms('uniform', 'CA'))}; drop "
             f"{_fmt(dm, dsd)} p.p. on {p['n_clean']} clean texts (one text = {100 / p['n_clean']:.2f} p.p.). "
             f"Per class CA none {by_class('none', 'CA')}; frs {by_class('frs', 'CA')}; drop "
             + ", ".join(f"{cname(c)} {v:.1f}" for c, v in cls_drop.items())
             + f" p.p. — the <= 5 p.p. bound {class_verdict({c: v <= 5.0 for c, v in cls_drop.items()})}. "
             f"Certified accuracy (correct, not abstained, radius > 0) frs {by_class('frs', 'certified_accuracy_clean')}, "
             f"uniform {by_class('uniform', 'certified_accuracy_clean')}; certified on a WRONG label (not abstained, "
             f"radius > 0) frs {by_class('frs', 'wrong_certified_clean')}, uniform "
             f"{by_class('uniform', 'wrong_certified_clean')}."))
    hr, hsd = ms("frs", "hit_rate")
    claims.append(Claim(
        "mechanism/mcts_trigger_hit_rate", "share of triggered texts with the trigger inside T(x')", hr,
        baseline=_g(agg, "frs", "random_segment_hit_rate"), threshold=0.8, higher_is_better=True,
        paper="expected >= 0.8 (Corollary 1 rests on it)",
        note=f"{_fmt(hr, hsd, 2)} over seeds; baseline = random segment of equal length (exact expectation). "
             f"Single-token KL occlusion (exhaustive, the prototype's locator) finds the trigger in {occl:.2f}. "
             f"Design sensitivity at the same I={p['iterations']}: C=√2 -> {_fmt(*ms('frs', 'hit_rate_c_sqrt2'), 2)}; "
             f"all four DL operators -> {_fmt(*ms('frs', 'hit_rate_all_operators'), 2)}. Triggered texts are all of "
             f"{', '.join(cname(c) for c in trig_classes)}: the hit rate is measured on that class only."))
    note, marg = gap_note("frs", "ftr-only", "ASR")
    claims.append(Claim(
        "ablation/frs_lt_no_bmps", "ASR on triggered negatives (%), FRS vs FRS with σ = 0", _g(agg, "frs", "ASR"),
        baseline=_g(agg, "ftr-only", "ASR"), higher_is_better=False, margin=marg,
        paper="Table 3: removing BMPS raises ASR",
        note=f"{note}. σ=0: fine-tuned with σ=0 from the same backdoored weights; its K identical copies count once "
             f"(N = n = {p['n_random']}). BMPS copies vote alike on {_fmt(100 * _g(agg, 'frs', 'copy_agreement'), 100 * _g(agg, 'frs', 'copy_agreement', 'sd'))}% "
             f"of randomised texts; bmps-only ASR {_fmt(*ms('bmps-only', 'ASR'))}. Triggered texts are all of "
             f"{', '.join(cname(c) for c in trig_classes)}; the claim speaks for that class only."))
    note, marg = gap_note("frs", "uniform", "empirical_radius", 3, lower=False)
    emp_cls = {c: _g(agg, "frs", f"empirical_radius_c{c}") > _g(agg, "uniform", f"empirical_radius_c{c}")
               for c in _classes(agg, "empirical_radius", "frs")}
    claims.append(Claim(
        "radius/frs_empirical_gt_uniform", "mean empirical radius (fraction of tokens)", _g(agg, "frs", "empirical_radius"),
        baseline=_g(agg, "uniform", "empirical_radius"), higher_is_better=True, margin=marg,
        paper="Table 2: FRS radius larger",
        note=f"{note}. Binary search over the number m of random-token substitutions; m passes if >= 95% of "
             f"{p['empirical_samples']} draws stay correct; up to {p['n_empirical']} clean texts the undefended model "
             f"gets right (per class n: {by_class('frs', 'n_empirical', 0)}). Per class frs "
             f"{by_class('frs', 'empirical_radius', 3)}, uniform {by_class('uniform', 'empirical_radius', 3)}: FRS > "
             f"uniform {class_verdict(emp_cls)}."))
    (mf, _), (mu, _) = ms("frs", "mean_radius_triggered"), ms("uniform", "mean_radius_triggered")
    note, marg = gap_note("frs", "uniform", "mean_radius_triggered", 4, lower=False)
    ratio = mf / mu if mu > 0 else float("inf")
    claims.append(Claim(
        "radius/frs_certified_gt_uniform",
        "mean certified radius on triggered texts (fraction of L): FRS at ω_H, conditional on the trigger lying "
        "in T(x'), vs uniform at ω_M (unconditional)", mf,
        baseline=mu, higher_is_better=True, margin=marg, paper="Corollary 1: ratio ln ω_M / ln ω_H = 11.43",
        note=f"{note}. Correct and non-abstained texts count, others 0. Ratio {ratio:.2f} (Corollary 1 at equal p: "
             f"{math.log(p['w_mid']) / math.log(p['w_high']):.2f}). Abstention on triggered texts: frs "
             f"{_fmt(*ms('frs', 'abstention_triggered'))}%, uniform {_fmt(*ms('uniform', 'abstention_triggered'))}%; "
             f"N = {p['k'] * p['n_random']}. In tokens: frs {_fmt(*ms('frs', 'mean_radius_tokens_triggered'), 3)}, uniform "
             f"{_fmt(*ms('uniform', 'mean_radius_tokens_triggered'), 3)}. The FRS radius is conditional on the trigger "
             f"lying in T(x') (hit rate {hr:.2f}) and on Assumption 1; with ω_L (no location assumption) it is "
             f"{_fmt(*ms('frs', 'mean_radius_unconditional_triggered'), 4)} (like-for-like comparison: the next claim). "
             f"Not like for like: FRS is credited ω_H = {p['w_high']} on T(x'), uniform ω_M = {p['w_mid']}. "
             f"{trig_scope}" + (f" Warnings: {'; '.join(warns)}" if warns else "")))
    (mfu, _), (mcu, _) = ms("frs", "mean_radius_unconditional_triggered"), ms("uniform", "mean_radius_triggered")
    note_u = (f"frs {_fmt(*ms('frs', 'mean_radius_unconditional_triggered'), 4)} vs uniform "
              f"{_fmt(*ms('uniform', 'mean_radius_triggered'), 4)} over seeds {list(seeds)}")
    big_u = max(_g(agg, "frs", "mean_radius_unconditional_triggered", "sd"), _g(agg, "uniform", "mean_radius_triggered", "sd"))
    (mfc, sfc), (mcc, scc) = ms("frs", "mean_radius_unconditional_clean"), ms("uniform", "mean_radius_clean")
    claims.append(Claim(
        "radius/frs_unconditional_ge_uniform",
        "mean certified radius on triggered texts without the location assumption (fraction of L): FRS at ω_L "
        "(the smallest probability any token gets) vs uniform at ω_M — like for like", mfu,
        baseline=mcu, higher_is_better=True, margin=max(big_u, 1e-9),
        paper="not in the paper (issue #40: like-for-like comparison)",
        note=f"{note_u}; gap {mfu - mcu:+.4f} {'exceeds' if mfu - mcu > big_u else 'does NOT exceed'} the larger sd "
             f"{big_u:.4f} (a wrong or abstained text counts 0, so a uniform radius of 0 here means it certified no "
             f"triggered text correctly). On clean texts, like for like: frs {_fmt(mfc, sfc, 4)} vs uniform "
             f"{_fmt(mcc, scc, 4)}. Both radii hold for a trigger anywhere in the "
             f"text (no assumption that it lies in T(x')); the budget-preserving ω_L is below ω_M by construction, so "
             f"FRS trades unconditional radius for the conditional one. Clean-text certified radius per class frs "
             f"{by_class('frs', 'mean_radius_clean', 4)}, uniform {by_class('uniform', 'mean_radius_clean', 4)}. "
             f"{trig_scope}"))
    return claims
