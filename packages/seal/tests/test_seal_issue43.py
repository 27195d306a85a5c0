"""Issue 43, items 4-5: the judge's verdict is its final tagged line (the article "a" is no vote), checked
against hand-labelled judge replies; unparsed replies are no votes; a chat-only server is named, not a
traceback."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from iclr25.seal.cli import main
from iclr25.seal.metrics import JUDGE_TEMPLATE, judged_win_rate, parse_verdict, parse_verdict_detailed

DATA = Path(__file__).parent / "data"


def _load(name):
    return [json.loads(x) for x in (DATA / name).read_text(encoding="utf-8").splitlines() if x.strip()]


HAND = _load("seal_judge_hand_labelled.jsonl")
HELDOUT = _load("seal_judge_heldout.jsonl")


def confusion(records) -> Counter:
    """(hand label, parsed verdict) -> count; "unclear" and ``None`` read as "unparsed"."""
    return Counter((r["label"] if r["label"] != "unclear" else "unparsed", parse_verdict(r["output"]) or "unparsed")
                   for r in records)


def test_issue43_article_a_is_not_a_vote():
    outs = ["This is a close call, but B is better.", "It is a tie.", "As a judge, I prefer B."]
    assert [parse_verdict(o) for o in outs] == ["b", "tie", "b"]


def test_tagged_final_line_wins_and_template_asks_for_it():
    assert "Verdict: [[A]]" in JUDGE_TEMPLATE and "[[tie]]" in JUDGE_TEMPLATE
    assert parse_verdict_detailed("A is a bit shorter, but B explains more.\nVerdict: [[B]]") == ("b", "tagged")
    assert parse_verdict("I first thought [[A]], but A is harmful.\nVerdict: [[B]]") == "b"
    for o in ("", None, "I cannot judge these answers.", "Verdict: [[C]]", "The answers are a and b."):
        assert parse_verdict(o) is None, o


def test_hand_labelled_judge_replies():
    assert len(HAND) >= 40
    assert {"tagged", "bare", "prose", "unclear"} <= {r["kind"] for r in HAND}
    cm = confusion(HAND)
    wrong = {k: n for k, n in cm.items() if k[1] != "unparsed" and k[0] != k[1]}
    assert not wrong, wrong  # a verdict the rule reads is the one the labeller read
    assert sum(n for (h, g), n in cm.items() if h == g) / len(HAND) >= 0.9


def test_heldout_judge_replies_labelled_after_the_rule_was_frozen():
    cm = confusion(HELDOUT)
    assert not {k: n for k, n in cm.items() if k[1] != "unparsed" and k[0] != k[1]}
    assert sum(n for (h, g), n in cm.items() if h == g) >= 18  # 19 of 20 when the set was made


class _Replies:
    name = "replies"

    def __init__(self, outs):
        self.outs = outs

    def generate(self, prompts, config=None):
        assert config.max_new_tokens >= 64  # room for a reason and the final line
        return list(self.outs[:len(prompts)])


def test_unparsed_replies_are_no_votes():
    # prompt 1: "a" (A first) and an unreadable reply: only the parsed verdict counts
    r = judged_win_rate(_Replies(["Verdict: [[A]]", "It is a tie.", "hmm", "Verdict: [[A]]"]), ["p1", "p2"],
                        ["x", "y"], ["u", "v"])
    # order 2 is flipped: "[[A]]" there is a vote for B
    assert r["verdicts"] == [["a", None], ["tie", "b"]] and r["unparsed"] == 1
    assert r["win_rate"] == pytest.approx(100 * (1.0 + 0.25) / 2) and r["parsed_by"] == {"tagged": 2, "rule": 1,
                                                                                          "unparsed": 1}
    with pytest.raises(ValueError, match="none of the 2 judge replies has a verdict"):
        judged_win_rate(_Replies(["As a judge I think so.", ""]), ["p"], ["x"], ["y"])


class _ChatOnly(BaseHTTPRequestHandler):
    """A chat-only OpenAI-compatible server: /v1/completions is 404, chat completions answer 'ok'."""

    def log_message(self, *a):
        pass

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/chat/completions"):
            code, out = 200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": "ok"}}]}
        else:
            code, out = 404, {"error": {"message": "Not Found", "type": "NotFoundError", "code": 404}}
        data = json.dumps(out).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def chat_only():
    pytest.importorskip("openai")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _ChatOnly)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_chat_only_server_one_line_error_and_chat_generator(tmp_path, capsys, chat_only):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "q1", "reference": "ok"}) + "\n")
    args = ["evaluate", "--prompts", str(prompts), "--generator-base-url", chat_only, "--generator-model", "m",
            "--quiet"]
    assert main([*args, "--generator", "openai", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "/v1/completions" in err and "--generator openai-chat" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert main([*args, "--generator", "openai-chat", "--prompt-template", "{}", "--out", str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b" / "results.json").read_text())["exact_match"] == 1.0


# trial-parsers: judge replies written and labelled by a new user (not in the hand-labelled sets)
@pytest.mark.parametrize("reply, label", [
    ("Answer B rambles and is off-topic.\nVerdict: A", "a"),          # untagged final verdict line
    ("Both are fine but A is shorter.\nVerdict: B", "b"),
    ("Verdict: [A]", "a"),                                             # single brackets
    ("**Verdict:** **B**", "b"),                                       # markdown around the label
    ("Reasons.\n**Verdict:** [[A]]", "a"),
    ("Verdict: [[B]]\n(The options were [[A]], [[B]] or [[tie]].)", "b"),   # options quoted after the verdict
    ("Verdict: [[A]]\n\nNote: had the order been swapped I would still not say [[B]].", "a"),
    ("Verdict: [[A]] Verdict: [[B]]", "b"),                            # two verdict lines: the last
    ("Answer A is better. I first thought [[B]].", "b"),               # no verdict line: the last tag
])
def test_trial_verdict_line_styles(reply, label):
    assert parse_verdict(reply) == label


class _RateLimited(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        data = json.dumps({"error": {"message": "rate limited", "type": "RateLimitError", "code": 429}}).encode()
        self.send_response(429)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("retry-after-ms", "1")
        self.end_headers()
        self.wfile.write(data)


def test_trial_rate_limited_server_is_not_blamed_on_the_model_or_key(tmp_path, capsys):
    # a 429 after the client's retries said "check --generator-model, the URL and the API key"
    pytest.importorskip("openai")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _RateLimited)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        prompts = tmp_path / "p.jsonl"
        prompts.write_text(json.dumps({"prompt": "q1", "reference": "ok"}) + "\n")
        assert main(["evaluate", "--prompts", str(prompts), "--generator", "openai-chat", "--generator-model", "m",
                     "--generator-base-url", f"http://127.0.0.1:{srv.server_address[1]}/v1", "--quiet",
                     "--out", str(tmp_path / "a")]) == 2
    finally:
        srv.shutdown()
        srv.server_close()
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "HTTP 429" in err and "rate-limiting" in err and "API key" not in err
