"""The trap task's base model ``pi_base``: core ``tiny_causal_lm`` + core ``byte_tokenizer``, pre-trained
from scratch on strings sampled from :class:`~iclr25.sharpening.task.TrapArithmeticTask` (``(prompt,
answer)`` pairs: the loss is on the two answer digits and EOS only). Two recipes:

- fixed length (``stop_kl=None``, the quick preset): core ``cached_tiny_lm`` on ``n_strings`` strings for
  ``epochs`` passes, cached under ``sharpening/tinylm-<key>``;
- to convergence (``stop_kl`` set, the full preset): fresh strings from the task's generator every step
  (an infinite stream), until the exact ``KL(p_data(.|x) || pi_base(.|x))`` on held-out validation prompts
  is at most ``stop_kl`` nats, checked every ``eval_every`` steps, with a hard cap ``max_steps``; a base
  that reaches the cap is recorded ``converged: false`` with its KL. The lr is held on the units-digit
  plateau (``lr_hold_fraction``); ``init_from`` continues from a saved base. Cached under
  ``sharpening/trapbase-<key>``, the key covering the recipe, the task, the config but the cap (checked on
  load), the validation prompts and the ``init_from`` weights' SHA-256.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .task import TrapArithmeticTask

__all__ = ["TrapBaseConfig", "TrapBase", "trap_corpus", "cached_trap_base", "use_fused_gelu", "data_kl",
           "trap_data_kl", "validation_pairs", "pretrain_trap_base_to_kl"]

#: Version of the to-convergence recipe; part of its cache key (bump it when the training loop changes).
KL_RECIPE = "kl-stop-v3"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrapBaseConfig:
    """Size and pre-training schedule of the trap task's base model (spec §4.1; issue #31 probe).

    Args:
        n_layer, n_embd, n_head: transformer size (spec: 2 layers, d = 128; do not shrink it, the
            trap must be representable).
        n_strings: training strings sampled from the task distribution (issue: 50k quick, 100k-200k full).
        epochs: passes over the strings. The issue's probe needed ~1,500 optimiser steps (batch 256); batch
            128 for 1,600 steps learns the trap as well at half the compute (``base/trap_learned`` shows it).
        batch_size: strings per optimiser step.
        lr: peak AdamW learning rate (warm-up over 5% of the steps, cosine decay; core ``pretrain_tiny_lm``).
        weight_decay: AdamW weight decay.
        beta2: AdamW's second-moment decay.
        warmup_frac: share of the steps with linear warm-up (fixed-length recipe).
        seed: initialisation, corpus and shuffling seed.
        stop_kl: ``None``: the fixed-length recipe. Otherwise train on a fresh stream of strings until the
            mean exact ``KL(p_data || pi_base)`` (nats per prompt, over the 100 answers + EOS) on ``n_val``
            validation prompts is ``<= stop_kl`` (warm-up over ``warmup_steps``, then constant ``lr``).
            An unlearned units digit costs ``p_c ln 10`` nats (0.92 / 0.46 / 0.23 at p_c 0.4 / 0.2 / 0.1);
            the full preset uses 0.05, under a quarter of the hardest plateau.
        max_steps: the hard cap on optimiser steps of the to-convergence recipe.
        eval_every: steps between KL checks.
        n_val: validation prompts for the KL (drawn from the prompts not excluded, e.g. not the test ones).
        warmup_steps: linear warm-up steps of the to-convergence recipe.
        plateau_patience: KL checks without a 1% improvement before the lr is halved (to-convergence recipe).
        lr_hold_fraction: the lr is not decayed while the validation KL is above ``lr_hold_fraction * p_c ln 10``
            (the units-digit plateau, where only a high lr breaks through; 0.5: until half of it is learned).
            0 lets ``ReduceLROnPlateau`` act from the end of the warm-up (recipe v2).
        init_from: ``None`` (from scratch) or a folder with a saved trap base (``save_pretrained``) to
            continue pre-training from, on this task's strings (the full preset's coverage-sweep bases start
            from the same seed's p_c = 0.4 base, README deviation 10). Its weights' SHA-256 is in the cache key.
    """

    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    n_strings: int = 51_200
    epochs: int = 4
    batch_size: int = 128
    lr: float = 3e-3
    weight_decay: float = 0.01
    beta2: float = 0.999
    warmup_frac: float = 0.05
    seed: int = 0
    stop_kl: float | None = None
    max_steps: int = 8000
    eval_every: int = 200
    n_val: int = 256
    warmup_steps: int = 160
    plateau_patience: int = 2
    lr_hold_fraction: float = 0.5
    init_from: str | None = None

    def __post_init__(self) -> None:
        for f in ("n_layer", "n_embd", "n_head", "n_strings", "epochs", "batch_size", "max_steps", "eval_every",
                  "n_val", "warmup_steps", "plateau_patience"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"TrapBaseConfig.{f} must be an integer >= 1, got {v!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"TrapBaseConfig.n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"TrapBaseConfig.lr must be a finite number > 0, got {self.lr!r}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"TrapBaseConfig.weight_decay must be finite and >= 0, got {self.weight_decay!r}")
        if self.seed < 0:
            raise ValueError(f"TrapBaseConfig.seed must be >= 0, got {self.seed}")
        if self.stop_kl is not None and not (isinstance(self.stop_kl, (int, float)) and math.isfinite(self.stop_kl)
                                             and self.stop_kl > 0):
            raise ValueError(f"TrapBaseConfig.stop_kl must be None or a finite number > 0 (nats), got {self.stop_kl!r}")
        if not (isinstance(self.lr_hold_fraction, (int, float)) and not isinstance(self.lr_hold_fraction, bool)
                and math.isfinite(self.lr_hold_fraction)
                and 0 <= self.lr_hold_fraction <= 1):
            raise ValueError(f"TrapBaseConfig.lr_hold_fraction must be in [0, 1], got {self.lr_hold_fraction!r}")
        if self.init_from is not None:
            if not isinstance(self.init_from, (str, Path)) or not str(self.init_from):
                raise ValueError(f"TrapBaseConfig.init_from must be None or a folder path, got {self.init_from!r}")
            object.__setattr__(self, "init_from", str(self.init_from))      # JSON-able, one cache key per path
        if self.init_from is not None and not (Path(self.init_from) / "config.json").is_file():
            raise ValueError(f"TrapBaseConfig.init_from={self.init_from!r} is not a saved model folder (no "
                             "config.json); give a folder written by save_pretrained, or None to start from scratch")
        if not (math.isfinite(self.beta2) and 0 < self.beta2 < 1):
            raise ValueError(f"TrapBaseConfig.beta2 must be in (0, 1), got {self.beta2!r}")

    @property
    def steps(self) -> int:
        """Optimiser steps of the fixed-length recipe, ``ceil(epochs * n_strings / batch_size)``; the cap
        ``max_steps`` for the to-convergence recipe."""
        if self.stop_kl is not None:
            return self.max_steps
        return math.ceil(self.epochs * self.n_strings / self.batch_size)

    def spec(self):
        """The core ``TinyLMSpec`` (byte tokenizer, one example per string, 16-token window)."""
        from iclr25.core.lm import TinyLMSpec

        return TinyLMSpec(tokenizer="byte", n_layer=self.n_layer, n_embd=self.n_embd, n_head=self.n_head,
                          n_positions=32, packing="sequences", seq_len=16, steps=None, epochs=float(self.epochs),
                          batch_size=self.batch_size, lr=self.lr, weight_decay=self.weight_decay, beta2=self.beta2,
                          warmup_frac=self.warmup_frac, seed=self.seed)


@dataclass
class TrapBase:
    """A pre-trained base: ``model`` (GPT-2, eval mode, CPU), ``tokenizer`` (byte tokenizer, left padding),
    ``info`` (dict: pretrain_seconds, pretrain_cpu_seconds, final_loss, steps, cached, path, val_kl,
    converged (``None`` for the fixed-length recipe), kl_history)."""

    model: object
    tokenizer: object
    info: dict


def trap_corpus(task: TrapArithmeticTask, n_strings: int, seed: int) -> list[tuple[str, str]]:
    """``n_strings`` ``(prompt, answer)`` pairs: operands uniform over the task's prompts, answers from the
    data-generating distribution (numpy generator seeded with ``seed``)."""
    rng = np.random.default_rng(seed)
    all_pairs = task.pairs()
    pairs = all_pairs[rng.integers(0, len(all_pairs), n_strings)]
    answers = task.sample_answers(pairs, rng)
    cands = task.candidates
    return [(f"{a}+{b}=", cands[y]) for (a, b), y in zip(pairs, answers)]


def use_fused_gelu(model) -> None:
    """Swap GPT-2's ``gelu_new`` (a chain of Python-level elementwise ops) for torch's fused
    ``gelu(approximate="tanh")``: the same function (max difference ~1e-6), about 40% less CPU time per
    forward of the tiny model. Recorded in the config, so ``save_pretrained`` / ``from_pretrained`` keep it."""
    from transformers.activations import ACT2FN

    if getattr(model.config, "model_type", None) != "gpt2":
        return
    model.config.activation_function = "gelu_pytorch_tanh"
    for block in model.transformer.h:
        block.mlp.act = ACT2FN["gelu_pytorch_tanh"]


def data_kl(log_p_data, log_pi):
    """Exact ``KL(p_data(.|x) || pi(.|x)) = sum_y p_data(y) (log p_data(y) - log pi(y))`` per prompt.

    Args:
        log_p_data: ``(B, K)`` log data probabilities (``-inf`` off the support; rows sum to 1 in
            probability).
        log_pi: ``(B, K)`` model log-probabilities of the same ``K`` responses (e.g. the 100 answers + EOS
            from :func:`~iclr25.sharpening.exact.enumerate_responses`). They need not sum to 1: mass the model
            puts outside the ``K`` responses only lowers ``log_pi`` on the support, which the sum counts.

    Returns:
        ``(B,)`` float64 array, nats (``>= 0``; ``+inf`` where the model gives 0 to a supported response).

    Raises:
        ValueError: shapes differ.
    """
    lp_d = np.asarray(log_p_data, dtype=np.float64)
    lp = np.asarray(log_pi, dtype=np.float64)
    if lp_d.shape != lp.shape or lp_d.ndim != 2:
        raise ValueError(f"data_kl: need two (B, K) arrays of one shape, got {lp_d.shape} and {lp.shape}")
    p = np.exp(lp_d)
    on = p > 0
    terms = np.where(on, p * (np.where(on, lp_d, 0.0) - np.where(on, lp, 0.0)), 0.0)
    return terms.sum(-1)


def trap_data_kl(model, tokenizer, task: TrapArithmeticTask, pairs: np.ndarray) -> dict:
    """The exact KL of :func:`data_kl` for a model on the trap task's prompts ``pairs`` ``(B, 2)``.

    Returns:
        ``{"kl": mean KL (nats), "kl_per_prompt": (B,) array, "outside_mass": mean mass off the 100 answers +
        EOS, "unsupported_mass": mean mass on answers the data never gives}``.
    """
    from .exact import enumerate_responses

    lp = enumerate_responses(model, tokenizer, task.prompts(pairs), task.candidates).numpy()
    lp_d = task.log_distribution(pairs)
    kl = data_kl(lp_d, lp)
    pi = np.exp(lp)
    return {"kl": float(kl.mean()), "kl_per_prompt": kl, "outside_mass": float(np.mean(1.0 - pi.sum(-1))),
            "unsupported_mass": float(np.mean(np.where(np.isfinite(lp_d), 0.0, pi).sum(-1)))}


def validation_pairs(task: TrapArithmeticTask, n_val: int, exclude: np.ndarray | None = None,
                     seed: int = 12345) -> np.ndarray:
    """``n_val`` operand pairs ``(n_val, 2)`` for the base's KL check, drawn (fixed ``seed``) from the
    task's prompts minus ``exclude`` (the sharpening test prompts), sorted.

    Raises:
        ValueError: fewer than ``n_val`` prompts remain.
    """
    pairs = task.pairs()
    if exclude is not None and len(exclude):
        ex = {(int(a), int(b)) for a, b in np.asarray(exclude)}
        pairs = np.array([p for p in pairs if (int(p[0]), int(p[1])) not in ex], dtype=np.int64)
    if len(pairs) < n_val:
        raise ValueError(f"validation_pairs: only {len(pairs)} prompts remain after excluding {len(exclude)}, "
                         f"need n_val={n_val}; lower TrapBaseConfig.n_val")
    idx = np.sort(np.random.default_rng(seed).choice(len(pairs), n_val, replace=False))
    return pairs[idx]


def pretrain_trap_base_to_kl(task: TrapArithmeticTask, cfg: TrapBaseConfig, val: np.ndarray, *,
                             progress: bool = True):
    """Pre-train the trap base until the exact validation KL is ``<= cfg.stop_kl`` or ``cfg.max_steps``.

    Every step draws ``batch_size`` fresh ``(prompt, answer)`` strings from the task's generator (operands
    uniform over all prompts, answers from ``p_data``; numpy generator seeded by ``cfg.seed``), so no string
    is revisited. Loss: mean cross-entropy on the two answer digits and EOS. AdamW (``lr``, ``beta2``,
    ``weight_decay``), linear warm-up over ``warmup_steps``, then ``lr`` held while the validation KL is above
    ``lr_hold_fraction * p_c ln 10`` (the units-digit plateau: a lr decayed there froze the p_c = 0.2 / 0.1
    bases on it, recipe v2), after which it is halved (torch ``ReduceLROnPlateau``, down to ``lr / 64``)
    whenever the KL has not improved by 1% for ``plateau_patience`` checks (a constant lr of 3e-3 stalled at
    KL ~0.15 from its own noise); gradient clip 1.0. ``init_from`` continues from a saved base instead of a
    fresh initialisation. Every ``eval_every``
    steps (and at the cap) the mean :func:`trap_data_kl` on ``val`` is computed; training stops at the first
    check with ``KL <= stop_kl``.

    Returns:
        ``(model, info)``: GPT-2 in eval mode on CPU, and ``{"steps", "converged", "val_kl", "kl_history":
        [[step, kl, mean train loss since the last check, lr], ...], "seconds", "cpu_seconds", "final_loss"}``.

    Raises:
        ValueError: ``cfg.stop_kl`` is ``None``. FloatingPointError: the loss is not finite.
    """
    import torch

    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm
    from iclr25.core.progress import progress as bar_of

    if cfg.stop_kl is None:
        raise ValueError("pretrain_trap_base_to_kl needs TrapBaseConfig.stop_kl (nats)")
    t0, c0 = time.perf_counter(), time.process_time()
    tok = byte_tokenizer(padding_side="left")
    all_pairs = task.pairs()
    p_ids = np.asarray(tok(task.prompts(all_pairs), add_special_tokens=False)["input_ids"], dtype=np.int64)
    a_ids = np.asarray(tok(list(task.candidates), add_special_tokens=False)["input_ids"], dtype=np.int64)
    if p_ids.ndim != 2 or a_ids.ndim != 2:
        raise ValueError("pretrain_trap_base_to_kl: prompts / answers do not tokenise to one length each")
    eos = np.full((1,), tok.eos_token_id, dtype=np.int64)
    Lp = p_ids.shape[1]
    torch.manual_seed(cfg.seed)
    if cfg.init_from is not None:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(cfg.init_from)
        got = (model.config.n_layer, model.config.n_embd, model.config.n_head, model.config.vocab_size)
        want = (cfg.n_layer, cfg.n_embd, cfg.n_head, len(tok))
        if got != want:
            raise ValueError(f"TrapBaseConfig.init_from={cfg.init_from!r} has (n_layer, n_embd, n_head, vocab) = "
                             f"{got}, the config asks for {want}")
    else:
        model = tiny_causal_lm(vocab_size=len(tok), n_positions=32, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
                               n_head=cfg.n_head, seed=cfg.seed, eos_token_id=tok.eos_token_id,
                               pad_token_id=tok.pad_token_id)
    use_fused_gelu(model)
    hold_kl = cfg.lr_hold_fraction * task.p_correct * math.log(10)
    rng = np.random.default_rng([cfg.seed, 31])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, cfg.beta2))
    # after the warm-up: halve lr when the validation KL has not improved by 1% for plateau_patience checks
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=cfg.plateau_patience,
                                                         threshold=0.01, min_lr=cfg.lr / 64)
    history: list[list[float]] = []
    kl = float("inf")
    losses: list[float] = []
    step = 0
    bar = bar_of(range(cfg.max_steps), desc=f"pre-train trap base (p_c={task.p_correct}, seed {cfg.seed})",
                 unit="step", quiet=None if progress else True)
    model.train()
    for step in range(1, cfg.max_steps + 1):
        if step <= cfg.warmup_steps:
            for g in opt.param_groups:
                g["lr"] = cfg.lr * step / cfg.warmup_steps
        idx = rng.integers(0, len(all_pairs), cfg.batch_size)
        ans = task.sample_answers(all_pairs[idx], rng)
        x = np.concatenate([p_ids[idx], a_ids[ans], np.broadcast_to(eos, (cfg.batch_size, 1))], 1)
        xt = torch.from_numpy(x)
        lab = xt.clone()
        lab[:, :Lp] = -100
        loss = model(input_ids=xt, labels=lab).loss
        if not torch.isfinite(loss):
            raise FloatingPointError(f"pretrain_trap_base_to_kl: loss became {loss.item()} at step {step}; "
                                     f"lower TrapBaseConfig.lr (now {cfg.lr})")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.item()))
        bar.update(1)
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            kl = trap_data_kl(model, tok, task, val)["kl"]
            model.train()
            history.append([step, kl, float(np.mean(losses)), float(opt.param_groups[0]["lr"])])
            if step > cfg.warmup_steps and (cfg.lr_hold_fraction == 0 or kl < hold_kl):
                plateau.step(kl)
            bar.set_postfix(kl=f"{kl:.4f}", loss=f"{np.mean(losses):.3f}")
            log.info("trap base p_c=%g seed %d: step %d, validation KL %.4f nats (stop at %.3g), train loss %.4f, "
                     "lr %.3g", task.p_correct, cfg.seed, step, kl, cfg.stop_kl, np.mean(losses), history[-1][3])
            losses = []
            if kl <= cfg.stop_kl:
                break
    bar.close()
    model.eval()
    converged = bool(kl <= cfg.stop_kl)
    if not converged:
        log.warning("trap base p_c=%g seed %d did NOT converge: validation KL %.4f > %.3g nats at the cap of %d "
                    "steps", task.p_correct, cfg.seed, kl, cfg.stop_kl, cfg.max_steps)
    info = {"recipe": KL_RECIPE, "init_from": cfg.init_from, "lr_hold_kl": hold_kl, "max_steps": cfg.max_steps,
            "steps": step, "converged": converged, "val_kl": kl, "stop_kl": cfg.stop_kl,
            "kl_history": history, "final_loss": history[-1][2] if history else None,
            "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
            "n_strings_seen": step * cfg.batch_size}
    return model, info


def _kl_base_dir(task: TrapArithmeticTask, cfg: TrapBaseConfig, val: np.ndarray, cache) -> Path:
    import hashlib

    from iclr25.core.data import cache_dir

    conf = asdict(cfg)
    conf.pop("max_steps")               # the cap is checked on load (see cached_trap_base), not keyed
    if cfg.init_from is not None:       # the parent's weights, not its path, so the key survives a moved cache
        w = sorted(Path(cfg.init_from).glob("*.safetensors")) or sorted(Path(cfg.init_from).glob("*.bin"))
        if not w:
            raise ValueError(f"TrapBaseConfig.init_from={cfg.init_from!r} holds no weights file (*.safetensors)")
        conf["init_from"] = [hashlib.sha256(f.read_bytes()).hexdigest() for f in w]
    key = hashlib.sha256(json.dumps({"recipe": KL_RECIPE, "task": asdict(task), "config": conf,
                                     "val": np.asarray(val).tolist()}, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache) if cache is not None else cache_dir()
    return root / "sharpening" / f"trapbase-{key}"


_TRAIN_KEYS = {"steps": int, "converged": bool, "val_kl": (int, float), "seconds": (int, float),
               "cpu_seconds": (int, float), "kl_history": list}


def _read_train(folder: Path, strict: bool = True) -> dict:
    """``folder/trapbase_train.json`` checked for the keys and types the loader uses.

    Raises:
        ValueError (``strict``): a missing, truncated or malformed record, naming the folder and the fix;
        otherwise ``{}`` is returned for it.
    """
    p = folder / "trapbase_train.json"
    try:
        t = json.loads(p.read_text())
        bad = [k for k, ty in _TRAIN_KEYS.items() if not isinstance(t.get(k), ty)] if isinstance(t, dict) else ["*"]
        if isinstance(t, dict) and isinstance(t.get("steps"), bool):
            bad.append("steps")
        if bad:
            raise ValueError(f"missing or malformed: {', '.join(bad)}")
        if not (folder / "config.json").is_file():
            raise ValueError("no config.json")
        return t
    except (OSError, ValueError, UnicodeDecodeError) as e:
        if not strict:
            return {}
        raise ValueError(f"cached trap base {folder} is damaged ({p.name}: {e}); delete the folder to train it "
                         "again") from None


def cap_folders(keyed: Path, cfg: TrapBaseConfig) -> list[Path]:
    """Where a to-convergence base for ``cfg`` may be cached: the keyed folder, then ``<key>-cap<N>`` (the
    cap's own base, when the keyed one does not serve this cap)."""
    return [keyed, keyed.with_name(f"{keyed.name}-cap{cfg.max_steps}")]


def _reusable(train: dict, cfg: TrapBaseConfig) -> bool:
    """Whether a cached to-convergence base serves ``cfg``: it converged within ``cfg.max_steps`` (training is
    deterministic and the cap plays no part before it is reached, so a larger cap gives the same model), or
    it stopped at exactly this cap."""
    steps = train.get("steps")
    if not isinstance(steps, int):
        return False
    if train.get("converged") is True:
        return steps <= cfg.max_steps
    return train.get("max_steps", steps) == cfg.max_steps


def cached_trap_base(task: TrapArithmeticTask = TrapArithmeticTask(), cfg: TrapBaseConfig = TrapBaseConfig(), *,
                     cache: str | Path | None = None, progress: bool = True,
                     exclude: np.ndarray | None = None) -> TrapBase:
    """The pre-trained base for ``(task, cfg)``: trained once, then reloaded from the cache.

    ``cfg.stop_kl is None``: core ``cached_tiny_lm`` (fixed length, ``<cache>/sharpening/tinylm-<key>``).
    Otherwise :func:`pretrain_trap_base_to_kl` (``<cache>/sharpening/trapbase-<key>``). Either way the exact
    validation KL on ``validation_pairs(task, cfg.n_val, exclude)`` is in ``info["val_kl"]``.

    Args:
        cache: cache root (default: the iclr25 user cache, ``$ICLR25_CACHE`` or ``~/.cache/iclr25``).
        exclude: ``(M, 2)`` operand pairs the validation prompts must avoid (the sharpening test prompts).

    Returns:
        :class:`TrapBase`; ``info["cached"]`` says whether it was loaded, ``info["pretrain_seconds"]`` /
        ``info["pretrain_cpu_seconds"]`` the one-time pre-training wall and CPU time (measured when it was trained;
        CPU ``None`` for a fixed-length base cached by a version that did not measure it),
        ``info["final_loss"]`` the last answer loss (nats/token; the floor is the data's conditional entropy),
        ``info["converged"]`` (``None`` for the fixed-length recipe), ``info["val_kl"]``, ``info["steps"]``.
    """
    from iclr25.core.lm import byte_tokenizer

    val = validation_pairs(task, cfg.n_val, exclude)
    tok = byte_tokenizer(padding_side="left")
    if cfg.stop_kl is not None:
        import shutil

        from transformers import AutoModelForCausalLM

        keyed = _kl_base_dir(task, cfg, val, cache)
        # the cap is not keyed: a base trained under another cap that does not serve this one (it stopped at
        # its own cap, or converged later than this cap) is kept, and this cap's base lives beside it
        folders = cap_folders(keyed, cfg)
        folder, train, cached = folders[-1], {}, False
        for f in folders:
            if (f / "config.json").is_file() or (f / "trapbase_train.json").is_file():
                t = _read_train(f)
                if _reusable(t, cfg):
                    folder, train, cached = f, t, True
                    break
                log.info("cached trap base %s does not serve cap %d (it %s after %s steps, cap %s); training this "
                         "cap's base into %s", f, cfg.max_steps, "converged" if t.get("converged") else
                         "stopped unconverged", t.get("steps"), t.get("max_steps"), folders[-1])
            elif f is keyed:
                folder = keyed
                break
        t0 = time.perf_counter()
        if cached:
            try:
                model = AutoModelForCausalLM.from_pretrained(folder).eval()
            except (OSError, ValueError, RuntimeError) as e:
                raise ValueError(f"cached trap base {folder} is damaged ({type(e).__name__}: {e}); delete the "
                                 "folder to train it again") from None
        else:
            log.info("pre-training the trap base to KL <= %g (cap %d steps); cached at %s", cfg.stop_kl,
                     cfg.max_steps, folder)
            model, train = pretrain_trap_base_to_kl(task, cfg, val, progress=progress)
            tmp = folder.with_name(folder.name + f".tmp-{time.time_ns()}")
            try:
                tmp.mkdir(parents=True, exist_ok=True)
                model.save_pretrained(tmp)
                (tmp / "trapbase_train.json").write_text(json.dumps(train, indent=2, default=str) + "\n")
                if folder.exists() and _reusable(_read_train(folder, strict=False), cfg):
                    shutil.rmtree(tmp, ignore_errors=True)   # another process finished the same base first
                else:
                    if folder.exists():
                        shutil.rmtree(folder)
                    tmp.rename(folder)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        seconds = time.perf_counter() - t0
        use_fused_gelu(model)
        model.eval()
        info = {"cached": cached, "path": str(folder), "recipe": KL_RECIPE,
                "pretrain_seconds": float(train["seconds"]), "pretrain_cpu_seconds": float(train["cpu_seconds"]),
                "load_seconds": seconds if cached else 0.0, "final_loss": train.get("final_loss"),
                "steps": int(train["steps"]), "converged": bool(train["converged"]), "val_kl": float(train["val_kl"]),
                "stop_kl": cfg.stop_kl, "max_steps": cfg.max_steps, "kl_history": train["kl_history"],
                "task": asdict(task), "config": asdict(cfg)}
        return TrapBase(model, tok, info)

    from iclr25.core.lm import cached_tiny_lm
    from iclr25.core.lm.pretrain import corpus_sha256, tiny_lm_dir

    texts = trap_corpus(task, cfg.n_strings, cfg.seed)
    spec = cfg.spec()
    folder = tiny_lm_dir("sharpening", spec, corpus_sha256(texts), cache)
    cached = (folder / "config.json").is_file()
    if not cached:
        log.info("pre-training the trap base once (%d steps); cached at %s", cfg.steps, folder)
    t0 = time.perf_counter()
    model, _, folder = cached_tiny_lm("sharpening", texts, spec, cache=cache, progress=progress)
    seconds = time.perf_counter() - t0
    train = json.loads((Path(folder) / "tinylm_train.json").read_text()) if (Path(folder) / "tinylm_train.json").is_file() else {}
    use_fused_gelu(model)
    model.eval()
    kl = trap_data_kl(model, tok, task, val)["kl"]
    cpu = train.get("cpu_seconds")  # the core's pre-training log records it since issue #44; wall time never stands in
    if cpu is None:
        log.warning("trap base %s was cached by an older version that recorded wall time only: pretrain_cpu_seconds "
                    "is None (not measured); delete the folder to pre-train it again and measure it", folder)
    info = {"cached": cached, "path": str(folder), "recipe": "fixed-length",
            "pretrain_seconds": float(train.get("seconds", seconds)),
            "pretrain_cpu_seconds": None if cpu is None else float(cpu),
            "load_seconds": seconds if cached else 0.0, "final_loss": train.get("final_loss"),
            "steps": train.get("steps", cfg.steps), "converged": None, "val_kl": kl,
            "task": asdict(task), "config": asdict(cfg)}
    return TrapBase(model, tok, info)
