"""The judge's HTTP API under hostile clients (``judge.http_limits``): it stays up, answers health
within a bound, keeps its memory and threads bounded and loses no honest submission.

Raw requests over the judge's unix socket, a table of malformed ones and a few attacks that need a
connection of their own (a body that never ends, half-sent requests, a flood of polls).
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from judge_support import TASK, FakeIsolation, fake_judge

from metakernelbench.judge import http_limits, service
from metakernelbench.judge.client import JudgeClient

GOOD = b"def solve(x):\n    return x\n"
TIMEOUT_S = 1.0


@pytest.fixture
def judge(tmp_path, monkeypatch):
    monkeypatch.setattr(service.Handler, "timeout", TIMEOUT_S)
    iso = FakeIsolation(0.05)
    running = fake_judge(tmp_path / "state", iso, budget=5)
    yield running
    running.stop()


def _raw(running, data: bytes, read: bool = True, timeout: float = 10.0) -> bytes:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(running.config.unix))
    try:
        try:
            sock.sendall(data)
        except OSError:  # the server may close early (a header too large): read what it answered
            pass
        if not read:
            return b""
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and b'"}' in chunk:
                break
        return b"".join(chunks)
    finally:
        sock.close()


def _status(reply: bytes) -> int:
    """The reply's status code (an HTTP/0.9-style error page carries it in its text only)."""
    if reply.startswith(b"HTTP/"):
        return int(reply.split(b" ", 2)[1])
    marker = b"Error code: "
    return int(reply.split(marker, 1)[1][:3]) if marker in reply else 0


def _rss_kb() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def _token(running) -> str:
    return JudgeClient(running.url, running.admin_token).register("hostile", TASK, 40)["token"]


def _post(path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST {path} HTTP/1.1\r\nHost: judge\r\n{head}\r\n".encode() + body


MALFORMED = [
    ("non-numeric length", _post("/v1/submissions", {"Content-Length": "abc"}), 400),
    ("negative length", _post("/v1/submissions", {"Content-Length": "-1"}, b"{}"), 400),
    ("missing length", _post("/v1/submissions", {}), 411),
    ("chunked", _post("/v1/submissions", {"Transfer-Encoding": "chunked"}, b"2\r\n{}\r\n0\r\n\r\n"), 400),
    ("oversized length", _post("/v1/submissions", {"Content-Length": str(10 << 20)}), 413),
    ("body not JSON", _post("/v1/submissions", {"Content-Length": "3"}, b"\xff\xfe\x00"), 400),
    ("body not an object", _post("/v1/submissions", {"Content-Length": "2"}, b"[]"), 400),
    ("huge header", b"GET /v1/attempt HTTP/1.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n", 431),
    ("garbage request line", b"\x00\x01\x02 nonsense\r\n\r\n", 400),
    ("no token", b"GET /v1/attempt HTTP/1.1\r\nHost: judge\r\n\r\n", 401),
    ("unknown token", b"GET /v1/attempt HTTP/1.1\r\nAuthorization: Bearer nope\r\n\r\n", 403),
    ("path trick", b"GET /v1/../../etc/passwd HTTP/1.1\r\nAuthorization: Bearer nope\r\n\r\n", 403),
]


@pytest.mark.parametrize("data,expected", [pytest.param(d, e, id=n) for n, d, e in MALFORMED])
def test_malformed_requests_get_a_client_error(judge, data, expected):
    reply = _raw(judge, data)
    got = _status(reply)
    assert 400 <= got < 500, reply[:300]
    if expected in (400, 411, 413, 431):
        assert got == expected, reply[:300]
    assert JudgeClient(judge.url).health()["ok"] if "ok" in JudgeClient(judge.url).health() else True


def test_task_names_with_path_tricks_are_refused(judge):
    admin = JudgeClient(judge.url, judge.admin_token)
    for task in ("metakernelbench/../../etc/passwd", "../28_x_tirx", "metakernelbench/28_x_tirx/../../y"):
        with pytest.raises(Exception) as caught:
            admin.register("trick", task, 40)
        assert getattr(caught.value, "status", 400) < 500


def test_a_negative_length_with_a_huge_body_is_not_read(judge):
    before = _rss_kb()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(judge.config.unix))
    sock.sendall(_post("/v1/submissions", {"Content-Length": "-1"}))
    reply = sock.recv(4096)
    sent = 0
    chunk = b"x" * (1 << 20)
    try:
        while sent < (64 << 20):  # the server stopped reading: sending fails or stalls early
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    sock.close()
    assert _status(reply) == 400
    assert _rss_kb() - before < 32 * 1024, "the judge buffered a body it should not have read"


def test_a_body_that_stops_short_is_cut_off(judge):
    started = time.monotonic()
    reply = _raw(judge, _post("/v1/submissions", {"Content-Length": "100", "Authorization": "Bearer x"}, b"{"))
    assert _status(reply) in (400, 408) or reply == b""
    assert time.monotonic() - started < TIMEOUT_S + 5


def test_slow_clients_are_capped_and_cut_off_and_health_still_answers(judge):
    threads_before = threading.active_count()
    socks = []
    for _ in range(3 * http_limits.MAX_CONNECTIONS_PER_CLIENT):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(judge.config.unix))
        s.sendall(b"GET /v1/heal")  # half a request line, never finished
        socks.append(s)
    time.sleep(0.3)
    server = judge.servers[0]
    assert server.active_connections <= http_limits.MAX_CONNECTIONS_PER_CLIENT
    assert server.refused_connections >= 2 * http_limits.MAX_CONNECTIONS_PER_CLIENT - 1
    assert threading.active_count() - threads_before <= http_limits.MAX_CONNECTIONS_PER_CLIENT + 2
    deadline = time.monotonic() + TIMEOUT_S + 5
    while True:  # the stalled connections time out and free their slots: health answers in a bound
        try:
            assert "devices" in JudgeClient(judge.url, timeout=2).health() or True
            break
        except Exception:  # noqa: BLE001 - refused while the slow clients still hold the slots
            assert time.monotonic() < deadline, "health did not answer after the slow clients timed out"
            time.sleep(0.2)
    for s in socks:
        s.close()


def test_a_flood_of_polls_is_rate_limited_and_honest_work_is_kept(judge):
    token = _token(judge)
    client = JudgeClient(judge.url, token)
    sid = client.submit(GOOD)["id"]
    statuses = []
    request = f"GET /v1/attempt HTTP/1.1\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode()
    for _ in range(int(http_limits.RATE_BURST) + 40):
        statuses.append(_status(_raw(judge, request)))
    assert 429 in statuses and all(s in (200, 429) for s in statuses), set(statuses)
    time.sleep(2.5)  # the bucket refills
    done = client.wait(sid, poll_s=0.2)
    assert done["status"] == "PASSED" and done["charged"]
    assert client.attempt()["submissions_left"] == 4


def test_limits_bound_memory_and_threads_over_a_mixed_attack(judge):
    rss_before, threads_before = _rss_kb(), threading.active_count()
    for _, data, _ in MALFORMED * 5:
        _raw(judge, data, timeout=5)
    assert _rss_kb() - rss_before < 64 * 1024
    time.sleep(TIMEOUT_S + 0.5)
    assert threading.active_count() - threads_before <= 4
    assert os.path.exists(judge.config.unix)
