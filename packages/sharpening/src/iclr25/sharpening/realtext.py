"""The optional real-text check of spec §4.3 (full run): SFT-Sharpening with N = 16 on a tiny LM of movie
snippets raises the reference log-likelihood of the model's own temperature-1 samples (Table 1's "likelihood
lift" column), with response lengths beside the likelihoods because sequence likelihood favours short
responses. No accuracy: free text has no answer.

Data: the Pang & Lee sentence-polarity snippets mirrored for ``vbon`` (``$ICLR25_DATA/vbon``), read through
core ``DatasetSpec``; the tiny LM is this package's own (core ``cached_tiny_lm``), not iclr25-vbon's.
"""

from __future__ import annotations

import logging

import numpy as np

from iclr25.core import Claim
from iclr25.core.data import DatasetSpec, RemoteFile

from .claimkit import margin_claim

__all__ = ["MOVIE_SNIPPETS", "movie_snippets", "realtext_likelihood_lift", "realtext_job", "realtext_claim"]

log = logging.getLogger(__name__)

_SRC = ("https://github.com/dennybritz/cnn-text-classification-tf/tree/"
        "18762b459e21d9c70e5c242f8d43fc4e6db37a0d/data/rt-polaritydata")

MOVIE_SNIPPETS = DatasetSpec(
    "vbon",
    files=(
        RemoteFile("rt-polarity.pos", url=f"{_SRC}/rt-polarity.pos",
                   sha256="4134882974a28d0c7b5151256f0e33a6169984ee7372c279e673f1114f475d58", direct=False),
        RemoteFile("rt-polarity.neg", url=f"{_SRC}/rt-polarity.neg",
                   sha256="2d11cfbc790f1cd96d78339f41ce53ced1efa83cd22d37d6788fa3fe3d17e2fd", direct=False),
    ),
    description="Pang & Lee (2005) sentence polarity v1.0 (movie-review snippets), mirrored for vbon",
)


def movie_snippets() -> list[str]:
    """All 10,662 snippets (whitespace-normalised). Raises ``FileNotFoundError`` naming the missing file."""
    out = []
    for name in ("rt-polarity.pos", "rt-polarity.neg"):
        with open(MOVIE_SNIPPETS.path(name), encoding="utf-8") as fh:
            out += [" ".join(line.split()) for line in fh if line.strip()]
    return out


def realtext_likelihood_lift(*, seeds=(0, 1, 2), device: str = "cpu", n_prompts: int = 200, n: int = 16,
                             eval_samples: int = 4, max_new_tokens: int = 24) -> dict:
    """Run the check; returns per-seed numbers and ``"claim"`` (a :class:`Claim`)."""
    import torch

    from iclr25.core.lm import TinyLMSpec, cached_tiny_lm

    from .rewards import score_sequences
    from .sampling import sample_responses
    from .sft import SFTConfig, sft_sharpen
    from .training import TrainConfig

    texts = movie_snippets()
    perm = np.random.default_rng(0).permutation(len(texts))
    held = [texts[i] for i in perm[: len(texts) // 10]]
    train_texts = [texts[i] for i in perm[len(texts) // 10:]]
    spec = TinyLMSpec(steps=600, batch_size=32, seq_len=64, n_positions=128)
    model, tok, folder = cached_tiny_lm("sharpening", train_texts, spec)
    model.to(device).eval()
    seen: dict[str, None] = {}
    for t in held:
        w = t.split()
        if len(w) > 4:
            seen.setdefault(" ".join(w[:3]), None)
    prompts = list(seen)
    if len(prompts) < 2 * n_prompts:
        raise ValueError(f"only {len(prompts)} distinct prompts in the held-out snippets")
    train_p, test_p = prompts[:n_prompts], prompts[n_prompts:2 * n_prompts]
    rows = []
    for s in seeds:
        torch.manual_seed(2000 + s)
        cfg = SFTConfig(n=n, max_new_tokens=max_new_tokens, sample_batch_size=512,
                        train=TrainConfig(epochs=3, lr=1e-3, batch_size=16, lora_r=0, max_grad_norm=1.0, seed=s))
        res = sft_sharpen(model, tok, train_p, cfg)
        row = {"seed": s, "bon_mean_logp": res.stats["mean_best_score"], "bon_mean_length": res.stats["mean_best_length"]}
        for name, pol in (("base", model), ("sharpened", res.model)):
            smp = sample_responses(pol, tok, test_p, eval_samples, max_new_tokens=max_new_tokens, batch_size=512)
            lp = score_sequences(model, smp.input_ids, smp.attention_mask, smp.response_mask)
            row[f"{name}_logp"] = float(lp.mean())
            row[f"{name}_length"] = float(smp.lengths.double().mean())
            row[f"{name}_finished"] = float(smp.finished.double().mean())
        g = sample_responses(model, tok, test_p, 1, temperature=0.0, max_new_tokens=max_new_tokens)
        row["base_greedy_logp"] = float(score_sequences(model, g.input_ids, g.attention_mask, g.response_mask).mean())
        row["base_greedy_length"] = float(g.lengths.double().mean())
        rows.append(row)
    return {"rows": rows, "model": str(folder), "n": n, "n_prompts": n_prompts, "eval_samples": eval_samples,
            "lm": {"n_layer": spec.n_layer, "n_embd": spec.n_embd, "vocab_size": spec.vocab_size}}


def realtext_job(settings: dict, seed: int | None, deps: dict) -> dict:
    """Runner job (full preset): :func:`realtext_likelihood_lift` over ``settings["seeds"]``; a missing
    data mirror is recorded as ``{"skipped": reason}`` (and logged as a warning)."""
    try:
        return realtext_likelihood_lift(seeds=tuple(settings["seeds"]), device=settings.get("device", "cpu"))
    except FileNotFoundError as e:
        log.warning("real-text check skipped: %s", e)
        return {"skipped": str(e)}


def realtext_claim(rec: dict) -> Claim:
    """The ``realtext/likelihood_lift`` claim from :func:`realtext_likelihood_lift`'s record (pure)."""
    rows, lm, n, n_prompts = rec["rows"], rec["lm"], rec["n"], rec["n_prompts"]
    what = (f"Tiny movie-snippet LM ({lm['n_layer']} layers, d={lm['n_embd']}, BPE {lm['vocab_size']}), SFT-Sharpening "
            f"N={n} on {n_prompts} 3-word prompts, {rec['eval_samples']} samples on {n_prompts} other prompts. Mean "
            f"response length (tokens, EOS incl.): sharpened {np.mean([r['sharpened_length'] for r in rows]):.1f}, base "
            f"{np.mean([r['base_length'] for r in rows]):.1f}, base greedy "
            f"{np.mean([r['base_greedy_length'] for r in rows]):.1f} (log pi "
            f"{np.mean([r['base_greedy_logp'] for r in rows]):.2f}); the sharpened responses are "
            f"{np.mean([r['base_length'] - r['sharpened_length'] for r in rows]):+.1f} tokens shorter than the base's "
            "samples, and shorter responses have higher likelihood, so part of the lift can be length")
    return margin_claim("realtext/likelihood_lift", "mean log pi_base of T=1 samples: SFT-sharpened vs base (nats)",
                        [r["sharpened_logp"] for r in rows], [r["base_logp"] for r in rows], 0.5,
                        "Table 1 col. 2 (likelihood lift)", what, unit=" nats", kind="mechanism",
                        paper_ref="Table 1 col. 2, direction only (Sec. 4.3 real-text check)")
