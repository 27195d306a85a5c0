"""Synthetic tasks with a known linear reward (spec "CPU-scale reproduction" A and B).

- :class:`BanditTask`: a contextual bandit (the LLM case with an exact lower level): prompts ``x``, responses
  ``y``, features ``phi(x, y) in R^d``, true reward ``phi^T theta*``, reference policy ``pi_ref``.
- :class:`GridworldMDP`: a tabular MDP (the MuJoCo stand-in): 8x8 grid, 5 actions, slip, terrain features and a goal.

Both give their exact true objective, the demonstration / preference features the losses need, and the
single-loop hooks (policy initialisation, policy step, agent rewards). All tensors are float64 on CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .soft import check_transitions, mirror_step, soft_policy, soft_value_iteration

__all__ = ["BanditTask", "GridworldMDP", "BanditDemos", "BanditPrefs", "TrajDemos", "TrajPrefs"]

DT = torch.float64


def _gen(seed: int | np.random.Generator) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------------------- bandit
@dataclass
class BanditDemos:
    """Demonstrations of a bandit: ``x`` ``(N,)`` prompt ids, ``y`` ``(N,)`` response ids (int64)."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.x.numel())


@dataclass
class BanditPrefs:
    """Preference pairs of a bandit: prompt ``x``, preferred ``y_w`` and dispreferred ``y_l`` (int64 ``(N,)``)."""

    x: torch.Tensor
    y_w: torch.Tensor
    y_l: torch.Tensor

    def __len__(self) -> int:
        return int(self.x.numel())


class BanditTask:
    """A contextual bandit with linear true reward ``r*(x, y) = phi(x, y)^T theta*``.

    Args:
        features: ``(X, Y, d)`` float features.
        theta_star: ``(d,)`` true reward parameters.
        beta: KL coefficient of the true objective and of the lower level.
        log_pi_ref: ``(X, Y)`` reference log-policy (default uniform).

    The true objective (spec A) is ``J(pi) = E_x[E_{y~pi} r*(x, y) - beta KL(pi(.|x) || pi_ref(.|x))]`` with ``x``
    uniform; its maximiser is ``pi* ∝ pi_ref exp(r*/beta)`` with ``J(pi*) = E_x[beta log sum_y pi_ref e^{r*/beta}]``.
    """

    kind = "bandit"

    def __init__(self, features: torch.Tensor, theta_star: torch.Tensor, beta: float = 1.0,
                 log_pi_ref: torch.Tensor | None = None) -> None:
        if features.dim() != 3:
            raise ValueError(f"features must be (X, Y, d), got shape {tuple(features.shape)}")
        if not math.isfinite(beta) or beta <= 0:
            raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
        self.features = features.to(DT)
        self.X, self.Y, self.d = features.shape
        self.theta_star = theta_star.to(DT)
        if self.theta_star.shape != (self.d,):
            raise ValueError(f"theta_star must be ({self.d},), got {tuple(theta_star.shape)}")
        self.beta = float(beta)
        self.log_pi_ref = (torch.full((self.X, self.Y), -math.log(self.Y), dtype=DT) if log_pi_ref is None
                           else log_pi_ref.to(DT))

    @classmethod
    def random(cls, n_prompts: int = 50, n_responses: int = 8, d: int = 6, beta: float = 1.0,
               seed: int | np.random.Generator = 0) -> BanditTask:
        """The spec's bandit: ``phi ~ N(0, I)``, ``theta* ~ N(0, I)``, uniform ``pi_ref`` (X = 50, Y = 8, d = 6)."""
        g = _gen(seed)
        phi = torch.from_numpy(g.standard_normal((n_prompts, n_responses, d)))
        theta = torch.from_numpy(g.standard_normal(d))
        return cls(phi, theta, beta)

    @classmethod
    def tabular(cls, n_prompts: int, n_responses: int, beta: float = 1.0, seed: int = 0) -> BanditTask:
        """A bandit with a tabular reward: one-hot features per ``(x, y)`` (``d = X * Y``)."""
        g = _gen(seed)
        d = n_prompts * n_responses
        phi = torch.eye(d, dtype=DT).view(n_prompts, n_responses, d)
        return cls(phi, torch.from_numpy(g.standard_normal(d)), beta)

    # rewards and policies
    def reward(self, theta: torch.Tensor) -> torch.Tensor:
        """``(X, Y)`` reward table ``phi^T theta``."""
        return self.features @ theta

    def optimal_log_policy(self, theta: torch.Tensor | None = None) -> torch.Tensor:
        """``(X, Y)`` log of the soft-optimal policy of ``theta`` (default the true reward)."""
        return soft_policy(self.log_pi_ref, self.reward(self.theta_star if theta is None else theta), self.beta)

    def objective(self, log_pi: torch.Tensor) -> float:
        """The true KL-regularised objective ``J(pi)`` (exact)."""
        pi = log_pi.exp()
        r = self.reward(self.theta_star)
        kl = (pi * (log_pi - self.log_pi_ref)).sum(-1)
        return float(((pi * r).sum(-1) - self.beta * kl).mean())

    def optimum(self) -> float:
        """``J(pi*)``."""
        r = self.reward(self.theta_star)
        return float((self.beta * torch.logsumexp(self.log_pi_ref + r / self.beta, -1)).mean())

    def regret(self, log_pi: torch.Tensor) -> float:
        """``J(pi*) - J(pi) >= 0``."""
        return self.optimum() - self.objective(log_pi)

    # data
    def sample_demos(self, n: int, seed: int | np.random.Generator, log_pi: torch.Tensor | None = None) -> BanditDemos:
        """``n`` demonstrations: ``x`` uniform, ``y ~ pi(.|x)`` (default the optimal policy ``pi*``)."""
        g = _gen(seed)
        lp = self.optimal_log_policy() if log_pi is None else log_pi
        x = g.integers(0, self.X, size=n)
        p = lp.exp().numpy()[x]
        y = (p.cumsum(1) > g.random((n, 1))).argmax(1)
        return BanditDemos(torch.from_numpy(x), torch.from_numpy(y))

    def biased_demo_policy(self, noise: float = 0.7, seed: int | np.random.Generator = 0) -> torch.Tensor:
        """Log-policy of an imperfect demonstrator ``theta_E = theta* + noise * N(0, I)`` (spec A)."""
        g = _gen(seed)
        theta_e = self.theta_star + noise * torch.from_numpy(g.standard_normal(self.d))
        return self.optimal_log_policy(theta_e)

    def sample_prefs(self, n: int, seed: int | np.random.Generator) -> BanditPrefs:
        """``n`` pairs of two ``pi_ref`` samples for a uniform prompt, labelled by Bradley-Terry on the true reward."""
        g = _gen(seed)
        x = g.integers(0, self.X, size=n)
        p = self.log_pi_ref.exp().numpy()[x]
        y1 = (p.cumsum(1) > g.random((n, 1))).argmax(1)
        y2 = (p.cumsum(1) > g.random((n, 1))).argmax(1)
        r = self.reward(self.theta_star).numpy()
        p1 = 1.0 / (1.0 + np.exp(-(r[x, y1] - r[x, y2])))
        first = g.random(n) < p1
        yw, yl = np.where(first, y1, y2), np.where(first, y2, y1)
        return BanditPrefs(torch.from_numpy(x), torch.from_numpy(yw), torch.from_numpy(yl))

    def demo_features(self, demos: BanditDemos) -> torch.Tensor:
        """``(N_D, d)`` features of the demonstrations."""
        return self.features[demos.x, demos.y]

    def pref_features(self, prefs: BanditPrefs) -> tuple[torch.Tensor, torch.Tensor]:
        """``(N_P, d)`` features of the preferred and of the dispreferred responses."""
        return self.features[prefs.x, prefs.y_w], self.features[prefs.x, prefs.y_l]

    def demo_log_likelihood(self, theta: torch.Tensor, demos: BanditDemos) -> torch.Tensor:
        """``(N_D,)`` ``log pi_theta(y_E | x)`` of the soft-optimal policy of ``theta`` (the L_D summand)."""
        return self.optimal_log_policy(theta)[demos.x, demos.y]

    # single-loop hooks
    def policy_init(self) -> dict:
        return {"log_pi": self.log_pi_ref.clone()}

    def policy_step(self, state: dict, theta: torch.Tensor, steps: int, eta: float) -> dict:
        """``steps`` mirror steps toward the soft-optimal policy of ``theta`` (spec "Algorithm", 2.1); ``steps = 0``
        is the exact lower level (the soft-optimal policy itself)."""
        target = self.optimal_log_policy(theta)
        if steps == 0:
            return {"log_pi": target}
        lp = state["log_pi"]
        for _ in range(steps):
            lp = mirror_step(lp, target, eta)
        return {"log_pi": lp}

    def agent_rewards(self, state: dict, reward_table: torch.Tensor, demos: BanditDemos, n_samples: int,
                      rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rewards of agent responses to the demonstration prompts: all ``Y`` responses with their policy
        probabilities (``n_samples = 0``, exact) or ``n_samples`` draws per prompt."""
        lp = state["log_pi"].detach()
        if n_samples == 0:
            return reward_table[demos.x], lp.exp()[demos.x]
        p = lp.exp().numpy()[demos.x]
        u = rng.random((len(demos), n_samples, 1))
        y = torch.from_numpy((p.cumsum(1)[:, None, :] > u).argmax(-1))
        return reward_table[demos.x.unsqueeze(1), y], None

    def log_policy(self, state: dict) -> torch.Tensor:
        return state["log_pi"]

    def evaluate(self, log_pi: torch.Tensor) -> dict:
        return {"regret": self.regret(log_pi), "objective": self.objective(log_pi), "optimum": self.optimum()}


# ------------------------------------------------------------------------------------------------------- gridworld
@dataclass
class TrajDemos:
    """Trajectories: ``states`` ``(N, H)`` int64 (``s_0 .. s_{H-1}``), ``actions`` ``(N, H)`` int64."""

    states: torch.Tensor
    actions: torch.Tensor

    def __len__(self) -> int:
        return int(self.states.shape[0])


@dataclass
class TrajPrefs:
    """Trajectory pairs ``tau_w > tau_l``: each ``(N, H)`` int64 states (state rewards need no actions)."""

    states_w: torch.Tensor
    states_l: torch.Tensor

    def __len__(self) -> int:
        return int(self.states_w.shape[0])


class GridworldMDP:
    """A finite MDP with a linear state reward ``r*(s) = phi(s)^T theta*`` and a finite-horizon discounted return.

    Args:
        P: ``(S, A, S)`` transitions (rows sum to 1; checked).
        features: ``(S, d)`` state features.
        theta_star: ``(d,)`` true reward parameters.
        rho0: ``(S,)`` initial-state distribution.
        gamma: discount in [0, 1).
        beta: entropy (KL to uniform) coefficient of the lower level.
        horizon: trajectory length H; returns are ``sum_{t<H} gamma^t r(s_t)``.

    The soft-optimal policy is the stationary solution of soft value iteration; the true objective is the exact
    expected finite-horizon return ``J(pi) = mu_pi^T theta*`` with feature expectation
    ``mu_pi = sum_{t<H} gamma^t E_pi[phi(s_t)]`` (state distributions propagated exactly). The metric of the spec is
    the normalised return ``(J - J_uniform) / (J(pi*) - J_uniform)``.

    Raises:
        ValueError: bad transitions, ``gamma`` outside [0, 1), ``beta <= 0``, shape mismatches.
    """

    kind = "gridworld"

    def __init__(self, P: torch.Tensor, features: torch.Tensor, theta_star: torch.Tensor, rho0: torch.Tensor,
                 gamma: float = 0.95, beta: float = 1.0, horizon: int = 60) -> None:
        P = P.to(DT)
        check_transitions(P)
        if not isinstance(gamma, (int, float)) or not math.isfinite(gamma) or not 0 <= gamma < 1:
            raise ValueError(f"gamma must be in [0, 1), got {gamma!r}")
        if not math.isfinite(beta) or beta <= 0:
            raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.P = P
        self.S, self.A, _ = P.shape
        self.features = features.to(DT)
        if self.features.shape[0] != self.S:
            raise ValueError(f"features must be (S={self.S}, d), got {tuple(features.shape)}")
        self.d = self.features.shape[1]
        self.theta_star = theta_star.to(DT)
        self.rho0 = rho0.to(DT)
        if abs(float(self.rho0.sum()) - 1) > 1e-8 or bool((self.rho0 < 0).any()):
            raise ValueError("rho0 must be a probability vector")
        self.gamma, self.beta, self.horizon = float(gamma), float(beta), int(horizon)
        self.discounts = self.gamma ** torch.arange(self.horizon, dtype=DT)
        self._star: dict | None = None

    @classmethod
    def grid(cls, size: int = 8, n_terrain: int = 5, slip: float = 0.1, gamma: float = 0.95, beta: float = 1.0,
             horizon: int = 60, goal_weight: float = 2.0, seed: int | np.random.Generator = 0) -> GridworldMDP:
        """The spec's gridworld: ``size x size`` cells, actions stay/up/down/left/right, with probability ``slip``
        a uniformly random action is executed; features = one-hot terrain (``n_terrain`` types) + goal indicator
        (the far corner); ``theta*`` ~ N(0, I) on terrain, ``goal_weight`` on the goal; start uniform."""
        if not 0 <= slip <= 1:
            raise ValueError(f"slip must be in [0, 1], got {slip}")
        g = _gen(seed)
        S, A = size * size, 5
        moves = [(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)]
        det = np.zeros((S, A, S))
        for s in range(S):
            i, j = divmod(s, size)
            for a, (di, dj) in enumerate(moves):
                ni, nj = min(max(i + di, 0), size - 1), min(max(j + dj, 0), size - 1)
                det[s, a, ni * size + nj] = 1.0
        P = (1 - slip) * det + slip * det.mean(1, keepdims=True)
        terrain = g.integers(0, n_terrain, size=S)
        feats = np.zeros((S, n_terrain + 1))
        feats[np.arange(S), terrain] = 1.0
        goal = S - 1
        feats[goal, n_terrain] = 1.0
        theta = np.concatenate([g.standard_normal(n_terrain), [goal_weight]])
        return cls(torch.from_numpy(P), torch.from_numpy(feats), torch.from_numpy(theta), torch.full((S,), 1.0 / S, dtype=DT),
                   gamma, beta, horizon)

    # rewards, policies, exact evaluation
    def reward(self, theta: torch.Tensor) -> torch.Tensor:
        """``(S,)`` state reward ``phi^T theta``."""
        return self.features @ theta

    def soft_optimal(self, theta: torch.Tensor | None = None, V0: torch.Tensor | None = None, iters: int = 10_000,
                     tol: float = 1e-10):
        """``(log_pi, V)`` of soft value iteration under ``theta`` (default ``theta*``)."""
        th = self.theta_star if theta is None else theta
        return soft_value_iteration(self.P, self.reward(th), self.gamma, self.beta, iters=iters, V0=V0, tol=tol,
                                    check=False)

    def state_visitation(self, log_pi: torch.Tensor) -> torch.Tensor:
        """``(H, S)`` exact state distributions ``d_t`` of ``pi`` from ``rho0``."""
        P_pi = torch.einsum("sa,sat->st", log_pi.exp(), self.P)
        d = self.rho0
        out = [d]
        for _ in range(self.horizon - 1):
            d = d @ P_pi
            out.append(d)
        return torch.stack(out)

    def feature_expectation(self, log_pi: torch.Tensor) -> torch.Tensor:
        """``(d,)`` exact ``mu_pi = sum_{t<H} gamma^t E[phi(s_t)]``."""
        return (self.discounts[:, None] * self.state_visitation(log_pi)).sum(0) @ self.features

    def objective(self, log_pi: torch.Tensor) -> float:
        """Exact expected true return ``J(pi) = mu_pi^T theta*``."""
        return float(self.feature_expectation(log_pi) @ self.theta_star)

    def _reference(self) -> dict:
        if self._star is None:
            lp_star, _ = self.soft_optimal()
            uni = torch.full((self.S, self.A), -math.log(self.A), dtype=DT)
            self._star = {"log_pi": lp_star, "J_star": self.objective(lp_star), "J_rand": self.objective(uni)}
        return self._star

    def normalized_return(self, log_pi: torch.Tensor) -> float:
        """``(J(pi) - J(uniform)) / (J(pi*) - J(uniform))`` (1 = the soft-optimal expert)."""
        ref = self._reference()
        return (self.objective(log_pi) - ref["J_rand"]) / (ref["J_star"] - ref["J_rand"])

    def evaluate(self, log_pi: torch.Tensor) -> dict:
        ref = self._reference()
        return {"normalized_return": self.normalized_return(log_pi), "return": self.objective(log_pi),
                "return_star": ref["J_star"], "return_uniform": ref["J_rand"]}

    # data
    def sample_trajectories(self, log_pi: torch.Tensor, n: int, seed: int | np.random.Generator,
                            epsilon: float = 0.0) -> TrajDemos:
        """``n`` trajectories of length H from ``rho0`` under ``pi`` (with probability ``epsilon`` per step a uniform
        action instead: the noisy expert of the preference data). Vectorised over trajectories."""
        g = _gen(seed)
        pi = log_pi.exp().numpy()
        if epsilon:
            pi = (1 - epsilon) * pi + epsilon / self.A
        cP = self.P.numpy().cumsum(-1)
        cpi = pi.cumsum(-1)
        s = (self.rho0.numpy().cumsum() > g.random((n, 1))).argmax(1)
        S_out = np.empty((n, self.horizon), np.int64)
        A_out = np.empty((n, self.horizon), np.int64)
        for t in range(self.horizon):
            a = (cpi[s] > g.random((n, 1))).argmax(1)
            S_out[:, t], A_out[:, t] = s, a
            s = (cP[s, a] > g.random((n, 1))).argmax(1)
        return TrajDemos(torch.from_numpy(S_out), torch.from_numpy(A_out))

    def sample_demos(self, n: int, seed: int | np.random.Generator, log_pi: torch.Tensor | None = None) -> TrajDemos:
        """``n`` expert trajectories from the soft-optimal policy (or ``log_pi``)."""
        return self.sample_trajectories(self._reference()["log_pi"] if log_pi is None else log_pi, n, seed)

    def sample_prefs(self, n: int, seed: int | np.random.Generator, epsilon: float = 0.6) -> TrajPrefs:
        """``n`` pairs of ``epsilon``-noisy expert trajectories labelled by Bradley-Terry on the true discounted
        returns (spec B)."""
        g = _gen(seed)
        t1 = self.sample_trajectories(self._reference()["log_pi"], n, g, epsilon)
        t2 = self.sample_trajectories(self._reference()["log_pi"], n, g, epsilon)
        r = self.reward(self.theta_star)
        R1 = (r[t1.states] * self.discounts).sum(1).numpy()
        R2 = (r[t2.states] * self.discounts).sum(1).numpy()
        first = g.random(n) < 1.0 / (1.0 + np.exp(-(R1 - R2)))
        fw = torch.from_numpy(first)[:, None]
        return TrajPrefs(torch.where(fw, t1.states, t2.states), torch.where(fw, t2.states, t1.states))

    def traj_features(self, states: torch.Tensor) -> torch.Tensor:
        """``(N, d)`` discounted feature sums ``sum_t gamma^t phi(s_t)`` of ``(N, H)`` state sequences."""
        return (self.features[states] * self.discounts[None, :, None]).sum(1)

    def demo_features(self, demos: TrajDemos) -> torch.Tensor:
        return self.traj_features(demos.states)

    def pref_features(self, prefs: TrajPrefs) -> tuple[torch.Tensor, torch.Tensor]:
        return self.traj_features(prefs.states_w), self.traj_features(prefs.states_l)

    # single-loop hooks
    def policy_init(self) -> dict:
        return {"log_pi": torch.full((self.S, self.A), -math.log(self.A), dtype=DT), "V": torch.zeros(self.S, dtype=DT),
                "vi_iters": 0}

    def policy_step(self, state: dict, theta: torch.Tensor, steps: int, eta: float) -> dict:
        """Warm-started soft value iteration under ``theta``: ``steps`` backups (0 = to convergence)."""
        iters = steps if steps > 0 else 10_000
        lp, V, n = soft_value_iteration(self.P, self.reward(theta), self.gamma, self.beta, iters=iters, V0=state["V"],
                                        tol=1e-10, return_iters=True, check=False)
        return {"log_pi": lp, "V": V, "vi_iters": int(state.get("vi_iters", 0)) + n}

    def agent_rewards(self, state: dict, reward_table: torch.Tensor, demos: TrajDemos, n_samples: int,
                      rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Discounted agent returns under ``reward_table``: the exact expectation ``mu_pi^T theta`` (repeated per
        demonstration, ``n_samples = 0``) or ``n_samples`` sampled trajectories per demonstration."""
        lp = state["log_pi"].detach()
        if n_samples == 0:
            occ = (self.discounts[:, None] * self.state_visitation(lp)).sum(0)  # (S,)
            ra = (occ @ reward_table).expand(len(demos))
            return ra, None
        tr = self.sample_trajectories(lp, len(demos) * n_samples, rng)
        R = (reward_table[tr.states] * self.discounts).sum(1)
        return R.view(len(demos), n_samples), None

    def log_policy(self, state: dict) -> torch.Tensor:
        return state["log_pi"]
