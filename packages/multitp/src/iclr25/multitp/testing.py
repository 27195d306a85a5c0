"""A local OpenAI-compatible stub server (standard library only) for tests, the pipeline claim and ``bench``.

:class:`StubChatServer` answers ``POST /v1/chat/completions`` on 127.0.0.1 with a reply function of the
request, after an optional latency; it can fail the first requests (HTTP 503) and *stall* after a given
number of answers (requests then hang until the server stops), which lets a test kill a client halfway
deterministically. It records every request it answered and stops itself after ``max_lifetime_s``.

:func:`scripted_reply` turns a :class:`~iclr25.multitp.agents.ScriptedAgent` into a reply function: it
reads the language from the ``[xx] `` tag of the pseudo-translation (or uses ``default_lang``), looks the
prompt up among the vignettes and answers (tagged again, so back-translation has something to undo).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["StubChatServer", "scripted_reply"]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:  # client hung up
        pass


class StubChatServer:
    """Local OpenAI-compatible chat-completions server.

    Args:
        reply: ``request body (dict) -> content``; default: echo of the last message's first 40 characters.
        latency_s: sleep per request (simulated model time).
        fail_first: the first ``n`` requests get HTTP 503.
        stall_after: after this many answered requests, further requests hang (until :meth:`stop`).
        max_lifetime_s: the server stops by itself after this many seconds.
        known_models: when given, a request for another model gets HTTP 404 "model not found" (as vLLM answers).

    Use as a context manager; ``base_url`` is ``http://127.0.0.1:<port>/v1``. ``answered`` lists the
    (system, user) message pairs answered with 200, ``auth_headers`` the ``Authorization`` values received.
    """

    def __init__(self, reply: Callable[[dict[str, Any]], str] | None = None, *, latency_s: float = 0.0,
                 fail_first: int = 0, stall_after: int | None = None, max_lifetime_s: float = 300.0,
                 known_models: Sequence[str] | None = None) -> None:
        self.reply = reply or (lambda req: "echo: " + str(req.get("messages", [{}])[-1].get("content", ""))[:40])
        self.latency_s, self.fail_first, self.stall_after = latency_s, fail_first, stall_after
        self.max_lifetime_s = max_lifetime_s
        self.known_models = None if known_models is None else set(known_models)
        self.n_requests = 0
        self.answered: list[tuple[str, str]] = []
        self.auth_headers: list[str] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def duplicates(self) -> int:
        """Requests answered more than once (same system and user message)."""
        return sum(n - 1 for n in Counter(self.answered).values() if n > 1)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:  # never log requests
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(n) or b"{}")
                with stub._lock:
                    stub.n_requests += 1
                    k = stub.n_requests
                    stub.auth_headers.append(self.headers.get("Authorization", ""))
                    stall = stub.stall_after is not None and len(stub.answered) >= stub.stall_after
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if stub.known_models is not None and req.get("model") not in stub.known_models:
                    self._send(404, {"error": {"message": f"The model `{req.get('model')}` does not exist.",
                                               "type": "NotFoundError", "code": 404}})
                    return
                if stall:
                    stub._release.wait()
                    return
                if stub.latency_s:
                    time.sleep(stub.latency_s)
                if k <= stub.fail_first:
                    self._send(503, {"error": {"message": "overloaded (injected)", "type": "server_error"}})
                    return
                try:
                    content = stub.reply(req)
                except Exception as e:  # noqa: BLE001 - a reply bug is a 500, not a dead server
                    self._send(500, {"error": {"message": f"{type(e).__name__}: {e}"}})
                    return
                msgs = req.get("messages", [])
                sys_ = next((m.get("content", "") for m in msgs if m.get("role") == "system"), "")
                user = msgs[-1].get("content", "") if msgs else ""
                with stub._lock:
                    stub.answered.append((sys_, user))
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
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self._timer = threading.Timer(self.max_lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        self._release.set()
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


def scripted_reply(agent: Any, vignettes: Sequence[Any], *, default_lang: str = "en") -> Callable[[dict[str, Any]], str]:
    """A :class:`StubChatServer` reply function answering as ``agent`` (see the module docstring)."""
    by_text = {v.prompt_en: v for v in vignettes}

    def split(text: str) -> tuple[str | None, str]:
        if text.startswith("[") and "] " in text[:12]:
            tag, rest = text[1:].split("] ", 1)
            return tag, rest
        return None, text

    def reply(req: dict[str, Any]) -> str:
        msgs = req.get("messages", [])
        sys_ = next((m.get("content", "") for m in msgs if m.get("role") == "system"), "")
        lang, _ = split(sys_)
        tag_u, prompt = split(msgs[-1].get("content", "") if msgs else "")
        lang = lang or tag_u or default_lang
        v = by_text.get(prompt)
        if v is None:
            return "I do not understand the question."
        ans = agent.answer(v, lang)
        return f"[{lang}] {ans}" if tag_u else ans

    return reply
