"""What the grader's timing window adds to a kernel's time, one layer at a time.

    python3 benchmarks/h200_window.py --problem 28 --kernel oracles/28_..._tirx.py --dsl tirx [--out FILE]

Each layer runs in a fresh process and adds one thing the candidate's worker has over a plain loop:
``plain`` (the independent loop: own L2 flush, sync, call, sync), ``cold_l2`` (the grader's flush,
with the persisting-L2 reset), ``hooks`` (the DSL launch counters), ``guard`` (the audit hook and
import gate, armed), ``sandbox`` (seccomp and landlock), ``ipc`` (inputs drawn by another process
and received over CUDA IPC, as the grader sends them). Then a full ``grade`` of the same kernel. The
medians show where a difference between the grader and an independent stopwatch comes from.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
LAYERS = ("plain", "cold_l2", "hooks", "guard", "sandbox", "ipc")


def _producer(queue, problem_id: str, count: int, ack) -> None:
    from metakernelbench.problems import find_problem

    problem = find_problem(problem_id)
    seeds = random.Random(7)
    for _ in range(count):
        gen = torch.Generator(device="cuda").manual_seed(seeds.getrandbits(63))
        inputs = problem.make_inputs(torch.device("cuda"), gen, **problem.spec.workload)
        queue.put(inputs)
        ack.get()  # keep the draw alive until the consumer is done with it


def child(problem_id: str, kernel: str, dsl: str, layers: int, warmup: int, timed: int) -> dict:
    from metakernelbench.problems import find_problem
    from metakernelbench.verifier import hooks, sandbox
    from metakernelbench.verifier.device import DeviceTools
    from metakernelbench.verifier.guard import install_guard

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    problem = find_problem(problem_id)
    use = set(LAYERS[: layers + 1])
    tools = DeviceTools.create(device)
    flush = torch.empty(2 * torch.cuda.get_device_properties(device).L2_cache_size, dtype=torch.uint8, device=device)
    if "hooks" in use:
        hooks.INSTALLERS[dsl]()
    guard = install_guard(kernel, [str(problem.spec.path.parent)], dsl, scratch=tempfile.mkdtemp()) \
        if "guard" in use else None
    queue = ack = None
    if "ipc" in use:
        ctx = torch.multiprocessing.get_context("spawn")
        queue, ack = ctx.Queue(), ctx.Queue()
        ctx.Process(target=_producer, args=(queue, problem_id, warmup + timed, ack), daemon=True).start()
    if "sandbox" in use:
        sandbox.enter(tempfile.mkdtemp(), submission=kernel)
    if guard is not None:
        guard.armed = True
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernel", kernel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seeds = random.Random(7)
    samples = []
    for i in range(warmup + timed):
        if queue is not None:
            inputs = queue.get()
        else:
            gen = torch.Generator(device=device).manual_seed(seeds.getrandbits(63))
            inputs = problem.make_inputs(device, gen, **problem.spec.workload)
        if "cold_l2" in use:
            tools.cold_l2()
        else:
            flush.bitwise_not_()
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        with torch.no_grad():
            module.solve(*inputs)
        torch.cuda.synchronize()
        t1 = time.perf_counter_ns()
        if i >= warmup:
            samples.append((t1 - t0) / 1e6)
        del inputs
        if ack is not None:
            ack.put(1)
    return {"layer": LAYERS[layers], "median_ms": statistics.median(samples), "min_ms": min(samples)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problem", required=True)
    p.add_argument("--kernel", required=True)
    p.add_argument("--dsl", required=True)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--timed", type=int, default=50)
    p.add_argument("--layer", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    if args.layer is not None:
        print(json.dumps(child(args.problem, str(Path(args.kernel).resolve()), args.dsl, args.layer, args.warmup,
                               args.timed)))
        return 0
    rows = []
    for layer in range(len(LAYERS)):
        done = subprocess.run([sys.executable, __file__, "--problem", args.problem, "--kernel", args.kernel,
                               "--dsl", args.dsl, "--layer", str(layer), "--warmup", str(args.warmup),
                               "--timed", str(args.timed)], capture_output=True, text=True, timeout=600)
        row = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else \
            {"layer": LAYERS[layer], "error": done.stderr[-1500:]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    from metakernelbench.problems import find_problem
    from metakernelbench.verifier.grader import grade

    result = grade(find_problem(args.problem), args.kernel, args.dsl)
    rows.append({"layer": "grader", "status": result.status.value, "median_ms": result.kernel_ms,
                 "min_ms": result.kernel_timing.min_ms if result.kernel_timing else None,
                 "message": result.message[:300]})
    print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"kernel": args.kernel, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
