"""How far a CPU host's own speed moves between minutes: a plain loop, outside the grader.

    python -m benchmarks.cpu_host_drift PROBLEM_FILE [KERNEL_FILE] [--seconds 240 --interval 5 --calls 100]
        [--small] [--out results/cpu/host-drift.json]

Every ``--interval`` seconds it times a burst of ``--calls`` calls of the eager reference and, given a
kernel file, of the kernel (the two alternate call by call, so a change of the host's speed inside a
burst hits both alike), and keeps each burst's medians. Between bursts the process sleeps, as the
judge does between gradings. The spread of the burst medians over the run is the floor under any
comparison of two gradings of one kernel made minutes apart on this host (the demo's solo and
transfer attempts): no grader can read identical kernels closer than the host itself holds still.

It imports nothing of ``metakernelbench``: the problem and the kernel are loaded as plain modules, the
inputs drawn once per burst (``make_inputs``; the small workload with ``--small``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks.independent_loop import load  # the plain loader of the independent stopwatch, beside this file


def burst(fns: dict, inputs: tuple, calls: int) -> dict[str, float]:
    """Median milliseconds per function over ``calls`` calls each, the functions taking turns."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    with torch.no_grad():
        for _ in range(calls):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn(*inputs)
                samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def spread(values: list[float]) -> dict[str, float]:
    return {"min_ms": min(values), "median_ms": statistics.median(values), "max_ms": max(values),
            "max_over_min": max(values) / min(values)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("problem")
    p.add_argument("kernel", nargs="?")
    p.add_argument("--seconds", type=float, default=240.0)
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--small", action="store_true", help="the problem's SMALL_WORKLOAD")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    problem = load(args.problem, "drift_problem")
    workload = dict(getattr(problem, "SMALL_WORKLOAD", {})) if args.small else {}
    fns = {"eager": problem.reference}
    if args.kernel:
        fns["kernel"] = load(args.kernel, "drift_kernel").solve
    device = torch.device("cpu")
    bursts = []
    started = time.monotonic()
    seed = 0
    while time.monotonic() - started < args.seconds:
        seed += 1
        inputs = problem.make_inputs(device, torch.Generator(device=device).manual_seed(seed), **workload)
        burst(fns, inputs, args.warmup)
        row = burst(fns, inputs, args.calls)
        row["t_s"] = round(time.monotonic() - started, 1)
        if "kernel" in row:
            row["kernel_over_eager"] = row["kernel"] / row["eager"]
        bursts.append(row)
        time.sleep(args.interval)
    summary = {name: spread([b[name] for b in bursts]) for name in fns}
    if args.kernel:
        summary["kernel_over_eager"] = spread([b["kernel_over_eager"] for b in bursts])
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    except OSError:
        commit = ""
    record = {
        "command": "python -m benchmarks.cpu_host_drift " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": commit, "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "torch": torch.__version__, "bursts": len(bursts), "summary": summary, "per_burst": bursts,
    }
    text = json.dumps(record, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(json.dumps({"bursts": len(bursts), "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
