"""Model loading with clean errors, tiny-LM pre-training with a cache, the completions backend."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr25.core.lm import (  # noqa: E402
    ModelLoadOptions,
    ModelNotFoundError,
    TinyLMSpec,
    byte_tokenizer,
    cached_tiny_lm,
    load_causal_lm,
    pretrain_tiny_lm,
    tiny_causal_lm,
    train_bpe_tokenizer,
)
from iclr25.core.lm.generation import GenerationConfig, OpenAICompletionGenerator  # noqa: E402

CORPUS = [f"the {a} cat sat on the {b} mat." for a in ("red", "big", "old", "shy") for b in ("blue", "flat", "new")]


@pytest.fixture()
def model_dir(tmp_path):
    d = tmp_path / "tiny"
    tiny_causal_lm(seed=0).save_pretrained(d)
    byte_tokenizer().save_pretrained(d)
    return d


def test_load_local_folder_with_dtypes(model_dir):
    m, tok = load_causal_lm(str(model_dir), dtype="float32", device="cpu")
    ref = tiny_causal_lm(seed=0).eval()
    x = torch.tensor([[1, 2, 3]])
    assert torch.equal(m(x).logits, ref(x).logits) and not m.training
    assert tok.pad_token_id is not None
    mb, _ = load_causal_lm(str(model_dir), dtype="bfloat16", device="cpu", padding_side="left",
                           gradient_checkpointing=True)
    assert next(mb.parameters()).dtype == torch.bfloat16 and mb.config.use_cache is False
    opts = ModelLoadOptions(dtype="float32")
    m2, _ = load_causal_lm(str(model_dir), device="cpu", **opts.load_kwargs())
    assert next(m2.parameters()).dtype == torch.float32


def test_load_errors(model_dir, tmp_path, monkeypatch):
    with pytest.raises(ModelNotFoundError, match="no such folder"):
        load_causal_lm(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        load_causal_lm(str(tmp_path / "empty"))
    (tmp_path / "file.bin").write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="is a file"):
        load_causal_lm(str(tmp_path / "file.bin"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelNotFoundError, match="no download was attempted"):
        load_causal_lm("someone/does-not-exist-model")
    with pytest.raises(ValueError, match="exclusive"):
        load_causal_lm(str(model_dir), load_in_4bit=True, load_in_8bit=True)
    with pytest.raises(ValueError, match="dtype"):
        load_causal_lm(str(model_dir), dtype="int3")


def test_model_without_causal_head_is_a_clean_error(tmp_path):
    from transformers import T5Config, T5Model

    d = tmp_path / "t5"
    T5Model(T5Config(d_model=8, d_ff=8, num_layers=1, num_heads=1, d_kv=4, vocab_size=32)).save_pretrained(d)
    with pytest.raises(ValueError, match="no causal-LM head"):
        load_causal_lm(str(d))


def test_pretrain_stream_learns_and_cache_reloads(tmp_path):
    spec = TinyLMSpec(tokenizer="byte", n_layer=1, n_embd=32, n_head=2, n_positions=64, seq_len=24,
                      steps=60, batch_size=8, lr=3e-3)
    m, tok, info = pretrain_tiny_lm(CORPUS, spec, progress=False)
    assert info["steps"] == 60 and info["final_loss"] < 3.5  # log(258) = 5.55 at init
    assert 0 < info["cpu_seconds"] and 0 < info["seconds"]  # CPU time of the loop, beside the wall time
    m1, t1, d = cached_tiny_lm("demo", CORPUS, spec, cache=tmp_path, progress=False)
    assert (d / "model.safetensors").is_file() and json.loads((d / "tinylm_train.json").read_text())["steps"] == 60
    m2, t2, d2 = cached_tiny_lm("demo", CORPUS, spec, cache=tmp_path, progress=False)
    assert d2 == d
    x = torch.tensor([t1("the red cat")["input_ids"]])
    assert torch.equal(m1(x).logits, m2(x).logits)
    # a different corpus is a different cache entry
    _, _, d3 = cached_tiny_lm("demo", CORPUS[:-1], spec, cache=tmp_path, progress=False)
    assert d3 != d


def test_pretrain_pairs_train_on_the_response_only():
    spec = TinyLMSpec(tokenizer="byte", n_layer=1, n_embd=32, n_head=2, n_positions=64, seq_len=32,
                      packing="sequences", steps=80, batch_size=8, lr=5e-3)
    pairs = [(f"{a}+{b}=", str(a + b)) for a in range(5) for b in range(5)]
    m, tok, info = pretrain_tiny_lm(pairs, spec, progress=False)
    assert info["n_truncated"] == 0
    with pytest.raises(ValueError, match="packing='sequences'"):
        pretrain_tiny_lm(pairs, TinyLMSpec(tokenizer="byte", steps=2), progress=False)


@pytest.mark.parametrize("bad", [dict(lr=float("nan")), dict(lr=0), dict(beta2=1.0), dict(seq_len=512),
                                 dict(dropout=-0.1), dict(tokenizer="word"), dict(packing="stream", steps=None)])
def test_spec_checks(bad):
    with pytest.raises(ValueError):
        TinyLMSpec(**bad)


def test_bpe_tokenizer_with_bos():
    tok = train_bpe_tokenizer(CORPUS * 3, vocab_size=300, add_bos=True)
    ids = tok("the red cat")["input_ids"]
    assert ids[0] == tok.bos_token_id == 0 and tok.pad_token_id == 1
    assert tok.decode(ids, skip_special_tokens=True) == "the red cat"


class _CompletionStub(BaseHTTPRequestHandler):
    calls: list = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _CompletionStub.calls.append((self.path, body))
        out = {"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
               "choices": [{"index": 0, "finish_reason": "length", "text": " and then " + body["prompt"][-3:],
                            "logprobs": None}]}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_completions_backend_against_local_stub():
    pytest.importorskip("openai")
    srv = HTTPServer(("127.0.0.1", 0), _CompletionStub)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        gen = OpenAICompletionGenerator("base", base_url=f"http://127.0.0.1:{srv.server_port}/v1",
                                        api_key="k", timeout=5, concurrency=2, stop=["\n"])
        out = gen.generate(["one two", "three"], GenerationConfig(max_new_tokens=5, temperature=0.7, seed=3))
        assert out == [" and then two", " and then ree"]
        path, body = _CompletionStub.calls[-1]
        assert path == "/v1/completions" and "messages" not in body and body["stop"] == ["\n"]
        assert body["max_tokens"] == 5 and body["temperature"] == 0.7 and body["seed"] == 3
    finally:
        srv.shutdown()
        th.join(timeout=5)
