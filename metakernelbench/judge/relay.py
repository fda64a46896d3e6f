"""The per-trial relay of the Docker mode: the only thing a sandbox can reach (standard library only).

Each trial's compose project runs one relay container on two networks: the trial's private internal
network (shared with the sandbox, nothing else) and the judge's internal network. At start the relay
registers the attempt with the judge, using the relay token from the judge's secrets volume and its
container hostname as the attempt key (stable if the container restarts, so a restart cannot reset
the budget), and from then on forwards the sandbox's feedback calls with the attempt's token. The
sandbox therefore never holds a token, cannot reach other trials, and cannot ask for more budget or
a final grade (except with ``--allow-final``, the Terminal-Bench layout, whose tests run in the
sandbox's own container: then the attempt may ask once, and that ends its feedback).
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .client import JudgeClient, JudgeError, JudgeUnavailable
from .http_limits import IO_TIMEOUT_S, BoundedServerMixin, ClientError, RateLimiter, read_json_body

__all__ = ["ALLOWED", "MAX_BODY", "Relay", "make_server"]

log = logging.getLogger("metakernelbench.judge.relay")
ALLOWED = (("GET", re.compile(r"/v1/health")), ("GET", re.compile(r"/v1/attempt")),
           ("POST", re.compile(r"/v1/submissions")), ("GET", re.compile(r"/v1/submissions/\d+")))
MAX_BODY = 2 * 1024 * 1024


class Relay:
    def __init__(self, judge_url: str, relay_token: str, task: str, minutes: float | None, key: str | None = None,
                 allow_final: bool = False):
        self.judge = JudgeClient(judge_url, relay_token)
        self.task, self.minutes, self.allow_final = task, minutes, allow_final
        self.key = key or f"relay:{socket.gethostname()}:{task}"
        self._token: str | None = None
        self._lock = threading.Lock()

    def attempt_token(self) -> str:
        with self._lock:
            if self._token is None:
                answer = self.judge.register(self.key, self.task, self.minutes, self_final=self.allow_final)
                self._token = answer["token"]
            return self._token

    def register_in_background(self) -> None:
        def loop() -> None:
            while True:
                try:
                    self.attempt_token()
                    log.info("attempt %s registered", self.key)
                    return
                except JudgeUnavailable:
                    time.sleep(2.0)
                except JudgeError as exc:
                    log.error("cannot register the attempt: %s", exc)
                    return

        threading.Thread(target=loop, daemon=True).start()

    def forward(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        if not any(m == method and rx.fullmatch(path) for m, rx in ALLOWED):
            return 404, {"error": f"no route {method} {path}"}
        if body is not None:
            kind = "final" if self.allow_final and body.get("kind") == "final" else "feedback"
            body = {**body, "kind": kind, "task": self.task}
            body.pop("attempt_key", None)
        try:
            client = JudgeClient(self.judge.url, self.attempt_token(), self.task)
            return 200, client.request(method, path, body)
        except JudgeUnavailable as exc:
            return 503, {"error": exc.message}
        except JudgeError as exc:
            return exc.status, {"error": exc.message}


def make_server(relay: Relay, listen: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = IO_TIMEOUT_S

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug(fmt, *args)

        def _reply(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _limited(self) -> bool:
            if limiter.allow("relay"):
                return False
            self._reply(429, {"error": "too many requests: slow down"})
            return True

        def do_GET(self) -> None:  # noqa: N802
            if not self._limited():
                self._reply(*relay.forward("GET", self.path.split("?", 1)[0].rstrip("/"), None))

        def do_POST(self) -> None:  # noqa: N802
            if self._limited():
                return
            try:
                body = read_json_body(self, MAX_BODY)
            except ClientError as exc:
                self.close_connection = True
                return self._reply(exc.status, {"error": exc.message})
            self._reply(*relay.forward("POST", self.path.split("?", 1)[0].rstrip("/"), body))

    class Server(BoundedServerMixin, ThreadingHTTPServer):
        daemon_threads = True

    limiter = RateLimiter()
    host, _, port = listen.rpartition(":")
    return Server((host or "0.0.0.0", int(port)), Handler)
