"""Building models, rewards and prompts from :class:`~iclr25.vbon.config.ModelArgs` (shared by CLI and reproduce)."""

from __future__ import annotations

import copy
from pathlib import Path

from .config import ModelArgs
from .reflm import reference_lm_spec

__all__ = ["LM_SIZES", "load_policy", "load_reward", "default_prompts", "clone_policy"]

LM_SIZES = {
    # CPU scale: 2 layers, d=64 (spec: d=128; halved to fit the quick budget on a shared 2-core machine).
    "quick": reference_lm_spec(n_layer=2, n_embd=64, n_head=2, epochs=1.0),
    # spec §4.2 full: 4 layers, d=256; d=128 here to keep the full reproduction near 30 CPU-minutes.
    "full": reference_lm_spec(n_layer=4, n_embd=128, n_head=4, epochs=2.0, lr=1e-3),
}


def load_policy(args: ModelArgs, data=None, progress: bool = True, device: str = "auto"):
    """``(model, tokenizer)`` of the reference policy: an HF id/path, or the cached embedded tiny LM.

    Args:
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (the command's ``--device``).
    """
    from iclr25.core.seed import choose_device

    dev = choose_device(device)
    if args.policy:
        from iclr25.core.lm import load_causal_lm

        # raises ModelNotFoundError (a FileNotFoundError) for a missing folder / id, without a download offline
        return load_causal_lm(args.policy, device=device, **args.load_kwargs())
    from .reflm import load_reference_lm

    model, tok = load_reference_lm(LM_SIZES[args.lm_size], data=data, progress=progress)
    return model.to(dev), tok


def load_reward(args: ModelArgs, data=None, device: str = "auto"):
    """The reward function: an HF classifier by id, or the cached TF-IDF sentiment reward."""
    if args.reward_model:
        from .rewards import HFRewardModel

        return HFRewardModel(args.reward_model, label=args.reward_label, device=device)
    from .rewards import TfidfSentimentReward

    return TfidfSentimentReward.cached(data)


def default_prompts(n: int, split: str = "train", data=None, prompts_file: Path | None = None) -> list[str]:
    """Prompts from a file, or the first 3 words of mirrored held-out snippets: ``train`` prompts are the
    first ``n`` distinct prefixes, ``eval`` prompts the next ``n`` (disjoint)."""
    from .data import load_polarity, make_prompts, read_prompts

    if prompts_file is not None:
        return read_prompts(prompts_file)[:n] if n else read_prompts(prompts_file)
    if n < 1:
        raise ValueError(f"the prompt set is empty (num_prompts={n}); use num_prompts >= 1")
    data = data or load_polarity()
    return make_prompts(data.test_texts, n, offset=0 if split == "train" else 512)


def clone_policy(model):
    """A trainable deep copy of ``model`` (the policy starts at ``pi_ref``).

    Raises:
        ValueError: a 4-/8-bit quantised model (vBoN trains every weight; quantised weights cannot be trained).
    """
    if getattr(model, "is_quantized", False) or getattr(model, "is_loaded_in_4bit", False) \
            or getattr(model, "is_loaded_in_8bit", False):
        raise ValueError("the policy is 4-/8-bit quantised; vBoN trains all parameters, so train with --dtype "
                         "bfloat16 (quantisation is for bon-sample / evaluate)")
    m = copy.deepcopy(model).train()
    for p in m.parameters():
        p.requires_grad_(True)
    return m
