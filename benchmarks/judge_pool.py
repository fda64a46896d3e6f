"""Grading time through the judge with its pool of warm runners off and on, interleaved; a JSON record.

    # a GPU host (see h200_env.sh): problem 28's TIRx oracle at the default counts
    python3 -m benchmarks.judge_pool --out judge-pool.json --gradings 5
    # a CPU machine: the CPU TIRx kernel at the small workload
    python3 -m benchmarks.judge_pool --out results/cpu/judge-pool.json --device cpu --small \\
        --kernel tests/fixtures/kernels/rmsnorm_tirx_llvm.py --gradings 5

It starts two judges (``serve --isolation subprocess``, one device each, the same device): one with
``--pool off`` (every evaluation starts its runner and workers cold) and one with ``--pool on`` (the
slot's next runner and its workers start while the slot is idle). Each round grades the kernel once
on each judge, as a final grade (no attempt budget), one at a time: before each grading the pooled
judge's warm runner must be ready (as it is when submissions are further apart than its start), so
no grading shares the CPUs with the other judge's start-up. The record holds, per grading, the time
the judge spent on it (claimed to verdict: ``wall_s``), the client's time from submission to verdict,
the status, whether it was dispatched warm, the result's ``stages_s`` and the runner's start-up fields
(``warm_ready_s``, ``runner_before_grade_s``, the candidate's ``candidate_start_*_s``), and per mode the
median and range over the rounds after ``--skip`` (the first measures the eager baseline).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.h200_judge import device_name, git_commit, start_judge
from metakernelbench.judge.client import JudgeClient

REPO = Path(__file__).resolve().parents[1]

PROBLEM = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16"
ORACLE = REPO / "oracles" / "mlp_norm" / f"{PROBLEM}_tirx.py"
MODES = ("off", "on")
DETAILS = ("warm", "warm_ready_s", "warm_idle_s", "warm_fallback", "runner_before_grade_s", "candidate_import_s")


def _pool_ready(client: JudgeClient) -> bool:
    pool = client.health().get("isolation_details", {}).get("pool") or {}
    return bool(pool) and all(state == "ready" for state in pool.values())


def wait_ready(client: JudgeClient, timeout: float) -> float:
    """Wait until the pooled judge's warm runners are ready; the seconds waited."""
    started = time.monotonic()
    while not _pool_ready(client):
        if time.monotonic() - started > timeout:
            raise SystemExit(f"the pooled judge's warm runner was not ready within {timeout:.0f} s")
        time.sleep(0.2)
    return time.monotonic() - started


def grade(client: JudgeClient, task: str, kernel: bytes, tag: str) -> dict:
    """One final grade through the judge: what the judge and the client measured."""
    started = time.monotonic()
    sub = client.submit(kernel, kind="final", task=task, request_id=tag)
    done = client.wait(sub["id"], poll_s=0.1, max_wait_s=3600)
    client_s = time.monotonic() - started
    result = done.get("result") or {}
    details = result.get("details") or {}
    return {"status": done.get("status"), "wall_s": done.get("wall_s"), "queue_wait_s": done.get("queue_wait_s"),
            "client_s": client_s, "grade_wall_s": result.get("grade_wall_s"), "stages_s": result.get("stages_s"),
            "kernel_ms": result.get("kernel_ms"), "speedup": result.get("speedup"),
            **{k: details[k] for k in DETAILS if k in details},
            "candidate_start_s": {k[len("candidate_start_"):-2]: float(v) for k, v in details.items()
                                  if k.startswith("candidate_start_")},
            "message": (result.get("message") or "")[:300]}


def summary(gradings: list[dict]) -> dict:
    def spread(key: str) -> dict:
        values = [g[key] for g in gradings if isinstance(g.get(key), int | float)]
        if not values:
            return {}
        return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
                "max": round(max(values), 3), "n": len(values)}

    stages = sorted({s for g in gradings for s in (g.get("stages_s") or {})})
    return {"wall_s": spread("wall_s"), "client_s": spread("client_s"), "grade_wall_s": spread("grade_wall_s"),
            "warm": sum(1 for g in gradings if g.get("warm") == "true"),
            "stages_s_median": {s: round(statistics.median([(g.get("stages_s") or {}).get(s, 0.0) for g in gradings]),
                                         3) for s in stages}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--kernel", type=Path, default=ORACLE)
    p.add_argument("--task", default=f"metakernelbench/{PROBLEM}_tirx")
    p.add_argument("--gradings", type=int, default=5, help="rounds: one grading per mode each")
    p.add_argument("--skip", type=int, default=1, help="rounds left out of the summary (the first measures the "
                                                       "eager baseline)")
    p.add_argument("--small", action="store_true", help="the problems' small workloads (CPU machines)")
    p.add_argument("--judge-args", default="", help="more `serve` arguments for both judges (e.g. '--timed 20')")
    p.add_argument("--ready-timeout", type=float, default=600.0)
    args = p.parse_args(argv)
    command = "python3 -m benchmarks.judge_pool " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    kernel = args.kernel.read_bytes()
    extra = (["--small"] if args.small else []) + shlex.split(args.judge_args)
    work = Path(tempfile.mkdtemp(prefix="mkb-judge-pool-"))
    work.chmod(0o711)  # evaluations may run as their own uid: they must reach their folders
    judges: dict[str, tuple] = {}
    record: dict = {"command": command, "commit": git_commit(), "date": dt.datetime.now(dt.UTC).isoformat(),
                    "device": device_name(args.device) if args.device.startswith("cuda") else args.device,
                    "kernel": str(args.kernel), "task": args.task, "small": args.small, "judge_args": args.judge_args}
    try:
        for mode in MODES:
            (work / mode).mkdir()
            proc, url = start_judge(work / mode / "state", args.device, ["--pool", mode, *extra])
            client = JudgeClient(url, (work / mode / "state" / "admin.token").read_text().strip(), timeout=120)
            judges[mode] = (proc, client)
        record["isolation"] = {mode: {k: v for k, v in judges[mode][1].health()["isolation_details"].items()
                                      if k in ("drop_privileges", "watch_imports", "pool")} for mode in MODES}
        record["host"] = {"cpus": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
        gradings: dict[str, list[dict]] = {mode: [] for mode in MODES}
        record["gradings"] = gradings
        for n in range(args.gradings):
            for mode in MODES:
                waited = wait_ready(judges["on"][1], args.ready_timeout)
                g = grade(judges[mode][1], args.task, kernel, f"pool-{mode}-{n}")
                g.update(round=n, waited_for_the_pool_s=round(waited, 3))
                gradings[mode].append(g)
                print(f"round {n} pool {mode}: {g['status']} judge {g['wall_s']:.2f} s, client {g['client_s']:.2f} s, "
                      f"warm {g.get('warm')}, start {(g.get('stages_s') or {}).get('start')}", flush=True)
        record["summary"] = {mode: summary(gradings[mode][args.skip:]) for mode in MODES}
    finally:
        for mode, (proc, _) in judges.items():
            proc.terminate()
            try:
                proc.wait(60)
            except Exception:  # noqa: BLE001 - it would not stop: end it
                proc.kill()
            failed = any(g.get("status") != "PASSED" for g in record.get("gradings", {}).get(mode, [{}]))
            if failed:  # only where something went wrong: the log names this machine's folders
                record.setdefault("judge_log_tail", {})[mode] = (work / mode / "judge.log").read_text(
                    errors="replace")[-2000:]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
