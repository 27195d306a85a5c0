"""Unit tests: runner (batching, retries, resumable cache, crash recovery), judges, HTTP backend against
a local stub server, API-key hygiene, loaders, reports."""

from __future__ import annotations

import json
import logging
import math

import pytest

from iclr25.air_bench import (
    EMPTY_RESPONSE_SCORE,
    JsonlCache,
    JudgeInput,
    JudgeTemplate,
    KeywordJudge,
    LLMJudge,
    PromptItem,
    RetryPolicy,
    aggregate,
    build_report,
    generate_responses,
    judge_responses,
    load_prompts,
    prompt_id,
    write_report_files,
)
from iclr25.air_bench.testing import (
    CANNED_REFUSAL,
    MockJudgeBackend,
    MockRefusalBackend,
    StubChatServer,
)

TEMPLATE = "Judge this.\nQ: {{QUESTION}}\nA: {{ANSWER}}\n##short_reasoning: <r>\n##the_score: <s>"


def _items(n: int, l2s=(1, 3, 14)) -> list[PromptItem]:
    out = []
    for i in range(n):
        cate = {1: "1.1.1", 3: "3.8.4", 14: "14.3940.1"}[l2s[i % len(l2s)]]
        p = f"prompt number {i}"
        out.append(PromptItem(prompt_id(cate, p), cate, "", "", "", p))
    return out


def _templates(items):
    return {it.cate_idx: JudgeTemplate(it.cate_idx, TEMPLATE, "2024-06") for it in items}


class Flaky:
    """Fails the first `n_fail` calls, then echoes; counts every prompt it answered."""

    name = "flaky"

    def __init__(self, n_fail=0):
        self.n_fail, self.calls, self.answered = n_fail, 0, []

    def generate(self, prompts, config=None):
        self.calls += 1
        if self.calls <= self.n_fail:
            raise ConnectionError("transient")
        self.answered += list(prompts)
        return [f"answer to {p}" for p in prompts]


# ---------------------------------------------------------------- runner


def test_generate_batches_and_order(tmp_path):
    items = _items(10)
    be = Flaky()
    res = generate_responses(be, items, tmp_path / "r.jsonl", batch_size=4, concurrency=3, progress=False)
    assert res.complete and res.n_new == 10 and be.calls == 3
    assert [r["id"] for r in res.records] == [it.id for it in items]
    assert all(r["response"] == f"answer to {r['prompt']}" for r in res.records)


def test_retries_are_bounded(tmp_path):
    be = Flaky(n_fail=2)
    res = generate_responses(be, _items(3), tmp_path / "r.jsonl", batch_size=3,
                             retry=RetryPolicy(max_retries=2, backoff_s=0.001), progress=False)
    assert res.complete and be.calls == 3
    be = Flaky(n_fail=10)
    res = generate_responses(be, _items(3), tmp_path / "r2.jsonl", batch_size=3,
                             retry=RetryPolicy(max_retries=2, backoff_s=0.001), progress=False)
    assert be.calls == 3 and len(res.failed) == 3 and res.records == []
    assert "ConnectionError" in res.failed[0][1]


def test_crash_then_resume_loses_and_duplicates_nothing(tmp_path):
    items = _items(50)
    path = tmp_path / "responses.jsonl"
    crashing = MockRefusalBackend(items, {"1": 0.5}, fail_after=23)
    res = generate_responses(crashing, items, path, batch_size=5, retry=RetryPolicy(0), progress=False)
    done = {r["id"] for r in res.records}
    assert len(done) == 20 and len(res.failed) == 30   # 4 full batches of 5 persisted
    # a crash in the middle of a write leaves half a line
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"model": "mock-refuser", "id": "x", "resp')
    with pytest.raises(FileExistsError):
        generate_responses(crashing, items, path, progress=False)
    fresh = MockRefusalBackend(items, {"1": 0.5})
    res2 = generate_responses(fresh, items, path, batch_size=5, resume=True, progress=False)
    assert res2.complete and res2.n_cached == 20 and res2.n_new == 30
    # the resumed run asked exactly the missing prompts, once each
    assert sorted(fresh.calls) == sorted(it.prompt for it in items if it.id not in done)
    lines = path.read_text(encoding="utf-8").splitlines()
    ids = [json.loads(x)["id"] for x in lines]
    assert len(ids) == 50 and len(set(ids)) == 50
    # responses equal those of an uninterrupted run (deterministic mock)
    ref = generate_responses(MockRefusalBackend(items, {"1": 0.5}), items, tmp_path / "ref.jsonl",
                             progress=False)
    assert [r["response"] for r in res2.records] == [r["response"] for r in ref.records]
    # a third run re-pays nothing
    again = MockRefusalBackend(items, {"1": 0.5})
    res3 = generate_responses(again, items, path, resume=True, progress=False)
    assert again.calls == [] and res3.n_cached == 50


def test_cache_rejects_corrupt_middle_line(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"model": "m", "id": "a"}\nnot json\n{"model": "m", "id": "b"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        JsonlCache(p, ("model", "id"))


# ---------------------------------------------------------------- judges


def test_llm_judge_convention_failures_and_empty(tmp_path):
    items = _items(6)
    tps = _templates(items)
    answers = iter(["##short_reasoning: refuses\n##the_score: 0",       # June: 0 = refusal -> 1.0
                    "##short_reasoning: helps\n##the_score: 1",         # -> 0.0
                    "I would rate this a 1.",                            # malformed -> failure
                    "##short_reasoning: meh\n##the_score: 0.5",         # -> 0.5
                    "##short_reasoning: x\n##the_score: 7"])            # out of range -> failure

    class Scripted:
        name = "scripted"
        seen = []

        def generate(self, prompts, config=None):
            self.seen += list(prompts)
            return [next(answers) for _ in prompts]

    be = Scripted()
    judge = LLMJudge(be, tps)
    resp = [{"model": "m", "id": it.id, "cate-idx": it.cate_idx, "prompt": it.prompt,
             "response": "   " if i == 2 else f"resp {i}"} for i, it in enumerate(items)]
    res = judge_responses(judge, resp, tmp_path / "s.jsonl", batch_size=2, progress=False)
    scores = [r["refusal_score"] for r in res.records]
    assert scores == [1.0, 0.0, EMPTY_RESPONSE_SCORE, None, 0.5, None]
    assert len(be.seen) == 5 and not any("   " == p for p in be.seen)  # empty response not sent
    assert res.records[2]["judge_called"] is False
    assert "no '##the_score'" in res.records[3]["judge_error"]
    assert "not one of" in res.records[5]["judge_error"]
    # the report counts failures and never as 0
    rep = build_report(res.records)
    m = next(iter(rep["models"].values()))
    assert m["n_judge_failures"] == 2
    ov = m["aggregate"]["overall"]["all"]
    assert (ov["refusal_rate"], ov["n"], ov["n_failed"], ov["n_blocked"]) == (2.5 / 4, 4, 2, 0)
    assert res.records[0]["convention"] == "2024-06" and res.records[0]["template_sha256"] == tps["1.1.1"].sha256


def test_llm_judge_missing_template_fails_before_calls(tmp_path):
    items = _items(3)
    be = MockJudgeBackend()
    judge = LLMJudge(be, {items[0].cate_idx: JudgeTemplate(items[0].cate_idx, TEMPLATE)})
    resp = [{"model": "m", "id": it.id, "cate-idx": it.cate_idx, "prompt": it.prompt, "response": "r"}
            for it in items]
    with pytest.raises(KeyError, match="no judge template"):
        judge_responses(judge, resp, tmp_path / "s.jsonl", progress=False)
    assert be.n_calls == 0


def test_judge_resume_and_rejudge_failures(tmp_path):
    items = _items(8)
    resp = [{"model": "m", "id": it.id, "cate-idx": it.cate_idx, "prompt": it.prompt,
             "response": CANNED_REFUSAL if i % 2 else "Sure, here it is"} for i, it in enumerate(items)]
    be = MockJudgeBackend(malformed_every=3)
    judge = LLMJudge(be, _templates(items))
    r1 = judge_responses(judge, resp, tmp_path / "s.jsonl", batch_size=3, progress=False)
    n_fail = sum(r["refusal_score"] is None for r in r1.records)
    assert n_fail == 2 and be.n_calls == 8
    r2 = judge_responses(judge, resp, tmp_path / "s.jsonl", resume=True, progress=False)
    assert be.n_calls == 8 and r2.n_cached == 8                       # nothing re-paid
    be.malformed_every = None
    r3 = judge_responses(judge, resp, tmp_path / "s.jsonl", resume=True, rejudge_failures=True,
                         progress=False)
    assert be.n_calls == 10 and all(r["refusal_score"] is not None for r in r3.records)
    assert [r["refusal_score"] for r in r3.records] == [0.0, 1.0] * 4


def test_keyword_judge():
    j = KeywordJudge().judge([JudgeInput("1.1.1", "p", r) for r in
                              ["I\u2019m sorry, I can't.", "Sure! Steps: ...", "", "  i cannot do that",
                               "Unfortunately I must decline."]])
    assert [x.refusal_score for x in j] == [1.0, 0.0, EMPTY_RESPONSE_SCORE, 1.0, 0.0]  # last: missed refusal


# ---------------------------------------------------------------- HTTP backend (local stub server)


def test_openai_backend_against_stub_with_retries_and_no_key_leak(tmp_path, monkeypatch, caplog):
    pytest.importorskip("openai")
    from iclr25.core.lm.generation import OpenAIChatGenerator

    secret = "sk-test-SECRET-4242"
    monkeypatch.setenv("AIRBENCH_TEST_KEY", secret)
    items = _items(12)
    caplog.set_level(logging.DEBUG)
    with StubChatServer(reply=lambda m: "ok: " + m[-1]["content"], fail_first=2, max_lifetime_s=60) as srv:
        from iclr25.air_bench.cli import _http_backend

        be = _http_backend("stub-model", srv.base_url, "AIRBENCH_TEST_KEY", 5.0)
        assert isinstance(be, OpenAIChatGenerator) and secret not in repr(be)
        res = generate_responses(be, items, tmp_path / "responses.jsonl", batch_size=1, concurrency=4,
                                 retry=RetryPolicy(max_retries=3, backoff_s=0.01), progress=False)
        assert srv.n_requests == 14                       # 2 injected 503s retried
        assert set(srv.auth_headers) == {f"Bearer {secret}"}   # the key was used ...
    assert res.complete and [r["response"] for r in res.records] == [f"ok: {it.prompt}" for it in items]
    # ... and never written or logged
    for f in tmp_path.rglob("*"):
        assert secret not in f.read_text(encoding="utf-8")
    assert secret not in caplog.text


def test_http_timeout_is_bounded(tmp_path):
    pytest.importorskip("openai")
    from iclr25.core.lm.generation import OpenAIChatGenerator

    with StubChatServer(latency_s=2.0, max_lifetime_s=30) as srv:
        be = OpenAIChatGenerator("stub", base_url=srv.base_url, api_key="EMPTY", timeout=0.3, max_retries=0)
        res = generate_responses(be, _items(2), tmp_path / "r.jsonl", batch_size=1, concurrency=2,
                                 retry=RetryPolicy(max_retries=1, backoff_s=0.01), progress=False)
    assert len(res.failed) == 2 and "Timeout" in res.failed[0][1]


# ---------------------------------------------------------------- loaders and reports


@pytest.mark.realdata
def test_load_prompts_mirror_filters_and_no_silent_fallback(air_data, monkeypatch):
    items = load_prompts("mirror")
    assert len(items) == 632 and len({it.id for it in items}) == 632
    assert len({it.l2 for it in items}) == 16
    sub = load_prompts("mirror", categories=["3", "14.3940"], limit=30)
    assert len(sub) == 30 and all(it.cate_idx.startswith(("3.", "14.3940.")) for it in sub)
    assert not any(it.cate_idx.startswith("3") and it.l2 != "3" for it in sub)  # '3' != '3x'
    with pytest.raises(ValueError, match="is not an AIR 2024 category"):
        load_prompts("mirror", categories=["99"])
    # datasets missing -> an error naming the fix, never the 632-prompt sample in its place
    import sys

    from iclr25.air_bench.data import PromptSourceError

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(PromptSourceError, match=r"iclr25-air-bench\[hub\]"):
        load_prompts("hf")


def test_load_prompts_bad_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"cate-idx": "1.1.1", "prompt": "a"}\n{"cate-idx": "1.1", "prompt": "b"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="row 2"):
        load_prompts(p)
    p.write_text('{"cate-idx": "1.1.1", "prompt": "a"}\n{oops\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"p\.jsonl:2: invalid JSON"):
        load_prompts(p)
    p.write_text('{"cate-idx": "1.99.99", "prompt": "a"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="not one of the 314"):
        load_prompts(p)
    p.write_text('{"cate-idx": "1.1.1", "prompt": "a"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="selects no prompt"):
        load_prompts(p, categories=["2"])


def test_report_files(tmp_path):
    recs = []
    for model, q in (("model-a", 1.0), ("model-b", 0.0)):
        for i, it in enumerate(_items(9)):
            recs.append({"model": model, "judge": "keyword", "id": it.id, "cate-idx": it.cate_idx,
                         "convention": "n/a", "refusal_score": q if i % 3 else 0.5, "judge_error": None})
    recs[0]["refusal_score"], recs[0]["judge_error"] = None, "no tag"
    paths = write_report_files(recs, tmp_path, names={"1": "Security Risks"})
    rep = json.loads(paths["json"].read_text())
    a = rep["models"]["model-a"]
    assert a["n_judge_failures"] == 1
    sub = {k: a["aggregate"]["l2"]["1"][k] for k in ("refusal_rate", "n", "n_failed")}
    assert sub == {"refusal_rate": 0.5, "n": 2, "n_failed": 1}
    ov = a["aggregate"]["overall"]["all"]
    assert (ov["refusal_rate"], ov["n"], ov["n_failed"]) == ((2 * 0.5 + 6 * 1.0) / 8, 8, 1)
    assert ov["se"] == pytest.approx(math.sqrt(ov["refusal_rate"] * (1 - ov["refusal_rate"]) / 8))
    csv_rows = paths["csv"].read_text().splitlines()
    assert csv_rows[0] == "model,judge,level,category,name,refusal_rate,se,ci95_low,ci95_high,n,n_failed,n_blocked"
    assert any(r.startswith("model-b,keyword,l2,1,Security Risks,0.5,") and r.endswith(",3,0,0") for r in csv_rows)
    assert any(r.startswith("model-b,keyword,overall,all,all,0.16666666666666666,") for r in csv_rows)
    md = paths["md"].read_text()
    assert "| 1 Security Risks |" in md and "1 failed" in md
    pytest.importorskip("matplotlib")
    assert paths["png"].stat().st_size > 1000


def test_aggregate_agrees_with_report_on_nan():
    agg = aggregate([{"cate-idx": "1.1.1", "refusal_score": None}])
    assert math.isnan(agg.overall.mean) and agg.to_dict()["overall"]["all"]["refusal_rate"] is None


@pytest.mark.parametrize("n,q", [(1, 0.5), (5, 0.05), (40, 0.05), (40, 0.5), (37, 0.95), (200, 0.3), (10, 0.0),
                                 (10, 1.0), (632, 0.62)])
def test_binomial_interval_matches_scipy(n, q):
    from scipy.stats import binom

    from iclr25.air_bench.testing import binomial_interval

    lo, hi = binom.interval(0.99, n, q)
    assert binomial_interval(n, q, 0.99) == (lo / n, hi / n)


class _LenEncoder:
    def encode(self, texts):
        import numpy as np

        return np.array([[t.lower().startswith(("i'm sorry", "i cannot")), len(t) / 100] for t in texts],
                        dtype=np.float32)


def test_embedding_judge_fit_and_judge():
    from iclr25.air_bench import EmbeddingLRJudge

    texts = ["I'm sorry, I can't."] * 10 + ["Sure, here you go: " + "x" * 200] * 10 + ["Maybe later."] * 6
    y = [1.0] * 10 + [0.0] * 10 + [0.5] * 6
    j = EmbeddingLRJudge(encoder=_LenEncoder())
    with pytest.raises(RuntimeError, match="fit"):
        j.judge([JudgeInput("1.1.1", "p", "x")])
    j.fit(texts, y)
    out = j.judge([JudgeInput("1.1.1", "p", r) for r in ("I cannot do it.", "Sure, here you go: " + "y" * 190, "")])
    assert [o.refusal_score for o in out] == [1.0, 0.0, EMPTY_RESPONSE_SCORE]
    with pytest.raises(ValueError, match="0, 0.5 or 1"):
        j.fit(texts[:2], [1.0, 0.3])


def test_http_concurrency_speedup_at_least_5x():
    pytest.importorskip("openai")
    from iclr25.air_bench.throughput import http_throughput

    r = http_throughput(_items(32), latency_s=0.1, concurrency=16)
    assert r["ratio"] >= 5, r


@pytest.mark.slow  # imports torch + transformers: ~45 s on a loaded 2-core machine
def test_local_tiny_model_backend_batched():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from iclr25.air_bench.throughput import local_throughput

    r = local_throughput(_items(4), batch_size=4, max_new_tokens=3)
    assert r["sequential"] > 0 and r["batched"] > 0


def test_score_item_single():
    from iclr25.air_bench import score_item

    t = JudgeTemplate("1.1.1", TEMPLATE, "2024-07")
    be = MockJudgeBackend()  # answers 0 for a refusal; under the July convention 0 means harmful help
    j = score_item(be, t, "p", CANNED_REFUSAL)
    assert (j.raw_score, j.refusal_score, j.called) == (0.0, 0.0, True)
    j = score_item(be, t, "p", "")
    assert j.refusal_score == EMPTY_RESPONSE_SCORE and not j.called and be.n_calls == 1
