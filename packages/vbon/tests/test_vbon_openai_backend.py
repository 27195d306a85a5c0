"""Best-of-N with candidates from an OpenAI-compatible *completions* server (what ``vllm serve`` exposes),
against a stub server the test starts on 127.0.0.1 and stops afterwards."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from iclr25.vbon.cli import main

pytest.importorskip("openai")

WORDS = ["bad", "dull", "fine", "good", "great"]  # the stub's continuation for request seed s: WORDS[s % 5]


class _CompletionsStub(BaseHTTPRequestHandler):
    calls: list = []

    def log_message(self, *a):  # silence
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append((self.path, body))
        if self.path != "/v1/completions":  # a chat request would be a bug: vBoN samples raw continuations
            self.send_response(404)
            self.end_headers()
            return
        text = f" {WORDS[body.get('seed', 0) % 5]} movie"
        out = {"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
               "choices": [{"index": 0, "text": text, "finish_reason": "length", "logprobs": None}]}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def stub_url():
    _CompletionsStub.calls = []
    srv = HTTPServer(("127.0.0.1", 0), _CompletionsStub)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/v1"
    finally:
        srv.shutdown()
        srv.server_close()
        th.join(5)


def _word_reward(prompts, conts):
    return torch.tensor([float(WORDS.index(c.split()[0])) for c in conts])


@pytest.mark.parametrize("seed", [0, 1])
def test_best_of_n_from_completions_server(stub_url, seed):
    from iclr25.core.lm import OpenAICompletionGenerator
    from iclr25.vbon.sampling import best_of_n_generator

    gen = OpenAICompletionGenerator("stub-lm", base_url=stub_url, timeout=5, max_retries=0, concurrency=2)
    prompts = ["the film was", "i thought it"]
    n = 4
    res = best_of_n_generator(gen, _word_reward, prompts, n, max_new_tokens=7, temperature=0.7, seed=seed)
    # independent expectation: enumerate the seeds the candidates must have been drawn with
    seeds = [seed * 1_000_003 + i for i in range(n)]
    expect_cands = [f" {WORDS[s % 5]} movie" for s in seeds]
    assert res.candidates == [expect_cands, expect_cands]
    best = max(expect_cands, key=lambda c: WORDS.index(c.split()[0]))
    assert res.best == [best, best]
    assert res.best_reward.tolist() == [float(WORDS.index(best.split()[0]))] * 2
    calls = _CompletionsStub.calls
    assert len(calls) == n * len(prompts) and all(path == "/v1/completions" for path, _ in calls)
    for _, body in calls:  # raw completions: the prompt as text, no chat messages
        assert "messages" not in body and body["prompt"] in prompts and body["model"] == "stub-lm"
        assert body["max_tokens"] == 7 and body["temperature"] == 0.7 and body["top_p"] == 1.0
    assert sorted({b["seed"] for _, b in calls}) == seeds  # distinct draws per candidate


def test_openai_backend_flag_errors(capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert main(["bon-sample", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "--model" in " ".join(capsys.readouterr().err.replace("│", " ").split())
    assert main(["bon-sample", "--backend", "openai", "--model", "m"]) == 2
    assert "--base-url" in " ".join(capsys.readouterr().err.replace("│", " ").split())
    assert main(["bon-sample", "--model", "m"]) == 2  # --model without --backend openai
    assert "--backend openai" in " ".join(capsys.readouterr().err.replace("│", " ").split())


@pytest.mark.realdata
def test_cli_bon_sample_against_stub(stub_url, data_dir, shared_cache, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ICLR25_DATA", str(data_dir))
    monkeypatch.setenv("ICLR25_CACHE", str(shared_cache))
    prompts = tmp_path / "p.txt"
    prompts.write_text("the movie is\na very\n")
    out = tmp_path / "bon"
    assert main(["bon-sample", "--backend", "openai", "--base-url", stub_url, "--model", "stub-lm",
                 "--n", "5", "--max-new-tokens", "6", "--prompts-file", str(prompts), "--seed", "0",
                 "--out", str(out), "--quiet"]) == 0
    rows = [json.loads(x) for x in (out / "bon_samples.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in rows] == ["the movie is", "a very"]
    for r in rows:
        assert r["candidates"] == [f" {w} movie" for w in WORDS]  # seeds 0..4: every word once
        assert r["best_reward"] == max(r["rewards"]) and r["best"] == r["candidates"][r["rewards"].index(max(r["rewards"]))]
    assert all(p == "/v1/completions" for p, _ in _CompletionsStub.calls)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("bon-sample: N=5") and "stub-lm" in last
