"""Honest trials submitting while a hostile client floods the judge; writes a JSON record.

    python3 -m benchmarks.judge_load --out results/cpu/judge-load.json [--device cpu --small] [--trials 3]

It starts a judge (subprocess isolation) on a unix socket, registers ``--trials`` honest attempts
and one hostile one, and runs them at once: each honest trial submits the honest TIRx kernel of
problem 28 ``--submissions`` times and waits for each grade; the hostile client meanwhile sends
malformed requests (bad lengths, chunked bodies, huge headers, garbage), half-sent requests that it
never finishes, and floods of status polls. The record holds every honest grade (status, charge,
kernel_ms and grading time), what the hostile client got back (status counts), the judge's health
latency during the attack, and its memory and thread count before, during and after. On a GPU host
(``--device cuda:0``, no ``--small``) the honest grades' kernel times can be compared with
``results/h200/timing.json``.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import multiprocessing
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.h200_judge import device_name, git_commit, start_judge
from metakernelbench.judge.client import JudgeClient

REPO = Path(__file__).resolve().parents[1]

TASK = "metakernelbench/28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"
HONEST = REPO / "tests" / "exploits" / "control_honest_28.py"
HOSTILE = [
    b"POST /v1/submissions HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
    b"POST /v1/submissions HTTP/1.1\r\nContent-Length: -1\r\n\r\n" + b"x" * (1 << 20),
    b"POST /v1/submissions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    b"GET /v1/attempt HTTP/1.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
    b"\x00\x01\x02 nonsense\r\n\r\n",
]


def _proc_stats(pid: int) -> dict:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"rss_kb": int(fields["VmRSS"].split()[0]), "threads": int(fields["Threads"])}


def _send(sock_path: str, data: bytes, read: bool = True) -> int:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(15)
    try:
        s.connect(sock_path)
        try:
            s.sendall(data)
        except OSError:
            pass
        if not read:
            return -1
        reply = s.recv(4096)
        if reply.startswith(b"HTTP/"):
            return int(reply.split(b" ", 2)[1])
        return int(reply.split(b"Error code: ", 1)[1][:3]) if b"Error code: " in reply else 0
    except OSError:
        return 0
    finally:
        if read:
            s.close()


def hostile(sock_path: str, token: str, stop: threading.Event, counts: collections.Counter, held: list) -> None:
    poll = f"GET /v1/attempt HTTP/1.1\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode()
    while not stop.is_set():
        for data in HOSTILE:
            counts[_send(sock_path, data)] += 1
        for _ in range(50):
            counts[_send(sock_path, poll)] += 1
        for _ in range(8):  # half-sent requests, left open
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sock_path)
                s.sendall(b"GET /v1/heal")
                held.append(s)
            except OSError:
                counts["refused-connect"] += 1
        while len(held) > 64:
            held.pop(0).close()


def hostile_process(sock_path: str, token: str, stop, replies) -> None:
    counts: collections.Counter = collections.Counter()
    held: list = []
    flag = threading.Event()
    runner = threading.Thread(target=hostile, args=(sock_path, token, flag, counts, held), daemon=True)
    runner.start()
    stop.wait()
    flag.set()
    runner.join(30)
    for s in held:
        s.close()
    replies.put(dict(counts))


def honest(url: str, token: str, submissions: int, out: list) -> None:
    client = JudgeClient(url, token)
    for _ in range(submissions):
        started = time.time()
        sid = client.submit(HONEST.read_bytes())["id"]
        done = client.wait(sid, poll_s=0.5)
        result = done.get("result") or {}
        out.append({"status": done.get("status"), "charged": done.get("charged"),
                    "kernel_ms": result.get("kernel_ms"), "speedup": result.get("speedup"),
                    "client_s": time.time() - started, "submissions_left": done.get("submissions_left")})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--device", default="cpu")
    p.add_argument("--small", action="store_true")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--submissions", type=int, default=2)
    args = p.parse_args(argv)
    command = "python3 -m benchmarks.judge_load " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    work = Path(tempfile.mkdtemp(prefix="mkb-load-"))
    work.chmod(0o711)
    state = work / "state"
    extra = ["--small", "--draws", "2", "--warmup", "2", "--timed", "5", "--rechecks", "2"] if args.small else []
    proc, url = start_judge(state, args.device, extra)
    sock_path = url.removeprefix("unix:")
    record: dict = {"command": command, "commit": git_commit(), "date": dt.datetime.now(dt.UTC).isoformat(),
                    "device": device_name(args.device) if args.device != "cpu" else "cpu",
                    "judge_before": _proc_stats(proc.pid)}
    try:
        admin = JudgeClient(url, (state / "admin.token").read_text().strip())
        tokens = [admin.register(f"honest-{i}", TASK, 60)["token"] for i in range(args.trials)]
        bad_token = admin.register("hostile", TASK, 60)["token"]
        ctx = multiprocessing.get_context("spawn")
        stop, replies = ctx.Event(), ctx.Queue()
        flood = ctx.Process(target=hostile_process, args=(sock_path, bad_token, stop, replies), daemon=True)
        flood.start()  # a process of its own: a client apart from the honest trials
        results: list[list] = [[] for _ in tokens]
        workers = [threading.Thread(target=honest, args=(url, t, args.submissions, r))
                   for t, r in zip(tokens, results, strict=True)]
        for w in workers:
            w.start()
        health, samples = [], []
        while any(w.is_alive() for w in workers):
            started = time.time()
            try:
                JudgeClient(url, timeout=30).health()
                health.append(time.time() - started)
            except Exception as exc:  # noqa: BLE001 - recorded, not fatal
                health.append(f"error: {type(exc).__name__}")
            samples.append(_proc_stats(proc.pid))
            time.sleep(1.0)
        stop.set()
        counts = replies.get(timeout=60)
        flood.join(30)
        time.sleep(2)
        ok = [h for h in health if isinstance(h, float)]
        record.update(
            honest=results, hostile_replies={str(k): v for k, v in sorted(counts.items(), key=lambda kv: str(kv[0]))},
            health_checks=len(health), health_failed=len(health) - len(ok),
            health_latency_s_max=max(ok) if ok else None,
            health_latency_s_median=sorted(ok)[len(ok) // 2] if ok else None,
            judge_during_max={"rss_kb": max((s.get("rss_kb", 0) for s in samples), default=0),
                              "threads": max((s.get("threads", 0) for s in samples), default=0)},
            judge_after=_proc_stats(proc.pid))
        flat = [r for trial in results for r in trial]
        record["honest_all_graded"] = len(flat) == args.trials * args.submissions and all(
            r["status"] == "PASSED" and r["charged"] for r in flat)
        record["honest_budgets_right"] = all(
            [r["submissions_left"] for r in trial] == [10 - k for k in range(1, len(trial) + 1)]
            for trial in results)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record.get(k) for k in ("honest_all_graded", "honest_budgets_right", "health_failed",
                                                 "health_latency_s_max", "judge_during_max", "hostile_replies")}))
    return 0 if record.get("honest_all_graded") else 1


if __name__ == "__main__":
    sys.exit(main())
