"""Exact tabular check of the Q-Adapter objective (spec Sec. 4.1).

A token MDP with vocabulary 3 and horizon 3 (27 responses) for 4 prompts; ``pi_1`` is a random tabular
autoregressive policy and ``R_2(x, y)`` a random sequence reward. Minimising the *population*
Q-Adapter loss (all response pairs, behaviour ``pi_1 x pi_1``, soft labels ``sigma(R_2(y) - R_2(y'))``)
over a free table ``Q[prefix, token]`` must give

    pi~(y|x) = pi_1(y|x)^(alpha_0/alpha~) exp(R_2(x,y)/alpha~) / Z(x)        (paper's optimum)

and, for ``alpha~ = alpha_0 = beta``, the same policy as DPO with reference ``pi_1``.
The rewards go through the package's own :func:`~iclr25.q_adapter.losses.residual_rewards`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from iclr25.core.lm import dpo_loss

from .config import QAdapterConfig
from .losses import residual_rewards, sequence_rewards

__all__ = ["TabularMDP", "make_tabular_mdp", "fit_qadapter_tabular", "fit_dpo_tabular", "optimal_policy",
           "total_variation", "tabular_check"]


@dataclass
class TabularMDP:
    """``base_logits [X, S, V]`` of ``pi_1`` per (prompt, prefix state); ``reward [X, N]``; ``responses
    [N, H]`` tokens; ``states [N, H]`` prefix-state index of each step."""

    base_logits: torch.Tensor
    reward: torch.Tensor
    responses: torch.Tensor
    states: torch.Tensor

    @property
    def n_prompts(self) -> int:
        return self.base_logits.shape[0]

    def seq_log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """``log pi(y|x)`` ``[X, N]`` of the tabular policy ``softmax(logits)`` (``[X, S, V]``)."""
        lp = F.log_softmax(logits, -1)  # [X, S, V]
        per = lp[:, self.states, self.responses]  # [X, N, H]
        return per.sum(-1)


def make_tabular_mdp(n_prompts: int = 4, vocab: int = 3, horizon: int = 3, seed: int = 0,
                     base_scale: float = 1.0, reward_scale: float = 1.0) -> TabularMDP:
    """Random ``pi_1`` (logits ~ N(0, base_scale^2)) and ``R_2`` (~ N(0, reward_scale^2)), float64."""
    g = torch.Generator().manual_seed(seed)
    offsets = np.cumsum([0] + [vocab ** t for t in range(horizon)])
    n_states = int(offsets[-1])
    responses = torch.tensor(list(itertools.product(range(vocab), repeat=horizon)), dtype=torch.long)
    states = torch.zeros_like(responses)
    for t in range(horizon):
        code = torch.zeros(len(responses), dtype=torch.long)
        for k in range(t):
            code = code * vocab + responses[:, k]
        states[:, t] = int(offsets[t]) + code
    base = torch.randn(n_prompts, n_states, vocab, generator=g, dtype=torch.float64) * base_scale
    reward = torch.randn(n_prompts, len(responses), generator=g, dtype=torch.float64) * reward_scale
    return TabularMDP(base, reward, responses, states)


def optimal_policy(mdp: TabularMDP, alpha_tilde: float, alpha_0: float) -> torch.Tensor:
    """``pi_1^(alpha_0/alpha~) exp(R_2/alpha~) / Z``, ``[X, N]`` probabilities."""
    logp1 = mdp.seq_log_probs(mdp.base_logits)
    return torch.softmax((alpha_0 * logp1 + mdp.reward) / alpha_tilde, dim=-1)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    """Max over prompts of ``0.5 * sum_y |p - q|``."""
    return float(0.5 * (p - q).abs().sum(-1).max())


def _population_weights(mdp: TabularMDP) -> tuple[torch.Tensor, torch.Tensor]:
    p1 = mdp.seq_log_probs(mdp.base_logits).exp()  # [X, N]
    w = p1[:, :, None] * p1[:, None, :]
    soft = torch.sigmoid(mdp.reward[:, :, None] - mdp.reward[:, None, :])
    return w, soft


def _bt_population(R: torch.Tensor, w: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    m = R[:, :, None] - R[:, None, :]
    return (w * (soft * F.softplus(-m) + (1 - soft) * F.softplus(m))).sum((1, 2)).mean()


def qadapter_sequence_rewards(mdp: TabularMDP, q_table: torch.Tensor, cfg: QAdapterConfig) -> torch.Tensor:
    """``R_theta(x, y)`` ``[X, N]`` through :func:`residual_rewards` (states ``s_0..s_H``; ``s_H`` terminal)."""
    X, N, H = mdp.n_prompts, *mdp.responses.shape
    base_lp = F.log_softmax(mdp.base_logits, -1)
    zeros = torch.zeros(X, N, 1, q_table.shape[-1], dtype=q_table.dtype)
    q = torch.cat([q_table[:, mdp.states], zeros], dim=2).reshape(X * N, H + 1, -1)
    b = torch.cat([base_lp[:, mdp.states], zeros], dim=2).reshape(X * N, H + 1, -1)
    acts = mdp.responses.repeat(X, 1)
    mask = torch.ones(X * N, H, dtype=q.dtype)
    r = residual_rewards(q, b, acts, mask, cfg)
    return sequence_rewards(r, mask, cfg.normalize).reshape(X, N)


def _lbfgs(params: torch.Tensor, closure_loss, iters: int) -> None:
    opt = torch.optim.LBFGS([params], lr=1.0, max_iter=iters, tolerance_grad=1e-12, tolerance_change=1e-15,
                            history_size=50, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = closure_loss()
        loss.backward()
        return loss

    opt.step(closure)


def fit_qadapter_tabular(mdp: TabularMDP, cfg: QAdapterConfig, iters: int = 500) -> torch.Tensor:
    """Minimise the population Q-Adapter loss over a free Q table (init: the base logits, as LoRA's
    ``B = 0``). Returns the learned ``pi~(y|x)``, ``[X, N]``."""
    w, soft = _population_weights(mdp)
    q = mdp.base_logits.clone().requires_grad_(True)
    _lbfgs(q, lambda: _bt_population(qadapter_sequence_rewards(mdp, q, cfg), w, soft), iters)
    with torch.no_grad():
        logits = (q + cfg.alpha_0 * F.log_softmax(mdp.base_logits, -1)) / cfg.alpha_tilde
        return mdp.seq_log_probs(logits).exp()


def fit_dpo_tabular(mdp: TabularMDP, beta: float, iters: int = 500) -> torch.Tensor:
    """Minimise the population DPO loss (core ``dpo_loss``, reference ``pi_1``) over free policy logits.
    Returns ``pi_theta(y|x)``, ``[X, N]``."""
    w, soft = _population_weights(mdp)
    ref = mdp.seq_log_probs(mdp.base_logits)
    theta = mdp.base_logits.clone().requires_grad_(True)
    X, N = ref.shape

    def loss():
        lp = mdp.seq_log_probs(theta)
        a = lp[:, :, None].expand(X, N, N).reshape(-1)
        b = lp[:, None, :].expand(X, N, N).reshape(-1)
        ra = ref[:, :, None].expand(X, N, N).reshape(-1)
        rb = ref[:, None, :].expand(X, N, N).reshape(-1)
        fwd, _, _ = dpo_loss(a, b, ra, rb, beta=beta, reduction="none")
        bwd, _, _ = dpo_loss(b, a, rb, ra, beta=beta, reduction="none")
        per = soft.reshape(-1) * fwd + (1 - soft.reshape(-1)) * bwd
        return (w.reshape(-1) * per).reshape(X, -1).sum(-1).mean()

    _lbfgs(theta, loss, iters)
    with torch.no_grad():
        return mdp.seq_log_probs(theta).exp()


ALPHAS = ((1.0, 0.01), (1.0, 1.0), (0.5, 0.2))


def tabular_check(alphas: tuple[tuple[float, float], ...] = ALPHAS, *, seed: int = 0, iters: int = 500,
                  value_index: str = "next") -> dict[str, float]:
    """Run the exact check. Returns ``{"tv[at,a0]": TV to the optimum, ..., "tv_max": ...,
    "tv_dpo[b]": TV between Q-Adapter (alpha~ = alpha_0 = b) and DPO (beta = b), "tv_dpo_max": ...}``."""
    mdp = make_tabular_mdp(seed=seed)
    out: dict[str, float] = {}
    for at, a0 in alphas:
        cfg = QAdapterConfig(alpha_tilde=at, alpha_0=a0, reg_beta=0.0, normalize="none", value_index=value_index)
        out[f"tv[{at},{a0}]"] = total_variation(fit_qadapter_tabular(mdp, cfg, iters), optimal_policy(mdp, at, a0))
    out["tv_max"] = max(v for k, v in out.items() if k.startswith("tv["))
    for beta in (1.0, 0.5):
        cfg = QAdapterConfig(alpha_tilde=beta, alpha_0=beta, reg_beta=0.0, normalize="none", value_index=value_index)
        out[f"tv_dpo[{beta}]"] = total_variation(fit_qadapter_tabular(mdp, cfg, iters), fit_dpo_tabular(mdp, beta, iters))
    out["tv_dpo_max"] = max(v for k, v in out.items() if k.startswith("tv_dpo["))
    return out
