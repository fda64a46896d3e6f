"""Talk to the judge over HTTP: from the sandbox (``submit``), from Harbor's verifier (final grade),
from the relay and from benchmarks. Standard library only, because it is copied into the sandbox and
verifier images as it is.

URLs: ``http://host:port`` or ``unix:/path/to/judge.sock`` (the no-Docker mode, where the sandbox
has no network at all and reaches the judge through a socket file).

A judge restart is not an error for a client: ``submit`` retries with the same request id (the
judge recognises it, so nothing is queued or charged twice) and ``wait`` keeps polling until the
judge answers again, for up to ``reconnect_s`` seconds.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

__all__ = ["API", "DONE_STATES", "JudgeClient", "JudgeError", "JudgeUnavailable", "encode_kernel", "progress_line"]

API = "/v1"
DONE_STATES = ("done", "rejected")


class JudgeError(Exception):
    """The judge answered with an error (HTTP status and its message)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"judge error {status}: {message}")
        self.status, self.message = status, message


class JudgeUnavailable(JudgeError):
    """The judge could not be reached."""

    def __init__(self, message: str):
        super().__init__(0, message)


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    if url.startswith("unix:"):
        path = url[len("unix:"):]
        if path.startswith("//"):
            path = path[2:]
        return _UnixHTTPConnection(path, timeout), ""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout), parts.path.rstrip("/")
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not a judge URL: {url!r} (use http://host:port or unix:/path/to/socket)")
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout), parts.path.rstrip("/")


def encode_kernel(source: bytes) -> dict[str, str]:
    try:
        return {"kernel": source.decode("utf-8")}
    except UnicodeDecodeError:
        return {"kernel_b64": base64.b64encode(source).decode()}


class JudgeClient:
    def __init__(self, url: str, token: str | None = None, task: str | None = None, timeout: float = 60.0):
        self.url, self.token, self.task, self.timeout = url, token, task, timeout

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> JudgeClient:
        """The client configured by the sandbox's (or verifier's) environment variables."""
        env = os.environ if env is None else env
        url = env.get("MKB_JUDGE_URL") or "http://judge-relay:8765"
        return cls(url, env.get("MKB_JUDGE_TOKEN") or None, env.get("MKB_TASK") or None)

    # ---- transport ---------------------------------------------------------------------------
    BUSY = (429, 503)  # the judge's limits say "not now": wait and ask again (submissions are idempotent)

    def request(self, method: str, path: str, payload: dict | None = None) -> dict:
        delay = 0.25
        for _ in range(8):
            try:
                return self._request_once(method, path, payload)
            except JudgeError as exc:
                if exc.status not in self.BUSY:
                    raise
            time.sleep(delay)
            delay = min(2 * delay, 4.0)
        return self._request_once(method, path, payload)

    def _request_once(self, method: str, path: str, payload: dict | None = None) -> dict:
        try:
            conn, prefix = _connection(self.url, self.timeout)
        except ValueError as exc:
            raise JudgeUnavailable(str(exc)) from None
        headers = {"Accept": "application/json"}
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.task:
            headers["X-MKB-Task"] = self.task
        try:
            conn.request(method, prefix + path, body=body, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise JudgeUnavailable(f"cannot reach the judge at {self.url}: {exc}") from None
        finally:
            conn.close()
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {"error": raw[:500].decode(errors="replace")}
        if resp.status >= 400:
            raise JudgeError(resp.status, str(data.get("error", data)))
        return data

    def _retrying(self, fn: Callable[[], dict], reconnect_s: float,
                  on_wait: Callable[[str], None] | None = None) -> dict:
        give_up = time.monotonic() + reconnect_s
        delay = 1.0
        while True:
            try:
                return fn()
            except JudgeUnavailable as exc:
                if time.monotonic() + delay > give_up:
                    raise
                if on_wait:
                    on_wait(f"judge unreachable, retrying ({exc.message})")
                time.sleep(delay)
                delay = min(2 * delay, 10.0)

    # ---- API ---------------------------------------------------------------------------------
    def health(self) -> dict:
        return self.request("GET", f"{API}/health")

    def attempt(self) -> dict:
        return self.request("GET", f"{API}/attempt")

    def register(self, key: str, task: str, minutes: float | None = None, budget: int | None = None,
                 self_final: bool = False) -> dict:
        return self.request("POST", f"{API}/attempts", {"key": key, "task": task, "minutes": minutes,
                                                         "budget": budget, "self_final": self_final})

    def submit(self, source: bytes, kind: str = "feedback", task: str | None = None,
               request_id: str | None = None, attempt_key: str | None = None, reconnect_s: float = 0.0,
               on_wait: Callable[[str], None] | None = None) -> dict:
        payload = {"kind": kind, "request_id": request_id or uuid.uuid4().hex, **encode_kernel(source)}
        if task or self.task:
            payload["task"] = task or self.task
        if attempt_key:
            payload["attempt_key"] = attempt_key
        return self._retrying(lambda: self.request("POST", f"{API}/submissions", payload), reconnect_s, on_wait)

    def get(self, sid: int) -> dict:
        return self.request("GET", f"{API}/submissions/{sid}")

    def wait(self, sid: int, on_progress: Callable[[dict], None] | None = None, poll_s: float = 2.0,
             reconnect_s: float = 600.0, max_wait_s: float | None = None,
             on_wait: Callable[[str], None] | None = None) -> dict:
        """Poll submission ``sid`` until it is done; ``on_progress`` sees every intermediate state."""
        stop = None if max_wait_s is None else time.monotonic() + max_wait_s
        while True:
            info = self._retrying(lambda: self.get(sid), reconnect_s, on_wait)
            if info.get("state") in DONE_STATES:
                return info
            if on_progress:
                on_progress(info)
            if stop is not None and time.monotonic() > stop:
                raise TimeoutError(f"submission {sid} still {info.get('state')} after {max_wait_s:.0f} s")
            time.sleep(poll_s)


def progress_line(info: dict) -> str:
    """One line for a waiting client: where its submission stands in the queue."""
    state = info.get("state")
    if state == "queued":
        ahead = info.get("queue_position") or 0
        text = f"queued: {ahead} evaluation(s) ahead of yours"
        if info.get("running"):
            text += f", {len(info['running'])} running"
        if info.get("estimate_s"):
            text += f" (about {info['estimate_s'] / 60:.1f} min per evaluation)"
        return text
    if state == "running":
        return (f"evaluating on {info.get('device') or 'the GPU'}: {info.get('stage') or 'running'}, "
                f"{info.get('running_for_s', 0):.0f} s so far")
    return str(state)
