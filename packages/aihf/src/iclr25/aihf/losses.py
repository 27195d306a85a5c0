"""AIHF upper-level losses: explicit reward (``aihf_reward_loss``) and implicit DPO form (``aihf_implicit_loss``).

Both are *minimised*. With ``weighting="mean"`` (the paper) the loss is
``w * demo_term + (1 - w) * pref_term`` on averaged terms; with ``weighting="per_pair"`` (the authors' code) every
pair carries its weight in one concatenated set: ``(w * sum(demo) + (1 - w) * sum(pref)) / (N_D + N_P)``.
"""

from __future__ import annotations

import math

import torch

from iclr25.core.lm import bradley_terry_loss, dpo_loss

__all__ = ["aihf_reward_loss", "aihf_implicit_loss", "combine_terms"]


def _check_w(w: float) -> float:
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or not 0.0 <= w <= 1.0:
        raise ValueError(f"w must be in [0, 1], got {w!r}")
    return float(w)


def _check_beta(beta: float) -> float:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    return float(beta)


def _finite(name: str, t: torch.Tensor) -> None:
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or inf (a reward or log-probability that is not finite); "
                         "check the reward model / policy outputs")


def combine_terms(demo: torch.Tensor | None, pref: torch.Tensor | None, w: float, weighting: str) -> torch.Tensor:
    """Weight per-example demonstration losses ``(N_D,)`` and preference losses ``(N_P,)`` into one scalar.

    A term whose weight is 0 may be ``None`` or empty; a term with a positive weight must have examples.

    Raises:
        ValueError: a weighted term without examples, an unknown ``weighting``, ``w`` outside [0, 1].
    """
    w = _check_w(w)
    if weighting not in ("mean", "per_pair"):
        raise ValueError(f"weighting must be 'mean' or 'per_pair', got {weighting!r}")
    parts: list[tuple[float, torch.Tensor]] = []
    for name, weight, t in (("demonstration", w, demo), ("preference", 1.0 - w, pref)):
        if weight == 0.0:
            continue
        if t is None or t.numel() == 0:
            raise ValueError(f"the {name} term has weight {weight:g} but no examples; give {name}s or set w to "
                             f"{'0' if name == 'demonstration' else '1'}")
        parts.append((weight, t))
    if not parts:  # cannot happen: w and 1 - w are not both 0
        raise ValueError("nothing to optimise")
    if weighting == "mean":
        return sum(weight * t.mean() for weight, t in parts)  # type: ignore[return-value]
    n = sum(t.numel() for _, t in parts)
    return sum(weight * t.sum() for weight, t in parts) / n  # type: ignore[return-value]


def aihf_reward_loss(r_demo: torch.Tensor | None, r_agent: torch.Tensor | None, r_chosen: torch.Tensor | None,
                     r_rejected: torch.Tensor | None, w: float = 0.5, beta: float = 1.0, demo_loss: str = "irl", *,
                     weighting: str = "mean", agent_weights: torch.Tensor | None = None,
                     check_finite: bool = True) -> torch.Tensor:
    """The AIHF reward-learning loss (minimise), explicit-reward form (spec "Gradients").

    Demonstration term, per demonstration ``i`` with agent sample(s) ``y'`` from the current policy:

    - ``demo_loss="irl"`` (the paper): ``-(r(y_E) - r(y')) / beta``. Its gradient is the ML-IRL identity
      ``-(1/beta)(grad r(y_E) - E_pi grad r(y'))``, i.e. minus the gradient of the demonstration log-likelihood
      ``log pi_theta(y_E|x)`` of the soft-optimal policy when ``y' ~ pi_theta`` (treat the agent samples as data:
      their rewards carry gradient, the sampling distribution does not).
    - ``demo_loss="logistic"`` (the authors' code): ``-log sigmoid(r(y_E) - r(y'))`` on core ``bradley_terry_loss``.

    Preference term: ``-log sigmoid(r(y_w) - r(y_l))`` (core ``bradley_terry_loss``).

    Args:
        r_demo: ``(N_D,)`` float rewards of the demonstrations.
        r_agent: ``(N_D,)`` rewards of one agent sample per demonstration, or ``(N_D, M)`` for ``M`` samples (or all
            ``M`` responses with ``agent_weights``, for an exact expectation).
        r_chosen, r_rejected: ``(N_P,)`` float rewards of the preferred / dispreferred responses.
        w: demonstration weight in [0, 1] (0 = RLHF's reward loss, 1 = ML-IRL).
        beta: KL coefficient > 0 (scales the IRL term by ``1/beta``).
        demo_loss: ``"irl"`` or ``"logistic"``.
        weighting: ``"mean"`` or ``"per_pair"`` (module docstring).
        agent_weights: ``(N_D, M)`` probabilities (rows sum to 1, no gradient) of the agent responses.
        check_finite: raise on NaN/inf rewards (a hot loop may check the loss instead).

    Returns:
        Scalar loss.

    Raises:
        ValueError: bad ``w``/``beta``/``demo_loss``, shape mismatches, a NaN/inf reward, a weighted term without data.
    """
    w = _check_w(w)
    beta = _check_beta(beta)
    if demo_loss not in ("irl", "logistic"):
        raise ValueError(f"demo_loss must be 'irl' or 'logistic', got {demo_loss!r}")
    demo = pref = None
    if w > 0 and r_demo is not None and r_demo.numel() > 0:
        if r_agent is None:
            raise ValueError("every demonstration needs an agent sample (r_agent is missing)")
        if check_finite:
            _finite("r_demo", r_demo)
            _finite("r_agent", r_agent)
        if r_agent.shape[0] != r_demo.shape[0]:
            raise ValueError(f"r_agent has {r_agent.shape[0]} rows for {r_demo.shape[0]} demonstrations; every "
                             "demonstration prompt needs an agent sample")
        ra = r_agent if r_agent.dim() == 2 else r_agent.unsqueeze(1)
        if agent_weights is None:
            wts = torch.full_like(ra, 1.0 / ra.shape[1]).detach()
        else:
            if agent_weights.shape != ra.shape:
                raise ValueError(f"agent_weights shape {tuple(agent_weights.shape)} != r_agent shape {tuple(ra.shape)}")
            wts = agent_weights.detach()
        if demo_loss == "irl":
            demo = -(r_demo - (wts * ra).sum(1)) / beta
        else:
            rd = r_demo.unsqueeze(1).expand_as(ra)
            demo = (wts * bradley_terry_loss(rd.reshape(-1), ra.reshape(-1), reduction="none").view_as(ra)).sum(1)
    if w < 1 and r_chosen is not None and r_chosen.numel() > 0:
        if r_rejected is None or r_rejected.shape != r_chosen.shape:
            raise ValueError("r_chosen and r_rejected must have one shape")
        if check_finite:
            _finite("r_chosen", r_chosen)
            _finite("r_rejected", r_rejected)
        pref = bradley_terry_loss(r_chosen, r_rejected, reduction="none")
    return combine_terms(demo, pref, w, weighting)


def aihf_implicit_loss(logp_demo: torch.Tensor | None, logp_agent: torch.Tensor | None,
                       logp_demo_old: torch.Tensor | None, logp_agent_old: torch.Tensor | None,
                       logp_w: torch.Tensor | None, logp_l: torch.Tensor | None, ref_logp_w: torch.Tensor | None,
                       ref_logp_l: torch.Tensor | None, w: float = 0.5, beta: float = 0.1, *,
                       weighting: str = "mean") -> torch.Tensor:
    """The AIHF loss in implicit-reward (DPO) form, ``r_theta = beta log(pi_theta / pi_0)`` (spec "Special cases").

    ``L = w * E[-log sigmoid(beta[log pi(y_E)/pi_old(y_E)] - beta[log pi(y')/pi_old(y')])]
    + (1 - w) * E[-log sigmoid(beta[log pi(y_w)/pi_ref(y_w)] - beta[log pi(y_l)/pi_ref(y_l)])]``,
    each term on core ``dpo_loss``. The demonstration term contrasts a demonstration with a sample ``y'`` of the
    policy (SPIN-style); which model is ``pi_old`` (the round's starting iterate: Self-Play-AIHF; the reference /
    SFT model: AIHF-DPO) is the caller's choice.

    Args:
        logp_demo, logp_agent: ``(N_D,)`` summed response log-probs of the demonstrations / agent samples under the
            policy being trained (with gradient).
        logp_demo_old, logp_agent_old: ``(N_D,)`` the same under the demonstration-term reference (cached, no grad).
        logp_w, logp_l: ``(N_P,)`` chosen / rejected log-probs under the policy.
        ref_logp_w, ref_logp_l: ``(N_P,)`` the same under pi_ref (cached).
        w: demonstration weight in [0, 1] (0 = DPO).
        beta: implicit-reward coefficient > 0.
        weighting: ``"mean"`` or ``"per_pair"``.

    Returns:
        Scalar loss.

    Raises:
        ValueError: bad ``w``/``beta``, shape mismatches, NaN/inf log-probs, a weighted term without data.
    """
    w = _check_w(w)
    beta = _check_beta(beta)
    demo = pref = None
    if w > 0 and logp_demo is not None and logp_demo.numel() > 0:
        if logp_agent is None or logp_agent.shape != logp_demo.shape:
            raise ValueError("every demonstration needs an agent sample: logp_agent must have logp_demo's shape")
        for name, t in (("logp_demo", logp_demo), ("logp_agent", logp_agent), ("logp_demo_old", logp_demo_old),
                        ("logp_agent_old", logp_agent_old)):
            if t is None:
                raise ValueError(f"{name} is missing")
            _finite(name, t)
        demo = dpo_loss(logp_demo, logp_agent, logp_demo_old, logp_agent_old, beta=beta, reduction="none")[0]
    if w < 1 and logp_w is not None and logp_w.numel() > 0:
        for name, t in (("logp_w", logp_w), ("logp_l", logp_l), ("ref_logp_w", ref_logp_w), ("ref_logp_l", ref_logp_l)):
            if t is None:
                raise ValueError(f"{name} is missing")
            _finite(name, t)
        pref = dpo_loss(logp_w, logp_l, ref_logp_w, ref_logp_l, beta=beta, reduction="none")[0]
    return combine_terms(demo, pref, w, weighting)
