"""Concurrent gradings on N GPUs of one host: throughput, and whether neighbours bend the timings.

    python3 -m benchmarks.h200_scale --out results/h200/scale.json --devices cuda:0,cuda:1[,...]
                                     [--ns 1,2] [--gradings 5] [--only 28_tirx,28_cutedsl]
                                     [--judge-args "..."] [--kernel TASK=FILE]

For each N: a local judge with the first N devices (one slot per GPU, each on its own CPU cores, as
``serve --devices`` runs it) is sent ``--gradings`` final grades of every chosen oracle per device,
all at once, so N evaluations run side by side for the whole run. Per N the record has the gradings
per hour (gradings / wall time from the first submission to the last verdict), each oracle's
speedups, their median and CV, and the drift of that median from the N = 1 run. A top-level
``entries`` list holds ``n``, ``gradings_per_hour``, ``max_speedup_drift`` (relative to N = 1, the
largest over the oracles) and ``speedup_cv`` (the largest over the oracles), with the command,
commit, device and date. ``--kernel TASK=FILE`` grades another file for a task (a CPU smoke test
with ``--devices cpu,cpu``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.h200_judge import device_name, git_commit, start_judge
from benchmarks.h200_oracles import selected, shown

REPO = Path(__file__).resolve().parents[1]


def chosen(only: set[str], overrides: dict[str, Path]) -> dict[str, Path]:
    """task -> kernel file for the oracles ``--only`` names (as ``h200_oracles.py`` picks them)."""
    picked = {task: path for task, _, _, path in selected(only, overrides)}
    if not picked:
        raise SystemExit(f"no oracle matches {sorted(only)}")
    return picked


def run_n(devices: list[str], kernels: dict[str, Path], gradings: int, judge_args: list[str]) -> dict:
    """One judge on ``devices``; every grading submitted at once; verdicts and the wall time."""
    work = Path(tempfile.mkdtemp(prefix="mkb-h200-scale-"))
    work.chmod(0o711)  # the judge drops each evaluation to its own uid: it must traverse to its folder
    proc, url = start_judge(work / "state", ",".join(devices), judge_args)
    from metakernelbench.judge.client import JudgeClient

    try:
        admin = JudgeClient(url, (work / "state" / "admin.token").read_text().strip())
        final = admin.request("POST", "/v1/tokens", {"scope": "final", "label": "scale"})["token"]
        jobs = [(task, path) for task, path in kernels.items() for _ in range(gradings * len(devices))]
        results: list[tuple[str, dict]] = []
        lock = threading.Lock()

        def one(task: str, path: Path) -> None:
            client = JudgeClient(url, final, f"metakernelbench/{task}", timeout=3600)
            sub = client.submit(path.read_bytes(), kind="final")
            done = client.wait(sub["id"], poll_s=1.0, max_wait_s=7200)
            with lock:
                results.append((task, done))

        started = time.time()
        threads = [threading.Thread(target=one, args=job) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - started
    finally:
        proc.terminate()
        proc.wait(60)
    per_task = {}
    for task in kernels:
        mine = [d for t, d in results if t == task]
        speedups = [d["result"].get("speedup") for d in mine if d.get("status") == "PASSED"]
        per_task[task] = {"statuses": sorted(d.get("status") for d in mine), "speedup": speedups,
                          # why a grading did not pass, in the grader's words (the record must explain itself)
                          "failures": [str((d.get("result") or {}).get("message") or d.get("error") or "")[:300]
                                       for d in mine if d.get("status") != "PASSED"],
                          "speedup_median": statistics.median(speedups) if speedups else None,
                          "speedup_cv": (statistics.pstdev(speedups) / statistics.mean(speedups))
                          if len(speedups) >= 2 else None,
                          "devices": sorted({(d.get("result") or {}).get("device") or "" for d in mine})}
    return {"n": len(devices), "devices": devices, "gradings": len(jobs), "wall_s": round(wall, 2),
            "gradings_per_hour": round(len(jobs) / wall * 3600, 1) if wall > 0 else None, "tasks": per_task}


def entry(run: dict, base: dict | None) -> dict:
    """The summary row of one N (drift against the N = 1 run ``base``)."""
    drifts, cvs = [], []
    for task, t in run["tasks"].items():
        if t["speedup_cv"] is not None:
            cvs.append(t["speedup_cv"])
        b = (base or {}).get("tasks", {}).get(task, {}).get("speedup_median")
        if b and t["speedup_median"] is not None:
            drifts.append(abs(t["speedup_median"] / b - 1.0))
    return {"n": run["n"], "gradings_per_hour": run["gradings_per_hour"],
            "max_speedup_drift": max(drifts) if drifts else None, "speedup_cv": max(cvs) if cvs else None,
            "all_passed": all(s == "PASSED" for t in run["tasks"].values() for s in t["statuses"]), "run": run}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--devices", required=True, help="comma-separated, e.g. cuda:0,cuda:1")
    p.add_argument("--ns", default="", help="comma-separated N values (default: 1 and every device count)")
    p.add_argument("--gradings", type=int, default=5, help="final grades per oracle per device")
    p.add_argument("--only", default="28_tirx,28_cutedsl", help="task names, NN, NN_dsl or families")
    p.add_argument("--judge-args", default="")
    p.add_argument("--kernel", action="append", default=[], metavar="TASK=FILE")
    args = p.parse_args(argv)
    devices = [d for d in args.devices.split(",") if d]
    ns = [int(x) for x in args.ns.split(",") if x] or sorted({1, len(devices)})
    if ns[0] != 1 or max(ns) > len(devices):
        raise SystemExit("--ns must start at 1 (the reference) and not exceed the device count")
    overrides = {k: Path(v).resolve() for k, _, v in (x.partition("=") for x in args.kernel)}
    kernels = chosen({k.strip() for k in args.only.split(",") if k.strip()}, overrides)
    command = "python3 -m benchmarks.h200_scale " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    record = {"command": command, "commit": git_commit(), "date": dt.datetime.now(dt.UTC).isoformat(),
              "device": device_name(devices[0]) if devices[0].startswith("cuda") else devices[0],
              "contract": "speedups within 5 % of the N = 1 run, CV <= 2 %, throughput close to N x",
              "kernels": {t: shown(k) for t, k in kernels.items()},
              "entries": []}
    base = None
    for n in ns:
        run = run_n(devices[:n], kernels, args.gradings, shlex.split(args.judge_args))
        base = base or run
        record["entries"].append(entry(run, base))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"N={n}: {run['gradings']} gradings in {run['wall_s']} s ({run['gradings_per_hour']}/h)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
