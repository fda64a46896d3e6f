"""Where a difference between the grader's time and a plain loop's comes from, variant by variant.

    python3 -m benchmarks.h200_gap --problem 28 --kernel oracles/mlp_norm/28_..._tirx.py --dsl tirx [--out FILE]

Each process below times the same kernel in several *variants interleaved call by call* (so slow
drift of the GPU or the host affects every variant alike) and reports, per variant, the median of
the whole call (device sync to device sync) and of the host part (until ``solve`` returned):

- ``bare``: nothing of the grader loaded. Variants: ``plain`` (the independent loop's flush),
  ``cold_l2`` (the grader's flush, persisting-L2 reset included), ``local`` (inputs copied into
  memory of this process first, as the worker's own input buffers are: ``h200_drift.localize``),
  ``gpu_idle`` (2 ms of host sleep between the flush's sync and the call: GPU and host idle),
  ``cpu_idle`` (2 ms of sleep before the flush: only the host idled).
- ``hooks``, ``guard``, ``sandbox``: the candidate worker's layers added one process at a time in the
  worker's order (launch hooks; audit hook and import gate; OS limits), then the kernel imported.
  Variants: ``plain`` (as ``bare``, audit hook short-circuited), ``worker`` (local inputs, the
  grader's flush, audit hook armed: the worker's call), ``disarmed`` (the same, audit hook
  short-circuited). The audit events one call raises are counted by name.

Then the independent loop (``independent_loop.py``), one grading (``grade``), one grading under
cProfile (the grader's side: where a grading's seconds go) and the independent loop again.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
PROCESSES = ("bare", "hooks", "guard", "sandbox")
VARIANTS = {"bare": ("plain", "cold_l2", "local", "gpu_idle", "cpu_idle"),
            "hooks": ("plain", "worker"), "guard": ("plain", "worker", "disarmed"),
            "sandbox": ("plain", "worker", "disarmed")}


def child(which: str, problem_id: str, kernel: str, dsl: str, rounds: int, warmup: int, device_name: str,
          small: bool) -> dict:
    from benchmarks.h200_drift import localize
    from metakernelbench.problems import find_problem
    from metakernelbench.verifier import hooks, sandbox
    from metakernelbench.verifier.device import DeviceTools
    from metakernelbench.verifier.guard import install_guard

    device = torch.device(device_name)
    problem = find_problem(problem_id)
    workload = {**problem.spec.workload, **(problem.spec.small_workload if small else {})}
    tools = DeviceTools.create(device)
    flush = tools.flush_buffer.clone() if tools.flush_buffer is not None else torch.empty(8, dtype=torch.uint8)
    counting = {"on": False, "events": collections.Counter()}

    def count(event, args):
        if counting["on"]:
            counting["events"][event] += 1

    sys.addaudithook(count)
    guard = None
    scratch = os.environ.get("TMPDIR") or tempfile.mkdtemp()
    layers = PROCESSES[: PROCESSES.index(which) + 1]
    if "hooks" in layers:
        hooks.INSTALLERS[dsl]()
    if "guard" in layers:
        guard = install_guard(kernel, [str(problem.spec.path.parent)], dsl, scratch=scratch)
    if "sandbox" in layers:
        sandbox.enter(scratch, submission=kernel)
    if guard is not None:
        guard.armed = True
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernel", kernel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seeds = random.Random(7)
    variants = VARIANTS[which]
    totals = {v: [] for v in variants}
    launches = {v: [] for v in variants}
    for r in range(rounds):
        for v in random.Random(r).sample(variants, len(variants)):
            gen = torch.Generator(device=device).manual_seed(seeds.getrandbits(63))
            inputs = problem.make_inputs(device, gen, **workload)
            like_worker = v in ("worker", "disarmed")
            if like_worker or v == "local":
                inputs = localize(inputs)
            if v == "cpu_idle":
                time.sleep(0.002)  # the host idles, then the flush keeps the GPU busy up to the call
            if like_worker or v == "cold_l2":
                tools.cold_l2()
            else:
                flush.bitwise_not_()
            tools.sync()
            if v == "gpu_idle":
                time.sleep(0.002)
            if guard is not None:
                guard.armed = v == "worker"
            counting["on"] = r == rounds - 1 and v in ("worker", "plain")
            t0 = time.perf_counter_ns()
            with torch.no_grad():
                module.solve(*inputs)
            t_ret = time.perf_counter_ns()
            tools.sync()
            t1 = time.perf_counter_ns()
            counting["on"] = False
            if guard is not None:
                guard.armed = True
            if r >= warmup:
                totals[v].append((t1 - t0) / 1e3)
                launches[v].append((t_ret - t0) / 1e3)
            del inputs
    return {"process": which, "variants": {v: {"median_us": statistics.median(totals[v]),
                                               "min_us": min(totals[v]),
                                               "host_launch_median_us": statistics.median(launches[v])}
                                           for v in variants},
            "audit_events_per_call": dict(counting["events"])}


def _independent(problem_file: Path, kernel: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.independent_loop", str(problem_file),
                           kernel, "--eager-timed", "20"], capture_output=True, text=True, timeout=600, cwd=REPO)
    if done.returncode != 0:
        return {"error": done.stderr[-1500:]}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {"kernel_ms": found["kernel_ms"], "eager_ms": found["eager_ms"]}


def _grade_row(result) -> dict:
    return {"status": result.status.value, "kernel_ms": result.kernel_ms, "eager_ms": result.eager_ms,
            "grade_wall_s": result.grade_wall_s, "stages_s": result.stages_s,
            "details": {k: v for k, v in result.details.items() if "us" in k or k.startswith("eager")},
            "message": result.message[:300]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problem", required=True)
    p.add_argument("--kernel", required=True)
    p.add_argument("--dsl", required=True)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--process", default=None, help=argparse.SUPPRESS)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--small", action="store_true", help="the problem's small workload (a CPU smoke run)")
    p.add_argument("--skip-grade", action="store_true")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    kernel = str(Path(args.kernel).resolve())
    if args.process is not None:
        print(json.dumps(child(args.process, args.problem, kernel, args.dsl, args.rounds, args.warmup,
                               args.device, args.small)))
        return 0
    from metakernelbench.problems import find_problem
    from metakernelbench.verifier.grader import grade

    problem = find_problem(args.problem)
    rows: dict = {"kernel": args.kernel, "processes": []}
    for which in PROCESSES:
        scratch = tempfile.mkdtemp(prefix="mkb-gap-")
        env = {**os.environ, "TMPDIR": scratch, "HOME": scratch, "CUTE_DSL_CACHE_DIR": scratch + "/cute",
               "CUDA_CACHE_PATH": scratch + "/nv", "XDG_CACHE_HOME": scratch + "/cache"}
        try:
            done = subprocess.run([sys.executable, "-m", "benchmarks.h200_gap", "--problem", args.problem,
                                   "--kernel", kernel, "--dsl", args.dsl, "--process", which,
                                   "--rounds", str(args.rounds), "--warmup", str(args.warmup), "--device", args.device,
                                   *(["--small"] if args.small else [])], capture_output=True, text=True,
                                  timeout=240, env=env, cwd=REPO)
            row = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else \
                {"process": which, "error": done.stderr[-1500:]}
        except subprocess.TimeoutExpired:
            row = {"process": which, "error": "no result within 240 s"}
        rows["processes"].append(row)
        print(json.dumps(row), flush=True)
    if not args.skip_grade:
        rows["independent_before"] = _independent(problem.spec.path, kernel)
        print(json.dumps(rows["independent_before"]), flush=True)
        rows["grade"] = _grade_row(grade(problem, kernel, args.dsl))
        print(json.dumps(rows["grade"]), flush=True)
        profiler = cProfile.Profile()
        profiler.enable()
        profiled = grade(problem, kernel, args.dsl)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
        rows["profiled_grade"] = _grade_row(profiled)
        rows["profile_top_cumulative"] = text.getvalue()[-9000:]
        print(json.dumps(rows["profiled_grade"]), flush=True)
        rows["independent_after"] = _independent(problem.spec.path, kernel)
        print(json.dumps(rows["independent_after"]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
