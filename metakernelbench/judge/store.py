"""The judge's embedded database (sqlite3 in WAL mode): attempts, tokens, submissions, results.

Everything the judge must not forget lives here, written before it is acted on, so a restart loses
nothing: an attempt's budget is the count of its charged (or still pending) feedback submissions, a
submission's kernel bytes are kept until it is graded, and an evaluation that was running when the
judge stopped is queued again when it comes back (``recover``).

Charging rule (design.md §4/§5): a feedback submission is charged once it *enters* evaluation. A
submission refused before that (missing, unparsable or oversized file, no budget, time is up) is
recorded as ``rejected`` and never charged; an evaluation that ends in INFRA_ERROR is uncharged.

Tokens are stored as SHA-256 hashes; the plain token is shown once, to whoever minted it.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Attempt", "FEEDBACK", "FINAL", "PENDING", "PRIORITY", "SCHEMA", "SCOPES", "Store", "Submission", "hash_token",
    "new_token",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    task TEXT NOT NULL,
    problem TEXT NOT NULL,
    dsl TEXT NOT NULL,
    budget INTEGER NOT NULL,
    created_at REAL NOT NULL,
    deadline REAL,
    self_final INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS tokens (
    hash TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    attempt_id INTEGER REFERENCES attempts(id),
    label TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY,
    attempt_id INTEGER REFERENCES attempts(id),
    kind TEXT NOT NULL,
    task TEXT NOT NULL,
    problem TEXT NOT NULL,
    dsl TEXT NOT NULL,
    request_id TEXT,
    sha256 TEXT NOT NULL,
    source BLOB,
    state TEXT NOT NULL,
    priority INTEGER NOT NULL,
    charged INTEGER NOT NULL DEFAULT 0,
    status TEXT,
    message TEXT,
    result_json TEXT,
    device TEXT,
    tries INTEGER NOT NULL DEFAULT 0,
    stage TEXT,
    queued_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    UNIQUE (attempt_id, request_id)
);
CREATE INDEX IF NOT EXISTS submissions_state ON submissions(state, priority, id);
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY,
    submission_id INTEGER NOT NULL REFERENCES submissions(id),
    device TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    outcome TEXT
);
"""

PENDING = ("queued", "running")
FEEDBACK, FINAL = "feedback", "final"
# final grades go first: Harbor's verifier phase has a timeout, an agent's feedback does not
PRIORITY = {FINAL: 0, FEEDBACK: 1}
SCOPES = ("admin", "relay", "job", "attempt", "final")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(scope: str) -> str:
    return f"mkb-{scope}-{secrets.token_urlsafe(24)}"


@dataclass(frozen=True)
class Attempt:
    id: int
    key: str
    task: str
    problem: str
    dsl: str
    budget: int
    created_at: float
    deadline: float | None
    self_final: int = 0


@dataclass(frozen=True)
class Submission:
    id: int
    attempt_id: int | None
    kind: str
    task: str
    problem: str
    dsl: str
    sha256: str
    state: str
    charged: bool
    status: str | None
    message: str | None
    result: dict | None
    device: str | None
    tries: int
    stage: str | None
    queued_at: float
    started_at: float | None
    finished_at: float | None


@dataclass
class _Result:
    rows: list[sqlite3.Row]
    lastrowid: int | None

    def fetchone(self) -> sqlite3.Row | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[sqlite3.Row]:
        return self.rows

    def __iter__(self):
        return iter(self.rows)


class Store:
    """Thread-safe access to the judge database (one connection, serialized by a lock)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)
        columns = {r["name"] for r in self._db.execute("PRAGMA table_info(attempts)")}
        if "self_final" not in columns:  # a database written by the first version of this schema
            self._db.execute("ALTER TABLE attempts ADD COLUMN self_final INTEGER NOT NULL DEFAULT 0")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self, sql: str, args: tuple = ()) -> _Result:
        """One statement, its rows fetched under the lock (the connection is shared by threads)."""
        with self._lock:
            cur = self._db.execute(sql, args)
            return _Result(cur.fetchall(), cur.lastrowid)

    # ---- tokens ------------------------------------------------------------------------------
    def mint(self, scope: str, attempt_id: int | None = None, label: str = "") -> str:
        if scope not in SCOPES:
            raise ValueError(f"unknown token scope {scope!r}")
        token = new_token(scope)
        self._tx("INSERT INTO tokens(hash, scope, attempt_id, label, created_at) VALUES (?,?,?,?,?)",
                 (hash_token(token), scope, attempt_id, label, time.time()))
        return token

    def add_token(self, token: str, scope: str, label: str = "") -> None:
        """Register a token chosen outside (the secrets files the judge writes at start)."""
        self._tx("INSERT OR IGNORE INTO tokens(hash, scope, attempt_id, label, created_at) VALUES (?,?,?,?,?)",
                 (hash_token(token), scope, None, label, time.time()))

    def token(self, token: str) -> sqlite3.Row | None:
        return self._tx("SELECT * FROM tokens WHERE hash = ?", (hash_token(token),)).fetchone()

    # ---- attempts ----------------------------------------------------------------------------
    def attempt(self, attempt_id: int) -> Attempt | None:
        row = self._tx("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
        return Attempt(**dict(row)) if row else None

    def attempt_by_key(self, key: str) -> Attempt | None:
        row = self._tx("SELECT * FROM attempts WHERE key = ?", (key,)).fetchone()
        return Attempt(**dict(row)) if row else None

    def register(self, key: str, task: str, problem: str, dsl: str, budget: int,
                 minutes: float | None, self_final: bool = False) -> tuple[Attempt, str | None]:
        """Create the attempt ``key`` and mint a token for it; an existing key keeps its attempt (budget,
        deadline) and gets a new token (a relay that restarted lost its own)."""
        with self._lock:
            found = self.attempt_by_key(key)
            if found:
                return found, self.mint("attempt", found.id, key)
            now = time.time()
            deadline = now + 60 * minutes if minutes else None
            cur = self._db.execute(
                "INSERT INTO attempts(key, task, problem, dsl, budget, created_at, deadline, self_final) "
                "VALUES (?,?,?,?,?,?,?,?)", (key, task, problem, dsl, budget, now, deadline, int(self_final)))
            attempt = self.attempt(cur.lastrowid)
            return attempt, self.mint("attempt", attempt.id, key)

    def close_attempt(self, attempt_id: int) -> None:
        """No more feedback for this attempt (its own final grade was asked for)."""
        self._tx("UPDATE attempts SET deadline = ? WHERE id = ?", (time.time(), attempt_id))

    def finals(self, attempt_id: int) -> int:
        row = self._tx("SELECT COUNT(*) FROM submissions WHERE attempt_id = ? AND kind = ? AND state != 'rejected'",
                       (attempt_id, FINAL)).fetchone()
        return int(row[0])

    def used(self, attempt_id: int) -> int:
        """Feedback submissions that count against the budget: charged, or still pending."""
        row = self._tx("SELECT COUNT(*) FROM submissions WHERE attempt_id = ? AND kind = ? AND "
                       "(state IN ('queued', 'running') OR (state = 'done' AND charged = 1))",
                       (attempt_id, FEEDBACK)).fetchone()
        return int(row[0])

    # ---- submissions -------------------------------------------------------------------------
    @staticmethod
    def _submission(row: sqlite3.Row) -> Submission:
        data = dict(row)
        data.pop("source", None)
        data.pop("request_id", None)
        data.pop("priority", None)
        raw = data.pop("result_json")
        return Submission(**{**data, "charged": bool(data["charged"]), "result": json.loads(raw) if raw else None})

    def submission(self, sid: int) -> Submission | None:
        row = self._tx("SELECT * FROM submissions WHERE id = ?", (sid,)).fetchone()
        return self._submission(row) if row else None

    def source(self, sid: int) -> bytes:
        row = self._tx("SELECT source FROM submissions WHERE id = ?", (sid,)).fetchone()
        return bytes(row[0]) if row and row[0] is not None else b""

    def by_request(self, attempt_id: int | None, request_id: str) -> Submission | None:
        row = self._tx("SELECT * FROM submissions WHERE attempt_id IS ? AND request_id = ?",
                       (attempt_id, request_id)).fetchone()
        return self._submission(row) if row else None

    def enqueue(self, attempt: Attempt | None, kind: str, task: str, problem: str, dsl: str, source: bytes,
                request_id: str | None, budget_check: bool) -> tuple[Submission | None, str]:
        """Queue a submission, atomically with the budget check; ``(None, reason)`` when refused."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if request_id and attempt is not None:
                    again = self.by_request(attempt.id, request_id)
                    if again:
                        self._db.execute("COMMIT")
                        return again, "duplicate"
                if budget_check and attempt is not None and self.used(attempt.id) >= attempt.budget:
                    self._db.execute("COMMIT")
                    return None, f"no submissions left (the budget is {attempt.budget})"
                cur = self._db.execute(
                    "INSERT INTO submissions(attempt_id, kind, task, problem, dsl, request_id, sha256, source, "
                    "state, priority, queued_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (attempt.id if attempt else None, kind, task, problem, dsl, request_id,
                     hashlib.sha256(source).hexdigest(), source, "queued", PRIORITY[kind], time.time()))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return self.submission(cur.lastrowid), "queued"

    def record_rejection(self, attempt: Attempt | None, kind: str, task: str, problem: str, dsl: str,
                         source: bytes, reason: str) -> Submission:
        """Keep a refused submission for the record; it is never charged."""
        now = time.time()
        cur = self._tx(
            "INSERT INTO submissions(attempt_id, kind, task, problem, dsl, sha256, state, priority, charged, "
            "status, message, queued_at, finished_at) VALUES (?,?,?,?,?,?,?,?,0,?,?,?,?)",
            (attempt.id if attempt else None, kind, task, problem, dsl, hashlib.sha256(source).hexdigest(),
             "rejected", PRIORITY[kind], "NOT_EVALUATED", reason, now, now))
        return self.submission(cur.lastrowid)

    def claim(self, device: str) -> Submission | None:
        """Move the next queued submission to ``running`` on ``device`` (final grades first)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT id, kind FROM submissions WHERE state = 'queued' "
                                       "ORDER BY priority, id LIMIT 1").fetchone()
                if row is None:
                    self._db.execute("COMMIT")
                    return None
                now = time.time()
                self._db.execute("UPDATE submissions SET state = 'running', device = ?, started_at = ?, "
                                 "tries = tries + 1, stage = 'starting', charged = ? WHERE id = ?",
                                 (device, now, 1 if row["kind"] == FEEDBACK else 0, row["id"]))
                self._db.execute("INSERT INTO evaluations(submission_id, device, started_at) VALUES (?,?,?)",
                                 (row["id"], device, now))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return self.submission(row["id"])

    def set_stage(self, sid: int, stage: str) -> None:
        self._tx("UPDATE submissions SET stage = ? WHERE id = ?", (stage, sid))

    def finish(self, sid: int, result: dict, charged: bool) -> None:
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "UPDATE submissions SET state = 'done', status = ?, message = ?, result_json = ?, charged = ?, "
                    "finished_at = ?, stage = 'done', source = NULL WHERE id = ?",
                    (result.get("status"), result.get("message"), json.dumps(result),
                     1 if charged else 0, now, sid))
                self._db.execute("UPDATE evaluations SET finished_at = ?, outcome = ? WHERE submission_id = ? "
                                 "AND finished_at IS NULL", (now, result.get("status"), sid))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def recover(self) -> list[int]:
        """After a restart: evaluations that were running are queued again (their rows say so)."""
        with self._lock:
            rows = self._db.execute("SELECT id FROM submissions WHERE state = 'running'").fetchall()
            now = time.time()
            self._db.execute("UPDATE evaluations SET finished_at = ?, outcome = 'interrupted' "
                             "WHERE finished_at IS NULL", (now,))
            self._db.execute("UPDATE submissions SET state = 'queued', stage = 'interrupted', device = NULL "
                             "WHERE state = 'running'")
            return [r["id"] for r in rows]

    # ---- queue views -------------------------------------------------------------------------
    def queue_position(self, sid: int) -> int | None:
        """How many queued submissions go before ``sid`` (None unless it is queued)."""
        row = self._tx("SELECT state, priority FROM submissions WHERE id = ?", (sid,)).fetchone()
        if row is None or row["state"] != "queued":
            return None
        ahead = self._tx("SELECT COUNT(*) FROM submissions WHERE state = 'queued' AND "
                         "(priority < ? OR (priority = ? AND id < ?))",
                         (row["priority"], row["priority"], sid)).fetchone()
        return int(ahead[0])

    def running(self) -> list[Submission]:
        rows = self._tx("SELECT * FROM submissions WHERE state = 'running' ORDER BY started_at").fetchall()
        return [self._submission(r) for r in rows]

    def counts(self) -> dict[str, int]:
        rows = self._tx("SELECT state, COUNT(*) AS n FROM submissions GROUP BY state").fetchall()
        return {r["state"]: int(r["n"]) for r in rows}

    def recent_wall(self, limit: int = 20) -> float | None:
        """Median wall time of recent evaluations (an estimate for waiting clients)."""
        rows = self._tx("SELECT finished_at - started_at AS w FROM evaluations WHERE outcome IS NOT NULL AND "
                        "outcome != 'interrupted' ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        walls = sorted(r["w"] for r in rows if r["w"] is not None)
        return walls[len(walls) // 2] if walls else None

    def evaluations(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._tx("SELECT * FROM evaluations ORDER BY id")]

    def submissions(self, attempt_id: int | None = None) -> list[Submission]:
        if attempt_id is None:
            rows = self._tx("SELECT * FROM submissions ORDER BY id").fetchall()
        else:
            rows = self._tx("SELECT * FROM submissions WHERE attempt_id = ? ORDER BY id", (attempt_id,)).fetchall()
        return [self._submission(r) for r in rows]
