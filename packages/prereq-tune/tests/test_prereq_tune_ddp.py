"""Data parallelism with two CPU processes (torchrun + gloo, accelerate): the ranks train on disjoint shards,
the first step's gradient is synced and equals the single-process mean of both ranks' losses, the skill
weights stay identical across ranks, and the frozen knowledge adapters and base are bit-identical (issue 23)."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from iclr25.core.testing import run_torchrun

WORKER = Path(__file__).with_name("prereq_tune_ddp_worker.py")


def _worker_module():
    spec = importlib.util.spec_from_file_location("prereq_tune_ddp_worker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_two_process_data_parallel_skill_training(tmp_path):
    pytest.importorskip("accelerate")
    from safetensors.torch import load_file

    from iclr25.prereq_tune import skill_examples
    from iclr25.prereq_tune.data import encode_completions
    from iclr25.prereq_tune.lora import adapter_parameters
    from iclr25.prereq_tune.training import completion_loss
    from iclr25.prereq_tune.world import TINY_FORMAT

    out = tmp_path / "out"
    out.mkdir()
    run_torchrun([WORKER, out], timeout=400)
    r0, r1 = (json.loads((out / f"run_rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world_size"] == r1["world_size"] == 2 and r0["steps"] == r1["steps"] > 1

    # sharding: the routed items are the fictitious questions (each with V = 2 version rows); in the first
    # epoch the two ranks' rows come from disjoint questions that together cover all of them
    mod = _worker_module()
    world, tok, model = mod.build()
    ex = skill_examples(world, "fictitious")
    subject = lambda i: ex[i].question  # noqa: E731  (the same question in every version)
    n_q = len({e.question for e in ex})
    assert len(ex) == 2 * n_q
    per_epoch = math.ceil(math.ceil(n_q / 2) / mod.ARGS["batch_size"])
    assert r0["steps"] == r1["steps"] == mod.ARGS["epochs"] * per_epoch
    first = [{subject(i) for b in r["batches"][:per_epoch] for i in b["rows"]} for r in (r0, r1)]
    assert first[0].isdisjoint(first[1])
    assert len(first[0] | first[1]) == len({e.question for e in ex})
    # routing: every micro-batch holds one version's rows, with that version's knowledge adapter active
    for r in (r0, r1):
        for b in r["batches"]:
            vs = {ex[i].version for i in b["rows"]}
            assert len(vs) == 1 and b["active"] == [f"know_statement_v{vs.pop()}", "skill"]

    # synced gradient == the single-process gradient of the mean of both ranks' micro-batch losses
    g0, g1 = (load_file(str(out / f"grad0_rank{r}.safetensors")) for r in (0, 1))
    assert g0.keys() == g1.keys() and len(g0) > 0
    assert all(torch.equal(g0[k], g1[k]) for k in g0)
    rows = encode_completions(tok, ex, TINY_FORMAT, max_length=mod.ARGS["max_length"])
    params = dict(model.named_parameters())
    model.train()
    local = []
    for r in (r0, r1):
        b = r["batches"][0]
        model.base_model.set_adapter(b["active"])
        for p in model.parameters():
            p.requires_grad_(False)
            p.grad = None
        for n in g0:
            params[n].requires_grad_(True)
        ids, att, lab = rows.batch(torch.as_tensor(b["rows"]))
        s, c = completion_loss(model, ids, att, lab)
        (s / c).backward()
        local.append({n: params[n].grad.detach().clone() for n in g0})
    for n, g in g0.items():
        torch.testing.assert_close(g, (local[0][n] + local[1][n]) / 2, rtol=1e-4, atol=1e-7)
    assert max(float(g.abs().max()) for g in g0.values()) > 0
    # the two ranks' local gradients differ, so equal synced gradients mean they were really averaged
    assert any(not torch.allclose(local[0][n], local[1][n]) for n in g0)

    # identical skill weights after the synced steps, and they moved; frozen tensors bit-identical
    w0, w1 = (load_file(str(out / f"skill_rank{r}.safetensors")) for r in (0, 1))
    init = {k: v.detach() for k, v in adapter_parameters(model, "skill").items()}
    assert w0.keys() == w1.keys() == init.keys()
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    assert all(not torch.equal(w0[k], init[k]) for k in w0)
    assert r0["frozen_before"] == r0["frozen_after"] == r1["frozen_after"] and len(r0["frozen_before"]) > 0
