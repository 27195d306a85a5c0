"""``iclr25-agpd``: poison / train / detect / reproduce / demo.

    iclr25-agpd poison --attack badnets --ratio 0.1 --target 0 --data digits --out runs/bd
    iclr25-agpd train --data runs/bd --epochs 15 --out runs/bd/model
    iclr25-agpd detect --data runs/bd --model runs/bd/model --agpd.variant paper
    iclr25-agpd detect-folder --data train_folder --clean clean_folder --model runs/bd/model --amp bf16
    iclr25-agpd reproduce --quick --out results/agpd
    iclr25-agpd demo
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import (
    AGPDConfig,
    DemoConfig,
    DetectConfig,
    DetectFolderConfig,
    PoisonConfig,
    ReproduceConfig,
    TrainConfig,
)

_KEYS = {"poisoned.pt": ("x_bd", "y_bd", "poison_mask", "x_clean", "y_clean", "x_eval", "y_eval", "meta"),
         "model.pt": ("model", "meta")}

__all__ = ["main"]



# torch is imported inside the commands: `iclr25-agpd --help` stays light.


def _device(name: str) -> str:
    from iclr25.core import choose_device

    return str(choose_device(name))


def _load(path: Path, what: str, hint: str, kind: str | None = None) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {what} (run '{hint}' first)")
    import torch

    try:
        d = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # unpickling errors come in many types
        raise ValueError(f"{path} is not {what} written by '{hint}' ({type(e).__name__}: {e}); "
                         f"re-run '{hint}'") from None
    missing = [k for k in _KEYS.get(kind or path.name, ()) if not isinstance(d, dict) or k not in d]
    if missing:
        raise ValueError(f"{path} is not {what} written by '{hint}': missing {missing}; re-run '{hint}'")
    return d


def _model_file(path: Path) -> Path:
    """``--model``: a model.pt file written by 'train', or the folder holding one."""
    if path.is_dir():
        f = path / "model.pt"
        if not f.is_file():
            raise FileNotFoundError(f"--model {path}: the folder has no model.pt (give the folder or the model.pt "
                                    "written by 'iclr25-agpd train')")
        return f
    if not path.exists():
        raise FileNotFoundError(f"--model {path} does not exist: give the folder or the model.pt written by "
                                "'iclr25-agpd train'")
    return path


def cmd_poison(cfg: PoisonConfig) -> int:
    import torch

    from .data import load_data, split_clean_set
    from .pipeline import poison_dataset

    data = load_data(cfg.data, cfg.seed)
    xc, yc, xe, ye = split_clean_set(data.x_test, data.y_test, cfg.clean_per_class, cfg.seed)
    x_bd, y_bd, mask, trig, tgt = poison_dataset(data, cfg.attack, cfg.ratio, cfg.target, cfg.alpha,
                                                 cfg.patch_size, cfg.seed)
    cfg.out.mkdir(parents=True, exist_ok=True)
    state = {"x_bd": x_bd, "y_bd": y_bd, "poison_mask": mask, "x_clean": xc, "y_clean": yc, "x_eval": xe,
             "y_eval": ye, "meta": {**{k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
                                    "num_classes": data.num_classes, "target": -1 if tgt is None else tgt}}
    if trig is not None:
        state["x_eval_triggered"] = trig(xe)
    torch.save(state, cfg.out / "poisoned.pt")
    print(f"poisoned {int(mask.sum())}/{len(mask)} samples ({cfg.attack}, target {tgt}) -> {cfg.out / 'poisoned.pt'}")
    return 0


def cmd_train(cfg: TrainConfig) -> int:
    import torch

    from .pipeline import build_model
    from .train import accuracy, save_checkpoint, train_classifier

    d = _load(cfg.data / "poisoned.pt", "the poisoned data set", "iclr25-agpd poison")
    meta = d["meta"]
    torch.manual_seed(cfg.seed)  # the initial weights too: two runs with the same --seed are identical
    net = build_model(cfg.model, meta["num_classes"], d["x_bd"].shape[1])
    cfg.out.mkdir(parents=True, exist_ok=True)
    train_classifier(net, d["x_bd"], d["y_bd"], epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                     momentum=cfg.momentum, weight_decay=cfg.weight_decay, seed=cfg.seed, augment=cfg.augment,
                     device=_device(cfg.device), checkpoint=cfg.out / "checkpoint.pt", resume=cfg.resume,
                     progress=not cfg.quiet)
    net.cpu()
    res = {"acc": accuracy(net, d["x_eval"], d["y_eval"])}
    if "x_eval_triggered" in d:
        from .gradients import predict

        t = meta["target"]
        keep = d["y_eval"] != t if t >= 0 else torch.ones_like(d["y_eval"], dtype=torch.bool)
        want = torch.full_like(d["y_eval"], t) if t >= 0 else (d["y_eval"] + 1) % meta["num_classes"]
        res["asr"] = float((predict(net, d["x_eval_triggered"][keep]) == want[keep]).float().mean())
    save_checkpoint(cfg.out / "model.pt", net, epoch=cfg.epochs,
                    meta={"model": cfg.model, "num_classes": meta["num_classes"], "in_channels": d["x_bd"].shape[1]})
    (cfg.out / "train.json").write_text(json.dumps({**res, "config": asdict(cfg)}, indent=1, default=str))
    print(f"trained {cfg.model}: clean accuracy {res['acc']:.4f}" + (f", ASR {res['asr']:.4f}" if "asr" in res else "")
          + f" -> {cfg.out / 'model.pt'}")
    return 0


def cmd_detect(cfg: DetectConfig) -> int:
    from .baselines import activation_clustering, spectral_signatures
    from .detector import AGPD
    from .gradients import penultimate_features
    from .metrics import detection_metrics
    from .pipeline import build_model

    d = _load(cfg.data / "poisoned.pt", "the poisoned data set", "iclr25-agpd poison")
    m = _load(_model_file(cfg.model), "the trained model", "iclr25-agpd train", kind="model.pt")
    lacks = [k for k in ("model", "num_classes", "in_channels") if not isinstance(m["meta"], dict) or k not in m["meta"]]
    if lacks:
        raise ValueError(f"{_model_file(cfg.model)} is not a model.pt written by 'iclr25-agpd train' (its meta lacks "
                         f"{lacks}; a training checkpoint.pt?): give the model.pt or its folder, or finish the "
                         "training with 'iclr25-agpd train ... --resume'")
    net = build_model(m["meta"]["model"], m["meta"]["num_classes"], m["meta"]["in_channels"])
    try:
        net.load_state_dict(m["model"])
    except RuntimeError as e:
        raise ValueError(f"{_model_file(cfg.model)} does not fit a '{m['meta']['model']}' model with "
                         f"{m['meta']['num_classes']} classes ({str(e).splitlines()[0]}); re-run 'iclr25-agpd train'") from None
    if d["x_bd"].shape[1] != m["meta"]["in_channels"]:
        raise ValueError(f"the data set has {d['x_bd'].shape[1]} channels but the model was trained on "
                         f"{m['meta']['in_channels']}; detect with the model trained on this data set")
    net.to(_device(cfg.device)).eval()
    res = AGPD(net, config=cfg.agpd).detect(d["x_bd"], d["y_bd"], d["x_clean"], d["y_clean"],
                                           num_classes=m["meta"]["num_classes"], progress=not cfg.quiet)
    out = {"agpd": {**detection_metrics(d["poison_mask"], res.poison_mask), **res.summary()}, "baselines": {}}
    if cfg.baselines:
        feats = penultimate_features(net, d["x_bd"])
        ratio = float(d["meta"]["ratio"])
        for b in cfg.baselines:
            if b == "spectral":
                flag = spectral_signatures(feats, d["y_bd"], ratio)
            elif b == "ac":
                flag = activation_clustering(feats, d["y_bd"])
            else:
                raise ValueError(f"--baselines: unknown baseline {b!r}; choose from spectral, ac")
            out["baselines"][b] = detection_metrics(d["poison_mask"], flag)
    dest = cfg.out
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "detection.json").write_text(json.dumps(out, indent=1))
    (dest / "poison_mask.txt").write_text("\n".join(str(int(v)) for v in res.poison_mask.tolist()) + "\n")
    a = out["agpd"]
    line = (f"AGPD ({cfg.agpd.variant}): targets {res.target_classes} at {res.layer}; flagged {a['n_flagged']}; "
            f"TPR {a['TPR']:.4f} FPR {a['FPR']:.4f} F1 {a['F1']:.4f}")
    for b, v in out["baselines"].items():
        line += f" | {b}: TPR {v['TPR']:.4f} FPR {v['FPR']:.4f}"
    print(line)
    return 0


def _folder_model(path: Path, arch: str, num_classes: int | None, channels: int):
    import torch

    from .pipeline import build_model

    f = path / "model.pt" if path.is_dir() else path
    if not f.is_file():
        raise FileNotFoundError(f"{f} not found: a model.pt written by 'iclr25-agpd train' or a state_dict file")
    try:
        d = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:  # unpickling errors come in many types
        raise ValueError(f"{f} is not a checkpoint or state_dict ({type(e).__name__}: {e})") from None
    if isinstance(d, dict) and "model" in d and isinstance(d.get("meta"), dict) and "model" in d["meta"]:
        meta = d["meta"]
        kind = meta["model"] if arch == "auto" else arch
        k, c = num_classes or meta["num_classes"], meta.get("in_channels", channels)
        state = d["model"]
    else:
        if arch == "auto":
            raise ValueError(f"{f} is a plain state_dict: pass --arch small|preactresnet18 (and --num-classes)")
        state = d.get("state_dict", d.get("model", d)) if isinstance(d, dict) else d
        kind, k, c = arch, num_classes, channels
    if c != channels:
        raise ValueError(f"the model takes {c}-channel images but --channels is {channels}")
    if k is None:
        raise ValueError("--num-classes is needed for a plain state_dict")
    net = build_model(kind, int(k), int(c))
    try:
        net.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as e:
        raise ValueError(f"{f} does not fit a '{kind}' model with {k} classes and {c} channels "
                         f"({str(e).splitlines()[0]})") from None
    return net


def _per_class_subset(ds, per_class: int, seed: int = 0):
    import numpy as np
    import torch

    targets = getattr(ds, "targets", None)
    if targets is None:
        targets = getattr(ds, "labels", None)
    if targets is None:
        targets = [ds[i][1] for i in range(len(ds))]
    t = np.asarray(targets)
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.choice(np.flatnonzero(t == k), min(per_class, int((t == k).sum())), replace=False)
                          for k in np.unique(t)])
    return torch.utils.data.Subset(ds, sorted(idx.tolist()))


def cmd_detect_folder(cfg: DetectFolderConfig) -> int:
    import torch

    from .detector import AGPD
    from .metrics import detection_metrics
    from .vision import image_folder, make_loader, sample_paths, torchvision_dataset

    tf = dict(image_size=cfg.image_size, channels=cfg.channels, mean=cfg.mean, std=cfg.std)
    if cfg.torchvision is not None:
        ds = torchvision_dataset(cfg.torchvision, cfg.data, train=True, **tf)
        classes = list(getattr(ds, "classes", []))
        clean = (image_folder(cfg.clean, class_to_idx=getattr(ds, "class_to_idx", None), **tf)
                 if cfg.clean is not None else
                 _per_class_subset(torchvision_dataset(cfg.torchvision, cfg.data, train=False, **tf),
                                   cfg.clean_per_class))
    else:
        if cfg.clean is None:
            raise ValueError("--clean FOLDER (the defender's clean ImageFolder) is required without --torchvision")
        ds = image_folder(cfg.data, **tf)
        classes = list(ds.classes)
        clean = image_folder(cfg.clean, class_to_idx=ds.class_to_idx, **tf)
    truth = None
    if cfg.truth is not None:  # checked before the (long) detection, not after it
        if not cfg.truth.is_file():
            raise FileNotFoundError(f"--truth {cfg.truth} does not exist")
        vals = cfg.truth.read_text().split()
        bad = next(((i, v) for i, v in enumerate(vals) if v not in ("0", "1")), None)
        if bad is not None:
            raise ValueError(f"--truth {cfg.truth}: line {bad[0] + 1}: {bad[1]!r} is not 0 or 1 (one 0/1 line per image)")
        truth = torch.tensor([v == "1" for v in vals], dtype=torch.bool)
        if len(truth) != len(ds):
            raise ValueError(f"--truth {cfg.truth} has {len(truth)} entries but the data set has {len(ds)} images")
    net = _folder_model(cfg.model, cfg.arch, cfg.num_classes or (len(classes) or None), cfg.channels)
    net.to(_device(cfg.device)).eval()
    loader = make_loader(ds, cfg.batch_size, cfg.workers)
    cloader = make_loader(clean, cfg.batch_size, cfg.workers)
    det = AGPD(net, layers=list(cfg.layers) if cfg.layers else None, config=cfg.agpd)
    K = net.linear.out_features if hasattr(net, "linear") else None
    res = det.detect(loader, None, cloader, None, batch_size=cfg.batch_size, num_classes=K,
                     progress=not cfg.quiet, amp=None if cfg.amp == "off" else cfg.amp)
    out = {"agpd": res.summary(), "n": len(res.poison_mask), "classes": classes,
           "streamed": {"batch_size": cfg.batch_size, "workers": cfg.workers, "amp": cfg.amp}}
    if truth is not None:
        out["metrics"] = detection_metrics(truth, res.poison_mask)
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "detection.json").write_text(json.dumps(out, indent=1))
    (cfg.out / "poison_mask.txt").write_text("\n".join(str(int(v)) for v in res.poison_mask.tolist()) + "\n")
    paths = sample_paths(ds)
    if paths is not None:
        flagged = [p for p, f in zip(paths, res.poison_mask.tolist()) if f]
        (cfg.out / "flagged.txt").write_text("".join(p + "\n" for p in flagged))
    line = (f"AGPD ({cfg.agpd.variant}) on {len(res.poison_mask)} images: targets {res.target_classes} at "
            f"{res.layer}; flagged {int(res.poison_mask.sum())}")
    if "metrics" in out:
        m = out["metrics"]
        line += f"; TPR {m['TPR']:.4f} FPR {m['FPR']:.4f} F1 {m['F1']:.4f}"
    print(line + f" -> {cfg.out}")
    return 0


def cmd_demo(cfg: DemoConfig) -> int:
    from .detector import detect_from_gradients
    from .metrics import detection_metrics
    from .synthetic import synthetic_gradients

    G, Y, C, YC, P = synthetic_gradients(cfg.n_per_class, cfg.num_classes, cfg.dim, cfg.target,
                                         cfg.poison_fraction, seed=cfg.seed)
    res = detect_from_gradients({"synthetic": G}, Y, {"synthetic": C}, YC, AGPDConfig(variant=cfg.variant))
    print("class  rho     z")
    for k in range(cfg.num_classes):
        print(f"{k:5d}  {res.rho[0, k]:.4f}  {res.z[0, k]:9.2f}" + ("  <- target" if k in res.target_classes else ""))
    m = detection_metrics(P, res.poison_mask)
    print(f"demo ({cfg.variant}): targets {res.target_classes}; TPR {m['TPR']:.4f} FPR {m['FPR']:.4f} F1 {m['F1']:.4f}")
    return 0


COMMANDS = {
    "poison": Command(PoisonConfig, cmd_poison, "poison a data set's training split (BadNets / Blended)"),
    "train": Command(TrainConfig, cmd_train, "train a classifier on a poisoned data set (checkpoints, --resume)"),
    "detect": Command(DetectConfig, cmd_detect, "run AGPD (+ Spectral / AC baselines) on a trained model"),
    "detect-folder": Command(DetectFolderConfig, cmd_detect_folder,
                             "run AGPD on an ImageFolder / torchvision data set, streamed (needs [vision])",
                             {"--num-workers": "--workers"}),
    "reproduce": reproduce_command("agpd", "iclr25.agpd.reproduce:reproduce", __version__, config=ReproduceConfig,
                                   help="reproduce the paper's claims (--quick: digits, 2 seeds)"),
    "demo": Command(DemoConfig, cmd_demo, "AGPD on synthetic gradients with a planted poisoned cluster"),
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``iclr25-agpd`` console script; returns the exit code."""
    return run_cli("iclr25-agpd", "AGPD: activation-gradient based poisoned sample detection (ICLR 2025).",
                   COMMANDS, argv, version=__version__)
