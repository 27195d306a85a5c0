"""Console script ``iclr25-prereq-tune``: ``train-knowledge``, ``train-skill``, ``evaluate``,
``generate``, ``reproduce``, ``demo``.

Only the config dataclasses are imported at module level (``--help`` loads no torch).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import (
    DemoConfig,
    EvaluateConfig,
    GenerateConfig,
    PrereqReproduceConfig,
    TrainKnowledgeConfig,
    TrainSkillConfig,
)

PROG = "iclr25-prereq-tune"
SLUG = "prereq-tune"
DESCRIPTION = (f"Prereq-Tune (ICLR 2025; iclr25-prereq-tune {__version__}): train knowledge LoRAs on the facts behind "
               "the task data (train-knowledge), train a skill LoRA with them active and frozen (train-skill: "
               "multi-version routing, mixed real/fictitious mode, alternating groups), deploy the skill LoRA alone "
               "(evaluate, generate) and plug a knowledge LoRA back in for knowledge-controlled answers. "
               "--model tiny is the CPU-scale M0 of the synthetic world.")
log = logging.getLogger("iclr25.prereq_tune")


# ------------------------------------------------------------------------------------------------
# shared helpers


def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 or "ACCELERATE_DYNAMO_BACKEND" in os.environ and \
        int(os.environ.get("WORLD_SIZE", "1")) > 1


def _accelerator(cfg: Any):
    if not (cfg.accelerate or _distributed()):
        return None
    try:
        from accelerate import Accelerator
    except ImportError:
        raise ImportError("multi-process training needs accelerate: pip install 'iclr25-prereq-tune[scale]'") from None
    return Accelerator(gradient_accumulation_steps=cfg.grad_accum, cpu=cfg.device == "cpu")


def _load_model(cfg: Any, device: str | None = None) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(model, tokenizer, prompt format, info)."""
    from iclr25.core.seed import choose_device

    from .data import OFFICIAL_FORMAT, PromptFormat
    from .world import TINY_FORMAT

    dev = device or choose_device(cfg.device)
    if cfg.model == "tiny":
        from dataclasses import replace

        from .experiment import QUICK
        from .model import pretrain_m0
        from .world import make_world

        s = QUICK
        world = make_world(s.n_real, s.n_fict, s.n_versions, cfg.world_seed, n_templates=s.n_templates,
                           n_passages=s.n_passages)
        model, tok, path, info = pretrain_m0(world, replace(s.m0, seed=cfg.world_seed), progress=not cfg.quiet)
        model = model.to(dev)
        fmt = TINY_FORMAT
        info = {"model": "tiny", "path": str(path), "m0_cached": info["cached"]}
    else:
        from .model import load_base_model

        model, tok = load_base_model(cfg.model, device=dev, dtype=cfg.dtype, bf16=cfg.bf16, device_map=cfg.device_map,
                                     load_in_4bit=cfg.load_in_4bit, load_in_8bit=cfg.load_in_8bit,
                                     gradient_checkpointing=cfg.gradient_checkpointing,
                                     trust_remote_code=cfg.trust_remote_code)
        fmt = OFFICIAL_FORMAT
        info = {"model": cfg.model}
    tmpl = getattr(cfg, "prompt_template", None)
    if tmpl is not None:
        fmt = PromptFormat(tmpl, cfg.answer_template)
    elif getattr(cfg, "answer_template", " {answer}") != " {answer}":
        fmt = PromptFormat(fmt.prompt, cfg.answer_template)
    return model, tok, fmt, info


def _lora(cfg: Any, model: Any):
    from .lora import GPT2_TARGETS, LLAMA_TARGETS, LoraSpec, _uses_conv1d

    targets = cfg.target_modules
    if targets is None:
        targets = GPT2_TARGETS if _uses_conv1d(model, GPT2_TARGETS) else LLAMA_TARGETS
    return LoraSpec(cfg.r, cfg.alpha, cfg.lora_dropout, tuple(targets), None)


def _train_args(cfg: Any):
    from .training import TrainArgs

    return TrainArgs(epochs=cfg.epochs, lr=cfg.lr, batch_size=cfg.batch_size, grad_accum=cfg.grad_accum,
                     weight_decay=cfg.weight_decay, beta2=cfg.beta2, warmup_ratio=cfg.warmup_ratio,
                     max_length=cfg.max_length, seed=cfg.seed, save_every=cfg.checkpoint_every)


def _write(out: Path, cfg: Any, results: dict[str, Any]) -> None:
    from iclr25.core.runinfo import write_run_files

    write_run_files(out, cfg, results)


def _main_process(acc: Any) -> bool:
    return acc is None or acc.is_main_process


#: Flags that may change across ``--resume``: where output goes, how it is shown, the hardware, and how often
#: checkpoints are written (none of them changes what is trained), and `--epochs` (training on is what
#: `--resume --epochs N` is for).
_RESUME_FREE = frozenset({"out", "resume", "quiet", "threads", "device", "checkpoint_every", "accelerate", "epochs"})
_SETTINGS_FILE = "run_settings.json"


def _early_checks(cfg: Any) -> None:
    """Every float/int hyper-parameter of a training command, checked before any model loads (the same
    checks :class:`~iclr25.prereq_tune.training.TrainArgs` / :class:`~iclr25.prereq_tune.lora.LoraSpec`
    make later; for an 8B model the load takes minutes)."""
    from .data import finite_in
    from .lora import LoraSpec

    _train_args(cfg)
    LoraSpec(cfg.r, cfg.alpha, cfg.lora_dropout, tuple(cfg.target_modules or ("c_attn",)), None)
    if hasattr(cfg, "real_weight"):
        finite_in("real_weight", cfg.real_weight, 0.0)


def _file_sha(p: Path) -> str | None:
    import hashlib

    if p.is_file():
        return hashlib.sha256(p.read_bytes()).hexdigest()
    if p.is_dir():      # an adapter folder: its weights
        w = p / "adapter_model.safetensors"
        return hashlib.sha256(w.read_bytes()).hexdigest() if w.is_file() else None
    return None


def _run_settings(cfg: Any) -> dict[str, Any]:
    """The settings ``--resume`` must not change (JSON types): every flag but :data:`_RESUME_FREE`, with data
    files and adapter folders resolved and hashed (a replaced file is another run)."""
    d = {k: v for k, v in asdict(cfg).items() if k not in _RESUME_FREE}
    if getattr(cfg, "data", None) is not None:
        d["data"] = str(Path(cfg.data).resolve())
        d["data_sha256"] = _file_sha(Path(cfg.data))
    if getattr(cfg, "knowledge", None):
        d["knowledge"] = [str(Path(k).resolve()) for k in cfg.knowledge]
        d["knowledge_sha256"] = [_file_sha(Path(k)) for k in cfg.knowledge]
    if cfg.model != "tiny" and Path(cfg.model).exists():
        d["model"] = str(Path(cfg.model).resolve())
    return json.loads(json.dumps(d, default=str))


def _resume_guard(cfg: Any, out: Path, *, free: Sequence[str] = ()) -> None:
    """Record a fresh run's settings in ``OUT/run_settings.json``; on ``--resume`` refuse any changed setting,
    naming each ``old -> new``, before the model loads.

    The trainer's checkpoint fingerprint covers the data and the frozen tensors only, and ``train-knowledge
    --resume`` skipped finished adapters without looking at the flags, so ``--resume --lr 0.5`` or ``--r 8``
    was silently mixed into (or silently ignored by) the run while ``config.json`` recorded the new values.

    Raises:
        ValueError: ``--resume`` with changed settings, or a damaged settings file.
    """
    from iclr25.core.config import guard_resume_settings

    guard_resume_settings(out, _run_settings(cfg), resume=cfg.resume, ignore=free, filename=_SETTINGS_FILE,
                          write=os.environ.get("RANK", "0") == "0")


def _check_checkpoint(last: Path) -> None:
    """Open every file of a ``--resume`` checkpoint (``trainer_state.json``, ``adapter.safetensors``,
    ``optim.pt`` with ``weights_only=True``) before training resumes, so a truncated or damaged one is reported
    by name with the fix instead of as a bare JSON/safetensors/unpickling message.

    Raises:
        ValueError: a damaged file (named).
    """
    from .training import STATE_FILE

    fix = "run without --resume (it starts over in the same --out) or start a new --out"
    f = last / STATE_FILE
    if f.is_file():
        try:
            state = json.loads(f.read_text(encoding="utf-8"))
            if not isinstance(state, dict) or "step" not in state:
                raise ValueError("no 'step' entry")
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"--resume: {f} is damaged or truncated ({e}); {fix}") from None
    if (last / "accelerate").is_dir():
        return
    for name in ("adapter.safetensors", "optim.pt"):
        g = last / name
        if not g.is_file():
            raise ValueError(f"--resume: {g} is missing (an incomplete checkpoint); {fix}")
        try:
            if name.endswith(".safetensors"):
                from safetensors import safe_open

                with safe_open(str(g), "pt") as h:
                    for k in h.keys():
                        h.get_slice(k)
            else:
                import torch

                torch.load(g, weights_only=True, map_location="cpu")
        except Exception as e:      # truncated file / header error / refused pickle
            raise ValueError(f"--resume: {g} is damaged or truncated ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''}); {fix}") from None


def _check_tiny_vocab(tok: Any, fields: Sequence[tuple[str, str]], source: str) -> None:
    """``--model tiny`` has a word-level tokenizer over the synthetic world's lowercase words (punctuation
    separated by spaces); any other word becomes ``<unk>``. Refuse such input instead of silently training or
    evaluating on ``<unk>`` tokens.

    Args:
        fields: ``(where, text)`` pairs, ``where`` naming the row and field.

    Raises:
        ValueError: a text has words outside the vocabulary (the first such row is named).
    """
    unk = tok.unk_token_id
    if unk is None:
        return
    for where, text in fields:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if unk in ids:
            words = [w for w in text.split() if unk in tok(w, add_special_tokens=False)["input_ids"]]
            raise ValueError(f"{source} {where}: {words[:5]} are not in the vocabulary of --model tiny (the "
                             "synthetic world's lowercase words, punctuation separated by spaces, e.g. 'where was "
                             "fipe nuvir born ?'); use the world files `demo` writes, or give your own --model")


# ------------------------------------------------------------------------------------------------
# commands


def cmd_train_knowledge(cfg: TrainKnowledgeConfig) -> int:
    import torch

    from .data import parse_version, read_hub_split, read_knowledge_jsonl
    from .lora import adapter_names, add_knowledge_adapter, save_adapter
    from .training import checkpoint_exists, train_knowledge_adapter

    if (cfg.data is None) == (cfg.hub_config is None):
        raise ValueError("give exactly one of --data FILE.jsonl or --hub-config CONFIG (a local copy of Shiyu-Lab/Prereq_Tune)")
    _early_checks(cfg)
    _resume_guard(cfg, Path(cfg.out), free=("names",))
    rows = (read_knowledge_jsonl(cfg.data, name_template=cfg.name_template) if cfg.data is not None else
            read_hub_split(cfg.hub_config, cfg.hub_split, name_template=cfg.name_template))
    by_name: dict[str, list[str]] = {}
    for r in rows:
        by_name.setdefault(r.name, []).append(r.text)
    if cfg.names is not None:
        missing = [n for n in cfg.names if n not in by_name]
        if missing:
            raise ValueError(f"--names {missing} have no rows in the data (it has {sorted(by_name)})")
        by_name = {n: by_name[n] for n in cfg.names}
    acc = _accelerator(cfg)
    model, tok, _, info = _load_model(cfg, str(acc.device) if acc is not None else None)
    if cfg.model == "tiny":
        _check_tiny_vocab(tok, [(f"row {i} 'text'", r.text) for i, r in enumerate(rows, 1)], str(cfg.data or cfg.hub_config))
    spec = _lora(cfg, model)
    args = _train_args(cfg)
    out = Path(cfg.out)
    results: dict[str, Any] = {"model": info, "adapters": {}}
    t0 = time.perf_counter()
    for k, (name, texts) in enumerate(by_name.items()):
        dest = out / name
        if cfg.resume and (dest / "adapter_config.json").is_file() and (dest / "prereq_tune.json").is_file():
            log.info("resume: %s is already trained (%s); skipping", name, dest)
            results["adapters"][name] = {"path": str(dest), "skipped": "already trained"}
            continue
        torch.manual_seed(cfg.seed * 1000 + k)
        if name in adapter_names(model):
            raise ValueError(f"adapter {name!r} twice")
        model = add_knowledge_adapter(model, name, spec)
        ckpt = out / "checkpoints" / name
        resume = cfg.resume and checkpoint_exists(ckpt)
        if resume:
            _check_checkpoint(ckpt / "last")
        r = train_knowledge_adapter(model, tok, name, texts, args, checkpoint_dir=ckpt, resume=resume,
                                    accelerator=acc, quiet=cfg.quiet)
        try:
            version = parse_version(name)
        except ValueError:
            version = None
        if _main_process(acc):
            save_adapter(model, name, dest, role="knowledge",
                         extra={"version": version, "n_texts": len(texts), "lora": asdict(spec), "train": asdict(args)})
        results["adapters"][name] = {"path": str(dest), "n_texts": len(texts), **r.summary()}
    results["seconds"] = round(time.perf_counter() - t0, 2)
    if _main_process(acc):
        _write(out, cfg, results)
    print(f"train-knowledge: {len(by_name)} knowledge LoRA(s) {list(by_name)} saved under {out} "
          f"({results['seconds']:.1f} s; base frozen and unchanged)")
    return 0


def _load_knowledge(model: Any, paths: Sequence[Path], names: Sequence[str] | None) -> tuple[Any, list[str]]:
    from .lora import load_adapter, read_adapter_meta

    if names is not None and len(names) != len(paths):
        raise ValueError(f"--names has {len(names)} names for {len(paths)} --knowledge folders")
    out = []
    for i, p in enumerate(paths):
        meta = read_adapter_meta(p)
        name = names[i] if names is not None else (meta.get("name") or Path(p).name)
        model = load_adapter(model, p, name, role="knowledge")
        out.append(name)
    return model, out


def _skill_rows(cfg: Any):
    from .data import read_hub_split, read_skill_jsonl

    if (cfg.data is None) == (cfg.hub_config is None):
        raise ValueError("give exactly one of --data FILE.jsonl or --hub-config CONFIG (a local copy of Shiyu-Lab/Prereq_Tune)")
    return read_skill_jsonl(cfg.data) if cfg.data is not None else read_hub_split(cfg.hub_config, cfg.hub_split)


def cmd_train_skill(cfg: TrainSkillConfig) -> int:
    import torch

    from .lora import add_skill_adapter, save_adapter
    from .training import checkpoint_exists, train_skill_adapter

    _early_checks(cfg)
    out = Path(cfg.out)
    ckpt = out / "checkpoints" / cfg.skill_name
    if cfg.resume and not checkpoint_exists(ckpt):
        raise FileNotFoundError(f"--resume: no checkpoint in {ckpt}; run without --resume")
    if cfg.resume:
        _check_checkpoint(ckpt / "last")
    examples = _skill_rows(cfg)
    _resume_guard(cfg, out)
    acc = _accelerator(cfg)
    model, tok, fmt, info = _load_model(cfg, str(acc.device) if acc is not None else None)
    if cfg.model == "tiny":
        _check_tiny_vocab(tok, [(f"row {i} '{k}'", t) for i, e in enumerate(examples, 1)
                                for k, t in (("question", e.question), ("answer", e.answer))],
                          str(cfg.data or cfg.hub_config))
    model, names = _load_knowledge(model, cfg.knowledge, cfg.names)
    spec = _lora(cfg, model.get_base_model() if hasattr(model, "get_base_model") else model)
    torch.manual_seed(cfg.seed * 1000 + 500)
    model = add_skill_adapter(model, cfg.skill_name, spec)
    resume = cfg.resume
    r = train_skill_adapter(model, tok, examples, names, _train_args(cfg), skill=cfg.skill_name,
                            multi_version=cfg.multi_version, real_knowledge=cfg.real_knowledge,
                            real_weight=cfg.real_weight, alternate_groups=cfg.alternate_groups, sampler=cfg.sampler,
                            fmt=fmt, checkpoint_dir=ckpt, resume=resume, accelerator=acc, quiet=cfg.quiet)
    dest = out / cfg.skill_name
    if _main_process(acc):
        save_adapter(model, cfg.skill_name, dest, role="skill",
                     extra={"knowledge": names, "lora": asdict(spec), "format": asdict(fmt),
                            "multi_version": cfg.multi_version, "real_weight": cfg.real_weight,
                            "alternate_groups": cfg.alternate_groups})
        res = {"model": info, "skill": str(dest), "knowledge": names, **r.summary(),
               "rows_per_counted_row": r.rows_forwarded / max(1, r.rows_counted),
               "frozen_tensors_checked": r.n_frozen, "frozen_changed": r.frozen_changed}
        _write(out, cfg, res)
    print(f"train-skill: skill LoRA {cfg.skill_name!r} saved alone to {dest} ({r.steps} steps, final loss "
          f"{r.final_loss:.4f}); {r.n_frozen} knowledge/base tensors bit-identical, "
          f"{r.n_trainable - len(r.trainable_unchanged)}/{r.n_trainable} skill tensors changed")
    return 0


def _deployed(cfg: Any, model: Any) -> tuple[Any, list[str]]:
    from .lora import load_adapter, read_adapter_meta

    adapters: list[str] = []
    if cfg.knowledge is not None:
        meta = read_adapter_meta(cfg.knowledge)
        name = meta.get("name") or Path(cfg.knowledge).name
        model = load_adapter(model, cfg.knowledge, name, role="knowledge")
        adapters.append(name)
    if cfg.skill is not None:
        meta = read_adapter_meta(cfg.skill)
        name = meta.get("name") or Path(cfg.skill).name
        if name in adapters:
            name = name + "_skill"
        model = load_adapter(model, cfg.skill, name, role="skill")
        adapters.append(name)
    return model, adapters


def cmd_evaluate(cfg: EvaluateConfig) -> int:
    from iclr25.core.jsonl import write_jsonl

    from .data import read_qa_jsonl
    from .evaluation import em_match, generate_answers, qa_accuracy

    items = read_qa_jsonl(cfg.data)
    model, tok, fmt, info = _load_model(cfg)
    if cfg.model == "tiny":
        _check_tiny_vocab(tok, [(f"row {i} 'question'", it.question) for i, it in enumerate(items, 1)], str(cfg.data))
    model, adapters = _deployed(cfg, model)
    t0 = time.perf_counter()
    if cfg.metric == "first-token":
        acc, pred = qa_accuracy(model, tok, items, adapters=adapters or None, fmt=fmt, return_predictions=True)
        texts = tok.convert_ids_to_tokens(pred)
        ok = [None] * len(items)
    else:
        texts = generate_answers(model, tok, [it.question for it in items], adapters=adapters or None, fmt=fmt,
                                 max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size)
        ok = [em_match(t, it.answers) for t, it in zip(texts, items)]
        acc = sum(ok) / len(ok)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "predictions.jsonl", [{"question": it.question, "answers": list(it.answers), "prediction": t,
                                             **({"correct": c} if c is not None else {})}
                                            for it, t, c in zip(items, texts, ok)])
    _write(out, cfg, {"model": info, "adapters": adapters, "metric": cfg.metric, "accuracy": acc, "n": len(items),
                      "seconds": round(time.perf_counter() - t0, 2)})
    stack = " + ".join(["θ₀", *adapters])
    print(f"evaluate: {stack}: accuracy {acc:.4f} on {len(items)} questions ({cfg.metric}); predictions in "
          f"{out / 'predictions.jsonl'}")
    return 0


def cmd_generate(cfg: GenerateConfig) -> int:
    from iclr25.core.jsonl import write_jsonl

    from .data import read_entities
    from .evaluation import adapter_stack, generate_longform, load_scorer

    entities = read_entities(cfg.entities)
    if cfg.limit is not None:
        if cfg.limit < 1:
            raise ValueError(f"--limit {cfg.limit} must be >= 1")
        entities = entities[:cfg.limit]
    scorer = load_scorer(cfg.scorer) if cfg.scorer else None
    t0 = time.perf_counter()
    if cfg.backend == "transformers":
        from iclr25.core.lm import TransformersGenerator

        model, tok, _, info = _load_model(cfg)
        if cfg.model == "tiny":
            _check_tiny_vocab(tok, [(f"entity {i} ({e!r}) with --template", cfg.template.replace("{entity}", e))
                                    for i, e in enumerate(entities)], str(cfg.entities))
        model, adapters = _deployed(cfg, model)
        gen = TransformersGenerator(model, tok, batch_size=cfg.batch_size)
        with adapter_stack(model, adapters or None):
            rows = generate_longform(gen, entities, template=cfg.template, max_new_tokens=cfg.max_new_tokens,
                                     scorer=scorer)
    else:
        if cfg.skill is not None or cfg.knowledge is not None:
            raise ValueError("--skill/--knowledge are for the local backend; a server serves its LoRA under "
                             "--served-model (vLLM: --enable-lora --lora-modules skill=DIR)")
        from iclr25.core.lm import OpenAIChatGenerator, OpenAICompletionGenerator

        name = cfg.served_model or cfg.model
        cls = OpenAIChatGenerator if cfg.backend == "openai-chat" else OpenAICompletionGenerator
        gen = cls(name, base_url=cfg.base_url)
        info, adapters = {"model": name, "base_url": cfg.base_url}, [name]
        rows = generate_longform(gen, entities, template=cfg.template, max_new_tokens=cfg.max_new_tokens, scorer=scorer)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "generations.jsonl", rows)
    res: dict[str, Any] = {"model": info, "adapters": adapters, "n": len(rows), "backend": cfg.backend,
                           "template": cfg.template, "seconds": round(time.perf_counter() - t0, 2)}
    msg = f"generate: {len(rows)} generations in {out / 'generations.jsonl'}"
    if scorer is not None:
        scored = [r for r in rows if r["claims"] > 0]
        res["accuracy"] = sum(r["supported"] / r["claims"] for r in scored) / len(scored) if scored else float("nan")
        res["claims_per_response"] = sum(r["claims"] for r in rows) / len(rows)
        msg += f"; accuracy {res['accuracy']:.4f}, {res['claims_per_response']:.1f} claims per response"
    else:
        msg += "; no --scorer given (FActScore-style scoring is unreleased; pass your own)"
    _write(out, cfg, res)
    print(msg)
    return 0


def cmd_demo(cfg: DemoConfig) -> int:
    from iclr25.core.jsonl import write_jsonl
    from iclr25.core.results import claims_table

    from .claims import claims_from_runs
    from .experiment import QUICK, run_seed
    from .reproduce import methods_table
    from .world import knowledge_corpus, make_world, qa_items, skill_examples

    s = QUICK
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    world = make_world(s.n_real, s.n_fict, s.n_versions, cfg.seed, n_templates=s.n_templates, n_passages=s.n_passages)
    (out / "world.json").write_text(json.dumps(world.to_dict(), indent=1) + "\n")
    for v in range(1, s.n_versions + 1):
        write_jsonl(out / f"knowledge_v{v}.jsonl", [{"text": t, "name": f"know_v{v}"} for t in knowledge_corpus(world, v)])
    write_jsonl(out / "skill_fictitious.jsonl", [asdict(e) for e in skill_examples(world, "fictitious")])
    write_jsonl(out / "qa_real_test.jsonl", [{"question": q.question, "answers": list(q.answers)}
                                             for q in qa_items(world, "real_test")])
    r = run_seed(s, cfg.seed, cfg.seed, cache=str(cfg.cache) if cfg.cache else None,
                 device=_dev(cfg.device), quiet=cfg.quiet, threads=cfg.threads)
    (out / "run.json").write_text(json.dumps(r, indent=1, default=str) + "\n")
    print(methods_table([r]))
    claims = claims_from_runs([r], quick=True, shared_world=False)
    print()
    print(claims_table(claims))
    held = sum(c.holds for c in claims)
    print(f"demo: seed {cfg.seed}, {held}/{len(claims)} claims hold on one seed ({r['timing']['total']:.0f} s); "
          f"world files in {out}")
    return 0


def _dev(name: str) -> str:
    from iclr25.core.seed import choose_device

    return choose_device(name)


#: old flag -> new flag of the training commands (kept for one release; CHANGELOG)
_DEPRECATED = {"--save-every": "--checkpoint-every"}


def main(argv: Sequence[str] | None = None) -> int:
    from .config import PRESETS, preset_path

    return run_cli(PROG, DESCRIPTION, {
        "train-knowledge": Command(TrainKnowledgeConfig, cmd_train_knowledge,
                                   "stage 1: knowledge LoRA(s) on knowledge JSONL (saved as PEFT adapters)",
                                   deprecated=_DEPRECATED),
        "train-skill": Command(TrainSkillConfig, cmd_train_skill,
                               "stage 2: the skill LoRA with frozen knowledge LoRAs (saves the skill adapter alone)",
                               deprecated=_DEPRECATED),
        "evaluate": Command(EvaluateConfig, cmd_evaluate, "QA accuracy of θ₀+Δskill (optionally + a knowledge LoRA)"),
        "generate": Command(GenerateConfig, cmd_generate,
                            "long-form generation for an entity list, scored by a pluggable claim scorer"),
        "reproduce": reproduce_command(SLUG, "iclr25.prereq_tune.reproduce:reproduce", __version__,
                                       config=PrereqReproduceConfig),
        "demo": Command(DemoConfig, cmd_demo, "one quick seed end to end; prints the C1/C2/C3 tables"),
    }, argv, version=__version__, presets=(PRESETS, preset_path))
