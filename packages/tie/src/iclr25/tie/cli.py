"""Console script ``iclr25-tie``: ``train-encoder``, ``embed``, ``evaluate``, ``reproduce``, ``bench``.

Only the config dataclasses are imported at module level, so ``--help`` stays fast (no numpy-heavy
work, no torch/open_clip/transformers).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import BenchConfig, EmbedConfig, EvaluateConfig, ReproduceConfig, TrainEncoderConfig

PROG = "iclr25-tie"
DESCRIPTION = (f"TIE / TIE* (ICLR 2025, iclr25-tie {__version__}): test-time translation of image embeddings "
               "against spurious features in zero-shot CLIP-style classifiers. The default encoder at CPU scale is "
               "the offline pair (frozen all-MiniLM-L6-v2 + linear head for text, a small CNN for images, trained "
               "here on cifar10-subset with an injected green/blue frame); real CLIP models are used from local "
               "weights only (embed --encoder open_clip|hf).")
log = logging.getLogger("iclr25.tie")


def _out(cfg) -> Path:
    return Path(cfg.out)                       # filled by the core's run_cli (runs/tie/<command>)


def _device(name: str) -> str:
    from iclr25.core.seed import choose_device

    return choose_device(name)


def cmd_train_encoder(cfg: TrainEncoderConfig) -> int:
    out = _out(cfg)
    from .offline_pair import PairConfig, n_parameters, train_offline_pair

    pc = PairConfig(seed=cfg.seed, epochs=cfg.epochs, rho=cfg.rho, batch_size=cfg.batch_size, lr=cfg.lr, dim=cfg.dim,
                    caption_mix={"class": cfg.caption_class, "class_colour": cfg.caption_class_colour,
                                 "colour": cfg.caption_colour})
    t0 = time.perf_counter()
    pair = train_offline_pair(pc, out, resume=cfg.resume, data_path=cfg.data, device=_device(cfg.device),
                              quiet=cfg.quiet)
    meta = json.loads((out / "config.json").read_text())
    print(f"train-encoder: {meta['epochs_done']}/{pc.epochs} epochs, {n_parameters(pair)['image']} image-tower "
          f"parameters, {time.perf_counter() - t0:.1f} s; checkpoint in {out}")
    return 0


def _source_rows(cfg: EmbedConfig):
    """(n_rows, encode(idx), y, a, split, prompts, class_names, fingerprint items, encoder)."""
    import numpy as np

    from .embeddings import PromptSet
    from .encoders import OfflinePairEncoder, load_hf_clip, load_open_clip

    dev = _device(cfg.device)
    if cfg.source == "cifar10-frames" and cfg.encoder != "offline-pair":
        raise ValueError("--source cifar10-frames renders 32x32 arrays for the offline pair; use --encoder offline-pair")
    if cfg.source != "cifar10-frames":
        # read and check the metadata and the prompts before a model is loaded or an image embedded
        md, prompts, names = _user_rows(cfg)
    if cfg.encoder == "offline-pair":
        if cfg.checkpoint is None:
            raise ValueError("--encoder offline-pair needs --checkpoint DIR (written by 'iclr25-tie train-encoder')")
        enc = OfflinePairEncoder(cfg.checkpoint, device=dev, batch_size=cfg.batch_size)
    elif cfg.encoder == "open_clip":
        enc = load_open_clip(cfg.model, cfg.pretrained, model_dir=cfg.model_dir, device=dev, batch_size=cfg.batch_size)
    else:
        if cfg.model_dir is None:
            raise ValueError("--encoder hf needs --model-dir (a local folder with config.json; no download is attempted)")
        enc = load_hf_clip(cfg.model_dir, device=dev, batch_size=cfg.batch_size)
    if cfg.source == "cifar10-frames":
        from .offline_pair import CLASS_NAMES, _load_cifar, _rng, draw_colours, render_frames

        _, d = _load_cifar(cfg.data)
        xtr, ytr = d["x_train"], d["y_train"].astype(np.int64)
        xt, yt = d["x_test"], d["y_test"].astype(np.int64)
        pa = draw_colours(ytr, cfg.rho, _rng(cfg.seed, 10**6, 0))
        imgs = np.concatenate([render_frames(xtr, np.array(["green", "blue"])[pa]), render_frames(xt, "green"),
                               render_frames(xt, "blue")])
        y = np.concatenate([ytr, yt, yt])
        a = np.concatenate([pa, np.zeros_like(yt), np.ones_like(yt)])
        split = np.concatenate([np.zeros_like(ytr), 2 * np.ones(2 * yt.size, np.int64)])
        prompts = PromptSet([f"a photo of a {c}." for c in CLASS_NAMES],
                            {0: "a photo with a green frame", 1: "a photo with a blue frame"}, "offline pair")
        items = [f"cifar10-frames rho={cfg.rho} seed={cfg.seed}"]
        return imgs.shape[0], lambda idx: enc.encode_arrays(imgs[idx]), y, a, split, prompts, list(CLASS_NAMES), items, enc
    paths = md.paths
    return (len(paths), lambda idx: enc.encode_images([paths[i] for i in idx]), md.y, md.a, md.split, prompts, names,
            [str(p) for p in paths], enc)


def _user_rows(cfg: EmbedConfig):
    """(metadata, prompts, class names) of --source metadata|celeba, checked against each other."""
    from .embed import check_labels_and_prompts
    from .embeddings import load_prompts, read_celeba, read_metadata

    if cfg.prompts is None:
        raise ValueError("--prompts FILE.json is needed (class prompts and the {attribute_value: prompt} mapping)")
    names = None
    if cfg.class_names is not None:
        if not Path(cfg.class_names).is_file():
            raise FileNotFoundError(f"--class-names {cfg.class_names} does not exist")
        names = [ln.strip() for ln in Path(cfg.class_names).read_text(encoding="utf-8").splitlines() if ln.strip()]
    prompts = load_prompts(cfg.prompts, cfg.prompts_key, class_names=names)
    if cfg.source == "celeba":
        if cfg.images_root is None:
            raise ValueError("--source celeba needs --images-root (the folder with list_attr_celeba.txt)")
        md = read_celeba(cfg.images_root, target=cfg.celeba_target, attribute=cfg.celeba_attribute)
    else:
        if cfg.metadata is None:
            raise ValueError("--source metadata needs --metadata FILE.csv (img_filename, y, a|place, split)")
        md = read_metadata(cfg.metadata, cfg.images_root, y_column=cfg.y_column, a_column=cfg.a_column,
                           split_column=cfg.split_column, filename_column=cfg.filename_column)
    check_labels_and_prompts(md.y, md.a, md.split, prompts, untranslated=cfg.untranslated)
    return md, prompts, names


def cmd_embed(cfg: EmbedConfig) -> int:
    out = _out(cfg)
    from .embed import build_embedding_set, embed_rows, fingerprint

    t0 = time.perf_counter()
    n, encode, y, a, split, prompts, class_names, items, enc = _source_rows(cfg)
    k, m = (int(v) for v in cfg.shard.split("/"))
    emb = embed_rows(n, encode, out, fingerprint=fingerprint(enc.name, items), shard_size=cfg.shard_size,
                     shard=(k, m), quiet=cfg.quiet)
    if emb is None:
        print(f"embed: shard {k}/{m} done in {time.perf_counter() - t0:.1f} s; other shards pending, the last "
              f"process writes {out / 'embeddings.npz'}")
        return 0
    es = build_embedding_set(emb, y, a, split, prompts, enc.encode_text, untranslated=cfg.untranslated,
                             class_names=class_names)
    p = es.save(out / "embeddings.npz")
    print(f"embed: {n} images x {emb.shape[1]} dims ({enc.name}) in {time.perf_counter() - t0:.1f} s; wrote {p}")
    return 0


def cmd_evaluate(cfg: EvaluateConfig) -> int:
    out = _out(cfg)
    from .embeddings import EmbeddingSet
    from .evaluate import evaluate_embedding_set, metrics_table, per_group_table

    es = EmbeddingSet.load(cfg.embeddings, untranslated=cfg.untranslated)
    if cfg.mode == "true" and es.a is None:
        raise ValueError("--mode true (TIE) needs the attribute labels 'a' in the embeddings file; use --mode inferred")
    methods = ["zero_shot", *(["tie"] if cfg.mode in ("all", "true") else []),
               *(["tie_star"] if cfg.mode in ("all", "inferred") else []), "projection"]
    res = evaluate_embedding_set(es, pool_split=cfg.pool_split, methods=methods, untranslated=cfg.untranslated,
                                 empty_group=cfg.empty_group)
    out.mkdir(parents=True, exist_ok=True)
    md = [f"# TIE evaluation of {cfg.embeddings}", "", f"pool: split {cfg.pool_split!r} ({res['n_pool']} images), "
          f"test: {res['n_test']} images; λ: {json.dumps(res['lambda'])}; â accuracy: {res['a_hat_accuracy']}", "",
          metrics_table(res), "", per_group_table(res), ""]
    empty = res["methods"]["zero_shot"]["empty_groups"]
    if empty:
        md.append(f"Empty test groups (left out of WGA): {empty}")
    (out / "evaluation.md").write_text("\n".join(md))
    js = {"lambda": res["lambda"],
          "a_hat_accuracy": res["a_hat_accuracy"], "skipped": res["skipped"], "n_pool": res["n_pool"],
          "n_test": res["n_test"], "methods": {
              m: {"worst_group": r["worst_group"], "worst_group_key": list(r["worst_group_key"]), "average": r["average"],
                  "per_group": {f"y{k[0]}_a{k[1]}": v for k, v in r["per_group"].items()},
                  "sizes": {f"y{k[0]}_a{k[1]}": v for k, v in r["sizes"].items()},
                  "empty_groups": [list(g) for g in r["empty_groups"]]} for m, r in res["methods"].items()}}
    from iclr25.core.runinfo import write_run_files

    write_run_files(out, cfg, js)
    print("\n".join(md[4:]))
    best = res["methods"].get("tie") or res["methods"].get("tie_star")
    zs = res["methods"]["zero_shot"]
    print(f"evaluate: WGA zero-shot {100 * zs['worst_group']:.2f} -> "
          f"{'TIE' if 'tie' in res['methods'] else 'TIE*'} {100 * best['worst_group']:.2f}; wrote {out / 'results.json'}")
    return 0


def cmd_bench(cfg: BenchConfig) -> int:
    out = _out(cfg)
    from .bench import run_bench

    res = run_bench(cfg)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(res, indent=1))
    for k, v in res.items():
        if not isinstance(v, dict):
            print(f"{k}: {v}")
    print(f"bench: TIE / zero-shot time {res['tie_over_zero_shot']:.2f}x (target <= 1.5x)"
          + (f"; TIE share of offline-pair embedding time {100 * res['tie_share_of_embedding']:.2f} % (target < 5 %)"
             if "tie_share_of_embedding" in res else ""))
    return 0


COMMANDS = {
    "train-encoder": Command(TrainEncoderConfig, cmd_train_encoder,
                             "train the offline CLIP-style pair (default encoder) on cifar10-subset; --resume"),
    "embed": Command(EmbedConfig, cmd_embed, "images + prompts -> EmbeddingSet .npz (--encoder offline-pair|open_clip|hf; "
                     "local weights only; resumable per shard)"),
    "evaluate": Command(EvaluateConfig, cmd_evaluate, "EmbeddingSet .npz -> zero-shot / TIE / TIE* / projection, per group"),
    "reproduce": reproduce_command("tie", "iclr25.tie.reproduce:reproduce", __version__, config=ReproduceConfig,
                                   help="reproduce the paper's claims at CPU scale (--quick: ~3 min on 2 cores)"),
    "bench": Command(BenchConfig, cmd_bench, "time zero-shot vs TIE (100k x 768, C=62, A=5) and TIE's share of embedding"),
}


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(PROG, DESCRIPTION, COMMANDS, argv, version=__version__)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
