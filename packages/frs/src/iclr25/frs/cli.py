"""The ``iclr25-frs`` command: attack / finetune / evaluate / certify / reproduce / demo.

Only the config dataclasses are imported at module level (``--help`` stays light: no torch).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import AttackConfig, CertifyConfig, DemoConfig, EvaluateConfig, FinetuneConfig, ReproduceConfig

__all__ = ["main"]

log = logging.getLogger("iclr25.frs")


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _device(name: str) -> str:
    from iclr25.core.seed import choose_device

    return choose_device(name)


def _load_data(cfg, split: str):
    from .data import load_dataset

    return load_dataset(cfg.data, split, text_column=cfg.text_column, label_column=cfg.label_column,
                        header=cfg.header, labels=list(cfg.labels) if cfg.labels else None)


def _subset(n_items: int, n: int | None, skip: int = 0, seed: int = 0):
    import numpy as np

    perm = np.random.default_rng(seed).permutation(n_items)[skip:]
    return perm if n is None else perm[:n]


def _load_model(spec: str, device: str, *, token_unit: str = "whitespace", num_labels: int | None = None,
                dtype: str = "auto", device_map: str | None = None, new_head: bool = False):
    if spec == "minilm" and not new_head:
        raise ValueError("--model minilm gives MiniLM with a new, untrained classification head: fine-tune it first "
                         "(iclr25-frs finetune --model minilm --out DIR) and pass DIR/model here")
    if spec == "minilm":
        from .hf import MiniLMClassifier

        return MiniLMClassifier.create(num_labels or 2, device=device, token_unit=token_unit)
    from .loading import load_classifier

    p = Path(spec)
    if p.exists() and not (p / "config.json").is_file():
        raise FileNotFoundError(f"--model {spec}: the folder has no config.json (use the 'model' folder written "
                                "by attack/finetune, a Hugging Face folder, or 'minilm')")
    if not p.exists() and (spec.startswith((".", "/", "~")) or spec.count("/") > 1):
        raise FileNotFoundError(f"--model {spec}: no such folder")
    return load_classifier(spec, device=device, num_labels=num_labels, dtype=dtype, device_map=device_map,
                           token_unit=token_unit)


def _bmps_meta(spec: str) -> dict:
    p = Path(spec) / "bmps.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def _copies_and_arm(cfg, model, sigma0_model=None):
    from .bmps import sample_parameter_copies
    from .smoothing import make_arm

    meta = _bmps_meta(cfg.model) if getattr(cfg, "model", None) else {}
    sigma = cfg.sigma if cfg.sigma is not None else float(meta.get("sigma", 0.01))
    depth = getattr(model, "depth", None)
    if cfg.top_layers is not None:
        top = cfg.top_layers
    elif "top_layers" in meta:
        top = int(meta["top_layers"])
    else:
        top = min(10, depth) if depth is not None else 0
    copies = None
    if cfg.defense in ("uniform", "frs", "bmps-only"):
        if not hasattr(model, "top_parameter_names"):
            raise ValueError(f"defense {cfg.defense!r} needs a torch model for BMPS copies; this model has no "
                             "parameters to perturb (use --defense ftr-only)")
        copies = sample_parameter_copies(model, k=cfg.k, sigma=sigma, top_layers=top, seed=cfg.seed)
    import warnings

    from .bounds import FewVotesWarning

    with warnings.catch_warnings():  # kept in clf.warnings; the commands print them once, as "warning: ..."
        warnings.simplefilter("ignore", FewVotesWarning)
        clf = make_arm(cfg.defense, model, copies, w_high=cfg.w_high, w_mid=cfg.w_mid, n_random=cfg.n_random,
                       iterations=cfg.iterations, max_span=cfg.max_span, c=cfg.c, alpha=cfg.alpha,
                       vote_design=cfg.vote_design, seed=cfg.seed)
    return clf, {"sigma": sigma, "top_layers": top, "k": cfg.k}


def _truncation_warning(model) -> list[str]:
    """The model's count of truncated inputs as a warning for results.json (it was only logged)."""
    n = int(getattr(model, "truncated", 0) or 0)
    if not n:
        return []
    return [f"{n} model input(s) (texts, randomised variants, MCTS rollouts) were longer than the model's maximum "
            "length and truncated: the model never saw their tail, while L and the radius count every token"]


def _unknown_only_warning(model, toks, what: str = "texts") -> list[str]:
    """One warning counting the texts made only of words the model does not know (each maps to its unknown token,
    so the model sees no content); empty when there are none or the model cannot tell."""
    fn = getattr(model, "unknown_only", None)
    flags = fn(toks) if fn is not None else None
    n = sum(flags) if flags else 0
    if not n:
        return []
    i = flags.index(True)
    return [f"{n} of {len(toks)} {what} consist only of words the model does not know (every token maps to its "
            f"unknown token, e.g. {' '.join(toks[i])[:60]!r}): the model sees no content in them, so their "
            "predictions and certificates say nothing about the text; check the data's language, case and "
            "tokenisation against the model's"]


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=float) + "\n")


# ---------------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------------


def _attack(cfg: AttackConfig) -> int:
    from iclr25.core.runinfo import write_run_files

    from .bmps import train_classifier
    from .data import poison_dataset, tokenize
    from .models import TinyClassifier, Vocab

    out = Path(cfg.out)
    ds = _load_data(cfg, "train")
    lower = cfg.data == "agnews"
    toks = tokenize(ds.texts, lowercase=lower)
    idx = _subset(len(toks), cfg.n_train, seed=cfg.data_seed)
    x, y = [toks[i] for i in idx], [ds.labels[i] for i in idx]
    if cfg.target >= len(ds.label_names):
        raise ValueError(f"target={cfg.target} is not a class of the data (labels {ds.label_names})")
    poisoned = {"indices": [], "positions": []}
    if not cfg.clean_only:
        x, y, pidx, pos = poison_dataset(x, y, rate=cfg.poison_rate, trigger=cfg.trigger, target=cfg.target, seed=cfg.seed)
        poisoned = {"indices": pidx.tolist(), "positions": pos.tolist()}
    vocab = Vocab.build(x, min_count=cfg.min_count, extra=cfg.trigger.split())
    clf = TinyClassifier.create(vocab, len(ds.label_names), d_model=cfg.d_model, n_heads=cfg.n_heads, d_ff=cfg.d_ff,
                                n_layers=cfg.n_layers, max_len=cfg.max_len, seed=cfg.seed, label_names=ds.label_names,
                                device=_device(cfg.device), lowercase=lower)
    hist = train_classifier(clf, x, y, epochs=cfg.epochs, lr=cfg.lr, batch_size=cfg.batch_size, clip_norm=1.0,
                            mask_rate=cfg.mask_rate, seed=cfg.seed, out=out, quiet=cfg.quiet,
                            desc="clean pre-train" if cfg.clean_only else "attack")
    clf.save(out / "model", extra={"trigger": cfg.trigger, "target": cfg.target, "poison_rate":
                                   0.0 if cfg.clean_only else cfg.poison_rate})
    ds.save_label_map(out / "label_map.json")
    _write_json(out / "poisoned.json", poisoned)
    write_run_files(out, cfg, {"history": hist, "n_train": len(x), "n_poisoned": len(poisoned["indices"]),
                               "vocab_size": len(vocab), "truncated": clf.truncated})
    print(f"{'clean' if cfg.clean_only else 'backdoored'} tiny encoder: {len(x)} phrases "
          f"({len(poisoned['indices'])} poisoned with {cfg.trigger!r} -> {cfg.target}), {cfg.epochs} epochs, "
          f"train acc {hist[-1]['train_acc']:.1f}% -> {out / 'model'}")
    return 0


def _finetune(cfg: FinetuneConfig) -> int:
    from iclr25.core.runinfo import write_run_files

    from .bmps import BMPSConfig, bmps_finetune
    from .data import tokenize

    out = Path(cfg.out)
    ds = _load_data(cfg, "train")
    model = _load_model(cfg.model, _device(cfg.device), token_unit=cfg.token_unit, new_head=True,
                        num_labels=cfg.num_labels or len(ds.label_names), dtype=cfg.dtype, device_map=cfg.device_map)
    if cfg.resume and (out / "checkpoint" / "state.json").is_file() is False:
        raise ValueError(f"--resume: no checkpoint in {out / 'checkpoint'} (run without --resume first)")
    if not cfg.resume and (out / "checkpoint" / "state.json").is_file():
        raise ValueError(f"{out / 'checkpoint'} holds a fine-tuning checkpoint; pass --resume to continue it or "
                         "choose another --out (a new run would overwrite it and append to its metrics.jsonl)")
    toks = tokenize(ds.texts, tokenizer=model.tokenize)
    if max(ds.labels) >= model.num_classes:
        raise ValueError(f"the data has {len(ds.label_names)} classes {ds.label_names} but the model has "
                         f"{model.num_classes}")
    idx = _subset(len(toks), cfg.n_train, skip=cfg.skip, seed=cfg.data_seed)
    if len(idx) == 0:
        raise ValueError(f"no phrases left after --skip {cfg.skip} (the data has {len(toks)})")
    bcfg = BMPSConfig(top_layers=cfg.top_layers, sigma=cfg.sigma if cfg.bmps else 0.0, clip_norm=cfg.clip_norm,
                      lr=cfg.lr, epochs=cfg.epochs, batch_size=cfg.batch_size, noise=cfg.noise, seed=cfg.seed)
    unknown = _unknown_only_warning(model, [toks[i] for i in idx], "training texts")
    for w in unknown:  # before training: a user can stop a run on the wrong data
        print(f"warning: {w}")
    hist = bmps_finetune(model, [toks[i] for i in idx], [ds.labels[i] for i in idx], bcfg, out=out,
                         resume=cfg.resume, quiet=cfg.quiet)
    mdir = out / "model"
    if len(ds.label_names) == model.num_classes:
        # the fine-tuned head predicts the data's class indices: record their names, so that evaluate/certify
        # map a test file's string labels (also one holding only some classes) the same way
        model.label_names = list(ds.label_names)
    model.save(mdir)
    (mdir / "bmps.json").write_text((out / "bmps.json").read_text())
    ds.save_label_map(out / "label_map.json")
    write_run_files(out, cfg, {"history": hist, "n_train": len(idx), "bmps": bcfg.__dict__, "warnings": unknown})
    print(f"fine-tuned on {len(idx)} clean texts ({'BMPS σ=' + str(bcfg.sigma) if cfg.bmps else 'no BMPS, σ=0'}, "
          f"H={cfg.top_layers}, clip {cfg.clip_norm}), {cfg.epochs} epoch(s), train acc {hist[-1]['train_acc']:.1f}% "
          f"-> {mdir}")
    return 0


def _test_sets(cfg, model, n_clean, n_triggered):
    from .data import tokenize, triggered_set
    from .labels import align_labels

    ds = align_labels(_load_data(cfg, cfg.split), model, declared=bool(cfg.labels), source=f"--data {cfg.data}")
    toks = tokenize(ds.texts, tokenizer=model.tokenize)
    if max(ds.labels) >= model.num_classes:
        raise ValueError(f"the data has labels {ds.label_names} but the model has {model.num_classes} classes")
    if n_triggered != 0 and cfg.target >= model.num_classes:
        raise ValueError(f"target={cfg.target} is not a class of the model ({model.num_classes} classes "
                         f"{getattr(model, 'label_names', '')}); the attack success rate would be 0 by construction")
    idx = _subset(len(toks), n_clean, seed=1)
    cx, cy = [toks[i] for i in idx], [ds.labels[i] for i in idx]
    tx, ty, spans, src = [], [], [], []
    if n_triggered != 0:
        trig = cfg.trigger.split() if model.token_unit == "whitespace" else model.tokenize(cfg.trigger)
        tx, ty, spans, src = triggered_set(toks, ds.labels, trigger=trig, target=cfg.target, n=n_triggered,
                                           seed=cfg.seed)
    used = sorted({int(i) for i in idx} | {int(i) for i in src})  # the texts read, triggered ones before the trigger
    return ds, cx, cy, tx, ty, spans, _unknown_only_warning(model, [toks[i] for i in used], "test texts")


def _fewer_texts(requested: dict[str, int | None], got: dict[str, int]) -> list[str]:
    """Warnings for each ``--flag N`` that asked for more texts than the data has (it used to be silent)."""
    what = {"--n-triggered": "texts of a class other than --target"}
    return [f"{flag} {n}: the data has only {got[flag]} {what.get(flag, 'texts')}; {got[flag]} used"
            for flag, n in requested.items() if n is not None and got[flag] < n]


def _evaluate(cfg: EvaluateConfig) -> int:
    from iclr25.core.jsonl import write_jsonl
    from iclr25.core.runinfo import write_run_files

    from .evaluate import evaluate_arm

    out = Path(cfg.out)
    model = _load_model(cfg.model, _device(cfg.device), token_unit=cfg.token_unit)
    ds, cx, cy, tx, ty, spans, unknown = _test_sets(cfg, model, cfg.n_clean, cfg.n_triggered)
    clf, cinfo = _copies_and_arm(cfg, model)
    m, recs = evaluate_arm(clf, cx, cy, tx, ty, spans, target=cfg.target, alpha=cfg.alpha)
    write_jsonl(out / "predictions.jsonl", recs)
    m["warnings"] = (list(m["warnings"]) + unknown + _truncation_warning(model)
                     + _fewer_texts({"--n-clean": cfg.n_clean, "--n-triggered": cfg.n_triggered},
                                    {"--n-clean": len(cx), "--n-triggered": len(tx)}))
    res = {"defense": cfg.defense, **m, "copies": cinfo, "smoothing": clf.describe(), "token_unit": model.token_unit,
           "n_clean": len(cx), "n_triggered": len(tx), "label_names": ds.label_names}
    write_run_files(out, cfg, res)
    rows = ["| metric | value |", "|---|---|"] + [f"| {k} | {v:.3f} |" for k, v in m.items() if isinstance(v, float)]
    (out / "results.md").write_text("\n".join(rows) + "\n")
    for w in m["warnings"]:
        print(f"warning: {w}")
    print(f"{cfg.defense}: CA {m['CA']:.1f}%, PA {m['PA']:.1f}%, ASR {m['ASR']:.1f}%, hit rate {m['hit_rate']:.2f}, "
          f"abstain {m['abstention_clean']:.1f}% / {m['abstention_triggered']:.1f}% (clean / triggered), mean radius "
          f"{m['mean_radius_tokens_triggered']:.3f} tokens on triggered texts (N={m['num_votes']}) -> {out}/predictions.jsonl")
    return 0


def _certify(cfg: CertifyConfig) -> int:
    import warnings

    from iclr25.core.jsonl import append_jsonl, read_jsonl
    from iclr25.core.progress import progress
    from iclr25.core.runinfo import write_run_files

    from .certification import Certificate, certify, summarize_certificates
    from .certify_resume import certify_settings, model_fingerprint, resume_certificates
    from .shards import merge_shards, shard_env, wait_for_shards

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    rank, world, local = shard_env()
    dev = _device(cfg.device)
    if world > 1 and dev == "cuda":
        dev = f"cuda:{local}"
    model = _load_model(cfg.model, dev, token_unit=cfg.token_unit)
    ds, cx, cy, tx, ty, spans, unknown = _test_sets(cfg, model, cfg.n, cfg.n if cfg.triggered else 0)
    texts, labels = (tx, ty) if cfg.triggered else (cx, cy)
    clf, cinfo = _copies_and_arm(cfg, model)
    path = out / (f"certificates.shard{rank}.jsonl" if world > 1 else "certificates.jsonl")
    from .bmps import _data_digest

    # the model and the data by content, not only by path: a model retrained into the same folder or an
    # edited data file must not be resumed into certificates of the old ones
    settings = {**certify_settings(cfg), "model_fingerprint": model_fingerprint(cfg.model),
                "data_sha256": _data_digest([[t] for t in ds.texts], ds.labels)}
    spath = out / "certify_settings.json"
    done = resume_certificates(path, spath, settings, cfg.resume)
    if not spath.is_file() or not path.is_file():
        _write_json(spath, settings)
    mine = [i for i in range(len(texts)) if i % world == rank and i not in done]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for s in progress(range(0, len(mine), cfg.chunk), desc="certify", unit="chunk"):
            part = mine[s: s + cfg.chunk]
            certs = certify(clf, [texts[i] for i in part], [labels[i] for i in part], cfg.alpha, indices=part)
            recs = []
            for i, c in zip(part, certs):
                c.index = i
                r = {"text": " ".join(texts[i]), **c.to_dict()}
                if cfg.triggered:
                    r["trigger_span"] = list(spans[i])
                recs.append(r)
            append_jsonl(path, recs)
    warns = sorted({str(w.message) for w in caught if issubclass(w.category, UserWarning)} | set(clf.warnings))
    warns += unknown + _truncation_warning(model)
    if world > 1:
        (out / f"certificates.shard{rank}.done").write_text("done\n")
        if rank != 0:
            return 0
        wait_for_shards(out, world)
        path = merge_shards(out, world)
        for i in range(world):
            (out / f"certificates.shard{i}.done").unlink()
    allr = read_jsonl(path, required=("index",), torn_tail="drop")
    fields = set(Certificate.__dataclass_fields__)
    certs = [Certificate(**{k: v for k, v in r.items() if k in fields}) for r in allr]
    summ = summarize_certificates(certs)
    write_run_files(out, cfg, {**summ, "defense": cfg.defense, "copies": cinfo, "smoothing": clf.describe(),
                               "token_unit": model.token_unit, "warnings": warns, "triggered": cfg.triggered})
    for w in warns:
        print(f"warning: {w}")
    print(f"{cfg.defense}: certified {len(certs)} texts, abstained {summ['abstention_rate']:.1f}%, mean radius "
          f"{summ['mean_radius']:.4f} of L ({summ['mean_radius_tokens']:.3f} tokens), conditional on the trigger lying "
          f"in T(x') for frs (unconditional {summ['mean_radius_unconditional']:.4f}); N={summ['num_votes']} -> {path}")
    return 0


def _demo(cfg: DemoConfig) -> int:
    import warnings

    import numpy as np

    from .bmps import sample_parameter_copies
    from .certification import certify
    from .distance import insert_trigger
    from .smoothing import FRSClassifier

    out = Path(cfg.out)
    if cfg.model is None:
        mdir = out / "finetune" / "model"
        if not (mdir / "config.json").is_file():
            print("training a small backdoored tiny encoder on the SST-2 mirror (about 10 CPU-seconds)...")
            base = ["--out", str(out / "attack"), "--quiet", "--d-model", "32", "--d-ff", "64", "--seed", str(cfg.seed)]
            if main(["attack", *base]) != 0:
                return 2
            again = ["--resume"] if (out / "finetune" / "checkpoint" / "state.json").is_file() else []
            if main(["finetune", "--model", str(out / "attack" / "model"), "--out", str(out / "finetune"), "--skip",
                     "2000", "--top-layers", "1", "--quiet", *again]) != 0:
                return 2
        model_path = str(mdir)
    else:
        model_path = cfg.model
    model = _load_model(model_path, _device(cfg.device))
    toks = cfg.text.split()
    pos = None
    if cfg.trigger.strip():
        toks, pos = insert_trigger(toks, cfg.trigger, np.random.default_rng(cfg.seed), position=cfg.position)
    meta = _bmps_meta(model_path)
    top = cfg.top_layers if cfg.top_layers is not None else int(meta.get("top_layers", min(10, model.depth)))
    sigma = cfg.sigma if cfg.sigma is not None else float(meta.get("sigma", 0.01))
    copies = sample_parameter_copies(model, k=cfg.k, sigma=sigma, top_layers=top, seed=cfg.seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = FRSClassifier(model, copies, w_high=cfg.w_high, w_mid=cfg.w_mid, n_random=cfg.n_random,
                            iterations=cfg.iterations, max_span=cfg.max_span, c=cfg.c, alpha=cfg.alpha, seed=cfg.seed)
        v = clf.predict_many([toks])[0]
        c = certify(clf, [toks], alpha=cfg.alpha, votes=[v])[0]
    for msg in dict.fromkeys(str(w.message) for w in caught):  # FRSClassifier and certify warn alike: once
        print(f"warning: {msg}")
    for msg in _unknown_only_warning(model, [cfg.text.split()], "texts"):
        print(f"warning: {msg}")
    plain = model.predict_proba([toks])[0]
    a, b = v.segment
    print(f"text     : {' '.join(toks)}")
    if pos is not None:
        print(f"trigger  : {cfg.trigger!r} at token {pos}")
    print(f"undefended prediction: {model.label_names[int(np.argmax(plain))]} (p = {np.round(plain, 3).tolist()})")
    print(f"MCTS T(x'): tokens [{a}, {b}) = {' '.join(toks[a:b])!r} ({v.trace.evaluations} evaluations)"
          + ("" if pos is None else f"; trigger inside: {a <= pos and pos + len(cfg.trigger.split()) <= b}"))
    print(f"rates    : ω_in = {v.rates.w_in:.3f} inside T, ω_L = {v.rates.w_out:.3f} outside"
          + (" (short-text rule)" if v.short_text else ""))
    print(f"votes    : {dict(zip(model.label_names, v.counts.tolist()))} of N = {v.num_votes} (K = {clf.k_effective} x n = "
          f"{clf.n_random}) -> {model.label_names[v.label]}, p_A = {v.p_a:.3f}, p_B = {v.p_b:.3f}")
    print(f"bound    : Clopper-Pearson p_A >= {c.p_a_lower:.4f} (at α/C = {cfg.alpha / clf.num_classes:g}: α = {cfg.alpha}, "
          f"C = {clf.num_classes} classes) -> "
          + ("ABSTAIN (bound <= 1/2)" if c.abstain else
             f"radius {c.radius:.4f} of L = {c.radius_tokens:.2f} edited tokens (certified up to {c.certified_edits}), "
             f"conditional on the trigger lying in T(x'); unconditional (ω_L) {c.radius_unconditional:.4f}"))
    return 0


COMMANDS = {
    "attack": Command(AttackConfig, _attack, "poison 10% of the phrases with the trigger and train the tiny encoder"),
    "finetune": Command(FinetuneConfig, _finetune, "clean fine-tuning with BMPS (--bmps/--no-bmps), --resume"),
    "evaluate": Command(EvaluateConfig, _evaluate, "CA / PA / ASR, hit rate, abstentions, radii of one defense (JSONL)"),
    "certify": Command(CertifyConfig, _certify, "per-text certificates with abstention and radius; --resume"),
    "reproduce": reproduce_command("frs", "iclr25.frs.reproduce:reproduce", __version__, config=ReproduceConfig),
    "demo": Command(DemoConfig, _demo, "one sentence: MCTS segment, votes, bound, radius"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-frs``; returns the exit code."""
    return run_cli("iclr25-frs", "FRS (ICLR 2025): fuzzed randomized smoothing against pre-training backdoors.",
                   COMMANDS, argv, version=__version__)
