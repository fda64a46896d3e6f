"""The judge's HTTP service (standard library only): attempts, submissions, final grades, the queue.

API (JSON, ``Authorization: Bearer <token>``):

- ``GET  /v1/health``: devices, isolation, queue (no token).
- ``POST /v1/attempts`` {key, task, minutes, budget} (admin or relay token): register an attempt
  (idempotent on ``key``); the answer carries the attempt's own token the first time.
- ``GET  /v1/attempt`` (attempt or job token): budget and time left.
- ``POST /v1/submissions`` {kind, kernel | kernel_b64, request_id, task, attempt_key}:
  ``feedback`` with an attempt token (or a job token plus the task: remote-judge mode), ``final``
  with a final or admin token. Refusals that never reach evaluation answer at once, uncharged.
- ``GET  /v1/submissions/<id>``: state, queue position, stage, then the verdict and the report.
- ``POST /v1/tokens`` {scope, label} (admin): mint a token (``job``, ``final``, ``relay``).

Token scopes: ``admin`` (everything), ``relay`` (registers attempts: the per-trial relay of the
Docker mode), ``attempt`` (one attempt's feedback), ``job`` (feedback for any task, one attempt per
task and token: the remote-judge mode), ``final`` (final grades only; never seen by a sandbox).
"""

from __future__ import annotations

import ast
import base64
import json
import logging
import os
import re
import socketserver
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from metakernelbench.contract import ATTEMPT_MINUTES, DSL_PATTERN, SUBMISSIONS
from metakernelbench.problems import problem_paths
from metakernelbench.verifier.report import render_report
from metakernelbench.verifier.result import GradeResult
from metakernelbench.verifier.rules import MAX_KERNEL_BYTES  # the grader's own limit (rules has no torch)

from .http_limits import IO_TIMEOUT_S, BoundedServerMixin, ClientError, RateLimiter, read_json_body
from .queue import Scheduler
from .store import FEEDBACK, FINAL, Attempt, Store, Submission, hash_token

__all__ = [
    "ApiError", "DEFAULT_BUDGET", "DEFAULT_MINUTES", "Handler", "Judge", "MAX_BODY_BYTES", "Principal",
    "RegisterBody", "SubmitBody", "TASK_RE", "TCPServer", "TokenBody", "UnixServer", "parse_task", "precheck",
    "serve_http",
]

log = logging.getLogger("metakernelbench.judge")

MAX_BODY_BYTES = 2 * MAX_KERNEL_BYTES + 64 * 1024
# an attempt's budget unless its registration says otherwise: the contract's, as the instructions state it
DEFAULT_BUDGET = SUBMISSIONS
DEFAULT_MINUTES = float(ATTEMPT_MINUTES)
TASK_RE = re.compile(rf"^(?:[a-z0-9_-]+/)?(?P<problem>\d{{2}}_[a-z0-9_]+)_(?P<dsl>{DSL_PATTERN})$")


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class RegisterBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=200)
    task: str
    minutes: float | None = None
    budget: int | None = Field(None, ge=0, le=1000)
    self_final: bool = False


class SubmitBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = FEEDBACK
    kernel: str | None = None
    kernel_b64: str | None = None
    request_id: str | None = Field(None, max_length=100)
    task: str | None = None
    attempt_key: str | None = Field(None, max_length=200)


class TokenBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scope: str
    label: str = ""


@dataclass(frozen=True)
class Principal:
    scope: str
    attempt: Attempt | None = None
    token: str = ""


def parse_task(task: str) -> tuple[str, str]:
    """``metakernelbench/28_slug_tirx`` -> (``28_slug``, ``tirx``)."""
    m = TASK_RE.match(task or "")
    if not m:
        raise ApiError(400, f"not a MetaKernelBench task name: {task!r}")
    return m["problem"], m["dsl"]


def precheck(source: bytes) -> str | None:
    """Why a submission cannot enter evaluation at all (then it is not charged), or None."""
    if not source.strip():
        return "the kernel file is empty"
    if len(source) > MAX_KERNEL_BYTES:
        return f"the kernel file is {len(source)} bytes, over the {MAX_KERNEL_BYTES}-byte limit"
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the kernel file is not UTF-8 text ({exc})"
    try:
        ast.parse(text, filename="kernel.py")
    except SyntaxError as exc:
        return f"the kernel file does not parse: {exc.msg} (line {exc.lineno})"
    except ValueError as exc:  # null bytes
        return f"the kernel file does not parse: {exc}"
    return None


class Judge:
    """The service's logic, independent of HTTP (the tests drive it directly too)."""

    def __init__(self, store: Store, scheduler: Scheduler, problems_root: Path | None = None,
                 default_budget: int = DEFAULT_BUDGET, default_minutes: float = DEFAULT_MINUTES):
        self.store, self.scheduler = store, scheduler
        self.problems = {p.stem for p in problem_paths(problems_root)}
        self.default_budget, self.default_minutes = default_budget, default_minutes
        self.started_at = time.time()

    # ---- auth --------------------------------------------------------------------------------
    def principal(self, token: str | None, task_header: str | None = None) -> Principal:
        if not token:
            raise ApiError(401, "no token: the sandbox's `submit` sends it (MKB_JUDGE_TOKEN), or the relay adds it")
        row = self.store.token(token)
        if row is None:
            raise ApiError(403, "unknown token")
        attempt = self.store.attempt(row["attempt_id"]) if row["attempt_id"] else None
        return Principal(row["scope"], attempt, token)

    def _require(self, who: Principal, *scopes: str) -> None:
        if who.scope not in scopes and who.scope != "admin":
            raise ApiError(403, f"a {who.scope} token cannot do this")

    def _check_task(self, task: str) -> tuple[str, str]:
        problem, dsl = parse_task(task)
        if problem not in self.problems:
            raise ApiError(404, f"no such problem: {problem}")
        return problem, dsl

    # ---- attempts ----------------------------------------------------------------------------
    def register(self, who: Principal, body: RegisterBody) -> dict:
        self._require(who, "relay")
        problem, dsl = self._check_task(body.task)
        budget = self.default_budget if body.budget is None else body.budget
        minutes = self.default_minutes if body.minutes is None else body.minutes
        attempt, token = self.store.register(body.key, body.task, problem, dsl, budget, minutes, body.self_final)
        if attempt.task != body.task:
            raise ApiError(409, f"attempt {body.key!r} belongs to task {attempt.task}")
        return {"attempt": attempt.id, "key": attempt.key, "token": token, **self._budget(attempt)}

    def _job_attempt(self, who: Principal, task: str | None) -> Attempt:
        """Remote-judge mode: one attempt per (job token, task), created at first use."""
        if not task:
            raise ApiError(400, "a job token needs the task name (MKB_TASK)")
        problem, dsl = self._check_task(task)
        key = f"job:{hash_token(who.token)[:16]}:{task}"
        attempt, _ = self.store.register(key, task, problem, dsl, self.default_budget, self.default_minutes)
        return attempt

    def _attempt_of(self, who: Principal, task: str | None) -> Attempt:
        if who.scope == "attempt" and who.attempt is not None:
            return who.attempt
        if who.scope == "job":
            return self._job_attempt(who, task)
        raise ApiError(403, f"a {who.scope} token has no attempt")

    def _budget(self, attempt: Attempt) -> dict:
        used = self.store.used(attempt.id)
        left = None if attempt.deadline is None else max(0.0, (attempt.deadline - time.time()) / 60)
        return {"task": attempt.task, "budget": attempt.budget, "used": used,
                "submissions_left": max(0, attempt.budget - used), "minutes_left": left}

    def attempt_info(self, who: Principal, task: str | None) -> dict:
        return self._budget(self._attempt_of(who, task))

    # ---- submissions -------------------------------------------------------------------------
    def submit(self, who: Principal, body: SubmitBody, task_header: str | None) -> dict:
        if body.kernel is not None:
            source = body.kernel.encode("utf-8")
        elif body.kernel_b64 is not None:
            try:
                source = base64.b64decode(body.kernel_b64, validate=True)
            except ValueError:
                raise ApiError(400, "kernel_b64 is not base64") from None
        else:
            source = b""
        if body.kind == FEEDBACK:
            attempt = self._attempt_of(who, body.task or task_header)
            problem, dsl, task = attempt.problem, attempt.dsl, attempt.task
            reason = precheck(source)
            if reason is None and attempt.deadline is not None and time.time() > attempt.deadline:
                reason = "the attempt's time is up"
            if reason is not None:
                sub = self.store.record_rejection(attempt, FEEDBACK, task, problem, dsl, source, reason)
                return self.view(sub, attempt)
            sub, why = self.store.enqueue(attempt, FEEDBACK, task, problem, dsl, source, body.request_id,
                                          budget_check=True)
            if sub is None:
                sub = self.store.record_rejection(attempt, FEEDBACK, task, problem, dsl, source, why)
                return self.view(sub, attempt)
        elif body.kind == FINAL and who.scope == "attempt" and who.attempt is not None:
            # an attempt that grades itself at its end (the Terminal-Bench layout: tests run in the
            # sandbox's container); allowed once, and it ends the attempt's feedback
            attempt = who.attempt
            if not attempt.self_final:
                raise ApiError(403, "this attempt's final grade is asked for by the verifier, not the sandbox")
            if self.store.finals(attempt.id):
                raise ApiError(409, "this attempt's final grade was already asked for")
            self.store.close_attempt(attempt.id)
            if len(source) > MAX_KERNEL_BYTES:
                source = source[: MAX_KERNEL_BYTES + 1]
            sub, _ = self.store.enqueue(attempt, FINAL, attempt.task, attempt.problem, attempt.dsl, source,
                                        body.request_id, budget_check=False)
        elif body.kind == FINAL:
            self._require(who, "final")
            task = body.task or task_header
            if not task:
                raise ApiError(400, "a final grade needs the task name")
            problem, dsl = self._check_task(task)
            attempt = self.store.attempt_by_key(body.attempt_key) if body.attempt_key else who.attempt
            if len(source) > MAX_KERNEL_BYTES:
                # the grader gives this its verdict (RULE_VIOLATION); only keep the stored row small
                source = source[: MAX_KERNEL_BYTES + 1]
            sub, _ = self.store.enqueue(attempt, FINAL, task, problem, dsl, source,
                                        body.request_id, budget_check=False)
        else:
            raise ApiError(400, f"kind must be {FEEDBACK} or {FINAL}")
        self.scheduler.wake()
        return self.view(sub, self.store.attempt(sub.attempt_id) if sub.attempt_id else None)

    def get(self, who: Principal, sid: int) -> dict:
        sub = self.store.submission(sid)
        if sub is None:
            raise ApiError(404, f"no submission {sid}")
        attempt = self.store.attempt(sub.attempt_id) if sub.attempt_id else None
        if who.scope not in ("admin", "final"):
            mine = self._attempt_of(who, sub.task)
            if attempt is None or attempt.id != mine.id:
                raise ApiError(404, f"no submission {sid}")
        return self.view(sub, attempt)

    def view(self, sub: Submission, attempt: Attempt | None) -> dict:
        out: dict[str, Any] = {"id": sub.id, "kind": sub.kind, "task": sub.task, "state": sub.state,
                               "stage": sub.stage, "charged": sub.charged, "sha256": sub.sha256}
        budget = self._budget(attempt) if attempt is not None and sub.kind == FEEDBACK else {}
        out.update({k: budget[k] for k in ("submissions_left", "minutes_left", "budget") if k in budget})
        now = time.time()
        if sub.state == "queued":
            out["queue_position"] = self.store.queue_position(sub.id)
            out["running"] = [{"device": r.device, "for_s": now - (r.started_at or now)} for r in self.store.running()]
            out["estimate_s"] = self.store.recent_wall()
        elif sub.state == "running":
            out["running_for_s"] = now - (sub.started_at or now)
            out["device"] = sub.device
        elif sub.state == "rejected":
            out["status"] = "NOT_EVALUATED"
            out["message"] = sub.message
            out["report"] = self._rejection_report(sub, budget)
        elif sub.state == "done":
            out["status"] = sub.status
            out["result"] = sub.result
            out["wall_s"] = (sub.finished_at or now) - (sub.started_at or now)
            out["queue_wait_s"] = (sub.started_at or now) - sub.queued_at
            out["report"] = self._report(sub, budget)
            if sub.kind == FINAL:
                out["reward"] = _reward(sub.result)
        return out

    @staticmethod
    def _rejection_report(sub: Submission, budget: dict) -> str:
        lines = ["status: NOT_EVALUATED", f"message: {sub.message}", "this submission was not charged"]
        if "submissions_left" in budget:
            lines.append(f"submissions left: {budget['submissions_left']}")
        if budget.get("minutes_left") is not None:
            lines.append(f"minutes left: {budget['minutes_left']:.1f}")
        return "\n".join(lines)

    @staticmethod
    def _report(sub: Submission, budget: dict) -> str:
        try:
            result = GradeResult.model_validate(sub.result)
        except ValidationError:
            return f"status: {sub.status}\nmessage: {sub.message}"
        text = render_report(result, budget.get("submissions_left"), budget.get("minutes_left"))
        if sub.kind == FEEDBACK and not sub.charged:
            text += "\nthis submission was not charged (infrastructure fault)"
        return text

    def health(self) -> dict:
        plan = self.scheduler.isolation.cpu_plan  # each device slot's CPUs (cpu_plan)
        return {"ok": True, "service": "metakernelbench-judge", "devices": self.scheduler.devices,
                "isolation": self.scheduler.isolation.name,
                "isolation_details": self.scheduler.isolation.describe(),
                "cpu_plan": plan.model_dump(mode="json") if plan is not None else None,
                "queue": self.store.counts(),
                "busy": {d: s for d, s in self.scheduler.busy.items()}, "uptime_s": time.time() - self.started_at}

    def mint(self, who: Principal, body: TokenBody) -> dict:
        self._require(who)
        if body.scope not in ("job", "final", "relay"):
            raise ApiError(400, "scope must be job, final or relay")
        return {"scope": body.scope, "token": self.store.mint(body.scope, label=body.label)}


def _reward(result: dict | None) -> dict[str, float]:
    """Harbor's flat reward for a final grade (an unreadable result is an infrastructure error)."""
    try:
        return GradeResult.model_validate(result).reward()
    except ValidationError:
        return {"reward": 0.0, "passed": 0.0, "speedup": 0.0, "kernel_ms": 0.0, "eager_ms": 0.0, "infra_error": 1.0}


# ---- HTTP ------------------------------------------------------------------------------------
class Handler(BaseHTTPRequestHandler):
    judge: Judge  # set on the server class
    protocol_version = "HTTP/1.1"
    server_version = "metakernelbench-judge"
    timeout = IO_TIMEOUT_S  # every read and write on the connection (http_limits)

    def address_string(self) -> str:
        return self.client_address[0] if isinstance(self.client_address, tuple) else "unix"

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _body(self) -> dict:
        return read_json_body(self, MAX_BODY_BYTES)

    def _dispatch(self, method: str) -> None:
        judge = self.server.judge  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0].rstrip("/")
        task = self.headers.get("X-MKB-Task")
        try:
            if method == "GET" and path == "/v1/health":
                return self._send(200, judge.health())
            key = self._token() or "client:" + self.server.client_of(self.connection)  # type: ignore[attr-defined]
            limiter = getattr(self.server, "limiter", None)
            if limiter is not None and not limiter.allow(key):
                raise ApiError(429, "too many requests: slow down")
            body = self._body() if method == "POST" else {}
            who = judge.principal(self._token(), task)
            if method == "POST" and path == "/v1/attempts":
                return self._send(200, judge.register(who, RegisterBody.model_validate(body)))
            if method == "GET" and path == "/v1/attempt":
                return self._send(200, judge.attempt_info(who, task))
            if method == "POST" and path == "/v1/submissions":
                return self._send(200, judge.submit(who, SubmitBody.model_validate(body), task))
            m = re.fullmatch(r"/v1/submissions/(\d+)", path)
            if method == "GET" and m:
                return self._send(200, judge.get(who, int(m[1])))
            if method == "POST" and path == "/v1/tokens":
                return self._send(200, judge.mint(who, TokenBody.model_validate(body)))
            raise ApiError(404, f"no route {method} {path}")
        except (ApiError, ClientError) as exc:
            if exc.status in (408, 411) or exc.status >= 413:
                self.close_connection = True  # the rest of what the client sent cannot be trusted
            self._send(exc.status, {"error": exc.message})
        except ValidationError as exc:
            self._send(400, {"error": f"bad request: {exc.errors(include_url=False)[:3]}"})
        except Exception as exc:  # noqa: BLE001 - a judge bug answers 500, the server lives on
            log.exception("request failed")
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"judge fault: {type(exc).__name__}"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")


class TCPServer(BoundedServerMixin, ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class UnixServer(BoundedServerMixin, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve_http(judge: Judge, listen: str | None, unix: Path | None) -> list[socketserver.BaseServer]:
    """Start the HTTP servers (TCP ``host:port`` and/or a unix socket) on background threads."""
    servers: list[socketserver.BaseServer] = []
    if listen:
        host, _, port = listen.rpartition(":")
        tcp = TCPServer((host or "127.0.0.1", int(port)), Handler)
        servers.append(tcp)
    if unix:
        unix.parent.mkdir(parents=True, exist_ok=True)
        unix.unlink(missing_ok=True)
        us = UnixServer(str(unix), Handler)
        os.chmod(unix, 0o666)  # the sandbox may run as another user; the token is the access control
        servers.append(us)
    for server in servers:
        server.judge = judge  # type: ignore[attr-defined]
        server.limiter = RateLimiter()  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, name=f"judge-http-{type(server).__name__}",
                         daemon=True).start()
    return servers
