"""Full-scale code paths on tiny local models: LoRA on a Llama-architecture model (q_proj/v_proj) through
the core loader, bf16 loading, the shipped accelerate / DeepSpeed configs, an OpenAI-compatible judge and
generation server (a stub on 127.0.0.1), and data-parallel selector training with 2 CPU processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from iclr25.seal.cli import main

TEMPLATE = "human {} assistant"


@pytest.fixture
def tiny_llama(tmp_path, tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    d = tmp_path / "tiny_llama"
    LlamaForCausalLM(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture
def jsonl(tmp_path, task):
    def w(name, recs):
        p = tmp_path / name
        p.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return p

    return {"safe": w("safe.jsonl", [{"prompt": p, "response": r} for p, r in zip(task.safe.prompts, task.safe.responses)]),
            "ft": w("ft.jsonl", [{"prompt": p, "response": r} for p, r in zip(task.ft.prompts, task.ft.responses)]),
            "w": w}


def test_lora_on_q_v_proj_trains_only_the_adapter(tmp_path, tiny_llama, jsonl):
    out = tmp_path / "sel"
    args = ["train-selector", "--model", str(tiny_llama), "--safe", str(jsonl["safe"]), "--ft", str(jsonl["ft"]),
            "--prompt-template", TEMPLATE, "--max-len", "40", "--epochs", "1", "--batch-size", "8", "--lr-model", "1e-2",
            "--lora-r", "4", "--device", "cpu", "--quiet", "--out", str(out)]
    assert main(args) == 0
    state = torch.load(out / "checkpoint" / "model_state.pt", weights_only=True)["model"]
    assert state and all("lora_" in k for k in state)
    assert {k.split(".lora_")[0].rsplit(".", 1)[-1] for k in state} == {"q_proj", "v_proj"}
    # sft with LoRA saves a PEFT adapter; evaluate applies it on the base
    assert main(["sft", "--model", str(tiny_llama), "--data", str(jsonl["ft"]), "--prompt-template", TEMPLATE,
                 "--max-len", "40", "--epochs", "1", "--batch-size", "8", "--lora-r", "4", "--lora-alpha", "16",
                 "--device", "cpu", "--quiet", "--out", str(tmp_path / "sft")]) == 0
    cfg = json.loads((tmp_path / "sft" / "model" / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 16 and set(cfg["target_modules"]) == {"q_proj", "v_proj"}


def test_bf16_lora_selector_step_runs(tmp_path, tiny_llama, jsonl):
    out = tmp_path / "bf16"
    assert main(["train-selector", "--model", str(tiny_llama), "--safe", str(jsonl["safe"]), "--ft", str(jsonl["ft"]),
                 "--prompt-template", TEMPLATE, "--max-len", "40", "--epochs", "1", "--batch-size", "8",
                 "--lora-r", "2", "--bf16", "--device", "cpu", "--quiet", "--out", str(out)]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["dtype"] == "bfloat16"
    from safetensors.torch import load_file

    assert torch.isfinite(load_file(str(out / "selector.safetensors"))["logits"]).all()


def test_unknown_lora_targets_list_the_layers(tok):
    from iclr25.core.lm import tiny_causal_lm
    from iclr25.seal.scale import apply_lora

    with pytest.raises(ValueError, match=r"not found in GPT2LMHeadModel; its linear layers are \[.*c_attn"):
        apply_lora(tiny_causal_lm(vocab_size=len(tok), n_layer=1, n_embd=16, n_head=2), 2)


def test_shipped_accelerate_and_deepspeed_configs():
    yaml = pytest.importorskip("yaml")
    from accelerate.commands.config.config_args import load_config_from_file

    from iclr25.seal.scale import CONFIG_FILES, config_path

    for name in CONFIG_FILES:
        assert config_path(name).is_file()
    acc = load_config_from_file(str(config_path("accelerate_zero3.yaml")))
    assert str(acc.distributed_type).endswith("DEEPSPEED")
    ds_file = acc.deepspeed_config["deepspeed_config_file"]
    ds = json.loads((config_path("accelerate_zero3.yaml").parent / ds_file).read_text())
    assert ds["zero_optimization"]["stage"] == 3
    for k in ("gradient_accumulation_steps", "train_micro_batch_size_per_gpu"):
        assert ds[k] == "auto"                    # filled from --batch-size / --micro-batch-size
    from iclr25.core.config import config_from_dict
    from iclr25.seal.config import SFTCommandConfig, TrainSelectorConfig

    sel = config_from_dict(TrainSelectorConfig, yaml.safe_load(config_path("llama3_selector.yaml").read_text()),
                           base=TrainSelectorConfig(model="m", safe="s", ft="f"))
    assert (sel.sigma0, sel.sigma_decay, sel.epochs, sel.lr_model, sel.lr_selector) == (1.0, 0.03, 3, 1e-5, 5e-3)
    assert sel.betas == (0.9, 0.95) and sel.selector_optimizer == "adam" and sel.lora_r == 16 and sel.dtype == "bfloat16"
    sft = config_from_dict(SFTCommandConfig, yaml.safe_load(config_path("llama3_sft.yaml").read_text()),
                           base=SFTCommandConfig(model="m", data="d"))
    assert (sft.epochs, sft.lr, sft.batch_size, sft.seed) == (2, 1e-5, 64, 42)


class _Stub(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible server: chat completions judge 'A' when answer A says 'good';
    completions continue every prompt with ' t1 t2'."""

    def log_message(self, *a):  # quiet
        pass

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/chat/completions"):
            text = body["messages"][-1]["content"]
            a = text.split("[Answer A]\n")[1].split("\n\n[Answer B]")[0]
            reply = "A" if "good" in a else "B"
            out = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                   "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}]}
        else:
            out = {"id": "x", "object": "text_completion", "created": 0, "model": body["model"],
                   "choices": [{"index": 0, "finish_reason": "stop", "text": " t1 t2", "logprobs": None}]}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def stub_server():
    pytest.importorskip("openai")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_llm_judge_and_server_generation(tmp_path, jsonl, stub_server):
    w = jsonl["w"]
    prompts = w("p.jsonl", [{"prompt": "q1", "reference": "t1 t2"}, {"prompt": "q2", "reference": "t3"}])
    base = w("b.jsonl", [{"response": "bad"}, {"response": "bad"}])
    assert main(["evaluate", "--prompts", str(prompts), "--generator", "openai", "--generator-base-url", stub_server,
                 "--generator-model", "served", "--baseline", str(base), "--judge", "openai", "--judge-model", "judge",
                 "--judge-base-url", stub_server, "--out", str(tmp_path / "ev"), "--quiet"]) == 0
    r = json.loads((tmp_path / "ev" / "results.json").read_text())
    resp = [json.loads(x)["response"] for x in (tmp_path / "ev" / "responses.jsonl").read_text().splitlines()]
    assert resp == ["t1 t2", "t1 t2"] and r["exact_match"] == 0.5
    # both answers lack 'good': the stub always prefers the second shown -> one win and one loss per prompt
    assert r["win_rate"] == 50.0 and r["judge"]["n"] == 2 and r["judge"]["unparsed"] == 0


@pytest.mark.slow
def test_two_cpu_processes_match_one(tmp_path, saved_model, jsonl):
    """accelerate launch with 2 CPU processes (gloo): micro 4 × 2 processes = the single-process batch 8 —
    same ω, same update counts (the processes really shard D_ft and all-reduce ω's gradient)."""
    common = ["train-selector", "--model", str(saved_model), "--safe", str(jsonl["safe"]), "--ft", str(jsonl["ft"]),
              "--prompt-template", TEMPLATE, "--max-len", "40", "--epochs", "2", "--batch-size", "8",
              "--lr-model", "1e-3", "--sigma-decay", "0.3", "--max-grad-norm", "0", "--device", "cpu", "--quiet"]
    assert main([*common, "--out", str(tmp_path / "one")]) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2",
                        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                        "-m", "iclr25.seal", *common, "--micro-batch-size", "4", "--out", str(tmp_path / "two")],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    from safetensors.torch import load_file

    a, b = (load_file(str(tmp_path / x / "selector.safetensors")) for x in ("one", "two"))
    assert torch.allclose(a["logits"], b["logits"], atol=1e-5)
    assert torch.equal(a["update_counts"], b["update_counts"])
    assert torch.equal(b["update_counts"], torch.ones_like(b["update_counts"]))
