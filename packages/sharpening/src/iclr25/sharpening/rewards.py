"""Self-rewards ``r_self(y|x; pi_base)``: computed from the base model alone (spec §1.1).

- :class:`LogLikelihood`: ``log pi_base(y|x)``, summed over response tokens (EOS included), nats —
  maximum-likelihood sharpening, the reward the theory uses.
- :class:`LengthNormalizedLogLikelihood`: ``log pi_base(y|x) / |y|`` with ``|y|`` the response tokens
  including EOS (spec §6.8).
- :class:`MajorityVote`: the share of the ``N`` samples whose extracted answer equals this sample's — a
  sample approximation of ``sum_{y': ans(y') = ans(y)} pi_base(y'|x)``.

Every likelihood reward is recomputed by a teacher-forced forward pass of the reference model through core
``sequence_logprobs``; no score a generation API returned is ever used.
"""

from __future__ import annotations

from collections.abc import Callable

from .answers import answer_extractor
from .sampling import Samples

__all__ = ["SelfReward", "LogLikelihood", "LengthNormalizedLogLikelihood", "MajorityVote", "score_sequences"]


def score_sequences(model, input_ids, attention_mask, response_mask, *, average: bool = False,
                    batch_size: int = 512, grad: bool = False):
    """``log pi(response | prompt)`` of each row via core ``sequence_logprobs``, in chunks of ``batch_size``.

    Args:
        model: a causal LM.
        input_ids, attention_mask, response_mask: ``(R, L)`` long tensors (see :class:`Samples`).
        average: divide by the number of response tokens (length normalisation).
        grad: keep the autograd graph (training); otherwise no_grad and eval mode.

    Returns:
        ``(R,)`` float tensor (float64 without ``grad``), nats.
    """
    import torch

    from iclr25.core.lm import sequence_logprobs

    dev = next(model.parameters()).device
    out = []
    was_training = model.training
    if not grad:
        model.eval()
    try:
        with torch.set_grad_enabled(grad):
            for s in range(0, input_ids.shape[0], batch_size):
                sl = slice(s, s + batch_size)
                ids, am, rm = input_ids[sl].to(dev), attention_mask[sl].to(dev), response_mask[sl].to(dev)
                keep = int(am.sum(0).nonzero().max()) + 1  # drop all-padding columns on the right
                lp = sequence_logprobs(model, ids[:, :keep], am[:, :keep], rm[:, :keep], average=average)
                out.append(lp if grad else lp.double().cpu())
    finally:
        model.train(was_training)
    return torch.cat(out)


class SelfReward:
    """Protocol of a self-reward: ``reward(samples) -> (B, N) float64 tensor`` (higher is better)."""

    name = "self-reward"

    def __call__(self, samples: Samples):  # pragma: no cover - interface
        raise NotImplementedError


class LogLikelihood(SelfReward):
    """``r_self(y|x) = log pi_ref(y|x)`` (sequence level, nats), recomputed by a forward pass of ``model``.

    Args:
        model: the reference model ``pi_base`` (a ``*ForCausalLM``); it scores the token ids of the samples,
            so it must share the sampler's tokenizer.
        batch_size: sequences per forward pass.
    """

    name = "log-likelihood"
    average = False

    def __init__(self, model, *, batch_size: int = 512) -> None:
        if model is None or not hasattr(model, "parameters"):
            raise ValueError(f"{type(self).__name__} needs the reference model (a torch causal LM), got {model!r}")
        self.model = model
        self.batch_size = batch_size

    def __call__(self, samples: Samples):
        lp = score_sequences(self.model, samples.input_ids, samples.attention_mask, samples.response_mask,
                             average=self.average, batch_size=self.batch_size)
        return lp.reshape(samples.batch_size, samples.n)


class LengthNormalizedLogLikelihood(LogLikelihood):
    """``r_self(y|x) = log pi_ref(y|x) / |y|``, ``|y|`` = response tokens including EOS (nats/token)."""

    name = "length-normalized-log-likelihood"
    average = True


class MajorityVote(SelfReward):
    """``r_self(y_j|x) = #{k : ans(y_k) = ans(y_j)} / N`` over the ``N`` samples of the same prompt.

    Responses without an extractable answer score 0 (they never win unless no response has an answer; then
    the first sample wins the tie).

    Args:
        extractor: ``"last-number"``, ``"gsm8k"``, a regular expression, or ``callable(text) -> answer | None``.

    Raises:
        ValueError: no extractor (majority vote is undefined without one).
    """

    name = "majority-vote"

    def __init__(self, extractor: str | Callable[[str], str | None] | None) -> None:
        if extractor is None:
            raise ValueError("MajorityVote needs an answer extractor (extractor='last-number', 'gsm8k', a regex "
                             "or a callable); majority vote is undefined without one")
        self.extractor = answer_extractor(extractor)

    def answers(self, samples: Samples) -> list[list[str | None]]:
        """The extracted answer of every response, ``B`` lists of ``N``."""
        return [[self.extractor(t) for t in row] for row in samples.responses]

    def __call__(self, samples: Samples):
        import torch

        out = torch.zeros(samples.batch_size, samples.n, dtype=torch.float64)
        for b, row in enumerate(self.answers(samples)):
            counts: dict[str, int] = {}
            for a in row:
                if a is not None:
                    counts[a] = counts.get(a, 0) + 1
            out[b] = torch.tensor([counts[a] / samples.n if a is not None else 0.0 for a in row], dtype=torch.float64)
        return out
