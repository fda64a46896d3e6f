"""Limits the judge's and the relay's HTTP endpoints apply before they read a request.

Every trial's sandbox can reach the judge (through its relay), and the agent in the sandbox may be
careless or hostile. One client must not be able to starve, crash or slow the others, so:

- a body is read only with a declared, well-formed ``Content-Length`` no larger than the limit
  (missing: 411; negative, non-numeric or chunked: 400; too large: 413), and a body that stops short
  is a 400, never a hang;
- every socket read and write has a timeout (a client that sends half a request, or nothing, is cut
  off after ``IO_TIMEOUT_S``), so a stalled connection holds its thread for seconds, not forever;
- connections are capped in total and per client (per IP, or per peer process on a unix socket); a
  connection over the cap is answered 503 and closed before a thread is started for it;
- requests are rate-limited per token (per client without one): 429 beyond the bucket.

Client errors are 4xx with a one-line reason; a 5xx means a fault of the judge itself.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from collections import defaultdict
from typing import Any

__all__ = [
    "BoundedServerMixin", "ClientError", "IO_TIMEOUT_S", "MAX_CONNECTIONS", "MAX_CONNECTIONS_PER_CLIENT",
    "RATE_BURST", "RATE_PER_S", "RateLimiter", "client_key", "read_json_body",
]

IO_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64
MAX_CONNECTIONS_PER_CLIENT = 16
RATE_PER_S = 50.0
RATE_BURST = 100.0
_LENGTH = re.compile(r"[0-9]{1,12}")


class ClientError(Exception):
    """A request the client got wrong: answered with ``status`` and a one-line reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def read_json_body(handler: Any, max_bytes: int) -> dict:
    """The request's JSON object body, read only after its declared length passed every check."""
    if handler.headers.get("Transfer-Encoding"):
        raise ClientError(400, "chunked bodies are not accepted: send Content-Length")
    declared = handler.headers.get("Content-Length")
    if declared is None:
        raise ClientError(411, "Content-Length is required")
    if not _LENGTH.fullmatch(declared.strip()):
        raise ClientError(400, "Content-Length must be a non-negative integer")
    length = int(declared.strip())
    if length > max_bytes:
        raise ClientError(413, f"request over {max_bytes} bytes: the kernel file is too large")
    try:
        raw = handler.rfile.read(length) if length else b""
    except TimeoutError:
        raise ClientError(408, f"the body did not arrive within {IO_TIMEOUT_S:.0f} s") from None
    if len(raw) != length:
        raise ClientError(400, "the body is shorter than its Content-Length")
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        raise ClientError(400, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise ClientError(400, "the body must be a JSON object")
    return data


def client_key(request: Any, client_address: Any) -> str:
    """Who a connection belongs to: its IP, or on a unix socket the connecting process (every trial's
    sandbox and relay are processes of their own; all of them may run as one user)."""
    if isinstance(client_address, tuple) and client_address:
        return str(client_address[0])
    try:
        creds = request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _, _ = struct.unpack("3i", creds)
        return f"pid:{pid}"
    except (OSError, AttributeError):
        return "unix"


class BoundedServerMixin:
    """Caps concurrent connections (total and per client) before a handler thread is started.

    Mix in before ``socketserver.ThreadingMixIn``. Handlers should set ``timeout = IO_TIMEOUT_S``.
    """

    max_connections = MAX_CONNECTIONS
    max_per_client = MAX_CONNECTIONS_PER_CLIENT
    request_queue_size = 256  # the listen backlog: a flood of connects must not crowd others out of it

    def _bounds(self):
        if not hasattr(self, "_bound_lock"):
            self._bound_lock = threading.Lock()
            self._active = 0
            self._per_client: dict[str, int] = defaultdict(int)
            self._client_of: dict[int, str] = {}
            self.refused_connections = 0
        return self._bound_lock

    def process_request(self, request, client_address):  # noqa: D102 - socketserver's hook
        lock = self._bounds()
        key = client_key(request, client_address)
        with lock:
            full = self._active >= self.max_connections or self._per_client[key] >= self.max_per_client
            if not full:
                self._active += 1
                self._per_client[key] += 1
                self._client_of[id(request)] = key
            else:
                self.refused_connections += 1
        if full:
            _refuse_connection(request)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):  # noqa: D102
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._bounds():
                self._active -= 1
                key = self._client_of.pop(id(request), "?")
                self._per_client[key] -= 1
                if self._per_client[key] <= 0:
                    self._per_client.pop(key, None)

    def client_of(self, request) -> str:
        with self._bounds():
            return self._client_of.get(id(request), "?")

    @property
    def active_connections(self) -> int:
        with self._bounds():
            return self._active


def _refuse_connection(request) -> None:
    body = b'{"error": "too many connections: try again shortly"}'
    try:
        request.settimeout(1.0)
        request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                        b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    except OSError:
        pass


class RateLimiter:
    """A token bucket per key (a token, or a client when there is none)."""

    def __init__(self, rate_per_s: float = RATE_PER_S, burst: float = RATE_BURST, max_keys: int = 10_000):
        self.rate, self.burst, self.max_keys = rate_per_s, burst, max_keys
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            level, at = self._buckets.get(key, (self.burst, now))
            level = min(self.burst, level + (now - at) * self.rate)
            if level < 1.0:
                self._buckets[key] = (level, now)
                return False
            if len(self._buckets) >= self.max_keys and key not in self._buckets:
                self._buckets.clear()  # bounded memory: a flood of fresh keys resets, it does not grow
            self._buckets[key] = (level - 1.0, now)
            return True
