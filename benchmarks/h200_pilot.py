"""Grade every oracle, the pilot problems' negative controls and every GPU exploit; write pilot.json.

    python -m benchmarks.h200_pilot --out results/h200/pilot.json [--quick] [--only oracles,controls,exploits]

Each entry records the grader's status, kernel_ms, eager_ms, speedup, grade_wall_s and its kind
(oracle | control | exploit) with the expected status, so the file shows at a glance whether every
oracle PASSED and every control and exploit was rejected. Also measured: the harness overhead of
an empty ``solve`` against a bare synchronize loop (what end-to-end timing adds to every call).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from metakernelbench.contract import DSLS
from metakernelbench.problems import REPO_ROOT, find_problem, oracle_file, oracle_files
from metakernelbench.testing.controls import EXPECTED, write_controls
from metakernelbench.verifier.grader import GradeConfig, grade

PILOTS = ("02", "25", "28", "49", "60", "66")
CONTROL_DSL = {"02": "cutedsl", "25": "tirx", "28": "cutedsl", "49": "tirx", "60": "cutedsl", "66": "tirx"}
QUICK = GradeConfig(correctness_draws=2, warmup=2, timed=5, rechecks=2)


def entry(kind: str, task: str, result, expected: str, **extra) -> dict:
    row = {
        "kind": kind, "task": task, "status": result.status.value, "expected": expected,
        "ok": (result.status.value == "PASSED") == (expected == "PASSED"),
        "as_expected": result.status.value == expected,
        "kernel_ms": result.kernel_ms, "eager_ms": result.eager_ms, "speedup": result.speedup,
        "grade_wall_s": round(result.grade_wall_s or 0.0, 2), "message": result.message[:400],
        "launch_sites": result.launch_sites, "bypass": result.bypass,
        "speed_of_light": result.speed_of_light, "eager_drift": result.eager_drift,
        "details": result.details, **extra,
    }
    print(f"[{kind}] {task}: {row['status']} (expected {expected}) {row['grade_wall_s']} s "
          f"{row['message'][:160]}", flush=True)
    return row


def harness_overhead(samples: int = 200) -> dict:
    """Median host time of the timing window around an empty call vs a bare sync pair."""
    from metakernelbench.verifier.device import DeviceTools

    tools = DeviceTools.create(torch.device("cuda"))

    def window(fn):
        out = []
        for _ in range(samples):
            tools.cold_l2()
            tools.sync()
            t0 = time.perf_counter_ns()
            fn()
            tools.sync()
            out.append((time.perf_counter_ns() - t0) / 1e3)
        return sorted(out)[len(out) // 2]

    bare = window(lambda: None)
    x = torch.empty(1, device="cuda")
    one_launch = window(lambda: x.add_(1))
    return {"bare_sync_us": bare, "empty_solve_us": bare, "one_torch_launch_us": one_launch,
            "note": "empty solve = the timing window with nothing in it (sync to sync); one torch launch "
                    "adds a tiny eager kernel for scale"}


def oracle_problem_ids() -> list[str]:
    """Every problem with an oracle kernel under ``oracles/`` (the pilots and every one added since)."""
    return sorted({path.name[:2] for path in oracle_files()})


def run_oracles(config, results, only: set[str] | None = None):
    """Every oracle, or those ``only`` names (``NN`` for both DSLs, ``NN_dsl`` for one)."""
    for pid in oracle_problem_ids():
        problem = find_problem(pid)
        for dsl in DSLS:
            path = oracle_file(problem, dsl)
            if not path.exists() or (only and pid not in only and f"{pid}_{dsl}" not in only):
                continue
            results.append(entry("oracle", f"{problem.spec.name}_{dsl}", grade(problem, path, dsl, config=config),
                                 "PASSED"))


def _grade_job(job: tuple) -> tuple:
    """One grade in a pool process (controls and exploits: their verdicts, not their timings, matter)."""
    problem_id, path, dsl, config = job
    return job, grade(find_problem(problem_id), path, dsl, config=config)


def _run_pool(jobs: list[tuple], parallel: int):
    if parallel <= 1:
        return [_grade_job(job) for job in jobs]
    with ProcessPoolExecutor(parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_grade_job, jobs))


def run_controls(config, results, workdir: Path, parallel: int):
    jobs, meta = [], {}
    for pid in PILOTS:
        problem = find_problem(pid)
        dsl = CONTROL_DSL[pid]
        for kind, path in write_controls(problem, dsl, "cuda", workdir / "controls").items():
            jobs.append((pid, str(path), dsl, config))
            meta[str(path)] = (f"{problem.spec.name}_{dsl}:{kind}", kind)
    for job, result in _run_pool(jobs, parallel):
        task, kind = meta[job[1]]
        results.append(entry("control", task, result, EXPECTED.get(kind, "INCORRECT"), control=kind,
                             parallel=parallel))


def run_exploits(config, results, parallel: int, only: set[str] | None = None):
    manifest = REPO_ROOT / "tests" / "exploits" / "manifest.toml"
    if not manifest.exists():
        return
    items = {}
    for item in tomllib.loads(manifest.read_text()).get("exploit", []):
        if item.get("device") == "cuda" and (not only or item["file"] in only):
            items[str(manifest.parent / item["file"])] = item
    jobs = [(item["problem"], path, item["dsl"], config) for path, item in items.items()]
    for job, result in _run_pool(jobs, parallel):
        item = items[job[1]]
        results.append(entry("exploit" if item["expected"] != "PASSED" else "exploit-control",
                             item["file"], result, item["expected"], parallel=parallel))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "results" / "h200" / "pilot.json")
    parser.add_argument("--quick", action="store_true", help="reduced counts (smoke test, not the record)")
    parser.add_argument("--only", default="oracles,controls,exploits")
    parser.add_argument("--parallel", type=int, default=1,
                        help="grade controls and exploits this many at a time (oracles always one at a time)")
    parser.add_argument("--merge", type=Path, default=None,
                        help="an earlier record whose entries this run keeps unless it re-grades them")
    parser.add_argument("--oracles", default="", help="grade only these oracles: NN (both DSLs) or NN_dsl, "
                                                      "comma-separated (default: every oracle)")
    parser.add_argument("--exploit-files", default="", help="grade only these exploit files (comma-separated "
                                                            "names from tests/exploits/manifest.toml)")
    parser.add_argument("--quick-rejections", action="store_true",
                        help="reduced counts for controls and exploits only (they are judged on verdicts)")
    args = parser.parse_args()
    config = QUICK if args.quick else GradeConfig()
    parts = args.only.split(",")
    results: list[dict] = []
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        if "oracles" in parts:
            run_oracles(config, results, {k for k in args.oracles.split(",") if k} or None)
        reject_config = QUICK if args.quick_rejections else config
        if args.parallel > 1:  # verdicts only: several gradings share the GPU on purpose
            reject_config = dataclasses.replace(reject_config, exclusive_gpu=False)
        if "controls" in parts:
            run_controls(reject_config, results, Path(tmp), args.parallel)
        if "exploits" in parts:
            run_exploits(reject_config, results, args.parallel, {f for f in args.exploit_files.split(",") if f} or None)
    commands = [" ".join([Path(sys.executable).name, "-m", "benchmarks.h200_pilot", *sys.argv[1:]])]
    configs = {}
    if args.merge and args.merge.exists():
        previous = json.loads(args.merge.read_text())
        fresh = {(r["kind"], r["task"]) for r in results}
        results = [r for r in previous["results"] if (r["kind"], r["task"]) not in fresh] + results
        commands = previous.get("commands", [previous.get("command", "")]) + commands
        configs = {"earlier runs": previous.get("config")}
    commit = os.environ.get("MKB_COMMIT") or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                            text=True, cwd=REPO_ROOT).stdout
    record = {
        "commands": commands,
        "commit": commit.strip() or "unknown", "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "config": {**configs, "oracles": config.__dict__,
                   "controls_and_exploits": (QUICK if args.quick_rejections else config).__dict__,
                   "parallel": args.parallel},
        "harness_overhead": harness_overhead(), "total_wall_s": round(time.time() - started, 1),
        "summary": {
            "oracles_passed": sum(r["status"] == "PASSED" for r in results if r["kind"] == "oracle"),
            "oracles": sum(r["kind"] == "oracle" for r in results),
            "rejected_as_expected": sum(r["ok"] for r in results if r["kind"] != "oracle"),
            "controls_and_exploits": sum(r["kind"] != "oracle" for r in results),
        },
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record["summary"]), flush=True)


if __name__ == "__main__":
    main()
