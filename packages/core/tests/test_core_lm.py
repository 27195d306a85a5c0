import json
import math
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr25.core.lm import (  # noqa: E402
    OpenAIChatGenerator,
    TextGenerator,
    TransformersGenerator,
    bradley_terry_loss,
    byte_tokenizer,
    dpo_loss,
    sequence_logprobs,
    tiny_causal_lm,
    token_logprobs,
)
from iclr25.core.lm.generation import GenerationConfig  # noqa: E402

TEXTS = ["plain ascii", "Grüße, naïve café", "日本語のテキスト", "Ελληνικά и русский", "emoji 🎉👩‍💻🇫🇷",
         "tabs\tand\nnewlines\r\n", "", "<|endoftext|> literally", "\x00\x7f control"]


@pytest.mark.parametrize("text", TEXTS)
def test_byte_tokenizer_roundtrip(text):
    tok = byte_tokenizer()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if "<|endoftext|>" not in text:
        assert ids == list(text.encode("utf-8"))  # one token per UTF-8 byte, id = byte value
    assert tok.decode(ids) == text


def test_byte_tokenizer_save_load(tmp_path):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = byte_tokenizer()
    tok.save_pretrained(tmp_path)
    for cls in (AutoTokenizer, PreTrainedTokenizerFast):
        t2 = cls.from_pretrained(tmp_path)
        assert t2.eos_token_id == 256 and t2.pad_token_id == 257 and len(t2) == 258
        for s in TEXTS:
            assert t2.decode(t2(s)["input_ids"]) == s


def _batch():
    tok = byte_tokenizer()
    enc = tok(["ab", "hello there", "xyz!"], return_tensors="pt", padding=True)
    resp = enc.attention_mask.clone()
    resp[:, :2] = 0  # first two tokens are the "prompt"
    return enc.input_ids, enc.attention_mask, resp


def test_sequence_logprobs_equals_naive_loop():
    model = tiny_causal_lm(seed=1).eval()
    ids, att, resp = _batch()
    got = sequence_logprobs(model, ids, att, resp)
    assert got.shape == (3,)
    expected = []
    for b in range(ids.shape[0]):
        n = int(att[b].sum())
        total = 0.0
        for t in range(1, n):  # naive: one forward per prefix
            if resp[b, t]:
                logits = model(input_ids=ids[b:b + 1, :t]).logits[0, -1]
                total += torch.log_softmax(logits.double(), -1)[ids[b, t]].item()
        expected.append(total)
    assert torch.allclose(got.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-4)
    avg = sequence_logprobs(model, ids, att, resp, average=True)
    n_resp = (resp[:, 1:] * att[:, 1:]).sum(-1).clamp(min=1)  # a row without response tokens averages to 0
    assert torch.allclose(avg, got / n_resp)
    per_tok = token_logprobs(model, ids, att, resp)
    assert per_tok.shape == ids.shape and (per_tok[resp == 0] == 0).all()


def test_logprobs_errors():
    model = tiny_causal_lm()
    ids, att, resp = _batch()
    with pytest.raises(ValueError, match="shape"):
        sequence_logprobs(model, ids, att[:, :-1], resp)
    resp2 = resp.clone()
    resp2[:, 0] = 1
    with pytest.raises(ValueError, match="position 0"):
        sequence_logprobs(model, ids, att, resp2)


def test_dpo_loss_by_hand():
    pc, pr = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.5])
    rc, rr = torch.tensor([-1.5, -2.0]), torch.tensor([-2.5, -1.0])
    beta, eps = 0.5, 0.1
    loss, cr, rj = dpo_loss(pc, pr, rc, rr, beta=beta, label_smoothing=eps, reduction="none")
    # by hand: h = beta * ((pc - rc) - (pr - rr))
    h = [0.5 * ((-1.0 + 1.5) - (-3.0 + 2.5)), 0.5 * ((-2.0 + 2.0) - (-1.5 + 1.0))]  # [0.5, 0.25]
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    expected = [-(1 - eps) * math.log(sig(x)) - eps * math.log(sig(-x)) for x in h]
    assert torch.allclose(loss, torch.tensor(expected), atol=1e-6)
    assert torch.allclose(cr, torch.tensor([0.25, 0.0])) and torch.allclose(rj, torch.tensor([-0.25, -0.25]))
    mean, _, _ = dpo_loss(pc, pr, rc, rr, beta=beta, label_smoothing=eps)
    assert mean.item() == pytest.approx(sum(expected) / 2, abs=1e-6)
    with pytest.raises(ValueError):
        dpo_loss(pc, pr, rc, rr, beta=0.0)
    with pytest.raises(ValueError):
        dpo_loss(pc, pr, rc, rr, label_smoothing=0.5)


def test_bradley_terry_loss():
    loss = bradley_terry_loss(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.0]), reduction="none")
    assert torch.allclose(loss, torch.tensor([math.log1p(math.exp(-1.0)), math.log(2.0)]))


def test_tiny_lm_and_local_generator():
    tok = byte_tokenizer()
    model = tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, seed=0)
    assert model.config.vocab_size == 258
    gen = TransformersGenerator(model, tok, batch_size=2)
    assert isinstance(gen, TextGenerator)
    cfg = GenerationConfig(max_new_tokens=6, temperature=0.0)
    prompts = ["a", "longer prompt", "mid"]
    batched = gen.generate(prompts, cfg)
    single = [gen.generate([p], cfg)[0] for p in prompts]
    assert len(batched) == 3 and batched == single  # left padding does not change greedy output
    with pytest.raises(ValueError):
        GenerationConfig(max_new_tokens=0)


class _Stub(BaseHTTPRequestHandler):
    calls: list = []
    fail_first = True

    def log_message(self, *a):  # silence
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Stub.calls.append((self.headers.get("Authorization"), body))
        if _Stub.fail_first:
            _Stub.fail_first = False
            self.send_response(500)
            self.end_headers()
            return
        text = "echo: " + body["messages"][-1]["content"]
        out = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": text}}]}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_openai_backend_against_local_stub(caplog):
    pytest.importorskip("openai")
    srv = HTTPServer(("127.0.0.1", 0), _Stub)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        gen = OpenAIChatGenerator("stub-model", base_url=f"http://127.0.0.1:{srv.server_port}/v1",
                                  api_key="sk-secret-123", timeout=5, max_retries=2, concurrency=2,
                                  system_prompt="be brief")
        with caplog.at_level("DEBUG"):
            out = gen.generate(["one", "two", "three"], GenerationConfig(max_new_tokens=8, seed=1))
        assert out == ["echo: one", "echo: two", "echo: three"]  # the first call got a 500 and was retried
        assert len(_Stub.calls) == 4
        auth, body = _Stub.calls[-1]
        assert auth == "Bearer sk-secret-123" and body["max_tokens"] == 8 and body["seed"] == 1
        assert body["messages"][0] == {"role": "system", "content": "be brief"}
        assert "sk-secret" not in repr(gen) and "sk-secret" not in caplog.text
    finally:
        srv.shutdown()


def test_left_padding_gives_the_same_logprobs():
    model = tiny_causal_lm(seed=2).eval()
    right = byte_tokenizer(padding_side="right")
    left = byte_tokenizer(padding_side="left")
    texts = ["ab cd", "a much longer example"]
    out = []
    for tok in (right, left):
        enc = tok(texts, return_tensors="pt", padding=True)
        resp = enc.attention_mask.clone()
        first = enc.attention_mask.argmax(-1)  # first real token
        resp[torch.arange(2), first] = 0
        resp[torch.arange(2), first + 1] = 0  # two prompt tokens
        out.append(sequence_logprobs(model, enc.input_ids, enc.attention_mask, resp))
    assert torch.allclose(out[0], out[1], atol=1e-4)
