"""Tiny-LM task, implicit trainer and the text path on a tiny local model (no hub downloads)."""

import json

import pytest
import torch

from iclr25.aihf import AIHFConfig, TinyLMConfig
from iclr25.aihf.tinylm import TinyLMTask, run_lm_method


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    cfg = TinyLMConfig(vocab=8, n_good=2, length=4, n_prompts=2, n_eval=32, rounds=2, epochs=1, lm_batch=16,
                       sft_epochs=1)
    return TinyLMTask(cfg, ref_steps=30, cache=tmp_path_factory.mktemp("cache"))


def test_tinylm_data_and_reward(task):
    data = task.make_data(64, 16, seed=0)
    assert data.demos.shape == (64, 4) and data.chosen.shape == (16, 4)
    assert int(data.demos.min()) >= task.first_content
    r = task.true_reward(data.demos)
    assert torch.equal(r, task.good[data.demos].sum(-1).float())
    # SIR demonstrations follow pi* ∝ pi_ref exp(r*/beta): more good tokens than pi_ref samples
    ref = task.sample(task.reference, task.random_prompts(256, torch.Generator().manual_seed(1)),
                      torch.Generator().manual_seed(2))
    assert float(r.mean()) > float(task.true_reward(ref).mean())


def test_tinylm_resume_is_exact(task):
    data = task.make_data(32, 16, seed=0)
    lm = task.cfg
    saved = []
    full = run_lm_method("aihf", task, data, AIHFConfig(w=0.5), lm, seed=0, checkpoint=saved.append)
    assert len(saved) == 2 and saved[0]["round"] == 1
    lm1 = TinyLMConfig(**{**lm.__dict__, "rounds": 1})
    first = []
    run_lm_method("aihf", task, data, AIHFConfig(w=0.5), lm1, seed=0, checkpoint=first.append)
    resumed = run_lm_method("aihf", task, data, AIHFConfig(w=0.5), lm, seed=0, resume=first[-1])
    for (k, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), k
    assert {"reward", "kl", "objective"} <= set(full.metrics)


@pytest.mark.parametrize("method", ["dpo", "sft", "sft-dpo", "self-play"])
def test_tinylm_baselines_run(task, method):
    data = task.make_data(32, 16, seed=1)
    res = run_lm_method(method, task, data, AIHFConfig(w=0.5), task.cfg, seed=1)
    assert 0 <= res.metrics["reward"] <= task.L


def _tiny_model(folder):
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    tiny_causal_lm(seed=0, n_positions=128).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture
def text_files(tmp_path):
    d = tmp_path / "demos.jsonl"
    p = tmp_path / "prefs.jsonl"
    d.write_text("".join(json.dumps({"prompt": f"Q{i}: ", "response": "yes good"}) + "\n" for i in range(4)))
    p.write_text("".join(json.dumps({"prompt": f"Q{i}: ", "chosen": "good", "rejected": "bad"}) + "\n"
                         for i in range(4)))
    return d, p


def test_text_implicit_round_and_resume(tmp_path, text_files):
    from iclr25.aihf.cli import main

    m = _tiny_model(tmp_path / "m")
    d, p = text_files
    argv = ["train", "--task", "text", "--policy", str(m), "--demos", str(d), "--prefs", str(p), "--max-new-tokens",
            "3", "--max-length", "48", "--lr", "1e-3", "--dpo-beta", "0.1", "--quiet", "--device", "cpu",
            "--out", str(tmp_path / "o")]
    assert main([*argv, "--rounds", "1"]) == 0
    st = json.loads((tmp_path / "o" / "state.json").read_text())
    assert st["round"] == 1 and (tmp_path / "o" / "policy" / "config.json").is_file()
    assert main([*argv, "--rounds", "2", "--resume"]) == 0
    st = json.loads((tmp_path / "o" / "state.json").read_text())
    assert st["round"] == 2 and len(st["history"]) == 2
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    acc = res.get("results", res)["pref_accuracy"]
    assert acc == 1.0  # 4 identical-response pairs: the implicit reward orders them after training


def test_text_explicit_reward_model_and_ppo(tmp_path, text_files):
    from iclr25.aihf.cli import main

    m = _tiny_model(tmp_path / "m")
    d, p = text_files
    argv = ["train", "--task", "text", "--policy", str(m), "--reward-model", str(m), "--demos", str(d), "--prefs",
            str(p), "--max-new-tokens", "3", "--max-length", "48", "--lr", "1e-2", "--rounds", "2", "--quiet",
            "--device", "cpu", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    assert (tmp_path / "o" / "reward_model" / "reward_head.safetensors").is_file()
    st = json.loads((tmp_path / "o" / "state.json").read_text())
    assert "reward_loss" in st["history"][0] and "ppo_samples" in st["history"][0]


@pytest.mark.slow
def test_text_two_cpu_processes_shard_and_sync(tmp_path, text_files):
    """2 CPU processes (torchrun; accelerate's own launcher needs MPI for multi-CPU): the Accelerator sees the
    launcher's RANK/WORLD_SIZE, each process trains on its half of the data and DDP syncs the gradients."""
    from iclr25.core.testing import run_torchrun

    pytest.importorskip("accelerate")
    m = _tiny_model(tmp_path / "m")
    d, p = text_files
    run_torchrun(["iclr25.aihf", "train", "--task", "text", "--policy", m, "--demos", d, "--prefs", p,
                  "--max-new-tokens", "3", "--max-length", "48", "--rounds", "1", "--batch-size", "2", "--device",
                  "cpu", "--quiet", "--out", tmp_path / "o"], module=True, timeout=900)
    st = json.loads((tmp_path / "o" / "state.json").read_text())
    assert st["round"] == 1
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert res.get("results", res)["n_prefs"] == 2  # rank 0's shard of 4 pairs


def test_grad_accum_equals_one_large_batch():
    """2 accumulated micro-steps of batch b == 1 step of batch 2b (same examples, mean losses, one AdamW update)."""
    import copy

    import numpy as np

    from iclr25.aihf.implicit import Encoded, implicit_epoch
    from iclr25.core.lm import tiny_causal_lm

    g = torch.Generator().manual_seed(0)

    def enc(n):
        ids = torch.randint(2, 20, (n, 6), generator=g)
        resp = torch.zeros_like(ids)
        resp[:, 2:] = 1
        return Encoded(ids, torch.ones_like(ids), resp)

    sets = [enc(16) for _ in range(4)]
    cached = [torch.randn(16, generator=g) for _ in range(4)]
    base = tiny_causal_lm(vocab_size=20, n_positions=8, seed=0, eos_token_id=1, pad_token_id=0)
    models = []
    for batch, steps, acc in ((8, 1, 1), (4, 2, 2)):
        m = copy.deepcopy(base)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        implicit_epoch(m, opt, w=0.5, beta=0.5, demos=sets[0], agents=sets[1], demo_old=cached[0],
                       agent_old=cached[1], chosen=sets[2], rejected=sets[3], ref_chosen=cached[2],
                       ref_rejected=cached[3], batch_size=batch, rng=np.random.default_rng(0), pad_id=0, steps=steps,
                       grad_accum=acc)
        models.append(m)
    moved = False
    for (k, a), b0, b in zip(models[0].state_dict().items(), base.state_dict().values(),
                             models[1].state_dict().values()):
        assert torch.allclose(a, b, atol=1e-5), k
        moved |= not torch.allclose(a, b0)
    assert moved


def test_text_max_length_over_model_context_is_clean_error(tmp_path, text_files, capsys):
    """New-user trial: a 128-position model with the default --max-length 256 used to die with an IndexError
    traceback inside the GPT-2 forward pass; now a clean error names --max-length and the model's context."""
    from iclr25.aihf.cli import main

    m = _tiny_model(tmp_path / "m")
    d, p = text_files
    argv = ["train", "--task", "text", "--policy", str(m), "--demos", str(d), "--prefs", str(p), "--quiet",
            "--device", "cpu", "--rounds", "1", "--out", str(tmp_path / "o")]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "--max-length 128" in err and "Traceback" not in err


def test_agent_samples_from_openai_compatible_endpoint():
    """--agent-endpoint (a vLLM server) on a local stub: raw completions of the HH-format demonstration prompts,
    the model name defaulting to --policy, HH turn markers as stop strings, a continuation that runs into the next
    human turn cut there, an empty sample replaced (and logged)."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from types import SimpleNamespace

    pytest.importorskip("openai")
    from iclr25.aihf.text import TURN_STOPS, _agent_responses

    calls = []

    class Stub(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append((self.path, body))
            text = {"A": " sure\n\nHuman: and now?", "B": " fine", "C": "\n\nHuman: x"}[body["prompt"][-13]]
            data = json.dumps({"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
                               "choices": [{"index": 0, "finish_reason": "stop", "text": text,
                                            "logprobs": None}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = HTTPServer(("127.0.0.1", 0), Stub)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        cfg = SimpleNamespace(agent_samples_file=None, agent_endpoint=f"http://127.0.0.1:{srv.server_port}/v1",
                              agent_model=None, policy="my/policy", max_new_tokens=7, seed=2)
        demos = [{"prompt": f"\n\nHuman: q{k}\n\nAssistant:", "response": "r"} for k in "ABC"]
        out = _agent_responses(cfg, demos, None, None, 3)
    finally:
        srv.shutdown()
        th.join(timeout=5)
    assert out == [" sure", " fine", " ."]
    assert {c[0] for c in calls} == {"/v1/completions"}
    bodies = sorted((c[1] for c in calls), key=lambda b: b["prompt"])
    assert [b["prompt"] for b in bodies] == [d["prompt"] for d in demos]
    assert all(b["model"] == "my/policy" and b["max_tokens"] == 7 and b["seed"] == 2003 for b in bodies)
    assert bodies[0]["stop"] == list(TURN_STOPS)


def test_text_explicit_form_with_a_plugged_policy_step(tmp_path, text_files):
    """train_text(cfg, policy_step=...) calls your PolicyStep (e.g. a TRL wrapper) once per round after the reward
    step, with the demonstration prompts and the learned reward; the built-in PPO step is not used."""
    from iclr25.aihf.config import TrainConfig
    from iclr25.aihf.text import PolicyStep, train_text

    class Recorder:
        def __init__(self):
            self.calls = []

        def __call__(self, policy, reference, tokenizer, prompts, reward_fn, optimizer):
            r = reward_fn(list(prompts), ["yes"] * len(prompts))
            self.calls.append((list(prompts), tuple(r.shape), bool(torch.isfinite(r).all())))
            return {"my_step": 1.0}

    m = _tiny_model(tmp_path / "m")
    d, p = text_files
    kw = dict(task="text", policy=str(m), demos=d, prefs=p, max_new_tokens=3, max_length=48, lr=1e-2, rounds=2,
              device="cpu", quiet=True)
    rec = Recorder()
    assert isinstance(rec, PolicyStep)
    with pytest.raises(ValueError, match="--reward-model"):
        train_text(TrainConfig(**kw, out=tmp_path / "o0"), policy_step=rec)
    with pytest.raises(ValueError, match="PolicyStep"):
        train_text(TrainConfig(**kw, reward_model=str(m), out=tmp_path / "o1"), policy_step=object())
    train_text(TrainConfig(**kw, reward_model=str(m), out=tmp_path / "o"), policy_step=rec)
    assert [c[0] for c in rec.calls] == [[f"Q{i}: " for i in range(4)]] * 2 and all(c[1:] == ((4,), True)
                                                                                for c in rec.calls)
    st = json.loads((tmp_path / "o" / "state.json").read_text())
    assert [h["my_step"] for h in st["history"]] == [1.0, 1.0] and "ppo_samples" not in st["history"][0]
