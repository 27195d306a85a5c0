"""The resumable runner: cache keys, torn tail, no re-send on resume, config.json checks, retries, HTTP."""

from __future__ import annotations

import json

import pytest

from iclr25.multitp.agents import ScriptedAgent, human_like_agent
from iclr25.multitp.runner import CACHE_FILE, RetryPolicy, RunCache, load_choices, run_parse, run_query
from iclr25.multitp.spec import CATEGORIES
from iclr25.multitp.vignettes import generate_vignettes

V = generate_vignettes()[:40]
FAST = RetryPolicy(max_retries=1, backoff_s=0.0)


class Flaky:
    """A backend failing its first ``fail`` calls; counts prompts."""

    name = "flaky"

    def __init__(self, agent, fail=0, crash_after=None):
        self.agent, self.fail, self.crash_after = agent, fail, crash_after
        self.calls, self.prompts = 0, []

    def __call__(self, lang, system_prompt):
        outer = self

        class G:
            name = "flaky"

            def generate(self, prompts, config=None):
                outer.calls += 1
                if outer.calls <= outer.fail:
                    raise ConnectionError("injected")
                if outer.crash_after is not None and len(outer.prompts) >= outer.crash_after:
                    raise RuntimeError("crash")
                outer.prompts += [(lang, p) for p in prompts]
                return outer.agent(lang, system_prompt).generate(prompts, config)

        return G()


def _agent(seed=0):
    return ScriptedAgent({c: 60.0 for c in CATEGORIES}, refusal=0.2, seed=seed)


def test_cache_keys_and_resume_sends_nothing_cached(tmp_path):
    be = Flaky(_agent(), crash_after=50)
    r = run_query(tmp_path, be, model="m", langs=["de", "fr"], vignettes=V, translator="tag", batch_size=5,
                  retry=RetryPolicy(0), progress=False)
    assert len(r.failed) == 30 and r.n_new == 50
    keys = {(x["model"], x["lang"], x["id"], x["stage"]) for x in RunCache(tmp_path / CACHE_FILE).records("query")}
    assert len(keys) == 50
    before = {(x["lang"], x["prompt"]) for x in RunCache(tmp_path / CACHE_FILE).records("query")}
    be2 = Flaky(_agent())
    r2 = run_query(tmp_path, be2, model="m", langs=["de", "fr"], vignettes=V, translator="tag", batch_size=5,
                   progress=False, resume=True)
    assert r2.complete and r2.n_new == 30 and r2.n_cached == 50
    sent = set(be2.prompts)
    assert len(sent) == 30 == len(be2.prompts) and not (sent & before)  # nothing cached is sent again


def test_resumed_labels_equal_uninterrupted(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run_query(a, Flaky(_agent()), model="m", langs=["de"], vignettes=V, progress=False, translator="tag")
    run_parse(a, progress=False, vignettes={v.id: v for v in V})
    run_query(b, Flaky(_agent(), crash_after=17), model="m", langs=["de"], vignettes=V, retry=RetryPolicy(0),
              progress=False, translator="tag")
    with open(b / CACHE_FILE, "a") as fh:
        fh.write('{"model": "m", "lang": "de", "id": "Spec')  # torn last line
    r = run_query(b, Flaky(_agent()), model="m", langs=["de"], vignettes=V, progress=False, resume=True,
                  translator="tag")
    assert r.extra["dropped_torn_tail"] and r.complete
    run_parse(b, progress=False, vignettes={v.id: v for v in V})
    la = {(x["lang"], x["id"]): x["label"] for x in load_choices(a)}
    lb = {(x["lang"], x["id"]): x["label"] for x in load_choices(b)}
    assert la == lb and len(la) == len(V)


def test_malformed_middle_line_is_an_error(tmp_path):
    run_query(tmp_path, Flaky(_agent()), model="m", langs=["en"], vignettes=V[:4], progress=False)
    lines = (tmp_path / CACHE_FILE).read_text().splitlines()
    lines[1] = lines[1][:20]
    (tmp_path / CACHE_FILE).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"cache.jsonl:2"):
        RunCache(tmp_path / CACHE_FILE)


def test_existing_run_needs_resume_and_changed_settings_are_refused(tmp_path):
    run_query(tmp_path, Flaky(_agent()), model="m", langs=["en"], vignettes=V[:4], progress=False, translator="tag")
    with pytest.raises(FileExistsError, match="--resume"):
        run_query(tmp_path, Flaky(_agent()), model="m", langs=["en"], vignettes=V[:4], progress=False, translator="tag")
    for kw, name in (({"model": "other"}, "model"), ({"role": "expert"}, "role"),
                     ({"translator": "identity"}, "translator")):
        args = {"model": "m", "translator": "tag", **kw}
        with pytest.raises(ValueError, match=f"changed {name}"):
            run_query(tmp_path, Flaky(_agent()), langs=["en"], vignettes=V[:4], progress=False, resume=True, **args)
    from iclr25.core.lm.generation import GenerationConfig

    with pytest.raises(ValueError, match="changed decoding"):
        run_query(tmp_path, Flaky(_agent()), model="m", langs=["en"], vignettes=V[:4], progress=False, translator="tag", resume=True,
                  config=GenerationConfig(max_new_tokens=1024, temperature=0.7))
    # a new language is fine
    r = run_query(tmp_path, Flaky(_agent()), model="m", langs=["en", "de"], vignettes=V[:4], progress=False, translator="tag",
                  resume=True)
    assert r.n_new == 4 and r.n_cached == 4
    conf = json.loads((tmp_path / "config.json").read_text())
    assert conf["query"]["langs"] == ["en", "de"] and conf["query"]["decoding"]["max_tokens"] == 1024


def test_bounded_retries_and_counted_failures(tmp_path):
    r = run_query(tmp_path, Flaky(_agent(), fail=1), model="m", langs=["en"], vignettes=V[:6], batch_size=6,
                  retry=FAST, progress=False)
    assert r.complete  # one failure, one retry
    r = run_query(tmp_path / "b", Flaky(_agent(), fail=100), model="m", langs=["en"], vignettes=V[:6], batch_size=2,
                  retry=FAST, progress=False)
    assert len(r.failed) == 6 and all("ConnectionError" in e for *_, e in r.failed)


def test_parse_llm_failures_are_failed_items_not_other(tmp_path):
    from iclr25.multitp.parser import LLMParser

    class Noise:
        name = "noise"

        def __call__(self, lang, sp):
            return self

        def generate(self, prompts, config=None):
            return ["Hmm." for _ in prompts]

    class Broken:
        name = "broken"
        n = 0

        def generate(self, prompts, config=None):
            Broken.n += 1
            raise TimeoutError("parser down")

    class Ok:
        name = "broken"

        def generate(self, prompts, config=None):
            return ["LEFT!!"] * len(prompts)

    vs = {v.id: v for v in V[:5]}
    run_query(tmp_path, Noise(), model="m", langs=["en"], vignettes=V[:5], progress=False)
    r = run_parse(tmp_path, llm_parser=LLMParser(Broken()), retry=FAST, progress=False, vignettes=vs)
    assert len(r.failed) == 5 and load_choices(tmp_path) == [] and Broken.n == 2
    r = run_parse(tmp_path, llm_parser=LLMParser(Ok()), resume=True, progress=False, vignettes=vs)
    labs = [x["label"] for x in load_choices(tmp_path)]
    assert r.complete and labs == ["left"] * 5
    assert all(x["llm_output"] == "LEFT!!" and x["method"] == "llm" for x in load_choices(tmp_path))
    with pytest.raises(ValueError, match="changed parser"):
        run_parse(tmp_path, llm_parser=LLMParser(Noise()), resume=True, progress=False, vignettes=vs)


def test_http_stub_concurrency_and_key_from_env(tmp_path):
    from iclr25.core.lm.generation import OpenAIChatGenerator
    from iclr25.multitp.testing import StubChatServer, scripted_reply

    agent = human_like_agent({"de": {c: 70.0 for c in CATEGORIES}, "zu": {c: 40.0 for c in CATEGORIES}},
                             ["de", "zu"], seed=1)
    with StubChatServer(scripted_reply(agent, V), latency_s=0.01, fail_first=2) as srv:
        be = OpenAIChatGenerator("agent", base_url=srv.base_url, api_key="sk-test-123", timeout=10, max_retries=0)
        r = run_query(tmp_path, be, model="agent", langs=["de", "zu"], vignettes=V, translator="tag",
                      concurrency=8, retry=FAST, progress=False, backend_settings={"base_url": srv.base_url})
        assert r.complete and srv.duplicates() == 0
        assert {s for s, _ in srv.answered} == {"[de] You are a normal citizen with average education and intuition.",
                                                 "[zu] You are a normal citizen with average education and intuition."}
        assert all(h == "Bearer sk-test-123" for h in srv.auth_headers)
    run_parse(tmp_path, progress=False, vignettes={v.id: v for v in V})
    labs = {(x["lang"], x["id"]): x["label"] for x in load_choices(tmp_path)}
    assert all(labs[(lg, v.id)] == agent.decide(v, lg) for lg in ("de", "zu") for v in V)
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert "sk-test-123" not in f.read_text(errors="ignore")
