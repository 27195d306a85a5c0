"""Engineering checks of the pipeline (they were reproduction claims; they are properties of the software):

* ``query`` killed (SIGKILL) halfway through against a local stub server, then ``--resume``: the labels equal an
  uninterrupted run's and no cached item is re-sent (a torn last cache line is dropped);
* an untrained tiny GPT-2 as model under test *and* as LLM parser: garbage answers become ``other`` and the run
  completes with every item labelled (the official code drops into pdb on an unexpected parser label).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from iclr25.core import Claim
from iclr25.multitp.agents import human_like_agent
from iclr25.multitp.human import human_by_language
from iclr25.multitp.reproduce import PIPELINE_LANGS
from iclr25.multitp.vignettes import Vignette, generate_vignettes, spread_subset

log = logging.getLogger(__name__)


def _pipeline_claim(out: Path, V: Sequence[Vignette], H_lang: Mapping[str, Mapping[str, float]], quick: bool) -> Claim:
    """Scripted agent behind a local stub server; ``query`` in a subprocess killed halfway; ``--resume``."""
    from iclr25.core.lm.generation import OpenAIChatGenerator
    from iclr25.multitp.runner import CACHE_FILE, RetryPolicy, load_choices, run_parse, run_query
    from iclr25.multitp.testing import StubChatServer, scripted_reply

    langs = list(PIPELINE_LANGS)
    agent = human_like_agent(H_lang, langs, seed=7, refusal=0.2, either=0.05, unparseable=0.02)
    reply = scripted_reply(agent, V)
    n_total = len(V) * len(langs)
    half = n_total // 2
    work = out / "pipeline"
    a_dir, b_dir = work / "uninterrupted", work / "killed_resumed"
    for d in (a_dir, b_dir):
        if d.exists():
            import shutil

            shutil.rmtree(d)
    t0 = time.perf_counter()
    with StubChatServer(reply, max_lifetime_s=900) as srv:
        be = OpenAIChatGenerator("scripted-agent", base_url=srv.base_url, api_key="EMPTY", timeout=30, max_retries=0,
                                 concurrency=1)
        ra = run_query(a_dir, be, model="scripted-agent", langs=langs, translator="tag", concurrency=8, vignettes=V,
                       retry=RetryPolicy(1, 0.2), progress=False, backend_settings={"base_url": srv.base_url})
        run_parse(a_dir, progress=False)
    labels_a = {(r["lang"], r["id"]): r["label"] for r in load_choices(a_dir)}
    env = {**os.environ, "MULTITP_STUB_KEY": "EMPTY", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "iclr25.multitp", "query", "--backend", "openai", "--model", "scripted-agent",
           "--langs", ",".join(langs), "--translator", "tag", "--out", str(b_dir), "--concurrency", "4",
           "--api-key-env", "MULTITP_STUB_KEY", "--max-retries", "1", "--backoff-s", "0.2", "--quiet",
           "--limit", str(len(V))]  # the CLI's subset is spread_subset(all, N): V must be that subset
    killed_at = cached_at_kill = 0
    torn = False
    with StubChatServer(reply, stall_after=half, max_lifetime_s=900) as srv:
        proc = subprocess.Popen([*cmd, "--base-url", srv.base_url], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        cache = b_dir / CACHE_FILE
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            n = sum(1 for ln in cache.read_text(encoding="utf-8").splitlines() if re.search(r'"stage":\s*"query"', ln)) \
                if cache.exists() else 0
            if len(srv.answered) >= half and n >= half:
                break
            time.sleep(0.05)
        killed_at = len(srv.answered)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        cached_at_kill = sum(1 for ln in cache.read_text(encoding="utf-8").splitlines() if ln.strip()) if cache.exists() else 0
        with open(cache, "a", encoding="utf-8") as fh:  # a crash in the middle of a write leaves a torn line
            fh.write('{"model": "scripted-agent", "lang": "de", "id": "Spec')
        torn = True
        srv.stall_after = None
        srv._release.set()
        answered_before = list(srv.answered)
        r2 = subprocess.run([*cmd, "--base-url", srv.base_url, "--resume"], env=env, capture_output=True, text=True,
                            timeout=600)
        resumed_requests = srv.answered[len(answered_before):]
    rc = r2.returncode
    cached_keys = set(answered_before)
    dup = sum(1 for x in resumed_requests if x in cached_keys)
    try:
        run_parse(b_dir, progress=False)
        labels_b = {(r["lang"], r["id"]): r["label"] for r in load_choices(b_dir)}
    except (FileNotFoundError, ValueError) as e:
        labels_b = {}
        log.error("pipeline: parse of the resumed run failed: %s", e)
    mism = sum(labels_a.get(k) != labels_b.get(k) for k in set(labels_a) | set(labels_b))
    ours = float(mism + dup) if (rc == 0 and len(labels_b) == n_total and ra.complete) else float("nan")
    return Claim(
        "pipeline/resumed_run_equals_uninterrupted", "label mismatches + requests re-sent for cached items "
        f"({n_total} items: {len(V)} vignettes x {langs})", ours, threshold=0.0, higher_is_better=False,
        paper="runner design: --resume re-sends nothing cached",
        note=f"`query` subprocess killed (SIGKILL) after {killed_at} answered requests with {cached_at_kill} cached "
             f"lines; a torn last line was appended ({torn}) and dropped on resume; the resumed run (exit {rc}) sent "
             f"{len(resumed_requests)} requests, {dup} of them for cached items; {mism} label mismatches vs the "
             f"uninterrupted run; stub server on 127.0.0.1, pseudo-translation 'tag' so that the server tells the "
             f"languages apart ({time.perf_counter() - t0:.1f} s)" + (f"; stderr: {r2.stderr[-300:]}" if rc else ""))


def _tiny_claim(out: Path, V: Sequence[Vignette], n: int, device: str) -> Claim:
    """The untrained tiny core GPT-2 as model under test and as LLM parser: garbage answers -> ``other``."""
    name = "pipeline/unexpected_parser_output_becomes_other"
    metric = f"number of the {n} vignettes labelled 'other' (run completed, every item labelled)"
    try:
        import torch  # noqa: F401

        from iclr25.core.lm import TransformersGenerator, byte_tokenizer, tiny_causal_lm
    except ImportError as e:
        log.warning("tiny GPT-2 part not run: needs the [hf] extra (%s)", e)
        return Claim(name, metric, float("nan"), threshold=1.0,
                     note="NOT RUN: needs torch + transformers: pip install 'iclr25-multitp[hf]'")
    from iclr25.core import choose_device
    from iclr25.core.lm.generation import GenerationConfig
    from iclr25.core.threads import limited_threads
    from iclr25.multitp.parser import LLMParser
    from iclr25.multitp.runner import RetryPolicy, load_choices, run_parse, run_query
    sub = spread_subset(V, n)
    dev = choose_device(device)
    model = tiny_causal_lm(n_positions=1024, seed=0).to(dev).eval()
    gen = TransformersGenerator(model, byte_tokenizer(), batch_size=8, device=dev, name="tiny-gpt2-untrained")
    d = out / "tiny_gpt2"
    if d.exists():
        import shutil

        shutil.rmtree(d)
    t0 = time.perf_counter()
    cfg = GenerationConfig(max_new_tokens=16, temperature=0.0)

    def go() -> tuple[Any, Any]:
        q = run_query(d, gen, model="tiny-gpt2-untrained", langs=["en"], vignettes=sub, config=cfg, batch_size=8,
                      retry=RetryPolicy(0), progress=False)
        p = run_parse(d, llm_parser=LLMParser(gen, max_new_tokens=16), batch_size=8, retry=RetryPolicy(0),
                      progress=False, vignettes={v.id: v for v in sub})
        return q, p

    if dev == "cpu":
        with limited_threads(1):
            q, p = go()
    else:
        q, p = go()
    recs = load_choices(d)
    n_other = sum(r["label"] == "other" for r in recs)
    ok = q.complete and p.complete and len(recs) == len(sub)
    raw = [r["llm_output"] for r in recs if r.get("llm_output") is not None][:3]
    return Claim(name, metric, float(n_other) if ok else float("nan"), threshold=1.0,
                 paper="official code: an unexpected parser label drops into pdb (the batch job hangs)",
                 note=f"{len(recs)}/{len(sub)} labelled ({p.extra['by_method']}); n_other = {n_other}; LLM-parser raw "
                      f"outputs e.g. {raw!r}; {time.perf_counter() - t0:.1f} s")


@pytest.mark.slow
def test_killed_query_resumes_to_the_uninterrupted_labels(tmp_path, mtp_data):
    V = spread_subset(generate_vignettes(), 60)  # what `query --limit 60` sends (was the first 60: the subprocess
    c = _pipeline_claim(tmp_path, V, human_by_language(), quick=True)  # queried all 460, so `ours` was NaN)
    assert c.holds and c.ours == 0.0, c.note


def test_tiny_gpt2_drives_other_end_to_end(tmp_path):
    pytest.importorskip("torch")
    c = _tiny_claim(tmp_path, generate_vignettes(), n=6, device="cpu")
    assert c.holds and c.ours >= 1, c.note
