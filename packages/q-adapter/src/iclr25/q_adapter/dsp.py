"""The DSP customisation experiment at CPU scale (spec Sec. 4.2): one method trained on the new preference,
evaluated along its training run on a validation split, the test split and held-out general text.

Job bodies of :mod:`iclr25.q_adapter.reproduce` (run by :mod:`iclr25.core.runner`): :func:`base_job`
pre-trains (or loads) the embedded base once and measures it; :func:`method_job` trains one method at one
learning rate and seed and records a *trade-off curve*: at evenly spaced steps (the same grid for every
method) the validation pair accuracy, the test pair accuracy and the general-text NLL. The claims then pick
points of these curves by validation accuracy only (:mod:`iclr25.q_adapter.matching`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .base import FULL_BASE, QUICK_BASE, BaseLMConfig

__all__ = ["ReproSettings", "QUICK", "FULL", "METHODS", "settings_to_dict", "settings_from_dict", "base_job",
           "method_job", "tabular_job", "checkpoint_steps"]

#: trained methods: name -> (trainer method, Q-Adapter loss variant)
METHODS = {"q-adapter-code": ("q-adapter", "code"), "q-adapter-paper": ("q-adapter", "paper"),
           "dpo": ("dpo", "paper"), "sft": ("sft", "paper")}


@dataclass(frozen=True)
class ReproSettings:
    """Sizes of one reproduction (spec Sec. 4.2)."""

    base: BaseLMConfig = QUICK_BASE
    domain: str = "literature"
    n_train_queries: int = 100
    """DSP train queries used for training (of the 500 of the seeded 500/161 split)."""
    n_val_queries: int = 16
    """Test-part queries after the ``n_test_queries`` test ones (never trained on, not in the base's
    pre-training corpus) whose pairs form the validation split that picks each method's learning rate and
    checkpoint."""
    n_test_queries: int = 40
    """DSP test queries used (of 161)."""
    max_length: int = 96
    max_prompt_length: int = 32
    epochs: int = 1
    batch_size: int = 8
    lrs: tuple[float, ...] = (3e-3,)
    """The learning-rate grid, the same for every method (10x the official 3e-4 at quick scale: ~50 steps,
    not thousands)."""
    seeds: tuple[int, ...] = (0, 1)
    n_general: int = 40
    """Held-out helpful and harmless dialogues each (forgetting metric)."""
    checkpoints: int = 4
    """Evaluation points after step 0 (evenly spaced, the last at the end): the checkpoint grid, the same for
    every method."""
    tabular_iters: int = 300

    def __post_init__(self) -> None:
        if not self.seeds or not self.lrs:
            raise ValueError("ReproSettings: seeds and lrs need at least one value each")
        if self.checkpoints < 1:
            raise ValueError(f"ReproSettings.checkpoints must be >= 1, got {self.checkpoints}")


QUICK = ReproSettings()
FULL = ReproSettings(base=FULL_BASE, n_train_queries=300, n_val_queries=40, n_test_queries=121, max_length=128,
                     lrs=(1e-3, 3e-3, 1e-2), seeds=(0, 1, 2), n_general=300, tabular_iters=800, checkpoints=8)


def settings_to_dict(s: ReproSettings) -> dict[str, Any]:
    """JSON-ready settings (job settings travel to spawned workers as plain data)."""
    return asdict(s)


def settings_from_dict(d: dict[str, Any]) -> ReproSettings:
    """Inverse of :func:`settings_to_dict`."""
    from iclr25.core.lm.pretrain import TinyLMSpec

    b = dict(d["base"])
    lm = {k: tuple(v) if isinstance(v, list) else v for k, v in b.pop("lm").items()}
    base = BaseLMConfig(lm=TinyLMSpec(**lm), **b)
    rest = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k != "base"}
    return ReproSettings(base=base, **rest)


def checkpoint_steps(total_steps: int, checkpoints: int) -> list[int]:
    """The evaluation steps: 0 and ``checkpoints`` evenly spaced steps ending at ``total_steps`` (deduplicated)."""
    pts = np.linspace(0, total_steps, checkpoints + 1).round().astype(int).tolist()
    return sorted(set(pts))


@dataclass
class _Data:
    tok: Any
    base: Any
    train: list = field(default_factory=list)
    val: list = field(default_factory=list)
    test: list = field(default_factory=list)
    general: list = field(default_factory=list)


def _data(s: ReproSettings, seed: int) -> _Data:
    """Base, tokenizer and the seed's train / validation / test pairs and the general texts."""
    from .base import heldout_general_texts, load_base
    from .data import load_dsp, load_dsp_pairs, split_queries, tokenize_pairs

    base, tok = load_base("embedded", cfg=s.base, device="cpu")
    recs = load_dsp()
    train_idx, test_idx = split_queries(len(recs), 500, seed=0)
    rng = np.random.default_rng(seed)
    tr = np.sort(rng.choice(train_idx, size=min(s.n_train_queries, len(train_idx)), replace=False))
    if s.n_test_queries + s.n_val_queries > len(test_idx):
        raise ValueError(f"n_test_queries + n_val_queries = {s.n_test_queries + s.n_val_queries} exceeds the "
                         f"{len(test_idx)} test-part queries; lower one of them")
    # validation: test-part queries after the test ones. Not train-part queries: the base's pre-training corpus
    # holds the DSP `normal` answers of every train-part query, which biases pair accuracy on them.
    te = test_idx[: s.n_test_queries]
    va = test_idx[s.n_test_queries: s.n_test_queries + s.n_val_queries]
    kw = dict(max_length=s.max_length, max_prompt_length=s.max_prompt_length)
    pairs = lambda idx: tokenize_pairs(load_dsp_pairs(records=recs, domain=s.domain, indices=idx), tok, **kw)  # noqa: E731
    return _Data(tok=tok, base=base, train=pairs(tr), val=pairs(va), test=pairs(te),
                 general=heldout_general_texts(s.n_general, s.n_general))


def _lean_imports() -> None:
    """In a runner worker (:func:`iclr25.core.runner.in_worker`), keep ``peft`` from importing ``bitsandbytes``
    (~4-7 CPU-s per process): these jobs never quantise, and ``peft`` treats the module as absent. An in-process
    run (``--workers 1``) or a test imports it as usual."""
    import sys

    from iclr25.core.runner import in_worker

    if in_worker() and not {"peft", "bitsandbytes"} & set(sys.modules):
        sys.modules["bitsandbytes"] = None  # type: ignore[assignment]


def _policy(method: str, variant: str, base: Any) -> Any:
    """The trained policy of a method on ``base`` (wrapped in place: pass a copy)."""
    from .baseline import LoRAPolicy
    from .config import QAdapterConfig
    from .model import QAdapterModel

    qcfg = QAdapterConfig.variant(variant)
    return QAdapterModel(base, qcfg) if method == "q-adapter" else LoRAPolicy(base, qcfg, score=method)


def _point(pol: Any, d: _Data, memo: dict, step: int) -> dict:
    """One checkpoint evaluation: validation and test pair accuracy and the general-text NLL of ``pol``. The
    frozen base's log-probs of these fixed batches are computed once and reused from ``memo``
    (:meth:`~iclr25.q_adapter.model.QAdapterModel.reuse_base_log_probs`; bitwise the same numbers)."""
    from .evaluate import general_nll, pair_accuracy

    pad = d.tok.pad_token_id
    with pol.reuse_base_log_probs(memo):
        return {"step": step, "val_accuracy": pair_accuracy(pol, d.val, pad),
                "test_accuracy": pair_accuracy(pol, d.test, pad), "general_nll": general_nll(pol, d.general, d.tok)}


def base_job(settings: dict, seed: int, deps: dict) -> dict:
    """Runner job: pre-train (or load from the cache) the embedded base and measure it: test pair accuracy of
    ``log pi_1`` and its general-text NLL (the forgetting reference).

    It also evaluates every method's policy at step 0 (``step0``): LoRA's ``B`` is 0 at initialisation, so the
    adapter-on network is the base whatever the seed's ``A``, and the validation / test pairs and general texts
    do not depend on the seed; the method jobs take their step-0 point from here instead of each recomputing it
    (``test_step0_from_base_equals_direct``)."""
    _lean_imports()
    import torch

    from .config import QAdapterConfig
    from .evaluate import general_nll, pair_accuracy
    from .model import QAdapterModel

    s = settings_from_dict(settings)
    d = _data(s, seed)
    copies = {name: copy.deepcopy(d.base) for name in METHODS}
    pol = QAdapterModel(d.base, QAdapterConfig.variant("code"))
    pad = d.tok.pad_token_id
    memo: dict = {}
    with pol.reuse_base_log_probs(memo):
        out = {"pair_accuracy": pair_accuracy(pol, d.test, pad, which="base"),
               "val_accuracy": pair_accuracy(pol, d.val, pad, which="base"),
               "general_nll": general_nll(pol, d.general, d.tok, which="base"),
               "n_layer": s.base.lm.n_layer, "n_embd": s.base.lm.n_embd}
    step0: dict[str, dict] = {}
    done: dict[tuple, dict] = {}
    for name, (method, variant) in METHODS.items():
        torch.manual_seed(seed)
        p = _policy(method, variant, copies.pop(name))
        # what a step-0 evaluation depends on: the policy class and its scoring (both Q-Adapter losses share the
        # alphas and the implied reward; the loss variant only changes training)
        key = (p.kind, p.cfg.alpha_tilde, p.cfg.alpha_0, getattr(p, "score", None))
        if key not in done:
            done[key] = _point(p, d, memo, 0)
        step0[name] = dict(done[key])
    out["step0"] = step0
    return out


def method_job(settings: dict, seed: int, deps: dict) -> dict:
    """Runner job: train ``settings["method"]`` at ``settings["lr"]`` with ``seed`` and record its curve.

    The step-0 point comes from the ``base`` job's record (``deps["base"]["step0"]``, see :func:`base_job`);
    called without dependencies (``deps == {}``) the job evaluates step 0 itself.

    Returns ``{"curve": [{"step", "val_accuracy", "test_accuracy", "general_nll"}, ...], "steps", ...}``; a
    Q-Adapter record also holds the regulariser's and the preference term's loss on the first and last batch.

    Raises:
        ValueError: a ``base`` record without ``step0`` (written by an older version: rerun without --resume).
    """
    _lean_imports()
    import torch

    from iclr25.core.seed import seed_everything

    from .trainer import PreferenceTrainer, TrainerConfig

    s = settings_from_dict(settings["repro"])
    name, lr = settings["method"], float(settings["lr"])
    method, variant = METHODS[name]
    step0 = None
    if "base" in deps:
        if "step0" not in deps["base"] or name not in deps["base"]["step0"]:
            raise ValueError(f"the base record has no step-0 point of {name!r} (written by an older version); "
                             "rerun the reproduction without --resume")
        step0 = dict(deps["base"]["step0"][name])
    d = _data(s, seed)
    pad = d.tok.pad_token_id
    seed_everything(seed)
    torch.manual_seed(seed)
    pol = _policy(method, variant, copy.deepcopy(d.base))
    tcfg = TrainerConfig(method=method, learning_rate=lr, epochs=s.epochs, batch_size=s.batch_size, seed=seed,
                         progress=False)
    trainer = PreferenceTrainer(pol, d.train, pad, tcfg, device="cpu", output_dir=None)
    marks = checkpoint_steps(trainer.total_steps, s.checkpoints)
    memo: dict = {}

    curve = [step0 if step0 is not None else _point(pol, d, memo, 0)]

    def on_step(step: int, rec: dict) -> None:
        if step in marks and step != trainer.total_steps:
            curve.append(_point(pol, d, memo, step))

    t0 = time.perf_counter()
    hist = trainer.train(on_step=on_step)
    curve.append(_point(pol, d, memo, trainer.step))
    r = {"method": name, "lr": lr, "curve": curve, "steps": trainer.step, "train_seconds": time.perf_counter() - t0,
         "final_loss": hist[-1]["loss"], "n_train_pairs": len(d.train), "n_val_pairs": len(d.val),
         "n_test_pairs": len(d.test), "n_general_texts": len(d.general)}
    if method == "q-adapter":
        r.update(pref_loss_init=hist[0]["pref_loss"], reg_loss_init=hist[0]["reg_loss"],
                 pref_loss_end=hist[-1]["pref_loss"], reg_loss_end=hist[-1]["reg_loss"])
    return r


def tabular_job(settings: dict, seed: int, deps: dict) -> dict:
    """Runner job: the exact tabular check (:func:`iclr25.q_adapter.tabular.tabular_check`)."""
    from .tabular import tabular_check

    return tabular_check(iters=int(settings["iters"]))
