"""Exact tools for small response spaces (spec §1.1, Def. 3.1, Prop. 3.1, Prop. C.1, Eq. (8)'s optimum).

When every response worth considering can be listed (the trap task's 100 answers + EOS, a multiple-choice
item), the sharpening quantities are computed exactly instead of estimated from samples:

- :func:`enumerate_responses`: ``log pi(y|x)`` of every candidate, one batched teacher-forced forward.
- :func:`argmax_response`: ``y*(x)`` (ties: first index).
- :func:`tilted_optimum`: ``pi*_beta ∝ pi_base^(1+1/beta)`` (the KL-regularised optimum, §1.4).
- :func:`coverage_coefficient`: ``C_cov = E_x[1/pi_base(y*(x)|x)]``.
- :func:`sharpness_report`: the ``(eps, delta)``-sharpness of Def. 3.1 and the mass on the mode.
- :func:`bon_output_law`, :func:`bon_success_probability`, :func:`required_samples`: the BoN laws
  (spec §6.3-6.4, Prop. C.1).
- :func:`tabular_greedy`: token-wise greedy decoding of a tabular sequence model (Prop. 3.1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = [
    "enumerate_responses",
    "argmax_response",
    "tilted_optimum",
    "coverage_coefficient",
    "SharpnessReport",
    "sharpness_report",
    "bon_output_law",
    "bon_success_probability",
    "required_samples",
    "tabular_greedy",
    "check_beta",
]


def check_beta(beta: float, name: str = "beta") -> float:
    """``beta`` as a float; ``ValueError`` unless it is finite and > 0."""
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {beta!r}")
    return float(beta)


def _pad_prompts(tokenizer, prompts: Sequence[str]):
    import torch

    p_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    for i, ids in enumerate(p_ids):
        if not ids:
            raise ValueError(f"prompt {i} is empty")
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos if eos is not None else 0)
    lp = max(map(len, p_ids))
    P = torch.full((len(p_ids), lp), pad, dtype=torch.long)
    Pm = torch.zeros_like(P)
    for i, ids in enumerate(p_ids):
        P[i, lp - len(ids):] = torch.tensor(ids)
        Pm[i, lp - len(ids):] = 1
    return P, Pm, pad


def _candidate_ids(tokenizer, candidates: Sequence[str], append_eos: bool) -> list[list[int]]:
    eos = tokenizer.eos_token_id
    if append_eos and eos is None:
        raise ValueError("append_eos=True but the tokenizer has no eos_token_id")
    c_ids = [tokenizer(c, add_special_tokens=False)["input_ids"] + ([eos] if append_eos else []) for c in candidates]
    for k, ids in enumerate(c_ids):
        if not ids:
            raise ValueError(f"candidate {k} is empty (and append_eos is False)")
    return c_ids


def enumerate_responses(model, tokenizer, prompts: Sequence[str], candidates: Sequence[str], *,
                        append_eos: bool = True, method: str = "prefix-tree", batch_size: int = 8192,
                        device: str | None = None):
    """``log pi(candidate_k + EOS | prompt_b)`` for every prompt and candidate, teacher-forced.

    Two equivalent computations (the test suite checks they agree):

    - ``"full"``: all ``B x K`` sequences ``prompt + candidate`` in batched forward passes (core
      ``sequence_logprobs``; prompts left-padded, positions from the attention mask).
    - ``"prefix-tree"`` (default): the prompt is run once and the candidates' token prefixes are expanded
      level by level from the key/value cache, so a shared prefix is computed once. For the trap task
      (100 two-digit answers + EOS) this is ``B x (1 + 10 + 100)`` single-token steps after the prompt
      instead of ``B x 100`` full sequences. Needs a model that returns ``past_key_values``.

    Args:
        model: a causal LM (``*ForCausalLM``); it is put in eval mode for the call and restored.
        tokenizer: its tokenizer (prompt and candidate are tokenised separately, without special tokens).
        prompts: ``B`` non-empty prompt texts.
        candidates: ``K`` candidate responses (text).
        append_eos: score ``candidate + EOS`` (the response *ends* there), as the trap task needs.
        method: ``"prefix-tree"`` or ``"full"``.
        batch_size: sequences (rows) per forward pass.
        device: where to run (default: the model's device).

    Returns:
        ``(B, K)`` float64 torch tensor (CPU) of summed response log-probabilities (nats, EOS included).

    Raises:
        ValueError: empty ``prompts``/``candidates``, an empty prompt or candidate, an unknown ``method``,
            ``append_eos`` without an EOS id, or ``"prefix-tree"`` with a model that returns no cache.
    """
    import torch

    if len(prompts) == 0 or len(candidates) == 0:
        raise ValueError("enumerate_responses needs at least one prompt and one candidate")
    if method not in ("prefix-tree", "full"):
        raise ValueError(f"method must be 'prefix-tree' or 'full', got {method!r}")
    P, Pm, pad = _pad_prompts(tokenizer, prompts)
    c_ids = _candidate_ids(tokenizer, candidates, append_eos)
    dev = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if method == "full":
                return _enumerate_full(model, P, Pm, c_ids, pad, batch_size, dev)
            rows = max(1, batch_size // max(1, sum(len(c) for c in c_ids)))
            return torch.cat([_enumerate_tree(model, P[s:s + rows], Pm[s:s + rows], c_ids, dev)
                              for s in range(0, len(P), rows)])
    finally:
        model.train(was_training)


def _enumerate_full(model, P, Pm, c_ids, pad, batch_size, dev):
    import torch

    from iclr25.core.lm import sequence_logprobs

    lc = max(map(len, c_ids))
    C = torch.full((len(c_ids), lc), pad, dtype=torch.long)
    Cm = torch.zeros_like(C)
    for k, ids in enumerate(c_ids):
        C[k, :len(ids)] = torch.tensor(ids)
        Cm[k, :len(ids)] = 1
    (B, lp), K = P.shape, len(c_ids)
    ids = torch.cat([P[:, None].expand(B, K, lp), C[None].expand(B, K, lc)], -1).reshape(B * K, lp + lc)
    attn = torch.cat([Pm[:, None].expand(B, K, lp), Cm[None].expand(B, K, lc)], -1).reshape(B * K, lp + lc)
    resp = torch.cat([torch.zeros(B, K, lp, dtype=torch.long), Cm[None].expand(B, K, lc)], -1).reshape(B * K, -1)
    out = []
    for s in range(0, B * K, batch_size):
        sl = slice(s, s + batch_size)
        out.append(sequence_logprobs(model, ids[sl].to(dev), attn[sl].to(dev), resp[sl].to(dev)).double().cpu())
    return torch.cat(out).reshape(B, K)


def cache_kwarg(model) -> str:
    """The forward keyword that takes a KV cache: ``cache`` (transformers >= 5.x) or ``past_key_values``."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _out_cache(out):
    c = out.get("cache") if hasattr(out, "get") else None
    return c if c is not None else getattr(out, "past_key_values", None)


def _enumerate_tree(model, P, Pm, c_ids, dev):
    """Prefix-tree expansion from the KV cache for one chunk of prompts (see :func:`enumerate_responses`)."""
    import torch
    import torch.nn.functional as F

    B, lp = P.shape
    depth = max(map(len, c_ids))
    # level t holds the distinct prefixes of length t (t = 1..depth-1); level 0 is the bare prompt
    levels: list[dict[tuple[int, ...], int]] = [{(): 0}]
    for t in range(1, depth):
        lvl: dict[tuple[int, ...], int] = {}
        for ids in c_ids:
            if len(ids) > t:
                lvl.setdefault(tuple(ids[:t]), len(lvl))
        levels.append(lvl)
    attn = Pm.to(dev)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    ckw = cache_kwarg(model)
    out = model(input_ids=P.to(dev), attention_mask=attn, position_ids=pos, use_cache=True)
    cache = _out_cache(out)
    if cache is None:
        raise ValueError("this model returns no past_key_values; use enumerate_responses(..., method='full')")
    logps = [F.log_softmax(out.logits[:, -1].float(), -1).double()]       # level 0: (B, V)
    plen = Pm.sum(-1).to(dev)
    for t in range(1, depth):
        prefixes = list(levels[t])
        n_prev, n_cur = len(levels[t - 1]), len(prefixes)
        parent = torch.tensor([levels[t - 1][p[:-1]] for p in prefixes], device=dev)
        last = torch.tensor([p[-1] for p in prefixes], device=dev)
        rows = (torch.arange(B, device=dev)[:, None] * n_prev + parent[None]).reshape(-1)
        cache.reorder_cache(rows)
        attn = torch.cat([attn[rows], torch.ones(B * n_cur, 1, dtype=attn.dtype, device=dev)], -1)
        pos = (plen.repeat_interleave(n_cur) + t - 1)[:, None]
        out = model(input_ids=last.repeat(B)[:, None], attention_mask=attn, position_ids=pos,
                    use_cache=True, **{ckw: cache})
        cache = _out_cache(out)
        logps.append(F.log_softmax(out.logits[:, -1].float(), -1).double().reshape(B, n_cur, -1))
    scores = torch.zeros(B, len(c_ids), dtype=torch.float64, device=dev)
    for k, ids in enumerate(c_ids):
        s = logps[0][:, ids[0]]
        for t in range(1, len(ids)):
            s = s + logps[t][:, levels[t][tuple(ids[:t])], ids[t]]
        scores[:, k] = s
    return scores.cpu()


def _np(x):
    if hasattr(x, "detach"):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def argmax_response(logprobs):
    """``y*(x) = argmax_k logprobs[..., k]`` with ties broken by the first index; ``(...,)`` int64 numpy."""
    a = _np(logprobs)
    if a.ndim == 0 or a.shape[-1] == 0:
        raise ValueError("argmax_response needs a non-empty last dimension")
    if np.isnan(a).any():
        raise ValueError("argmax_response: NaN in log-probabilities")
    return np.argmax(a, axis=-1)  # numpy documents first-occurrence ties


def tilted_optimum(base_logprobs, beta: float):
    """The KL-regularised optimum of maximum-likelihood sharpening (§1.4; Eq. (8)'s population minimiser):
    ``pi*_beta(y|x) = pi_base(y|x)^(1+1/beta) / Z(x)`` = ``softmax((1 + 1/beta) log pi_base)`` over the last dim.

    Args:
        base_logprobs: ``(..., K)`` log-probabilities of the base (numpy or torch; ``-inf`` allowed);
            they need not be normalised over the K listed responses.
        beta: KL coefficient ``beta > 0`` (smaller is sharper; ``beta -> 0`` puts all mass on ``y*``).

    Returns:
        ``(..., K)`` float64 numpy probabilities summing to 1 over the last dim.
    """
    b = check_beta(beta)
    a = _np(base_logprobs)
    if np.isnan(a).any() or np.isposinf(a).any():
        raise ValueError("tilted_optimum: base_logprobs contain NaN or +inf")
    z = (1.0 + 1.0 / b) * a
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def coverage_coefficient(base_logprobs) -> float:
    """``C_cov = E_x[1 / pi_base(y*(x)|x)]`` over the prompts (rows) of ``(B, K)`` log-probabilities (§1.1).

    ``pi_base`` here is the unnormalised probability the base gives the listed candidate, so mass outside
    the list does not enter. Returns a float >= 1 for a normalised model.
    """
    a = _np(base_logprobs)
    if a.ndim == 1:
        a = a[None]
    return float(np.mean(np.exp(-a.max(axis=-1))))


@dataclass(frozen=True)
class SharpnessReport:
    """How sharp a model is on a set of prompts (Def. 3.1; exact over the listed responses).

    Attributes:
        n_prompts: prompts evaluated.
        delta: the ``delta`` of Def. 3.1.
        epsilon: the smallest ``eps`` for which the model is ``(eps, delta)``-sharpened, i.e. the fraction
            of prompts with ``pi_hat(y*|x) < 1 - delta`` (``y*`` the *base* model's argmax).
        sharpened_fraction: fraction with ``pi_hat(y*|x) > 1/2`` (Prop. 3.1: greedy then returns ``y*``).
        mean_mode_mass: mean ``pi_hat(y*|x)``.
        coverage: ``C_cov`` of the base.
        mean_outside_mass: mean ``1 - sum_k pi_hat(k|x)``: model mass on responses outside the list.
        mode_accuracy: fraction of prompts where ``y*`` is the correct answer (when ``correct`` is given).
        expected_sample_accuracy: mean ``pi_hat(correct|x)``, the temperature-1 sampling accuracy.
    """

    n_prompts: int
    delta: float
    epsilon: float
    sharpened_fraction: float
    mean_mode_mass: float
    coverage: float
    mean_outside_mass: float
    mode_accuracy: float | None = None
    expected_sample_accuracy: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def sharpness_report(model_logprobs, base_logprobs=None, *, delta: float = 0.5, correct=None) -> SharpnessReport:
    """Sharpness of ``pi_hat`` with respect to ``y*`` of ``pi_base`` (Def. 3.1), from enumerated log-probs.

    Args:
        model_logprobs: ``(B, K)`` ``log pi_hat(candidate|x)`` (e.g. from :func:`enumerate_responses`).
        base_logprobs: ``(B, K)`` ``log pi_base``; defines ``y*`` and ``C_cov`` (default: the model itself).
        delta: in (0, 1).
        correct: optional ``(B,)`` int indices of the correct candidate.

    Raises:
        ValueError: shape mismatch or ``delta`` outside (0, 1).
    """
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    m = _np(model_logprobs)
    b = m if base_logprobs is None else _np(base_logprobs)
    if m.ndim != 2 or m.shape != b.shape:
        raise ValueError(f"model_logprobs {m.shape} and base_logprobs {b.shape} must both be (B, K)")
    rows = np.arange(len(m))
    ystar = argmax_response(b)
    pm = np.exp(m)
    mass = pm[rows, ystar]
    out = dict(n_prompts=len(m), delta=float(delta), epsilon=float(np.mean(mass < 1 - delta)),
               sharpened_fraction=float(np.mean(mass > 0.5)), mean_mode_mass=float(mass.mean()),
               coverage=coverage_coefficient(b), mean_outside_mass=float(np.mean(1 - pm.sum(-1))))
    if correct is not None:
        c = np.asarray(correct, dtype=np.int64)
        if c.shape != (len(m),):
            raise ValueError(f"correct must have shape ({len(m)},), got {c.shape}")
        out.update(mode_accuracy=float(np.mean(ystar == c)), expected_sample_accuracy=float(pm[rows, c].mean()))
    return SharpnessReport(**out)


def bon_output_law(probs, n: int):
    """Distribution of the best-of-``n`` response under the likelihood self-reward (spec §6.3).

    For distinct probabilities, ``P(BoN = y) = (F(y) + p(y))^n - F(y)^n`` with ``F(y) = P(pi(y') < pi(y))``.
    Responses with equal probability form one group whose mass ``(F + p_G)^n - F^n`` is shared equally (the
    first-drawn among them wins, and each is equally likely to be drawn first).

    Args:
        probs: ``(..., K)`` probabilities (the unlisted remainder ``1 - sum`` counts as lower-likelihood mass).
        n: number of samples, >= 1.

    Returns:
        ``(..., K)`` float64 numpy array.
    """
    check_n(n)
    p = _np(probs)
    if (p < 0).any() or (p.sum(-1) > 1 + 1e-9).any():
        raise ValueError("bon_output_law: probabilities must be >= 0 and sum to at most 1")
    rest = np.clip(1.0 - p.sum(-1, keepdims=True), 0.0, 1.0)
    # F(y): mass strictly below p(y) (plus the unlisted remainder); G(y): mass of y's tie group
    below = (p[..., None, :] < p[..., :, None]) * p[..., None, :]
    ties = (p[..., None, :] == p[..., :, None]) * p[..., None, :]
    F = below.sum(-1) + rest
    G = ties.sum(-1)
    group = (F + G) ** n - F ** n
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(G > 0, p / np.where(G > 0, G, 1.0), 0.0)
    return group * share


def bon_success_probability(p_star, n: int):
    """``P(y* among n draws) = 1 - (1 - p*)^n`` (spec §6.4; Prop. C.1's miss probability is ``(1-p*)^n``)."""
    check_n(n)
    p = _np(p_star)
    return 1.0 - (1.0 - p) ** n


def required_samples(p_star, rho: float = 0.1):
    """Prop. C.1's sufficient sample count ``ln(1/rho) / p*`` for BoN to return ``y*`` w.p. >= 1 - rho."""
    if not (0.0 < rho < 1.0):
        raise ValueError(f"rho must be in (0, 1), got {rho!r}")
    return math.log(1.0 / rho) / _np(p_star)


def check_n(n: int, name: str = "n") -> int:
    """``n`` as an int; ``ValueError`` unless it is an integer >= 1."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {n!r}")
    return int(n)


def tabular_greedy(joint) -> tuple[tuple[int, ...], float]:
    """Token-wise greedy decoding of a tabular model of fixed-length sequences (Prop. 3.1).

    Args:
        joint: ``(V,) * H`` array, ``joint[y_1, ..., y_H] = pi(y_1..y_H)`` (sums to 1).

    Returns:
        ``(sequence, pi(sequence))``: at each step the next token maximises the conditional
        ``pi(y_h | y_<h)`` (ties: first token), i.e. the marginal of the remaining tree.
    """
    p = _np(joint)
    seq: list[int] = []
    node = p
    while node.ndim > 0:
        marg = node.reshape(node.shape[0], -1).sum(-1)
        t = int(np.argmax(marg))
        seq.append(t)
        node = node[t]
    return tuple(seq), float(node)
