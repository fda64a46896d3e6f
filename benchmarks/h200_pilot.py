"""Grade every pilot oracle, negative control and GPU exploit on the local GPU; write pilot.json.

    python benchmarks/h200_pilot.py --out results/h200/pilot.json [--quick] [--only oracles,controls,exploits]

Each entry records the grader's status, kernel_ms, eager_ms, speedup, grade_wall_s and its kind
(oracle | control | exploit) with the expected status, so the file shows at a glance whether every
oracle PASSED and every control and exploit was rejected. Also measured: the harness overhead of
an empty ``solve`` against a bare synchronize loop (what end-to-end timing adds to every call).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import torch

from metakernelbench.problems import REPO_ROOT, find_problem
from metakernelbench.verifier.controls import EXPECTED, write_controls
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
        "speed_of_light": result.speed_of_light, "eager_drift": result.eager_drift, **extra,
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


def run_oracles(config, results):
    for pid in PILOTS:
        problem = find_problem(pid)
        for dsl in ("cutedsl", "tirx"):
            path = REPO_ROOT / "oracles" / f"{problem.spec.name}_{dsl}.py"
            if not path.exists():
                continue
            results.append(entry("oracle", f"{problem.spec.name}_{dsl}", grade(problem, path, dsl, config=config),
                                 "PASSED"))


def run_controls(config, results, workdir: Path):
    for pid in PILOTS:
        problem = find_problem(pid)
        dsl = CONTROL_DSL[pid]
        for kind, path in write_controls(problem, dsl, "cuda", workdir / "controls").items():
            result = grade(problem, path, dsl, config=config)
            results.append(entry("control", f"{problem.spec.name}_{dsl}:{kind}", result,
                                 EXPECTED.get(kind, "INCORRECT"), control=kind))


def run_exploits(config, results):
    manifest = REPO_ROOT / "tests" / "exploits" / "manifest.toml"
    if not manifest.exists():
        return
    for item in tomllib.loads(manifest.read_text()).get("exploit", []):
        if item.get("device") != "cuda":
            continue
        problem = find_problem(item["problem"])
        path = manifest.parent / item["file"]
        result = grade(problem, path, item["dsl"], config=config)
        results.append(entry("exploit" if item["expected"] != "PASSED" else "exploit-control",
                             item["file"], result, item["expected"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "results" / "h200" / "pilot.json")
    parser.add_argument("--quick", action="store_true", help="reduced counts (smoke test, not the record)")
    parser.add_argument("--only", default="oracles,controls,exploits")
    args = parser.parse_args()
    config = QUICK if args.quick else GradeConfig()
    parts = args.only.split(",")
    results: list[dict] = []
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        if "oracles" in parts:
            run_oracles(config, results)
        if "controls" in parts:
            run_controls(config, results, Path(tmp))
        if "exploits" in parts:
            run_exploits(config, results)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT).stdout
    record = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": commit.strip() or "unknown", "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "config": config.__dict__ if hasattr(config, "__dict__") else str(config),
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
