"""Data parallelism with two CPU processes (torchrun + gloo): ranks draw different rollouts, gradients are
synced (equal to the single-process average over both ranks' batches) and weights stay identical (issue 28)."""

import json
from pathlib import Path

import pytest
import torch

from iclr25.core.testing import run_torchrun
from iclr25.vbon.objective import policy_gradient_loss
from iclr25.vbon.runtime import clone_policy
from iclr25.vbon.sampling import Samples, response_logprobs

WORKER = Path(__file__).with_name("ddp_worker_vbon.py")


@pytest.mark.slow
def test_two_process_data_parallel_vbon(tiny_lm, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    model, tok = tiny_lm
    mdir = tmp_path / "model"
    model.save_pretrained(mdir)
    tok.save_pretrained(mdir)
    out = tmp_path / "out"
    out.mkdir()
    run_torchrun([WORKER, mdir, out], timeout=400)

    r0, r1 = (json.loads((out / f"rollouts_rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world_size"] == r1["world_size"] == 2
    for a, b in zip(r0["rolls"], r1["rolls"]):  # different data on the two ranks at every step
        assert (a["prompts"], a["continuations"]) != (b["prompts"], b["continuations"])

    w0, w1 = (load_file(str(out / f"weights_rank{r}.safetensors")) for r in (0, 1))
    init = dict(model.named_parameters())
    assert w0.keys() == w1.keys()
    assert all(torch.equal(w0[k], w1[k]) for k in w0)  # identical after 3 synced steps
    assert any(not torch.equal(w0[k], init[k]) for k in w0)  # and they did move

    # the synced gradient equals the single-process gradient of the mean loss over both ranks' batches
    g0, g1 = (load_file(str(out / f"grad0_rank{r}.safetensors")) for r in (0, 1))
    assert all(torch.equal(g0[k], g1[k]) for k in g0)
    pol = clone_policy(AutoModelForCausalLM.from_pretrained(mdir))
    for m in pol.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    pol.zero_grad()
    for r in (0, 1):
        ro = torch.load(out / f"rollout0_rank{r}.pt", weights_only=True)
        s = Samples([], [], ro["input_ids"], ro["attention_mask"], ro["position_ids"], ro["response_mask"],
                    torch.zeros_like(ro["response_mask"]))
        logp = response_logprobs(pol, s)
        loss = policy_gradient_loss(logp, ro["old"], ro["response_mask"].to(logp.dtype), ro["adv"], clip=None)
        (loss / 2).backward()  # the concatenated batch's mean loss (equal per-rank batch sizes)
    single = dict(pol.named_parameters())
    for k, g in g0.items():
        torch.testing.assert_close(g, single[k].grad, rtol=1e-4, atol=1e-6)
    assert max(float(g.abs().max()) for g in g0.values()) > 0
