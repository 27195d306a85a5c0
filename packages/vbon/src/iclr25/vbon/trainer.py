"""The vBoN trainer (and, with ``method="rlhf"``, the RLHF baseline) — spec §1.4–1.5.

One step:

1. sample ``prompts_per_step`` training prompts and ``k = samples_per_prompt`` continuations each from
   ``pi_theta``;
2. score them with the reward function ``r``;
3. transform: vBoN → ``vbon_reward(log F̂(x, r), log pi_ref(y|x), N)``; RLHF → ``r``;
4. fold the KL penalty into the sequence return: ``R = reward - beta * sum_t (log pi_theta - log pi_ref)``
   with ``beta = 1/(N-1)`` (vBoN) or the RLHF ``beta``;
5. leave-one-out (RLOO) advantages within each prompt's ``k`` samples; REINFORCE, or PPO-clip epochs.

The model and optimiser go through ``accelerate.Accelerator`` so the same code runs under
``accelerate launch`` (DDP/FSDP); on one CPU it is a thin wrapper.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .cdf import RewardCDFCache
from .config import VBoNConfig
from .objective import kl_k3, policy_gradient_loss, rloo_advantages, vbon_reward
from .rewards import RewardFn, call_reward
from .sampling import Samples, response_logprobs, sample, sample_texts

__all__ = ["VBoNTrainer", "Rollout", "evaluate_policy", "win_rate", "check_sharding"]

log = logging.getLogger(__name__)


def win_rate(policy_rewards, ref_rewards) -> tuple[float, float]:
    """Win rate of policy samples against paired reference samples (ties count 1/2) and its standard error.

    Args:
        policy_rewards, ref_rewards: ``(B,)`` rewards, paired element-wise (same prompt).

    Returns:
        ``(mean, standard_error)``.
    """
    a = torch.as_tensor(policy_rewards, dtype=torch.float64)
    b = torch.as_tensor(ref_rewards, dtype=torch.float64)
    if a.shape != b.shape or a.numel() == 0:
        raise ValueError(f"win_rate needs two non-empty equal-shape vectors, got {tuple(a.shape)} and {tuple(b.shape)}")
    w = (a > b).double() + 0.5 * (a == b).double()
    se = float(w.std(unbiased=True) / math.sqrt(w.numel())) if w.numel() > 1 else float("nan")
    return float(w.mean()), se


@torch.no_grad()
def evaluate_policy(policy, ref_policy, tokenizer, reward_fn: RewardFn, prompts: Sequence[str],
                    samples_per_prompt: int = 4, max_new_tokens: int = 24, ref_rewards: torch.Tensor | None = None,
                    temperature: float = 1.0) -> dict[str, float]:
    """Win rate against fresh reference samples, mean reward and ``KL(pi_theta || pi_ref)`` (spec §4.2).

    Args:
        policy, ref_policy, tokenizer: models sharing one tokenizer.
        reward_fn: ``(prompts, continuations) -> (B,)``.
        prompts: ``P`` evaluation prompts.
        samples_per_prompt: ``k`` policy samples per prompt (``B = P k``).
        ref_rewards: optional ``(P k,)`` rewards of independent reference samples (the same pool can be
            shared between policies); drawn here when ``None``.

    Returns:
        dict with ``win_rate``, ``win_rate_se``, ``reward``, ``reward_se``, ``kl`` (mean of
        ``sum_t log pi_theta - log pi_ref`` over policy samples), ``kl_se``, ``kl_k3`` (official estimator).
    """
    prompts = list(prompts)
    if not prompts:
        raise ValueError("evaluate_policy: the prompt set is empty")
    was = policy.training
    policy.eval()
    try:
        return _evaluate(policy, ref_policy, tokenizer, reward_fn, prompts, samples_per_prompt, max_new_tokens,
                         ref_rewards, temperature)
    finally:
        policy.train(was)


def _evaluate(policy, ref_policy, tokenizer, reward_fn, prompts, samples_per_prompt, max_new_tokens, ref_rewards,
              temperature) -> dict[str, float]:
    s = sample(policy, tokenizer, prompts, samples_per_prompt, max_new_tokens, temperature)
    r = call_reward(reward_fn, s.prompts, s.continuations)
    lp = response_logprobs(policy, s)
    lr = response_logprobs(ref_policy, s)
    mask = s.response_mask.to(lp.dtype)
    kl_seq = ((lp - lr) * mask).sum(1).double().cpu()
    k3 = kl_k3(lp, lr, mask).double().cpu()
    if ref_rewards is None:
        ref_txt = sample_texts(ref_policy, tokenizer, prompts, samples_per_prompt, max_new_tokens)
        ref_rewards = call_reward(reward_fn, s.prompts, [t for row in ref_txt for t in row])
    wr, wr_se = win_rate(r, ref_rewards)
    n = r.numel()
    return {"win_rate": wr, "win_rate_se": wr_se, "reward": float(r.mean()), "reward_se": float(r.std() / math.sqrt(n)),
            "kl": float(kl_seq.mean()), "kl_se": float(kl_seq.std() / math.sqrt(n)), "kl_k3": float(k3.mean()),
            "n_samples": n}


_RANK_STRIDE = 1_000_003


def check_sharding(accelerator) -> None:
    """Refuse the sharding set-ups vBoN's rollouts cannot use (``accelerate launch --config_file ...``).

    Rollouts are sampled with ``generate`` from the full policy on every rank: DeepSpeed ZeRO-3 partitions
    the weights (gathering them needs ``deepspeed`` itself, which this package does not import) and FSDP2
    has no ``summon_full_params``. Supported: one process, DDP, FSDP v1 (``configs/accelerate/fsdp.yaml``),
    DeepSpeed ZeRO-1/2 (``configs/accelerate/deepspeed-zero2.yaml``).

    The update takes one optimiser step per rollout batch, so gradient accumulation must be off (a
    DeepSpeed config's ``gradient_accumulation_steps`` reaches the Accelerator through
    ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS``; with k > 1 the loss would be divided by k and DeepSpeed
    would step only every k-th update).

    Raises:
        ValueError: ZeRO stage 3, ``fsdp_version: 2``, or gradient accumulation other than 1.
    """
    from accelerate.utils import DistributedType

    gas = getattr(accelerator, "gradient_accumulation_steps", 1)
    if gas != 1:
        raise ValueError(f"gradient_accumulation_steps is {gas}: vBoN takes one optimiser step per rollout "
                         "batch; set gradient_accumulation_steps: 1 in the accelerate config (raise "
                         "--prompts-per-step for a larger batch)")
    dt = accelerator.distributed_type
    state = getattr(accelerator, "state", None)
    if dt == DistributedType.DEEPSPEED:
        plugin = getattr(state, "deepspeed_plugin", None)
        if plugin is not None and int(getattr(plugin, "zero_stage", 0)) == 3:
            raise ValueError("vBoN samples rollouts from the whole policy on every rank, and DeepSpeed ZeRO-3 "
                             "partitions its weights; launch with configs/accelerate/deepspeed-zero2.yaml or "
                             "configs/accelerate/fsdp.yaml instead")
    if dt == DistributedType.FSDP:
        plugin = getattr(state, "fsdp_plugin", None)
        if plugin is not None and int(getattr(plugin, "fsdp_version", 1)) == 2:
            raise ValueError("vBoN's rollouts under FSDP need summon_full_params (FSDP v1); set fsdp_version: 1 "
                             "in the accelerate config (configs/accelerate/fsdp.yaml)")


def _disable_dropout(model) -> None:
    """Set every ``nn.Dropout`` probability to 0 (TRL's ``disable_dropout_in_model``)."""
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0


@dataclass
class Rollout:
    """One rank's rollout batch. ``B = prompts_per_step * samples_per_prompt``.

    Attributes:
        samples: the :class:`~iclr25.vbon.sampling.Samples` (``(B, L)`` tensors).
        rewards: ``(B,)`` float64 raw rewards ``r(x, y)``.
        old_logprobs: ``(B, L)`` token log-probs under the sampling policy (eval mode, no grad).
        mask: ``(B, L)`` float, 1 on continuation tokens.
        kl_seq: ``(B,)`` ``sum_t log pi_theta - log pi_ref`` (nats).
        transformed: ``(B,)`` vBoN (or raw RLHF) reward before the KL penalty.
        returns: ``(B,)`` ``transformed - kl_coef * kl_seq``.
        advantages: ``(B,)`` RLOO advantages.
    """

    samples: Samples
    rewards: torch.Tensor
    old_logprobs: torch.Tensor
    mask: torch.Tensor
    kl_seq: torch.Tensor
    transformed: torch.Tensor
    returns: torch.Tensor
    advantages: torch.Tensor


class VBoNTrainer:
    """Policy-gradient fine-tuning towards ``pi_BoN`` (vBoN) or with the raw reward (RLHF).

    Args:
        policy: the trainable causal LM (initialised from ``ref_policy``; it is modified in place).
        ref_policy: the frozen reference ``pi_ref``.
        tokenizer: shared tokenizer.
        reward_fn: ``(prompts, continuations) -> (B,)`` floats.
        prompts: training prompts (non-empty).
        config: :class:`~iclr25.vbon.config.VBoNConfig`.
        cdf: the reward CDF cache of the training prompts (required for ``method="vbon"``).
        accelerator: an ``accelerate.Accelerator`` (default: a new one).

    Raises:
        ValueError: empty prompts, or a vBoN run without a CDF cache / with prompts missing from it.
    """

    def __init__(self, policy, ref_policy, tokenizer, reward_fn: RewardFn, prompts: Sequence[str],
                 config: VBoNConfig = VBoNConfig(), cdf: RewardCDFCache | None = None, accelerator=None) -> None:
        from accelerate import Accelerator

        self.cfg = config
        self.prompts = list(prompts)
        if not self.prompts:
            raise ValueError("VBoNTrainer: the prompt set is empty")
        if config.method == "vbon":
            if cdf is None:
                raise ValueError("method='vbon' needs a RewardCDFCache of the training prompts (cdf=...)")
            cdf.rows(self.prompts)  # raises KeyError naming a missing prompt
        self.cdf = cdf
        self.tokenizer = tokenizer
        self.reward_fn = reward_fn
        self.accelerator = accelerator or Accelerator(cpu=not torch.cuda.is_available())
        check_sharding(self.accelerator)
        opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=1e-6)
        self.policy, self.optimizer = self.accelerator.prepare(policy, opt)
        self.ref_policy = ref_policy.to(self.accelerator.device).eval()
        for p in self.ref_policy.parameters():
            p.requires_grad_(False)
        if config.disable_dropout:
            _disable_dropout(policy)
        self.step = 0
        # one prompt stream per rank (rank 0 keeps the single-process stream): ranks draw different data
        self.generator = torch.Generator().manual_seed(config.seed + _RANK_STRIDE * int(self.accelerator.process_index))
        self.history: list[dict[str, float]] = []
        if config.temperature != 1.0 and config.logprob_temperature == "one":
            log.warning("--vbon.temperature %s with --vbon.logprob-temperature one: rollouts come from the tempered "
                        "policy but are scored at temperature 1 (off-policy updates, the trlx reading); the "
                        "default 'sampling' scores at the sampling temperature", config.temperature)

    @property
    def score_temperature(self) -> float:
        """Temperature of the policy's log-probs: the sampling temperature (``logprob_temperature='sampling'``)
        or 1."""
        return self.cfg.temperature if self.cfg.logprob_temperature == "sampling" else 1.0

    def _full_policy_for_sampling(self):
        """Context and model to sample rollouts from. Under FSDP (v1) the root's own shards (embeddings,
        head) are gathered with ``FullyShardedDataParallel.summon_full_params(recurse=False, writeback=False)``
        and ``generate`` runs through the wrapped policy, so each decoder-layer unit gathers its weights in
        its own forward; otherwise (one process, DDP, ZeRO-2) the unwrapped policy, no context."""
        from contextlib import nullcontext

        from accelerate.utils import DistributedType

        if self.accelerator.distributed_type == DistributedType.FSDP:
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            return FSDP.summon_full_params(self.policy, recurse=False, writeback=False), self.policy
        return nullcontext(), self.unwrapped

    @property
    def unwrapped(self):
        return self.accelerator.unwrap_model(self.policy)

    def transformed_reward(self, prompts: Sequence[str], r: torch.Tensor, log_ref: torch.Tensor) -> torch.Tensor:
        """The sequence reward before the KL penalty: vBoN (exact / L1) or the raw ``r`` (RLHF)."""
        if self.cfg.method == "rlhf":
            return r
        lf = self.cdf.log_cdf(prompts, r)
        return vbon_reward(lf, log_ref, self.cfg.n, self.cfg.bound, self.cfg.scale)

    @property
    def rank(self) -> int:
        """This process's index under ``accelerate launch``/``torchrun`` (0 on one process)."""
        return int(self.accelerator.process_index)

    def _eval_forward(self):
        """Context: the policy in eval mode (dropout off) for rollouts, old log-probs and the KL estimate."""
        trainer = self

        class _Ctx:
            def __enter__(self):
                self.was = trainer.policy.training
                trainer.policy.eval()

            def __exit__(self, *exc):
                trainer.policy.train(self.was)

        return _Ctx()

    @torch.no_grad()
    def rollout(self) -> Rollout:
        """Draw this rank's batch (its own prompt generator and sampling seed), score it and compute the
        old policy / reference log-probs, the KL estimate and the RLOO advantages — all in eval mode
        (dropout off, as TRL's PPO trainer does), so the on-policy PPO ratio is exactly 1."""
        cfg = self.cfg
        idx = torch.randint(len(self.prompts), (cfg.prompts_per_step,), generator=self.generator)
        batch = [self.prompts[i] for i in idx.tolist()]
        torch.manual_seed(cfg.seed * 100_003 + self.step + _RANK_STRIDE * self.rank)
        gather, sampler = self._full_policy_for_sampling()
        with self._eval_forward():
            with gather:
                s = sample(sampler, self.tokenizer, batch, cfg.samples_per_prompt, cfg.max_new_tokens,
                           cfg.temperature)
            r = call_reward(self.reward_fn, s.prompts, s.continuations)
            old = response_logprobs(self.policy, s, temperature=self.score_temperature)
            mask_full = s.response_mask + (s.prompt_mask if cfg.ref_logprob_scope == "full" else 0)
            ref_all = response_logprobs(self.ref_policy, s, mask_full)
        ref = ref_all * s.response_mask
        maskf = s.response_mask.to(old.dtype)
        kl_seq = ((old - ref) * maskf).sum(1)
        rew = self.transformed_reward(s.prompts, r, ref_all.sum(1).double().cpu()).to(old.dtype).to(old.device)
        returns = rew - cfg.kl_coef * kl_seq
        adv = rloo_advantages(returns, cfg.samples_per_prompt)
        return Rollout(s, r, old, maskf, kl_seq, rew, returns, adv)

    def update(self, ro: Rollout) -> torch.Tensor:
        """RLOO / PPO-clip epochs on one rollout; gradients are averaged over ranks (DDP). Returns the last loss."""
        cfg = self.cfg
        self.policy.train(not cfg.disable_dropout)
        epochs = cfg.ppo_epochs if cfg.algo == "ppo" else 1
        for _ in range(epochs):
            logp = response_logprobs(self.policy, ro.samples, temperature=self.score_temperature)
            loss = policy_gradient_loss(logp, ro.old_logprobs, ro.mask, ro.advantages,
                                        clip=cfg.clip if cfg.algo == "ppo" else None)
            self.optimizer.zero_grad(set_to_none=True)
            self.accelerator.backward(loss)
            self.accelerator.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
            self.optimizer.step()
        return loss.detach()

    def train_step(self) -> dict[str, float]:
        """One rollout + update. Returns the step's metrics (this rank's batch)."""
        ro = self.rollout()
        loss = self.update(ro)
        self.step += 1
        m = {"step": self.step, "reward": float(ro.rewards.mean()), "vbon_reward": float(ro.transformed.mean()),
             "kl": float(ro.kl_seq.mean()), "return": float(ro.returns.mean()), "loss": float(loss)}
        self.history.append(m)
        return m

    def train(self, steps: int | None = None, progress: bool = True, checkpoint_dir: Path | None = None,
              save_every: int = 0, metrics_path: Path | None = None) -> list[dict[str, float]]:
        """Run ``steps`` (default ``config.steps``) updates from the current step; checkpoint every
        ``save_every`` steps into ``checkpoint_dir``; append per-step metrics to ``metrics_path``."""
        from iclr25.core.progress import progress as progress_bar

        total = self.cfg.steps if steps is None else steps
        bar = progress_bar(range(self.step, total), desc=f"{self.cfg.method} N={self.cfg.n}" if self.cfg.method == "vbon"
                           else f"rlhf beta={self.cfg.beta}", unit="step", quiet=None if progress else True)
        for _ in bar:
            t0 = time.perf_counter()
            m = self.train_step()
            m["seconds"] = time.perf_counter() - t0
            bar.set_postfix(reward=f"{m['reward']:.2f}", kl=f"{m['kl']:.2f}")
            if metrics_path is not None:
                with open(metrics_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(m) + "\n")
            if checkpoint_dir is not None and save_every and (self.step % save_every == 0 or self.step == total):
                self.save_checkpoint(checkpoint_dir)
        return self.history

    def save_checkpoint(self, path: str | Path) -> Path:
        """``save_pretrained`` policy (safetensors) + tokenizer + ``trainer_state.pt`` (optimizer, step, resume
        key) + ``rng_state.json`` (every rank's prompt generator and global RNG states, through
        :func:`iclr25.core.checkpoint.capture_rng_state`).

        Written with :func:`iclr25.core.checkpoint.atomic_folder`: a kill at any moment leaves the previous
        checkpoint or this one, never a mix of the two."""
        from accelerate.utils import gather_object

        from iclr25.core.checkpoint import atomic_folder, atomic_write_json, capture_rng_state

        d = Path(path)
        self.accelerator.wait_for_everyone()
        mine = {"rank": self.rank, "generator": base64.b64encode(self.generator.get_state().numpy().tobytes()).decode(),
                "rng": capture_rng_state(torch_state=True)}
        states = gather_object([mine])  # every rank's state, in rank order, on every rank
        if self.accelerator.is_main_process:
            with atomic_folder(d) as tmp:
                self.unwrapped.save_pretrained(tmp)
                self.tokenizer.save_pretrained(tmp)
                # "global_step", not "step": the optimiser's state dicts have "step" keys, and pickle memoises a
                # key string shared with them in a fresh run but not in a resumed one (same values, other bytes)
                torch.save({"optimizer": self.optimizer.state_dict(), "global_step": self.step,
                            "config": json.dumps(self._resume_key(), sort_keys=True)}, tmp / "trainer_state.pt")
                atomic_write_json(tmp / "rng_state.json", {"processes": len(states), "ranks": states})
        self.accelerator.wait_for_everyone()
        return d

    RESUMABLE_CHANGES = ("steps",)
    """``VBoNConfig`` fields a resumed run may change; every other one changes the objective, the sampling
    or the optimiser state that the checkpoint holds."""

    def _resume_key(self) -> dict:
        from dataclasses import asdict

        key = {k: v for k, v in asdict(self.cfg).items() if k not in self.RESUMABLE_CHANGES}
        key.update(n_prompts=len(self.prompts), processes=self.accelerator.num_processes)
        return key

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore policy weights, optimizer, step and RNG from :meth:`save_checkpoint` output."""
        from safetensors.torch import load_file

        from iclr25.core.checkpoint import recover_folder, restore_rng_state

        d = Path(path)
        recover_folder(d)
        if not (d / "trainer_state.pt").is_file():
            raise FileNotFoundError(f"no checkpoint in {d} (expected trainer_state.pt); run without --resume")
        fix = f"delete {d} or train without --resume (or into another --out)"

        def _read(f, loader):
            try:
                obj = loader(f)
            except Exception as e:  # UnpicklingError / KeyError / SafetensorError / EOFError on a torn file
                raise ValueError(f"checkpoint file {f} is torn or not written by VBoNTrainer "
                                 f"({type(e).__name__}); {fix}") from e
            if not isinstance(obj, dict):
                raise ValueError(f"checkpoint file {f} is not written by VBoNTrainer; {fix}")
            return obj

        load_pt = lambda f: torch.load(f, weights_only=True)  # noqa: E731
        st = _read(d / "trainer_state.pt", load_pt)
        if not {"optimizer", "global_step", "config"} <= set(st):
            raise ValueError(f"checkpoint file {d / 'trainer_state.pt'} is not written by this VBoNTrainer version "
                             f"(no 'config'/'global_step'); {fix}")
        if "config" in st:
            saved, now = json.loads(st["config"]), self._resume_key()
            changed = [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(saved) | set(now))
                       if saved.get(k) != now.get(k)]
            if changed:
                raise ValueError(f"--resume: checkpoint {d} was written with other settings ({'; '.join(changed)}); "
                                 f"only --vbon.steps may change on resume; {fix}")
        def _json(f):
            return json.loads(Path(f).read_text(encoding="utf-8"))

        rng = _read(d / "rng_state.json", _json)
        ranks = rng.get("ranks")
        if not isinstance(ranks, list) or len(ranks) <= self.rank:
            raise ValueError(f"{d / 'rng_state.json'} holds no RNG state of rank {self.rank}: the checkpoint was "
                             f"written with fewer processes; resume with the same number of processes")
        weights = _read(d / "model.safetensors", lambda f: load_file(str(f)))
        try:
            res = self.unwrapped.load_state_dict(weights, strict=False)
        except RuntimeError as e:  # size mismatch: another architecture
            raise ValueError(f"checkpoint {d} does not match this policy ({str(e).splitlines()[-1].strip()}); "
                             f"resume with the --policy it was trained from, or {fix}") from e
        if res.unexpected_keys:
            raise ValueError(f"checkpoint {d} does not match this policy (unexpected weights "
                             f"{res.unexpected_keys[:3]}); resume with the --policy it was trained from, or {fix}")
        self.optimizer.load_state_dict(st["optimizer"])
        self.step = int(st["global_step"])
        mine = ranks[self.rank]
        self.generator.set_state(torch.frombuffer(bytearray(base64.b64decode(mine["generator"])), dtype=torch.uint8))
        restore_rng_state(mine["rng"])
