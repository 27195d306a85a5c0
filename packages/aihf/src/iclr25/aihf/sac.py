"""The compact torch SAC of the MuJoCo policy step (Haarnoja et al. 2018: twin critics, Polyak-averaged targets,
tanh-Gaussian actor, fixed temperature) and the MLP both it and the reward use."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["SAC", "mlp"]


def mlp(n_in: int, hidden: tuple[int, ...], n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(n_in, h), nn.ReLU()]
        n_in = h
    layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


class SAC(nn.Module):
    """Compact soft actor-critic with a fixed temperature ``alpha`` (the lower level's ``beta``).

    Actions live in ``[-1, 1]^d_a`` (tanh-Gaussian); :meth:`update` takes a ``reward_fn(obs, act) -> (B,)`` so the
    same learner trains on the true reward (expert) or on the learned ``r_theta`` (AIHF policy step).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...] = (256, 256), lr: float = 1e-3,
                 gamma: float = 0.99, alpha: float = 0.2, tau: float = 0.005):
        super().__init__()
        self.actor = mlp(obs_dim, hidden, 2 * act_dim)
        self.q1, self.q2 = mlp(obs_dim + act_dim, hidden, 1), mlp(obs_dim + act_dim, hidden, 1)
        self.q1_t, self.q2_t = mlp(obs_dim + act_dim, hidden, 1), mlp(obs_dim + act_dim, hidden, 1)
        self.q1_t.load_state_dict(self.q1.state_dict())
        self.q2_t.load_state_dict(self.q2.state_dict())
        for p in (*self.q1_t.parameters(), *self.q2_t.parameters()):
            p.requires_grad_(False)
        self.pi_opt = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.q_opt = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=lr)
        self.gamma, self.alpha, self.tau = gamma, alpha, tau

    def _dist(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, log_std = self.actor(obs).chunk(2, -1)
        return mu, log_std.clamp(-20, 2)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised ``a = tanh(u)``, ``u ~ N(mu, sigma)``; returns ``(a (B, d_a), log pi(a|s) (B,))``."""
        mu, log_std = self._dist(obs)
        u = mu + log_std.exp() * torch.randn_like(mu)
        logp = torch.distributions.Normal(mu, log_std.exp()).log_prob(u).sum(-1)
        logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)  # tanh Jacobian, stable form
        return torch.tanh(u), logp

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        o = torch.as_tensor(obs, dtype=torch.float32, device=self._device()).unsqueeze(0)
        a = torch.tanh(self._dist(o)[0]) if deterministic else self.sample(o)[0]
        return a.squeeze(0).cpu().numpy()

    def _device(self) -> torch.device:
        return next(self.actor.parameters()).device

    def _q(self, q1, q2, o, a) -> torch.Tensor:
        x = torch.cat([o, a], -1)
        return torch.min(q1(x), q2(x)).squeeze(-1)

    def update(self, b: dict[str, torch.Tensor], reward_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
               ) -> tuple[float, float]:
        """One critic and one actor step on minibatch ``b``; returns ``(critic_loss, actor_loss)``."""
        with torch.no_grad():
            r = reward_fn(b["obs"], b["act"])
            a2, logp2 = self.sample(b["next_obs"])
            target = r + self.gamma * (1 - b["done"]) * (self._q(self.q1_t, self.q2_t, b["next_obs"], a2)
                                                        - self.alpha * logp2)
        x = torch.cat([b["obs"], b["act"]], -1)
        q_loss = F.mse_loss(self.q1(x).squeeze(-1), target) + F.mse_loss(self.q2(x).squeeze(-1), target)
        self.q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        self.q_opt.step()
        a, logp = self.sample(b["obs"])
        pi_loss = (self.alpha * logp - self._q(self.q1, self.q2, b["obs"], a)).mean()
        self.pi_opt.zero_grad(set_to_none=True)
        pi_loss.backward()
        self.pi_opt.step()
        with torch.no_grad():
            for net, tgt in ((self.q1, self.q1_t), (self.q2, self.q2_t)):
                for p, pt in zip(net.parameters(), tgt.parameters()):
                    pt.lerp_(p, self.tau)
        ql, pl = float(q_loss.detach()), float(pi_loss.detach())
        if not (math.isfinite(ql) and math.isfinite(pl)):
            raise FloatingPointError(f"SAC loss is not finite (critic {ql}, actor {pl}); lower --sac-lr or "
                                     "--reward-clip")
        return ql, pl
