"""Command line: ``iclr25-q-adapter {train,evaluate,generate,tabular-check,reproduce}``."""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import Command, run_cli

from ._version import __version__

__all__ = ["main", "TrainArgs", "EvaluateArgs", "GenerateArgs", "TabularArgs", "ReproduceArgs"]

log = logging.getLogger("iclr25.q_adapter")


@dataclass
class TrainArgs:
    """Train a Q-Adapter (or the DPO/SFT baseline) on preference pairs."""

    data: str = "dsp"
    """``dsp``, ``hh-harmless``, ``hh-helpful``, or a path to a JSONL of {prompt, chosen, rejected}."""
    domain: str = "literature"
    """DSP target domain (academy, business, entertainment, literature)."""
    base: str = "embedded"
    """Base LM: ``embedded`` (tiny GPT-2 pre-trained on CPU and cached), a local folder or a HF model id."""
    method: Literal["q-adapter", "dpo", "sft"] = "q-adapter"
    variant: Literal["paper", "code"] = "paper"
    """Q-Adapter loss: ``paper`` (equations) or ``code`` (official implementation's four differences)."""
    alpha_tilde: float = 1.0
    alpha_0: float = 0.01
    lora_r: int = 8
    learning_rate: float = 3e-4
    epochs: int = 3
    batch_size: int = 8
    max_length: int = 96
    max_prompt_length: int = 32
    max_pairs: int = 0
    """Use at most this many training pairs (0: all)."""
    max_steps: int = 0
    checkpoint_every: int = 50
    output_dir: Path = Path("runs/q-adapter")
    resume: bool = False
    """Continue from ``output_dir/checkpoint`` (adapter, optimiser, step)."""
    seed: int = 0
    device: str = "auto"
    quick: bool = True
    """Embedded base size: quick (2 layers) or full (4 layers)."""
    quiet: bool = False


@dataclass
class EvaluateArgs:
    """Evaluate a saved adapter: held-out pair accuracy and general-text NLL vs the base."""

    adapter: Path = Path("runs/q-adapter/adapter")
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
    quick: bool = True
    device: str = "auto"
    quiet: bool = False


@dataclass
class GenerateArgs:
    """Generate from the customised policy softmax((Q + alpha_0 log pi_1)/alpha~) with two KV caches."""

    prompt: str = "## Human:\nDescribe the sea at night.\n\n## Assistant:\n"
    adapter: Path | None = None
    """Adapter folder (None: base model only)."""
    base: str = "embedded"
    max_new_tokens: int = 64
    sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    seed: int = 0
    policy: Literal["customized", "base", "adapter"] = "customized"
    quick: bool = True
    device: str = "auto"
    quiet: bool = False


@dataclass
class TabularArgs:
    """Exact tabular check: the learned policy must equal pi_1^(a0/a~) exp(R2/a~)/Z (and DPO when a~ = a0)."""

    seed: int = 0
    iters: int = 300
    value_index: Literal["next", "same"] = "next"
    quiet: bool = False


@dataclass
class ReproduceArgs:
    """Reproduce the paper's claims at CPU scale; writes OUT/results.{json,md}."""

    quick: bool = False
    out: Path = Path("results/q-adapter")
    variant: Literal["code", "paper"] = "code"
    """Q-Adapter loss in the DSP run (spec Sec. 4.2 prescribes the official code's)."""
    quiet: bool = False


def _setup(quiet: bool) -> None:
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _pairs(data: str, domain: str, seed: int, part: str):
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
        raise ValueError(f"--data {data!r}: not 'dsp', 'hh-harmless', 'hh-helpful' or an existing JSONL file")
    return load_preference_jsonl(data)


def _load(base: str, quick: bool, device: str):
    from iclr25.core.seed import choose_device

    from .base import load_base

    return load_base(base, quick=quick, device=choose_device(device))


def cmd_train(a: TrainArgs) -> int:
    _setup(a.quiet)
    from iclr25.core.seed import seed_everything

    from .config import QAdapterConfig
    from .data import tokenize_pairs
    from .model import LoRAPolicy, QAdapterModel
    from .trainer import PreferenceTrainer, TrainerConfig

    seed_everything(a.seed)
    model, tok = _load(a.base, a.quick, a.device)
    pairs = _pairs(a.data, a.domain, a.seed, "train")
    if a.max_pairs:
        pairs = pairs[: a.max_pairs]
    train = tokenize_pairs(pairs, tok, max_length=a.max_length, max_prompt_length=a.max_prompt_length)
    qcfg = QAdapterConfig.variant(a.variant, alpha_tilde=a.alpha_tilde, alpha_0=a.alpha_0, lora_r=a.lora_r,
                                  lora_alpha=2 * a.lora_r)
    pol = QAdapterModel(model, qcfg) if a.method == "q-adapter" else LoRAPolicy(model, qcfg, score=a.method)
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(asdict(a), indent=2, default=str) + "\n")
    tcfg = TrainerConfig(method=a.method, learning_rate=a.learning_rate, epochs=a.epochs, batch_size=a.batch_size,
                         max_steps=a.max_steps, seed=a.seed, checkpoint_every=a.checkpoint_every,
                         progress=not a.quiet)
    t0 = time.perf_counter()
    trainer = PreferenceTrainer(pol, train, tok.pad_token_id, tcfg, output_dir=out)
    hist = trainer.train(resume=a.resume)
    pol.save_pretrained(out / "adapter")
    tok.save_pretrained(out / "adapter")
    final = hist[-1] if hist else {}
    print(f"trained {a.method} on {len(train)} pairs: {trainer.step} steps ({len(hist)} in this run) in {time.perf_counter() - t0:.1f} s, "
          f"final loss {final.get('loss', float('nan')):.4f}; adapter in {out / 'adapter'}")
    return 0


def _load_policy(adapter: Path, base: str, quick: bool, device: str):
    from .model import QCONFIG_NAME, LoRAPolicy, QAdapterModel

    model, tok = _load(base, quick, device)
    kind = "q-adapter"
    meta = Path(adapter) / QCONFIG_NAME
    if meta.is_file():
        kind = json.loads(meta.read_text()).get("kind", kind)
    cls = QAdapterModel if kind == "q-adapter" else LoRAPolicy
    return cls.from_pretrained(model, adapter), tok


def cmd_evaluate(a: EvaluateArgs) -> int:
    _setup(a.quiet)
    from .base import heldout_general_texts
    from .data import tokenize_pairs
    from .evaluate import general_nll, pair_accuracy

    pol, tok = _load_policy(a.adapter, a.base, a.quick, a.device)
    pairs = _pairs(a.data, a.domain, 0, "test")[: a.max_pairs]
    test = tokenize_pairs(pairs, tok, max_length=a.max_length, max_prompt_length=a.max_prompt_length)
    general = heldout_general_texts(a.n_general, a.n_general)
    res = {"pair_accuracy": pair_accuracy(pol, test, tok.pad_token_id),
           "base_pair_accuracy": pair_accuracy(pol, test, tok.pad_token_id, which="base"),
           "general_nll": general_nll(pol, general, tok, max_length=a.general_max_length),
           "base_general_nll": general_nll(pol, general, tok, which="base", max_length=a.general_max_length)}
    res["forgetting"] = res["general_nll"] - res["base_general_nll"]
    (Path(a.adapter) / "eval.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res))
    return 0


def cmd_generate(a: GenerateArgs) -> int:
    _setup(a.quiet)
    import torch

    if not a.prompt.strip():
        raise ValueError("--prompt is empty")
    if a.adapter is None:
        from .config import QAdapterConfig
        from .model import QAdapterModel

        model, tok = _load(a.base, a.quick, a.device)
        pol = QAdapterModel(model, QAdapterConfig())  # fresh adapter (B = 0): use --policy base
    else:
        pol, tok = _load_policy(a.adapter, a.base, a.quick, a.device)
    enc = tok(a.prompt, add_special_tokens=False, return_tensors="pt")
    g = torch.Generator().manual_seed(a.seed)
    out = pol.generate(enc["input_ids"], enc["attention_mask"], max_new_tokens=a.max_new_tokens, do_sample=a.sample,
                       temperature=a.temperature, top_k=a.top_k, policy=a.policy, generator=g)
    print(tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True))
    return 0


def cmd_tabular(a: TabularArgs) -> int:
    _setup(a.quiet)
    from .tabular import tabular_check

    res = tabular_check(seed=a.seed, iters=a.iters, value_index=a.value_index)
    for k, v in res.items():
        print(f"{k:>18}: {v:.3e}")
    ok = res["tv_max"] < 1e-3 and res["tv_dpo_max"] < 1e-3
    print(f"tabular check {'passed' if ok else 'FAILED'}: max TV to optimum {res['tv_max']:.2e}, "
          f"to DPO {res['tv_dpo_max']:.2e} (threshold 1e-3)")
    return 0 if ok else 1


def cmd_reproduce(a: ReproduceArgs) -> int:
    _setup(a.quiet)
    from iclr25.core.registry import run_reproduction
    from iclr25.core.results import summarize

    from .reproduce import reproduce

    def fn(quick, out):
        return reproduce(quick, out, variant=a.variant)

    report = run_reproduction("q-adapter", fn, quick=a.quick, out_dir=a.out, version=__version__)
    print(report.to_markdown())
    print(f"{summarize(report.claims)} in {report.seconds:.1f} s; results in {a.out}/results.json")
    return 0


def _friendly(fn):
    """Print bad-input errors as ``iclr25-q-adapter: error: ...`` (exit 2) instead of a traceback."""

    def run(args):
        from iclr25.core.data import DataNotFoundError

        try:
            return fn(args)
        except (ValueError, FileNotFoundError, DataNotFoundError) as e:
            print(f"iclr25-q-adapter: error: {e}", file=sys.stderr)
            return 2

    return run


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``iclr25-q-adapter``; returns the exit code."""
    return run_cli("iclr25-q-adapter", "Q-Adapter (ICLR 2025): customise a pre-trained LM to a new preference "
                   "with a residual-Q LoRA adapter, without forgetting.", {
                       "train": Command(TrainArgs, _friendly(cmd_train), "train a Q-Adapter / DPO / SFT LoRA (with --resume)"),
                       "evaluate": Command(EvaluateArgs, _friendly(cmd_evaluate), "pair accuracy and forgetting of an adapter"),
                       "generate": Command(GenerateArgs, _friendly(cmd_generate), "sample from the customised policy"),
                       "tabular-check": Command(TabularArgs, _friendly(cmd_tabular), "exact tabular check of the objective"),
                       "reproduce": Command(ReproduceArgs, _friendly(cmd_reproduce), "reproduce the paper's claims (--quick)"),
                   }, argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
