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

from .claims import ARM_ORDER, CLAIM_NAMES, aggregate, arm_warnings, arms_table, build_claims, class_table

__all__ = ["reproduce", "QUICK", "FULL", "CLAIM_NAMES", "ARM_ORDER"]

log = logging.getLogger(__name__)


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
    agg = aggregate(per_seed)
    warns = sorted({w for r in per_seed for arm in ARM_ORDER for w in r[arm]["warnings"]})
    stage_seconds = setup.get("train_seconds", 0.0) + sum(
        r[a].get(k, 0.0) for r in per_seed for a in ARM_ORDER for k in ("seconds", "empirical_seconds"))
    meta = {"preset": {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.items()}, "quick": quick,
            "seeds": seeds, "device": dev, "seconds": seconds, "resumed": ck.resumed,
            "stage_seconds_all_invocations": stage_seconds, "max_len": max_len, "vocab_size": len(vocab),
            "poisoned": int(len(pidx)), "attack_finetune_overlap": overlap, "occlusion_rate": occl,
            "single_models": pre, "aggregate": agg, "per_seed": per_seed, "warnings": warns,
            "truncated_texts": int(frs_model.truncated), "label_names": list(tr.label_names),
            "torch_threads": torch.get_num_threads()}
    (out / "metrics.json").write_text(json.dumps(meta, indent=2, default=float))
    (out / "arms.md").write_text(arms_table(agg, seeds, p) + "\n" + class_table(agg, list(tr.label_names)))
    from .plots import write_plots

    write_plots(agg, out, len(seeds), f"{p['data']}, d = {p['d_model']}, K = {p['k']}, n = {p['n_random']}")
    ck.finish()
    return build_claims(agg, pre, occl, p, seeds, arm_warnings(per_seed), names=list(tr.label_names))


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


