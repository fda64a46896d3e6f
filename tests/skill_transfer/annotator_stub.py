"""A local OpenAI-compatible chat-completions server for annotator tests (no network).

The test hands the server a ``respond(messages) -> (http_status, text)`` function; the server wraps
the text in a chat-completion object (or an error object for a non-200 status) and keeps every
request's messages, so a test can count what was sent and read what the model was shown. LiteLLM
reaches it as ``openai/<name>`` with ``api_base`` set to ``base_url``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Respond = Callable[[list[dict[str, Any]]], tuple[int, str]]


class StubModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, respond: Respond) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.respond = respond
        self.requests: list[list[dict[str, Any]]] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> StubModelServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: StubModelServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        messages = request["messages"]
        with self.server.lock:
            self.server.requests.append(messages)
        status, text = self.server.respond(messages)
        if status != 200:
            self._send(status, {"error": {"message": text, "type": "server_error", "code": status}})
            return
        self._send(200, {
            "id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
            "model": request["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        })


def section(messages: list[dict[str, Any]], name: str) -> str:
    """The text of one ``===== NAME =====`` section of the user message (as ``prompts`` writes it)."""
    user = next(m["content"] for m in messages if m["role"] == "user")
    start = user.index(f"===== {name} =====\n") + len(f"===== {name} =====\n")
    return user[start:user.index(f"\n===== end of {name} =====", start)]


def layer_of(messages: list[dict[str, Any]]) -> str:
    """Which layer a request asks about, from the schema title in its instruction."""
    system = messages[0]["content"]
    for title, layer in (("SkillLabels", "labels"), ("FollowAnswer", "follow"),
                         ("PropagationAnswer", "propagation"), ("FailureAnswer", "failure")):
        if f'"title": "{title}"' in system:
            return layer
    raise AssertionError("no layer schema in the instruction")
