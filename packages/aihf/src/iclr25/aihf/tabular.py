"""AIHF with an explicit linear reward on the tabular tasks: the single loop, the exact optimum, the baselines.

- :func:`train_aihf` — the paper's single-loop alternating algorithm (spec "Algorithm"): K policy steps under the
  current reward, agent samples (or exact expectations), one reward step on ``aihf_reward_loss``.
- :func:`fit_aihf_exact` — the optimum of the upper-level objective with the *exact* lower level (bandit), by
  L-BFGS: ``min_theta w * mean_D[-log pi_theta(y_E|x)] + (1-w) * mean_P[-log sigmoid(Delta_theta)] + l2 ||theta||^2``;
  convex for a linear reward (spec "Gradients").
- :func:`run_baseline` — RLHF (w = 0), AIHF, IRL (w = 1), SFT (add-one smoothed demonstration frequencies),
  SFT->RLHF (``pi ∝ pi_SFT exp(r_P / beta)``), on the same data.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .config import AIHFConfig
from .losses import aihf_reward_loss, combine_terms
from .soft import soft_policy, soft_value_iteration
from .tasks import DT, BanditDemos, BanditTask, GridworldMDP

__all__ = ["TrainResult", "train_aihf", "fit_aihf_exact", "run_baseline", "sft_policy", "cosine_distance",
           "METHODS"]

log = logging.getLogger("iclr25.aihf")
METHODS = ("rlhf", "aihf", "irl", "sft", "sft-rlhf")


@dataclass
class TrainResult:
    """What :func:`train_aihf` returns: reward parameters ``theta`` ``(d,)``, the policy state (``log_pi`` ``(X, Y)``
    or ``(S, A)``, and the MDP's soft values), the iteration reached, the history and the resumable state."""

    theta: torch.Tensor
    policy: dict
    iteration: int
    history: list[dict] = field(default_factory=list)
    state: dict = field(default_factory=dict)

    @property
    def log_pi(self) -> torch.Tensor:
        return self.policy["log_pi"]


def _minibatch(n: int, size: int | None, rng: np.random.Generator) -> torch.Tensor | None:
    if size is None or size >= n:
        return None
    return torch.from_numpy(rng.choice(n, size=size, replace=False))


def train_aihf(task: BanditTask | GridworldMDP, demos: Any, prefs: Any, config: AIHFConfig = AIHFConfig(), *,
               seed: int = 0, theta0: torch.Tensor | None = None, resume: dict | None = None,
               checkpoint: Callable[[dict], None] | None = None, checkpoint_every: int = 50,
               log_every: int = 10, progress: bool = False) -> TrainResult:
    """The single-loop alternating AIHF algorithm with a linear reward ``r_theta = phi^T theta`` (spec "Algorithm").

    For ``t = 0 .. T-1``: (1) policy step — ``K = config.policy_steps`` mirror steps (bandit) or warm-started soft
    Bellman backups (MDP) toward the soft-optimal policy of ``theta_t``; (2) sampling — agent responses/trajectories
    from the new policy for the demonstration prompts (``config.agent_samples``; 0 = exact expectation);
    (3) reward step — one SGD step of size ``alpha = config.reward_lr`` on
    ``aihf_reward_loss(...) + l2 ||theta||^2`` over a minibatch.

    Args:
        task: a :class:`BanditTask` or :class:`GridworldMDP`.
        demos: the task's demonstrations (may be empty when ``w = 0``).
        prefs: the task's preference pairs (may be empty when ``w = 1``).
        config: :class:`AIHFConfig` (``w``, ``beta`` is taken from the task, ``reward_lr``, ``policy_steps``...).
        seed: seeds the minibatch / agent-sample generator.
        theta0: ``(d,)`` initial reward (default zeros).
        resume: a ``TrainResult.state`` dict to continue from (theta, policy, optimiser, iteration, RNG).
        checkpoint: called with the resumable state every ``checkpoint_every`` iterations and at the end.
        log_every: record the loss every this many iterations in ``history``.
        progress: show a progress bar.

    Returns:
        :class:`TrainResult`.

    Raises:
        ValueError: ``config.beta`` differs from the task's ``beta`` (the lower level is the task's), a weighted term
            without data, the logistic demo loss with exact expectations on an MDP, NaN rewards or losses, a
            ``resume`` state already past ``config.iters``.
    """
    from iclr25.core.progress import progress as bar

    if abs(config.beta - task.beta) > 1e-12:
        raise ValueError(f"config.beta={config.beta} differs from the task's beta={task.beta}; the lower level is "
                         "the task's KL-regularised policy, set them equal")
    if config.demo_loss == "logistic" and config.agent_samples == 0 and isinstance(task, GridworldMDP):
        raise ValueError("demo_loss='logistic' on an MDP needs sampled agent trajectories: set agent_samples >= 1")
    Phi_D = task.demo_features(demos) if demos is not None and len(demos) else torch.zeros(0, task.d, dtype=DT)
    if prefs is not None and len(prefs):
        Phi_w, Phi_l = task.pref_features(prefs)
    else:
        Phi_w = Phi_l = torch.zeros(0, task.d, dtype=DT)
    if config.w > 0 and Phi_D.shape[0] == 0:
        raise ValueError(f"w={config.w} > 0 needs demonstrations; none were given")
    if config.w < 1 and Phi_w.shape[0] == 0:
        raise ValueError(f"w={config.w} < 1 needs preference pairs; none were given")
    theta = torch.zeros(task.d, dtype=DT) if theta0 is None else theta0.to(DT).clone()
    theta.requires_grad_(True)
    opt = {"name": "sgd", "lr": config.reward_lr, "steps": 0}  # plain SGD: no moment buffers to restore
    rng = np.random.default_rng(seed)
    policy = task.policy_init()
    start, history = 0, []
    if resume is not None:
        with torch.no_grad():
            theta.copy_(resume["theta"])
        opt.update(dict(resume["optimizer"]))
        policy = dict(resume["policy"])
        start = int(resume["iteration"])
        if start > config.iters:
            raise ValueError(f"iters={config.iters}: the checkpoint is already at iteration {start}; --iters is the "
                             f"total to reach, pass more than {start}")
        if start == config.iters:
            log.warning("the checkpoint is already at iteration %d = iters: nothing to train (pass a larger --iters "
                        "to continue)", start)
        rng.bit_generator.state = resume["rng"]
        history = list(resume.get("history", []))

    def state_at(it: int) -> dict:
        return {"theta": theta.detach().clone(), "optimizer": dict(opt), "policy": policy, "iteration": it,
                "rng": rng.bit_generator.state, "history": history}

    it = start
    for it in bar(range(start, config.iters), desc=f"AIHF {task.kind} (w={config.w:g})", unit="it",
                  quiet=None if progress else True):
        with torch.no_grad():
            policy = task.policy_step(policy, theta.detach(), config.policy_steps, config.policy_lr)
        r_table = task.reward(theta)
        demo_idx = _minibatch(Phi_D.shape[0], config.demo_batch, rng)
        pref_idx = _minibatch(Phi_w.shape[0], config.pref_batch, rng)
        if config.w > 0:
            sub = demos if demo_idx is None else _subset(demos, demo_idx)
            r_demo = (Phi_D if demo_idx is None else Phi_D[demo_idx]) @ theta
            r_agent, weights = task.agent_rewards(policy, r_table, sub, config.agent_samples, rng)
        else:
            r_demo = r_agent = weights = None
        if config.w < 1:
            Fw, Fl = (Phi_w, Phi_l) if pref_idx is None else (Phi_w[pref_idx], Phi_l[pref_idx])
            r_w, r_l = Fw @ theta, Fl @ theta
        else:
            r_w = r_l = None
        loss = aihf_reward_loss(r_demo, r_agent, r_w, r_l, config.w, task.beta, config.demo_loss,
                                weighting=config.weighting, agent_weights=weights, check_finite=False)
        total = loss + config.l2 * (theta * theta).sum()
        value = float(total.detach())
        if not math.isfinite(value):
            raise ValueError(f"the AIHF loss became {value} at iteration {it} (a NaN/inf reward, or divergence: "
                             f"lower reward_lr, now {config.reward_lr})")
        (grad,) = torch.autograd.grad(total, theta)
        if (it + 1) % log_every == 0 or it == start:
            history.append({"iteration": it + 1, "loss": value, "grad_norm": float(grad.norm())})
        with torch.no_grad():
            theta -= opt["lr"] * grad
        opt["steps"] += 1
        if checkpoint is not None and (it + 1) % checkpoint_every == 0 and it + 1 < config.iters:
            checkpoint(state_at(it + 1))
    end = max(start, config.iters)
    st = state_at(end)  # the loop's state (resuming with more iterations continues exactly from here)
    if checkpoint is not None:
        checkpoint(st)
    with torch.no_grad():  # the policy for the final reward (the lower level tracks theta_T)
        final = task.policy_step(policy, theta.detach(), config.policy_steps, config.policy_lr)
    return TrainResult(theta.detach().clone(), final, end, history, st)


def _subset(demos: Any, idx: torch.Tensor) -> Any:
    if isinstance(demos, BanditDemos):
        return BanditDemos(demos.x[idx], demos.y[idx])
    return type(demos)(demos.states[idx], demos.actions[idx])


def exact_objective(task: BanditTask, demos: BanditDemos | None, prefs: Any, theta: torch.Tensor, w: float,
                    l2: float, weighting: str = "mean") -> torch.Tensor:
    """The upper-level loss with the exact lower level on a bandit (differentiable in ``theta``)."""
    demo = -task.demo_log_likelihood(theta, demos) if w > 0 and demos is not None and len(demos) else None
    pref = None
    if w < 1 and prefs is not None and len(prefs):
        Fw, Fl = task.pref_features(prefs)
        pref = -torch.nn.functional.logsigmoid((Fw - Fl) @ theta)
    return combine_terms(demo, pref, w, weighting) + l2 * (theta * theta).sum()


def fit_aihf_exact(task: BanditTask, demos: BanditDemos | None, prefs: Any, w: float, l2: float = 1e-4,
                   weighting: str = "mean", *, gtol: float = 1e-12, max_iter: int = 20_000) -> torch.Tensor:
    """The optimum ``theta_opt`` ``(d,)`` of the exact upper-level objective on a bandit, by scipy's L-BFGS-B with
    autograd gradients in float64.

    Raises:
        ValueError: a weighted term without data; L-BFGS ending on a non-finite objective.
    """
    from scipy.optimize import minimize

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        th = torch.from_numpy(x).requires_grad_(True)
        f = exact_objective(task, demos, prefs, th, w, l2, weighting)
        f.backward()
        return float(f.detach()), th.grad.numpy().copy()  # type: ignore[union-attr]

    res = minimize(fun, np.zeros(task.d), jac=True, method="L-BFGS-B",
                   options={"gtol": gtol, "ftol": 1e-15, "maxiter": max_iter, "maxcor": 30})
    if not np.isfinite(res.fun):
        raise ValueError(f"L-BFGS ended on a non-finite objective ({res.message})")
    return torch.from_numpy(res.x)


def sft_policy(task: BanditTask | GridworldMDP, demos: Any, smoothing: float = 1.0) -> torch.Tensor:
    """Supervised fine-tuning / behaviour cloning: add-``smoothing`` demonstration frequencies as a log-policy
    ``(X, Y)`` (bandit) or ``(S, A)`` (MDP, state-action counts over the trajectories)."""
    if isinstance(task, BanditTask):
        counts = torch.zeros(task.X, task.Y, dtype=DT)
        counts.index_put_((demos.x, demos.y), torch.ones(len(demos), dtype=DT), accumulate=True)
    else:
        counts = torch.zeros(task.S, task.A, dtype=DT)
        counts.index_put_((demos.states.reshape(-1), demos.actions.reshape(-1)),
                          torch.ones(demos.states.numel(), dtype=DT), accumulate=True)
    counts = counts + smoothing
    return (counts / counts.sum(-1, keepdim=True)).log()


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """``1 - cos(a, b)`` (2 for opposite directions; 1 for a zero vector)."""
    na, nb = float(a.norm()), float(b.norm())
    if na == 0 or nb == 0:
        return 1.0
    return 1.0 - float(a @ b) / (na * nb)


def run_baseline(method: str, task: BanditTask | GridworldMDP, demos: Any, prefs: Any,
                 config: AIHFConfig = AIHFConfig(), *, seed: int = 0, solver: str = "auto") -> dict:
    """Train one method on the same data and return ``{"log_pi", "theta" (or None), "method"}``.

    Args:
        method: ``rlhf`` (w = 0), ``aihf`` (``config.w``), ``irl`` (w = 1), ``sft``, ``sft-rlhf``.
        solver: ``"exact"`` (L-BFGS optimum, bandit only), ``"loop"`` (:func:`train_aihf`), ``"auto"`` (exact on a
            bandit with ``demo_loss="irl"``, the single loop otherwise).

    Raises:
        ValueError: an unknown method or solver.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS} for a tabular task, got {method!r}")
    if solver not in ("auto", "exact", "loop"):
        raise ValueError(f"solver must be auto, exact or loop, got {solver!r}")
    if method == "sft":
        return {"method": method, "log_pi": sft_policy(task, demos), "theta": None}
    w = {"rlhf": 0.0, "irl": 1.0, "sft-rlhf": 0.0}.get(method, config.w)
    cfg = AIHFConfig(**{**config.__dict__, "w": w})
    bandit = isinstance(task, BanditTask)
    use_exact = solver == "exact" or (solver == "auto" and bandit and cfg.demo_loss == "irl")
    if use_exact and not bandit:
        raise ValueError("solver='exact' needs a bandit; use solver='loop' on an MDP")
    if use_exact:
        theta = fit_aihf_exact(task, demos if w > 0 else None, prefs if w < 1 else None, w, cfg.l2, cfg.weighting)
        log_pi = soft_policy(task.log_pi_ref, task.reward(theta), task.beta)
    else:
        res = train_aihf(task, demos if w > 0 else None, prefs if w < 1 else None, cfg, seed=seed)
        theta, log_pi = res.theta, res.log_pi
    if method == "sft-rlhf":  # the staged pipeline: KL-regularise toward the SFT policy instead of pi_ref
        ref = sft_policy(task, demos)
        if bandit:
            log_pi = soft_policy(ref, task.reward(theta), task.beta)
        else:
            log_pi, _ = soft_value_iteration(task.P, task.reward(theta), task.gamma, task.beta, log_pi_ref=ref,
                                             check=False)
    return {"method": method, "log_pi": log_pi, "theta": theta}
