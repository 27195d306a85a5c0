"""Backends with known behaviour, for tests, the synthetic reproduction and throughput benchmarks.

- :class:`MockRefusalBackend` — refuses each prompt of level-2 category ``k`` with probability ``q_k``
  (a canned refusal) and otherwise answers with a canned compliant text. The draw for a prompt is a
  deterministic function of ``(seed, prompt id)``, so it does not depend on batching or order.
- :class:`MockJudgeBackend` — a rule-based "judge model" that reads the rendered judge prompt and
  answers in the AIR-Bench format with the June-2024 convention (0 = refusal, 1 = harmful help).
- :class:`StubChatServer` — an OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1
  (standard library only) with configurable latency and injected failures; it stops by itself after
  ``max_lifetime_s``.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from iclr25.core.lm.generation import GenerationConfig

from .data import PromptItem

__all__ = ["CANNED_REFUSAL", "CANNED_COMPLIANCE", "MockRefusalBackend", "MockJudgeBackend", "StubChatServer",
           "binomial_interval", "MockContentFilterError"]


class MockContentFilterError(Exception):
    """What a provider's content filter raises (HTTP 400, code ``content_filter``), for offline tests."""

    status_code = 400
    code = "content_filter"

    def __init__(self, message: str = "The prompt was filtered due to the content management policy") -> None:
        super().__init__(message)

CANNED_REFUSAL = "I'm sorry, but I can't help with that request."
CANNED_COMPLIANCE = "Sure. Here is an outline of the steps you asked for: first, ..."


def _uniform(seed: int, key: str) -> float:
    h = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64


class MockRefusalBackend:
    """A model under test with known per-level-2 refusal probabilities.

    Args:
        prompts: the items it will be asked (prompt text -> id and category).
        refusal_prob: ``{l2 id ("1".."16"): q_k in [0, 1]}``; missing categories use ``default``.
        seed: seed of the per-prompt draws.
        default: refusal probability of unlisted categories.
        name: model name.
        fail_after: raise ``RuntimeError`` once this many prompts have been answered (crash tests).
        latency_s: sleep per prompt (interrupted-run tests).
        blocked_marker: prompts containing it raise :class:`MockContentFilterError`.

    Raises:
        KeyError: (generate) a prompt it was not built with.
    """

    def __init__(self, prompts: Sequence[PromptItem], refusal_prob: Mapping[str, float], *, seed: int = 0,
                 default: float = 0.5, name: str = "mock-refuser", fail_after: int | None = None,
                 latency_s: float = 0.0, blocked_marker: str | None = None) -> None:
        self.by_text = {p.prompt: p for p in prompts}
        self.q = {str(k): float(v) for k, v in refusal_prob.items()}
        self.seed, self.default, self.name, self.fail_after = seed, default, name, fail_after
        self.latency_s, self.blocked_marker = latency_s, blocked_marker
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def refuses(self, item: PromptItem) -> bool:
        """Whether the backend refuses this item (deterministic)."""
        return _uniform(self.seed, item.id) < self.q.get(item.l2, self.default)

    def generate(self, prompts: Sequence[str], config: GenerationConfig | None = None) -> list[str]:
        out = []
        for p in prompts:
            with self._lock:
                if self.fail_after is not None and len(self.calls) >= self.fail_after:
                    raise RuntimeError("mock backend crash (fail_after reached)")
                self.calls.append(p)
            if self.latency_s:
                time.sleep(self.latency_s)
            if self.blocked_marker and self.blocked_marker in p:
                raise MockContentFilterError()
            out.append(CANNED_REFUSAL if self.refuses(self.by_text[p]) else CANNED_COMPLIANCE)
        return out


class MockJudgeBackend:
    """A deterministic judge model: answers with the refusal score of ``convention`` (June-2024:
    ``##the_score: 0`` = refusal; July-2024: ``1``) when the rendered judge prompt contains
    ``refusal_marker``, else the other score.

    Args:
        refusal_marker: text whose presence means the model refused.
        malformed_every: every n-th answer is malformed (no score tag) to exercise failure handling.
        name: model name.
        latency_s: sleep per answer.
        convention: the template direction it answers in.
    """

    def __init__(self, refusal_marker: str = CANNED_REFUSAL, *, malformed_every: int | None = None,
                 name: str = "mock-judge", latency_s: float = 0.0, convention: str = "2024-06") -> None:
        self.marker, self.malformed_every, self.name = refusal_marker, malformed_every, name
        self.latency_s = latency_s
        self.refusal, self.helped = ("0", "1") if convention != "2024-07" else ("1", "0")
        self.n_calls = 0
        self._lock = threading.Lock()

    def generate(self, prompts: Sequence[str], config: GenerationConfig | None = None) -> list[str]:
        out = []
        for p in prompts:
            with self._lock:
                self.n_calls += 1
                k = self.n_calls
            if self.latency_s:
                time.sleep(self.latency_s)
            if self.malformed_every and k % self.malformed_every == 0:
                out.append("I think the model mostly refused.")
            elif self.marker in p:
                out.append(f"##short_reasoning: The model refuses the request.\n##the_score: {self.refusal}")
            else:
                out.append(f"##short_reasoning: The model provides help.\n##the_score: {self.helped}")
        return out


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:  # client hung up (timeouts)
        pass


class StubChatServer:
    """A local OpenAI-compatible chat-completions server for tests and benchmarks.

    Args:
        reply: ``messages -> content`` (default: echo of the last user message's first 40 chars).
        latency_s: sleep per request (simulated network/model time).
        fail_first: the first ``n`` requests answer HTTP 503 (exercises retries).
        max_lifetime_s: the server shuts itself down after this many seconds.
        blocked_marker: a request whose last message contains it answers HTTP 400 with error code
            ``content_filter`` (as Azure OpenAI and others do).
        rate_limit_first: the first ``n`` requests answer HTTP 429 with ``Retry-After: retry_after``.
        retry_after: the ``Retry-After`` header value (seconds) of those 429s.
        bad_request_marker: a request containing it answers a plain HTTP 400 (not retryable).

    Use as a context manager; ``base_url`` is ``http://127.0.0.1:<port>/v1``. ``auth_headers`` keeps
    the ``Authorization`` values received (tests check the key was sent); ``n_requests`` counts them.
    """

    def __init__(self, reply: Callable[[list[dict[str, Any]]], str] | None = None, *, latency_s: float = 0.0,
                 fail_first: int = 0, max_lifetime_s: float = 120.0, blocked_marker: str | None = None,
                 rate_limit_first: int = 0, retry_after: float = 1.0, bad_request_marker: str | None = None) -> None:
        self.reply = reply or (lambda msgs: "echo: " + str(msgs[-1]["content"])[:40])
        self.latency_s, self.fail_first, self.max_lifetime_s = latency_s, fail_first, max_lifetime_s
        self.blocked_marker, self.bad_request_marker = blocked_marker, bad_request_marker
        self.rate_limit_first, self.retry_after = rate_limit_first, retry_after
        self.request_times: list[float] = []
        self.n_requests = 0
        self.auth_headers: list[str] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:  # silence: never log requests
                pass

            def _send(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(n) or b"{}")
                with stub._lock:
                    stub.n_requests += 1
                    k = stub.n_requests
                    stub.auth_headers.append(self.headers.get("Authorization", ""))
                    stub.request_times.append(time.monotonic())
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if stub.latency_s:
                    time.sleep(stub.latency_s)
                if k <= stub.fail_first:
                    self._send(503, {"error": {"message": "overloaded (injected)", "type": "server_error"}})
                    return
                if k <= stub.fail_first + stub.rate_limit_first:
                    self._send(429, {"error": {"message": "rate limited (injected)", "type": "rate_limit_error"}},
                               {"Retry-After": f"{stub.retry_after:g}"})
                    return
                last = str((req.get("messages") or [{}])[-1].get("content", ""))
                if stub.blocked_marker and stub.blocked_marker in last:
                    self._send(400, {"error": {"message": "The response was filtered due to the prompt triggering "
                                               "the content management policy.", "type": None,
                                               "param": "prompt", "code": "content_filter"}})
                    return
                if stub.bad_request_marker and stub.bad_request_marker in last:
                    self._send(400, {"error": {"message": "invalid request (injected)", "type": "invalid_request_error",
                                               "code": "invalid_value"}})
                    return
                content = stub.reply(req.get("messages", []))
                self._send(200, {
                    "id": f"chatcmpl-{k}", "object": "chat.completion", "created": int(time.time()),
                    "model": req.get("model", "stub"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                })

        return H

    def start(self) -> StubChatServer:
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self._timer = threading.Timer(self.max_lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None:
            srv, self._server = self._server, None
            srv.shutdown()
            srv.server_close()

    def __enter__(self) -> StubChatServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def binomial_interval(n: int, q: float, level: float = 0.99) -> tuple[float, float]:
    """Central ``level`` acceptance interval of a Binomial(n, q) proportion, as
    ``scipy.stats.binom.interval``: ``(ppf((1 - level) / 2) / n, ppf((1 + level) / 2) / n)`` with
    ``ppf(a)`` the smallest count whose CDF reaches ``a``. Computed in log space with NumPy (scipy.stats
    takes seconds to import; equality with scipy is tested).

    Raises:
        ValueError: ``n < 1``, ``q`` outside [0, 1] or ``level`` outside (0, 1).
    """
    if n < 1 or not 0 <= q <= 1 or not 0 < level < 1:
        raise ValueError(f"need n >= 1, q in [0, 1], level in (0, 1); got {n}, {q}, {level}")
    k = np.arange(n + 1)
    if q in (0.0, 1.0):
        pmf = (k == (0 if q == 0 else n)).astype(np.float64)
    else:
        lg = np.vectorize(math.lgamma)
        logpmf = lg(n + 1) - lg(k + 1) - lg(n - k + 1) + k * math.log(q) + (n - k) * math.log1p(-q)
        pmf = np.exp(logpmf)
    cdf = np.cumsum(pmf)
    eps = 1e-12 * max(1.0, float(cdf[-1]))
    lo = int(np.argmax(cdf >= (1 - level) / 2 - eps))
    hi = int(np.argmax(cdf >= min((1 + level) / 2, float(cdf[-1])) - eps))
    return lo / n, hi / n
