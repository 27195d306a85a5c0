"""Command line: ``iclr25-q-adapter {train,evaluate,generate,tabular-check,reproduce}``."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import (
    Command,
    CommonOptions,
    ReproduceOptions,
    SeedOption,
    reproduce_command,
    run_cli,
)
from iclr25.core.lm.loading import ModelLoadOptions

from ._version import __version__

__all__ = ["main", "TrainArgs", "EvaluateArgs", "GenerateArgs", "TabularArgs", "ReproduceArgs"]

log = logging.getLogger("iclr25.q_adapter")


_DEPRECATED = {"--output-dir": "--out", "--quick": "--small-base", "--no-quick": "--no-small-base"}
#: train also renames --learning-rate (issue 47 §9: one flag per meaning across the packages)
_TRAIN_DEPRECATED = {**_DEPRECATED, "--learning-rate": "--lr"}


def _check_lengths(max_length: int, max_prompt_length: int) -> None:
    if max_prompt_length < 1:
        raise ValueError(f"--max-prompt-length must be >= 1 (tokens of prompt kept), got {max_prompt_length}")
    if max_length <= max_prompt_length:
        raise ValueError(f"--max-length ({max_length}) must be > --max-prompt-length ({max_prompt_length})")


def _check_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"--{name} must be a finite number > 0, got {value}")


@dataclass(kw_only=True)
class TrainArgs(CommonOptions, SeedOption, ModelLoadOptions):
    """Train a Q-Adapter (or the DPO/SFT baseline) on preference pairs."""

    data: str = "dsp"
    """``dsp``, ``hh-harmless``, ``hh-helpful``, or a JSONL of {prompt, chosen, rejected} or of HH-RLHF
    {chosen, rejected} dialogues (prompt = up to the last "\\n\\nAssistant:")."""
    domain: str = "literature"
    """DSP target domain (academy, business, entertainment, literature)."""
    base: str = "embedded"
    """Base LM: ``embedded`` (tiny GPT-2 pre-trained on CPU and cached), a local folder or a HF model id."""
    method: Literal["q-adapter", "dpo", "sft"] = "q-adapter"
    variant: Literal["paper", "code"] = "paper"
    """Q-Adapter loss: ``paper`` (equations) or ``code`` (official implementation's four differences)."""
    alpha_tilde: float = 1.0
    alpha_0: float = 0.01
    reg_beta: float | None = None
    """Weight of the code's regulariser beta * mean r_t^2 (None: the variant's, paper 0, code 0.1)."""
    lora_r: int = 8
    lr: float = 3e-4
    """AdamW learning rate (official 3e-4; ``--learning-rate`` is a deprecated alias)."""
    epochs: int = 3
    batch_size: int = 8
    """Pairs per process per step (global batch = batch_size x processes x grad_accum)."""
    grad_accum: int = 1
    max_length: int = 96
    """Tokens per prompt + response (at most the model's context)."""
    max_prompt_length: int = 32
    """Prompt tokens kept (the last ones; >= 1)."""
    max_pairs: int = 0
    """Use at most this many training pairs (0: all)."""
    max_steps: int = 0
    """Stop after this many optimiser steps (0: all epochs)."""
    checkpoint_every: int = 50
    resume: bool = False
    """Continue from ``out/checkpoint`` (adapter, optimiser, step, RNG states); an error when there is none."""
    disable_dropout: bool = True
    """Base model dropout off in training (TRL's default for preference losses: the policy and reference
    forwards see one dropout-free network); ``--no-disable-dropout`` keeps the model's dropout. LoRA dropout
    is not affected."""
    small_base: bool = True
    """Embedded base size: small (2 layers, ``--small-base``) or full (4 layers, ``--no-small-base``);
    ``--quick``/``--no-quick`` are deprecated aliases (``--quick`` is only on ``reproduce``)."""

    def __post_init__(self) -> None:
        _check_lengths(self.max_length, self.max_prompt_length)
        _check_positive("lr", self.lr)
        _check_positive("alpha-tilde", self.alpha_tilde)
        if not (math.isfinite(self.alpha_0) and self.alpha_0 >= 0):
            raise ValueError(f"--alpha-0 must be finite and >= 0, got {self.alpha_0}")
        if self.reg_beta is not None and not (math.isfinite(self.reg_beta) and self.reg_beta >= 0):
            raise ValueError(f"--reg-beta must be finite and >= 0, got {self.reg_beta}")
        for name in ("epochs", "batch_size", "grad_accum", "lora_r"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("max_pairs", "max_steps", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0 (0 = no limit/off), "
                                 f"got {getattr(self, name)}")


@dataclass(kw_only=True)
class EvaluateArgs(CommonOptions, ModelLoadOptions):
    """Evaluate a saved adapter: held-out pair accuracy and general-text NLL vs the base."""

    adapter: Path = Path("runs/q-adapter/train/adapter")
    base: str = "embedded"
    data: str = "dsp"
    domain: str = "literature"
    max_pairs: int = 400
    max_length: int = 96
    max_prompt_length: int = 32
    n_general: int = 100
    """Held-out helpful and harmless dialogues each for the forgetting metric."""
    general_max_length: int = 128
    """Tokens per general-text dialogue (capped at the model's context)."""
    small_base: bool = True

    def __post_init__(self) -> None:
        _check_lengths(self.max_length, self.max_prompt_length)
        for name in ("max_pairs", "n_general", "general_max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")


@dataclass(kw_only=True)
class GenerateArgs(CommonOptions, SeedOption, ModelLoadOptions):
    """Generate from the customised policy softmax((Q + alpha_0 log pi_1)/alpha~) with two KV caches."""

    prompt: str = "## Human:\nDescribe the sea at night.\n\n## Assistant:\n"
    """The prompt text (in a shell, write newlines as $'...\\n...' or use --prompt-file)."""
    prompt_file: Path | None = None
    """Read the prompt from this UTF-8 file instead of --prompt."""
    adapter: Path | None = None
    """Adapter folder (None: base model only)."""
    base: str = "embedded"
    max_new_tokens: int = 64
    sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    policy: Literal["customized", "base", "adapter"] = "customized"
    small_base: bool = True

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        _check_positive("temperature", self.temperature)
        if self.top_k < 0:
            raise ValueError(f"--top-k must be >= 0 (0 = off), got {self.top_k}")


@dataclass(kw_only=True)
class TabularArgs(CommonOptions, SeedOption):
    """Exact tabular check: the learned policy must equal pi_1^(a0/a~) exp(R2/a~)/Z (and DPO when a~ = a0)."""

    iters: int = 300
    value_index: Literal["next", "same"] = "next"

    def __post_init__(self) -> None:
        if self.iters < 1:
            raise ValueError(f"--iters must be >= 1, got {self.iters}")


@dataclass(kw_only=True)
class ReproduceArgs(ReproduceOptions):
    """Reproduce the paper's claims at CPU scale; writes OUT/results.{json,md}."""

    workers: int | None = None
    """Processes the jobs run in (default: from the cores, --threads torch threads each; 1: in-process)."""
    resume: bool = False
    """Keep the jobs an interrupted run in --out finished (refused if the settings changed)."""


def _pairs(data: str, domain: str, part: str):
    """Load (and validate) the preference pairs before any model is loaded."""
    from .data import load_dsp, load_dsp_pairs, load_hh_rlhf, load_preference_jsonl, split_queries

    if data == "dsp":
        recs = load_dsp()
        tr, te = split_queries(len(recs), 500, seed=0)
        return load_dsp_pairs(records=recs, domain=domain, indices=tr if part == "train" else te)
    if data in ("hh-harmless", "hh-helpful"):
        pairs = load_hh_rlhf(split=data.split("-")[1])
        n_test = 312
        return pairs[:-n_test] if part == "train" else pairs[-n_test:]
    if not Path(data).is_file():
        raise FileNotFoundError(f"--data {data!r}: not 'dsp', 'hh-harmless', 'hh-helpful' or an existing "
                                "JSONL file")
    pairs = load_preference_jsonl(data)
    if not pairs:
        raise ValueError(f"--data {data}: no preference pairs in the file")
    return pairs


def _load(a, *, for_training: bool = False):
    from .base import load_base

    return load_base(a.base, quick=a.small_base, device=a.device, dtype=a.dtype, device_map=a.device_map,
                     load_in_4bit=a.load_in_4bit, load_in_8bit=a.load_in_8bit,
                     gradient_checkpointing=a.gradient_checkpointing and for_training,
                     trust_remote_code=a.trust_remote_code)


def cmd_train(a: TrainArgs) -> int:
    from iclr25.core.seed import seed_everything

    from .base import check_context
    from .baseline import LoRAPolicy
    from .config import QAdapterConfig
    from .data import tokenize_pairs
    from .model import QAdapterModel
    from .trainer import PreferenceTrainer, TrainerConfig

    if a.resume:  # checked before the data and the model load
        from iclr25.core.checkpoint import recover_folder

        ck = Path(a.out) / "checkpoint"
        recover_folder(ck)  # a kill between atomic_folder's two renames leaves checkpoint.old
        if not (ck / "trainer_state.pt").is_file():
            raise FileNotFoundError(f"--resume given but no checkpoint in {ck} (train without --resume first)")
    pairs = _pairs(a.data, a.domain, "train")  # validated before the model loads
    if a.max_pairs:
        pairs = pairs[: a.max_pairs]
    tcfg = TrainerConfig(method=a.method, learning_rate=a.lr, epochs=a.epochs, batch_size=a.batch_size,
                         grad_accum=a.grad_accum, max_steps=a.max_steps, seed=a.seed,
                         checkpoint_every=a.checkpoint_every, progress=not a.quiet,
                         disable_dropout=a.disable_dropout)
    extra = {} if a.reg_beta is None else {"reg_beta": a.reg_beta}
    qcfg = QAdapterConfig.variant(a.variant, alpha_tilde=a.alpha_tilde, alpha_0=a.alpha_0, lora_r=a.lora_r,
                                  lora_alpha=2 * a.lora_r, **extra)
    seed_everything(a.seed)
    model, tok = _load(a, for_training=True)
    check_context(model, a.max_length)
    train = tokenize_pairs(pairs, tok, max_length=a.max_length, max_prompt_length=a.max_prompt_length)
    pol = QAdapterModel(model, qcfg) if a.method == "q-adapter" else LoRAPolicy(model, qcfg, score=a.method)
    out = Path(a.out)
    t0 = time.perf_counter()
    trainer = PreferenceTrainer(pol, train, tok.pad_token_id, tcfg, output_dir=out, device=a.device)
    if a.resume:  # a refused resume (changed settings or data) must leave config.json as it was
        trainer.check_checkpoint()
    if trainer.acc.is_main_process:
        from iclr25.core.runinfo import run_info

        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps({"config": asdict(a), "run": run_info()}, indent=2,
                                                    default=str) + "\n")
    hist = trainer.train(resume=a.resume)
    if trainer.acc.is_main_process:
        pol.save_pretrained(out / "adapter")
        tok.save_pretrained(out / "adapter")
    loss = f"final loss {hist[-1]['loss']:.4f}" if hist else "no step left to train (checkpoint already at the end)"
    print(f"trained {a.method} on {len(train)} pairs ({trainer.world} process(es)): {trainer.step} steps "
          f"({len(hist)} in this run) in {time.perf_counter() - t0:.1f} s, {loss}; adapter in {out / 'adapter'}")
    return 0


def _load_policy(a):
    from .baseline import LoRAPolicy
    from .model import QCONFIG_NAME, QAdapterModel

    adapter = Path(a.adapter)
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"--adapter {adapter}: no adapter_config.json there (train one with "
                                "`iclr25-q-adapter train`; the adapter is OUT/adapter)")
    model, tok = _load(a)
    kind = "q-adapter"
    meta = adapter / QCONFIG_NAME
    if meta.is_file():
        kind = json.loads(meta.read_text()).get("kind", kind)
    cls = QAdapterModel if kind == "q-adapter" else LoRAPolicy
    return cls.from_pretrained(model, adapter), tok


def cmd_evaluate(a: EvaluateArgs) -> int:
    from .base import check_context, heldout_general_texts
    from .data import tokenize_pairs
    from .evaluate import general_nll, pair_accuracy

    pairs = _pairs(a.data, a.domain, "test")[: a.max_pairs]
    general = heldout_general_texts(a.n_general, a.n_general)
    pol, tok = _load_policy(a)
    check_context(pol.peft_model.get_base_model(), a.max_length)
    test = tokenize_pairs(pairs, tok, max_length=a.max_length, max_prompt_length=a.max_prompt_length)
    res = {"pair_accuracy": pair_accuracy(pol, test, tok.pad_token_id),
           "base_pair_accuracy": pair_accuracy(pol, test, tok.pad_token_id, which="base"),
           "general_nll": general_nll(pol, general, tok, max_length=a.general_max_length),
           "base_general_nll": general_nll(pol, general, tok, which="base", max_length=a.general_max_length)}
    res["forgetting"] = res["general_nll"] - res["base_general_nll"]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res))
    print(f"pair accuracy {res['pair_accuracy']:.3f} (base {res['base_pair_accuracy']:.3f}), forgetting "
          f"{res['forgetting']:+.4f} nats/token; {out / 'eval.json'}")
    return 0


def cmd_generate(a: GenerateArgs) -> int:
    import torch

    from .base import model_context

    prompt = a.prompt
    if a.prompt_file is not None:
        if not Path(a.prompt_file).is_file():
            raise FileNotFoundError(f"--prompt-file {a.prompt_file} does not exist")
        prompt = Path(a.prompt_file).read_text(encoding="utf-8")
    if not prompt.strip():
        raise ValueError("--prompt is empty")
    if "\\n" in prompt and "\n" not in prompt:
        log.warning("--prompt contains a literal backslash-n and no newline; in a shell write $'...\\n...' "
                    "or use --prompt-file")
    if a.adapter is None:
        from .config import QAdapterConfig
        from .model import QAdapterModel

        model, tok = _load(a)
        pol = QAdapterModel(model, QAdapterConfig())  # fresh adapter (B = 0): use --policy base
    else:
        pol, tok = _load_policy(a)
    enc = tok(prompt, add_special_tokens=False, return_tensors="pt")
    ctx = model_context(pol.peft_model.get_base_model())
    if ctx is not None:  # past the position embeddings the model would fail with an IndexError
        if a.max_new_tokens >= ctx:
            raise ValueError(f"--max-new-tokens {a.max_new_tokens} leaves no room for the prompt in the model's "
                             f"context of {ctx} tokens; use --max-new-tokens {ctx - 1} or less")
        n = enc["input_ids"].shape[1]
        if n + a.max_new_tokens > ctx:
            keep = ctx - a.max_new_tokens
            log.warning("the prompt (%d tokens) + --max-new-tokens %d exceed the model's context of %d tokens: "
                        "only the prompt's last %d tokens are used", n, a.max_new_tokens, ctx, keep)
            enc = {k: v[:, -keep:] for k, v in enc.items()}
    dev = next(pol.parameters()).device
    g = torch.Generator(device=dev).manual_seed(a.seed)
    out = pol.generate(enc["input_ids"].to(dev), enc["attention_mask"].to(dev), max_new_tokens=a.max_new_tokens,
                       do_sample=a.sample, temperature=a.temperature, top_k=a.top_k, policy=a.policy, generator=g)
    print(tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True))
    return 0


def cmd_tabular(a: TabularArgs) -> int:
    from .tabular import tabular_check

    res = tabular_check(seed=a.seed, iters=a.iters, value_index=a.value_index)
    for k, v in res.items():
        print(f"{k:>18}: {v:.3e}")
    ok = res["tv_max"] < 1e-3 and res["tv_dpo_max"] < 1e-3
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tabular.json").write_text(json.dumps(res, indent=2) + "\n")
    print(f"tabular check {'passed' if ok else 'FAILED'}: max TV to optimum {res['tv_max']:.2e}, "
          f"to DPO {res['tv_dpo_max']:.2e} (threshold 1e-3)")
    return 0 if ok else 1


def _named_presets(argv: list[str]) -> list[str]:
    """``train --config quick`` / ``--config paper`` (not an existing file) name the packaged presets.

    Raises: ValueError (one line, exit 2) for a named preset on another command (the presets hold train
    settings that ``evaluate`` / ``generate`` / ``reproduce`` do not take) and for a ``--config`` value
    that is neither a file nor a preset (a misspelt name: the presets are listed).
    """
    from .presets import PRESETS, preset_path

    out = list(argv)
    command = next((a for a in out if not a.startswith("-")), None)
    for i, a in enumerate(out):
        if a == "--config" and i + 1 < len(out):
            j, value = i + 1, out[i + 1]
        elif a.startswith("--config="):
            j, value = i, a[9:]
        else:
            continue
        if Path(value).exists():
            continue
        if value in PRESETS:
            if command != "train":
                hint = " (reproduce: --quick)" if command == "reproduce" and value == "quick" else ""
                raise ValueError(f"--config {value}: the packaged presets {list(PRESETS)} are train settings; "
                                 f"{command} takes a YAML file of its own flags{hint}")
            path = str(preset_path(value))
            out[j] = path if j == i + 1 else f"--config={path}"
        elif not value.endswith((".yaml", ".yml", ".json", ".toml")) and "/" not in value:
            raise ValueError(f"--config {value}: no such file and not a packaged preset (train presets: "
                             f"{', '.join(PRESETS)})")
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``iclr25-q-adapter``; returns the exit code."""
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        argv = _named_presets(argv)
    except ValueError as e:  # one line, exit 2, as run_cli's errors
        command = next((a for a in argv if not a.startswith("-")), "")
        print(f"iclr25-q-adapter {command}: error: {e}", file=sys.stderr)
        return 2
    return run_cli("iclr25-q-adapter", "Q-Adapter (ICLR 2025): customise a pre-trained LM to a new preference "
                   "with a residual-Q LoRA adapter, without forgetting.", {
                       "train": Command(TrainArgs, cmd_train, "train a Q-Adapter / DPO / SFT LoRA (with --resume)",
                                        _TRAIN_DEPRECATED),
                       "evaluate": Command(EvaluateArgs, cmd_evaluate, "pair accuracy and forgetting of an adapter",
                                           _DEPRECATED),
                       "generate": Command(GenerateArgs, cmd_generate, "sample from the customised policy", _DEPRECATED),
                       "tabular-check": Command(TabularArgs, cmd_tabular, "exact tabular check of the objective"),
                       "reproduce": reproduce_command("q-adapter", "iclr25.q_adapter.reproduce:reproduce",
                                                      __version__, config=ReproduceArgs),
                   }, argv, version=__version__)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
