"""The reproduction's job bodies (:mod:`iclr25.frs.reproduce` declares them for :mod:`iclr25.core.runner`).

``setup_job`` trains the four models once (attack, clean pre-training, BMPS and σ = 0 fine-tuning) into
``out/models/`` and measures the seed-independent numbers (single-model CA / ASR, occlusion rate);
``seed_job`` (one per seed of the smoothing randomness, after ``setup``) loads those models and runs
every arm, the empirical radii and the hit-rate sensitivity of that seed. Both rebuild the same data,
vocabulary and test sets from the preset (deterministic: seeds 0 and 1), so a seed job in another
process sees exactly what the setup saw. A record holds NaN as ``None`` (:func:`nan_to_none`; the
records hold no ``None`` of their own); the reproduction reads it back with ``none_to_nan``.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from pathlib import Path

import numpy as np

__all__ = ["setup_job", "seed_job", "MODEL_NAMES"]

#: the four models of the setup job, saved under ``out/models/<name>``
MODEL_NAMES = ("backdoored", "bmps", "sigma0", "clean_only")


def _data(p: dict) -> dict:
    """Training splits, vocabulary and test sets of the preset ``p`` (the same in every job)."""
    from .data import load_dataset, poison_dataset, tokenize, triggered_set
    from .models import Vocab

    data = p["data"]
    tr, te = load_dataset(data, "train"), load_dataset(data, "test")
    lower = data == "agnews"
    tok_tr, tok_te = tokenize(tr.texts, lowercase=lower), tokenize(te.texts, lowercase=lower)
    perm = np.random.default_rng(0).permutation(len(tok_tr))
    n_att = min(p["n_attack"], len(perm))
    att = perm[:n_att]
    ft = perm[n_att:n_att + p["n_finetune"]] if n_att + p["n_finetune"] <= len(perm) else perm[:p["n_finetune"]]
    at_x, at_y = [tok_tr[i] for i in att], [tr.labels[i] for i in att]
    px, py, pidx, _ = poison_dataset(at_x, at_y, rate=p["poison_rate"], trigger=p["trigger"], target=p["target"], seed=0)
    vocab = Vocab.build(px, min_count=p["min_count"], extra=[p["trigger"]])
    order = np.random.default_rng(1).permutation(len(tok_te))[: p["n_clean"]]
    tx, ty, spans, _ = triggered_set(tok_te, te.labels, trigger=p["trigger"], target=p["target"],
                                     n=p["n_triggered"], seed=0)
    return dict(
        tr=tr, lower=lower, at_x=at_x, at_y=at_y, px=px, py=py, n_poisoned=int(len(pidx)), vocab=vocab,
        overlap=int(len(set(att.tolist()) & set(ft.tolist()))),
        max_len=max(max(len(t) for t in tok_tr), max(len(t) for t in tok_te)) + len(p["trigger"].split()),
        ft_x=[tok_tr[i] for i in ft], ft_y=[tr.labels[i] for i in ft],
        cx=[tok_te[i] for i in order], cy=[te.labels[i] for i in order], tx=tx, ty=ty, spans=spans)


def _load_models(out: Path, device: str) -> list:
    from .models import TinyClassifier

    models = [TinyClassifier.load(out / "models" / n, device=device) for n in MODEL_NAMES]
    for m in models:
        m.batch_size = 1024
    return models


def setup_job(settings: dict, seed: int, deps: dict) -> dict:
    """Train and save the four models; return the seed-independent numbers and the data's sizes."""
    from .bmps import BMPSConfig, bmps_finetune, train_classifier
    from .mcts import kl_divergence
    from .models import TinyClassifier

    p, out, dev = settings["preset"], Path(settings["out"]), settings["device"]
    d = _data(p)
    tr = d["tr"]
    t_setup = time.perf_counter()

    def new_model():
        return TinyClassifier.create(d["vocab"], len(tr.label_names), d_model=p["d_model"], n_heads=p["n_heads"],
                                     d_ff=p["d_ff"], n_layers=p["n_layers"], max_len=d["max_len"], seed=0,
                                     label_names=tr.label_names, device=dev, lowercase=d["lower"])

    att_kw = dict(epochs=p["attack_epochs"], lr=p["attack_lr"], batch_size=p["attack_batch"],
                  clip_norm=p["clip_norm"], mask_rate=p["attack_mask_rate"], seed=0, quiet=True)
    backdoored = new_model()
    train_classifier(backdoored, d["px"], d["py"], desc="attack", **att_kw)
    backdoored.save(out / "models" / "backdoored")
    clean_pre = new_model()
    train_classifier(clean_pre, d["at_x"], d["at_y"], desc="clean pre-train", **att_kw)
    bcfg = BMPSConfig(top_layers=p["top_layers"], sigma=p["sigma"], clip_norm=p["clip_norm"], lr=p["ft_lr"],
                      epochs=p["ft_epochs"], batch_size=p["ft_batch"], num_copies=p["k"], seed=0)
    frs_model = TinyClassifier.load(out / "models" / "backdoored", device=dev)
    bmps_finetune(frs_model, d["ft_x"], d["ft_y"], bcfg, quiet=True)
    frs_model.save(out / "models" / "bmps")
    s0_model = TinyClassifier.load(out / "models" / "backdoored", device=dev)
    bmps_finetune(s0_model, d["ft_x"], d["ft_y"], BMPSConfig(**{**bcfg.__dict__, "sigma": 0.0}), quiet=True)
    s0_model.save(out / "models" / "sigma0")
    bmps_finetune(clean_pre, d["ft_x"], d["ft_y"], bcfg, quiet=True)
    clean_pre.save(out / "models" / "clean_only")
    train_seconds = time.perf_counter() - t_setup
    # evaluate with the saved weights, as the seed jobs do
    backdoored, frs_model, s0_model, clean_pre = _load_models(out, dev)
    cx, cy, tx, ty, target = d["cx"], d["cy"], d["tx"], d["ty"], p["target"]
    return {"train_seconds": train_seconds,
            "occlusion_rate": _occlusion_rate(frs_model, tx, d["spans"], kl_divergence),
            "single_models": {"backdoored": _plain(backdoored, cx, cy, tx, ty, target),
                              "bmps_finetuned": _plain(frs_model, cx, cy, tx, ty, target),
                              "sigma0_finetuned": _plain(s0_model, cx, cy, tx, ty, target),
                              "clean_only": _plain(clean_pre, cx, cy, tx, ty, target)},
            "max_len": int(d["max_len"]), "vocab_size": len(d["vocab"]), "poisoned": d["n_poisoned"],
            "attack_finetune_overlap": d["overlap"], "label_names": list(tr.label_names),
            "truncated_texts": int(frs_model.truncated)}


def seed_job(settings: dict, seed: int, deps: dict) -> dict:
    """Every arm, the empirical radii and the MCTS hit-rate sensitivity for smoothing seed ``seed``
    (``texts/seed<s>_<arm>.jsonl`` holds the per-text certificates)."""
    p, out, dev, s = settings["preset"], Path(settings["out"]), settings["device"], int(seed)
    with warnings.catch_warnings():  # the filter below ends with the job (workers=1 runs it in-process)
        return _seed_job(p, out, dev, s, deps)


def _seed_job(p: dict, out: Path, dev: str, s: int, deps: dict) -> dict:
    from iclr25.core.runner import nan_to_none

    from .bmps import sample_parameter_copies
    from .bounds import FewVotesWarning
    from .certification import empirical_radius
    from .claims import ARM_ORDER
    from .evaluate import evaluate_arm
    from .mcts import OPERATORS, MCTSFuzzer
    from .metrics import random_segment_hit_rate, trigger_hit_rate
    from .models import Vocab
    from .smoothing import make_arm

    d = _data(p)
    _, frs_model, s0_model, _ = _load_models(out, dev)
    cx, cy, tx, ty, spans = d["cx"], d["cy"], d["tx"], d["ty"], d["spans"]
    none_pred = frs_model.predict_proba(cx).argmax(1)
    emp_idx = [i for i in range(len(cx)) if none_pred[i] == cy[i]][: p["n_empirical"]]
    ex, ey = [cx[i] for i in emp_idx], [cy[i] for i in emp_idx]
    pool = [t for t in d["vocab"].itos[len(Vocab.specials):] if t != p["trigger"]]
    smooth_kw = dict(w_high=p["w_high"], w_mid=p["w_mid"], n_random=p["n_random"], iterations=p["iterations"],
                     max_span=p["max_span"], c=p["c"], alpha=p["alpha"])
    res: dict = {"seed": s}
    copies = sample_parameter_copies(frs_model, k=p["k"], sigma=p["sigma"], top_layers=p["top_layers"], seed=s)
    # each arm keeps its certifier warnings (clf.warnings -> the record, metrics.json, the claim notes, and one
    # log line per distinct warning in reproduce); printed here they came once per arm and seed, with source lines
    warnings.filterwarnings("ignore", category=FewVotesWarning)
    for arm in ARM_ORDER:
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
    for arm in ("uniform", "frs"):
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
    # hit-rate sensitivity of the MCTS design (same model, texts and seed)
    for name, kw in (("hit_rate_c_sqrt2", dict(c=math.sqrt(2))), ("hit_rate_all_operators", dict(operators=OPERATORS))):
        fz = MCTSFuzzer(frs_model.predict_proba, max_span=p["max_span"], iterations=p["iterations"],
                        seed=s, mask_token=frs_model.mask_token, **{"c": p["c"], **kw})
        res["frs"][name] = trigger_hit_rate([seg for seg, _ in fz.search_many(tx)], spans)
    res = json.loads(json.dumps(res, default=float))  # numpy scalars -> JSON numbers, NaN kept
    return {"result": nan_to_none(res), "truncated_texts": int(frs_model.truncated)}


def _write_jsonl(path: Path, recs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


def _plain(model, cx, cy, tx, ty, target) -> dict:
    from .metrics import attack_success_rate, clean_accuracy

    return {"CA": clean_accuracy(model.predict_proba(cx).argmax(1), cy),
            "ASR": attack_success_rate(model.predict_proba(tx).argmax(1), ty, target),
            "p_target_triggered": float(model.predict_proba(tx)[:, target].mean())}


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
