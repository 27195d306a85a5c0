"""Exact Best-of-N (BoN) utilities on small discrete spaces (paper §2, Eq. 2–4).

All functions take a reference distribution ``pi_ref`` over ``K`` outcomes and their rewards
(array-likes or tensors of shape ``(K,)``) and work in ``torch.float64``. They are the ground truth
that the sampler, the empirical CDF and the trainer are tested against.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "as_prob_vector",
    "strict_cdf",
    "bon_distribution",
    "bon_distribution_sum_form",
    "bon_kl",
    "bon_win_rate",
    "n_from_beta",
    "beta_from_n",
    "kl_divergence",
    "total_variation",
    "exact_win_rate",
    "l1_optimum",
    "rlhf_optimum",
    "sample_bon_discrete",
    "optimize_tabular",
]


def _check_n(n: int) -> int:
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"N (the number of BoN samples) must be an integer >= 1, got {n!r}")
    return int(n)


def as_prob_vector(p, name: str = "ref_probs") -> torch.Tensor:
    """Validate a probability vector: 1-D, finite, non-negative, sums to 1 (atol 1e-6).

    Returns:
        ``(K,)`` float64 tensor.

    Raises:
        ValueError: naming ``name`` and what is wrong.
    """
    t = torch.as_tensor(p, dtype=torch.float64)
    if t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-D vector, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all() or (t < 0).any():
        raise ValueError(f"{name} must be finite and non-negative")
    s = float(t.sum())
    if abs(s - 1.0) > 1e-6:
        raise ValueError(f"{name} must sum to 1, sums to {s:.8g}; normalise it (p / p.sum())")
    return t


def _rewards(rewards, k: int) -> torch.Tensor:
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if r.shape != (k,):
        raise ValueError(f"rewards must have shape ({k},) like ref_probs, got {tuple(r.shape)}")
    if not torch.isfinite(r).all():
        raise ValueError("rewards contain NaN or inf; the BoN distribution needs finite rewards")
    return r


def _cdf_and_tie_mass(ref_probs, rewards) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    p = as_prob_vector(ref_probs)
    r = _rewards(rewards, p.numel())
    rs, order = torch.sort(r)
    cum = torch.cat([torch.zeros(1, dtype=p.dtype), torch.cumsum(p[order], 0)])
    lo = torch.searchsorted(rs, r, side="left")
    hi = torch.searchsorted(rs, r, side="right")
    F = cum[lo]                      # P[r(y') <  r(y)]
    tie = cum[hi] - cum[lo]          # P[r(y') == r(y)]  (== p(y) without ties)
    return p, r, F, tie


def strict_cdf(ref_probs, rewards) -> torch.Tensor:
    """Strict reward CDF under the reference, ``F(y) = P_{y'~pi_ref}[r(y') < r(y)]`` (§2).

    Args:
        ref_probs: ``(K,)`` probabilities of the reference policy.
        rewards: ``(K,)`` rewards (ties allowed; tied outcomes are not "less").

    Returns:
        ``(K,)`` float64 in ``[0, 1)``.
    """
    return _cdf_and_tie_mass(ref_probs, rewards)[2]


def bon_distribution(ref_probs, rewards, n: int) -> torch.Tensor:
    """The Best-of-N distribution ``pi_BoN(y) = (F(y) + pi_ref(y))^N - F(y)^N`` (Eq. 3).

    With tied rewards BoN breaks ties uniformly at random among the tied draws; the mass of a
    tie group ``g`` is ``(F_g + p_g)^N - F_g^N``, shared in proportion to ``pi_ref`` (this reduces
    to Eq. 3 when rewards are distinct).

    Args:
        ref_probs: ``(K,)`` reference probabilities (sum to 1).
        rewards: ``(K,)`` finite rewards.
        n: number of draws ``N >= 1``.

    Returns:
        ``(K,)`` float64 probabilities summing to 1.

    Raises:
        ValueError: ``n < 1``, bad shapes, NaN rewards, ``ref_probs`` not a distribution.
    """
    n = _check_n(n)
    p, _, F, tie = _cdf_and_tie_mass(ref_probs, rewards)
    group = (F + tie) ** n - F**n
    share = torch.where(tie > 0, p / tie.clamp_min(1e-300), torch.zeros_like(p))
    return group * share


def bon_distribution_sum_form(ref_probs, rewards, n: int) -> torch.Tensor:
    """``pi_BoN(y) = sum_{i=1}^N C(N,i) F(y)^{N-i} pi_ref(y)^i`` (Eq. 2; distinct rewards only)."""
    n = _check_n(n)
    p, _, F, _ = _cdf_and_tie_mass(ref_probs, rewards)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    comb = torch.tensor([math.comb(n, int(k)) for k in i], dtype=torch.float64)
    return (comb * F[:, None] ** (n - i) * p[:, None] ** i).sum(-1)


def bon_kl(n: int) -> float:
    """``KL(pi_BoN || pi_ref) = log N - (N-1)/N`` for continuous rewards (Beirami et al., 2024).

    Raises:
        ValueError: ``n < 1``.
    """
    n = _check_n(n)
    return math.log(n) - (n - 1) / n


def bon_win_rate(n: int) -> float:
    """Probability that the BoN sample beats one independent reference sample: ``N / (N + 1)``."""
    n = _check_n(n)
    return n / (n + 1)


def n_from_beta(beta: float) -> int:
    """The official code's ``N = int(1/beta) + 1`` (``examples/ppo_sentiments.py``).

    Raises:
        ValueError: ``beta <= 0``.
    """
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    return int(1.0 / beta) + 1


def beta_from_n(n: int) -> float:
    """KL coefficient of the vBoN lower bound, ``beta = 1/(N-1)`` (§3, Eq. 9).

    Raises:
        ValueError: ``n < 2`` (N = 1 is the reference policy itself; there is nothing to train).
    """
    n = _check_n(n)
    if n < 2:
        raise ValueError("N must be >= 2 for vBoN: with N = 1, pi_BoN = pi_ref and beta = 1/(N-1) is infinite")
    return 1.0 / (n - 1)


def kl_divergence(p, q) -> torch.Tensor:
    """``KL(p || q) = sum_y p(y) log(p(y)/q(y))`` in nats (terms with ``p = 0`` are 0).

    Returns ``inf`` when ``p`` puts mass where ``q`` has none.
    """
    p = torch.as_tensor(p, dtype=torch.float64)
    q = torch.as_tensor(q, dtype=torch.float64)
    pos = p > 0
    if (pos & (q <= 0)).any():
        return torch.tensor(float("inf"), dtype=torch.float64)
    return (p[pos] * (p[pos].log() - q[pos].log())).sum()


def total_variation(p, q) -> float:
    """``TV(p, q) = 0.5 * sum |p - q|``."""
    return 0.5 * float((torch.as_tensor(p, dtype=torch.float64) - torch.as_tensor(q, dtype=torch.float64)).abs().sum())


def exact_win_rate(policy_probs, ref_probs, rewards) -> float:
    """``P[r(Y) > r(Y')] + 0.5 P[r(Y) = r(Y')]`` for ``Y ~ policy``, ``Y' ~ pi_ref`` independent."""
    pol = as_prob_vector(policy_probs, "policy_probs")
    _, _, F, tie = _cdf_and_tie_mass(ref_probs, rewards)
    return float((pol * (F + 0.5 * tie)).sum())


def l1_optimum(ref_probs, rewards, n: int) -> torch.Tensor:
    """Maximiser of the vBoN lower bound: ``pi(y) ∝ pi_ref(y) F(y)^{N-1}`` (§3)."""
    n = _check_n(n)
    p, _, F, _ = _cdf_and_tie_mass(ref_probs, rewards)
    w = p * F ** (n - 1)
    if float(w.sum()) == 0:
        raise ValueError("all reference mass is on the lowest reward; the L1 optimum is undefined")
    return w / w.sum()


def rlhf_optimum(ref_probs, rewards, beta: float) -> torch.Tensor:
    """Maximiser of ``E_pi[r] - beta KL(pi || pi_ref)``: ``pi(y) ∝ pi_ref(y) exp(r(y)/beta)``."""
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    p = as_prob_vector(ref_probs)
    r = _rewards(rewards, p.numel())
    logw = torch.where(p > 0, p.log() + r / beta, torch.full_like(p, -math.inf))
    return torch.softmax(logw, 0)


def sample_bon_discrete(ref_probs, rewards, n: int, num_samples: int,
                        generator: torch.Generator | None = None) -> torch.Tensor:
    """Monte-Carlo BoN on a discrete space: draw ``N`` outcomes from ``pi_ref`` per trial and keep
    the one with the largest reward (first drawn among ties).

    Returns:
        ``(num_samples,)`` long indices of the chosen outcomes.
    """
    n = _check_n(n)
    p = as_prob_vector(ref_probs)
    r = _rewards(rewards, p.numel())
    draws = torch.multinomial(p, num_samples * n, replacement=True, generator=generator).view(num_samples, n)
    best = r[draws].argmax(1)
    return draws.gather(1, best[:, None]).squeeze(1)


def optimize_tabular(ref_probs, reward, beta: float, max_iter: int = 150, tol: float = 1e-10) -> torch.Tensor:
    """Maximise ``E_pi[reward] - beta KL(pi || pi_ref)`` over free logits by exact gradient ascent
    (expectations by enumeration; L-BFGS with strong-Wolfe line search). Used for the exact toy
    (spec §4.1):

    * vBoN exact: ``reward = log sum_i C(N,i) F^{N-i} pi_ref^{i-1}``, ``beta = 1`` → ``pi_BoN``;
    * vBoN L1 bound: ``reward = log F``, ``beta = 1/(N-1)`` → ``pi_ref F^{N-1} / Z``;
    * RLHF: ``reward = r`` → ``pi_ref exp(r/beta) / Z``.

    Args:
        ref_probs: ``(K,)`` reference probabilities (all > 0).
        reward: ``(K,)`` per-outcome reward (``-inf`` allowed: that outcome gets no mass).
        beta: KL coefficient (> 0).
        max_iter: L-BFGS iterations.

    Returns:
        ``(K,)`` float64 policy probabilities.
    """
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    p = as_prob_vector(ref_probs)
    if (p <= 0).any():
        raise ValueError("optimize_tabular needs ref_probs > 0 everywhere")
    rew = torch.as_tensor(reward, dtype=torch.float64)
    finite = torch.isfinite(rew)
    if not finite.any():
        raise ValueError("reward is -inf everywhere; nothing to optimise")
    ps, rs = p[finite], rew[finite]  # outcomes with reward -inf get no mass: optimise on the rest
    logp = ps.log()
    logits = logp.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([logits], lr=1.0, max_iter=max_iter, tolerance_grad=tol, tolerance_change=tol,
                            history_size=20, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logpi = torch.log_softmax(logits, 0)
        pi = logpi.exp()
        loss = -((pi * rs).sum() - beta * (pi * (logpi - logp)).sum())
        loss.backward()
        return loss

    opt.step(closure)
    out = torch.zeros_like(p)
    with torch.no_grad():
        out[finite] = torch.softmax(logits, 0)
    return out
