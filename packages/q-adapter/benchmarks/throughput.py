"""Generation throughput of the customised Q-Adapter policy against the UNWRAPPED base model.

Baselines (same prompts, EOS ignored so every run makes ``--new-tokens`` tokens per row):

* ``base_loop``: the plain ``*ForCausalLM`` (no peft) in the same KV-cached token loop
  (:func:`iclr25.q_adapter.decoding.kv_decode`);
* ``base_hf_generate``: the plain model's Hugging Face ``generate`` (greedy).

Customised policy ``softmax((Q + alpha_0 log pi_1)/alpha~)``:

* ``fused``: one forward of the doubled batch per token (peft mixed-adapter batch, one KV cache);
* ``two_caches``: two forwards per token (adapter on; adapter off via ``disable_adapter``).

Runs alternate ``--repeats`` times; the ratio uses mean times (best times are reported too). The model is
a random tiny GPT-2 of the embedded quick base's size (throughput does not depend on the weights) or
``--base PATH``. Usage::

    python packages/q-adapter/benchmarks/throughput.py --out runs/q-adapter/bench [--base PATH] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=None, help="local model folder (default: random tiny GPT-2, 2L d=128)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=24)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=Path("runs/q-adapter/bench"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    from iclr25.core.lm import load_causal_lm, tiny_causal_lm
    from iclr25.q_adapter import QAdapterConfig, QAdapterModel
    from iclr25.q_adapter.decoding import cache_kwarg, kv_decode

    if a.base:
        model, _ = load_causal_lm(a.base, device=a.device)
    else:
        model = tiny_causal_lm(vocab_size=2048, n_positions=192, n_embd=128, n_layer=2, n_head=4, seed=0).to(a.device)
    model.eval()
    plain = copy.deepcopy(model)
    qm = QAdapterModel(model, QAdapterConfig()).eval()
    with torch.no_grad():  # a non-trivial adapter (B != 0), as after training
        for n, p in qm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    V = plain.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V - 2, (a.batch, a.prompt_tokens), generator=g).to(a.device)
    attn = torch.ones_like(ids)
    ckw = cache_kwarg(plain)
    cache: dict = {}

    def base_step(full, step_ids, at, pos):
        out = plain(input_ids=step_ids, attention_mask=at, position_ids=pos, use_cache=True, **{ckw: cache.get("c")})
        cache["c"] = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[:, -1].float()

    def base_loop():
        cache.clear()
        return kv_decode(base_step, ids, attn, max_new_tokens=a.new_tokens, eos_token_id=None)

    def base_hf():
        return plain.generate(input_ids=ids, attention_mask=attn, max_new_tokens=a.new_tokens,
                              min_new_tokens=a.new_tokens, do_sample=False, pad_token_id=0)

    runs = {
        "base_loop": base_loop,
        "base_hf_generate": base_hf,
        "peft_base_disable_adapter": lambda: qm.generate(ids, attn, max_new_tokens=a.new_tokens, policy="base",
                                                         eos_token_id=-1),
        "customized_fused": lambda: qm.generate(ids, attn, max_new_tokens=a.new_tokens, eos_token_id=-1,
                                                fused=True),
        "customized_two_caches": lambda: qm.generate(ids, attn, max_new_tokens=a.new_tokens, eos_token_id=-1,
                                                     fused=False),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    with torch.no_grad():
        for fn in runs.values():  # warm-up
            fn()
        for _ in range(a.repeats):
            for k, fn in runs.items():
                t0 = time.perf_counter()
                out = fn()
                times[k].append(time.perf_counter() - t0)
                assert out.shape == (a.batch, a.prompt_tokens + a.new_tokens), (k, out.shape)
    n = a.batch * a.new_tokens
    res = {k: {"tok_s_mean": n / (sum(t) / len(t)), "tok_s_best": n / min(t), "seconds": t} for k, t in times.items()}
    ratios = {f"{c}/{b}": res[c]["tok_s_mean"] / res[b]["tok_s_mean"]
              for c in ("customized_fused", "customized_two_caches")
              for b in ("base_loop", "base_hf_generate", "peft_base_disable_adapter")}
    a.out.mkdir(parents=True, exist_ok=True)
    info = {"settings": {k: str(v) for k, v in vars(a).items()}, "model": type(plain).__name__,
            "n_params": sum(p.numel() for p in plain.parameters())}
    (a.out / "throughput.json").write_text(json.dumps({**info, "results": res, "ratios": ratios}, indent=2) + "\n")
    print("| run | tokens/s (mean) | tokens/s (best) |\n|---|---|---|")
    for k, r in res.items():
        print(f"| {k} | {r['tok_s_mean']:.0f} | {r['tok_s_best']:.0f} |")
    print("| ratio (means) | value |\n|---|---|")
    for k, v in ratios.items():
        print(f"| {k} | {v:.3f} |")
    f = ratios["customized_fused/base_loop"], ratios["customized_fused/base_hf_generate"]
    print(f"customised policy (fused) = {f[0]:.2f}x the unwrapped base (same loop), {f[1]:.2f}x its HF generate "
          f"(target >= 0.45x: {'met' if min(f) >= 0.45 else 'NOT met'}); {a.out / 'throughput.json'}")


if __name__ == "__main__":
    main()
