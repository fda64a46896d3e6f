"""A local OpenAI-compatible chat-completions server that plays ``attempt_script`` for Terminus-2.

Terminus-2 talks to its model through LiteLLM; with ``-m openai/<name>`` and
``--ak api_base=http://127.0.0.1:<port>/v1`` LiteLLM sends ``POST <api_base>/chat/completions`` with
the whole conversation and expects an OpenAI chat-completion object back (non-streaming: Terminus-2
refuses streamed responses; a streamed request is still answered, as one chunk, for other clients).
The reply text is Terminus-2's JSON command format, produced by ``attempt_script.next_reply``.

Every exchange is appended to a JSON-lines log (the request's messages and the reply), so a test
can check what the model was shown: the task's instruction, the attached notes, the judge's report.

    python -m demo.scripted_model --kernels kernels.json --port-file port.txt --log model.jsonl

``kernels.json`` maps task folder names to the kernel file the model writes for that task.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .attempt_script import next_reply

MODEL_ID = "mkb-scripted"


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The part of an OpenAI chat-completions request the script reads; the rest is ignored."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage]
    stream: bool = False


class ModelConfig(BaseModel):
    """What the server replays: the kernel file to write for each task folder name."""

    model_config = ConfigDict(extra="forbid")

    kernels: dict[str, Path]


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)  # a rough count: the usage fields only have to be plausible


def completion(request: ChatRequest, config: ModelConfig) -> dict[str, Any]:
    """The chat-completion object answering ``request``."""
    messages = [m.model_dump() for m in request.messages]
    content = next_reply(messages, config.kernels)
    prompt = sum(_tokens(m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]))
                 for m in messages)
    completion_tokens = _tokens(content)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                  "total_tokens": prompt + completion_tokens},
    }


def stream_chunks(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The same answer as chat.completion.chunk objects (one content delta, then the stop)."""
    base = {"id": answer["id"], "object": "chat.completion.chunk", "created": answer["created"],
            "model": answer["model"]}
    content = answer["choices"][0]["message"]["content"]
    return [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": content},
                              "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": answer["usage"]},
    ]


class ScriptedModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], config: ModelConfig, log: Path | None = None):
        super().__init__(address, _Handler)
        self.config = config
        self.log = log
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def record(self, entry: dict[str, Any]) -> None:
        if self.log is None:
            return
        with self.lock, open(self.log, "a") as fh:
            fh.write(json.dumps(entry) + "\n")


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedModelServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # the JSON-lines log records every exchange; no access log on stderr

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, message: str) -> None:
        self._send(code, {"error": {"message": message, "type": "invalid_request_error", "code": code}})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "local"}]})
        else:
            self._error(404, f"no such endpoint: GET {self.path}")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no such endpoint: POST {self.path} (only chat completions are served)")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
            request = ChatRequest.model_validate_json(self.rfile.read(length))
            answer = completion(request, self.server.config)
        except (ValidationError, ValueError) as exc:
            self.server.record({"error": str(exc)})
            self._error(400, str(exc))
            return
        self.server.record({"messages": [m.model_dump() for m in request.messages],
                            "reply": answer["choices"][0]["message"]["content"]})
        if not request.stream:
            self._send(200, answer)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in stream_chunks(answer):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def serve_in_thread(config: ModelConfig, log: Path | None = None, port: int = 0) -> ScriptedModelServer:
    """Start a server on 127.0.0.1 in a daemon thread; ``shutdown()`` stops it."""
    server = ScriptedModelServer(("127.0.0.1", port), config, log)
    threading.Thread(target=server.serve_forever, name="scripted-model", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", type=Path, required=True, help="JSON: task folder name -> kernel file")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", type=Path, help="write the chosen port here once listening")
    p.add_argument("--log", type=Path, help="append every exchange here (JSON lines)")
    args = p.parse_args(argv)
    config = ModelConfig(kernels=json.loads(args.kernels.read_text()))
    server = ScriptedModelServer(("127.0.0.1", args.port), config, args.log)
    if args.port_file:
        args.port_file.write_text(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
