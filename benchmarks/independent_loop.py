"""A plain timing loop written outside the grader: the stopwatch a user holds against `mkb grade`.

    python -m benchmarks.independent_loop PROBLEM_FILE KERNEL_FILE [--warmup 10 --timed 50 --eager-timed 100]

It imports nothing of ``metakernelbench.verifier``: the problem file and the kernel file are loaded
as plain modules in this one process. Each call gets a fresh draw (``make_inputs`` with its own
seed), the L2 is flushed by writing a buffer twice its size, and the time is host wall time from a
device synchronize to a device synchronize around the call -- the loop the README describes. It
prints one JSON object: the medians of the kernel and of the eager reference, and their ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import sys
import time

import torch


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def l2_flush_buffer(device: torch.device) -> torch.Tensor:
    """A buffer twice the GPU's L2: writing it all (``bitwise_not_``) evicts whatever the L2 held."""
    return torch.empty(2 * torch.cuda.get_device_properties(device).L2_cache_size, dtype=torch.uint8, device=device)


def time_calls(fn, problem, workload: dict, warmup: int, timed: int, device: torch.device) -> list[float]:
    flush = l2_flush_buffer(device)
    seeds = random.Random(12345)
    samples = []
    for i in range(warmup + timed):
        gen = torch.Generator(device=device).manual_seed(seeds.getrandbits(63))
        inputs = problem.make_inputs(device, gen, **workload)
        flush.bitwise_not_()
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            fn(*inputs)
        torch.cuda.synchronize()
        if i >= warmup:
            samples.append((time.perf_counter() - start) * 1e3)
        del inputs
    return samples


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("problem")
    p.add_argument("kernel")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--timed", type=int, default=50)
    p.add_argument("--eager-timed", type=int, default=100)
    p.add_argument("--eager-only", action="store_true", help="time only the eager reference (KERNEL ignored)")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda", torch.cuda.current_device())
    problem = load(args.problem, "independent_problem")
    workload: dict = {}  # make_inputs' defaults are the graded workload
    kernel_ms = [float("nan")]
    if not args.eager_only:
        kernel = load(args.kernel, "independent_kernel")
        kernel_ms = time_calls(kernel.solve, problem, workload, args.warmup, args.timed, device)
    eager_ms = time_calls(problem.reference, problem, workload, args.warmup, args.eager_timed, device)
    k, e = statistics.median(kernel_ms), statistics.median(eager_ms)
    print(json.dumps({"kernel_ms": k, "eager_ms": e, "speedup": e / k, "kernel_samples_ms": kernel_ms,
                      "eager_samples_ms": eager_ms, "device": torch.cuda.get_device_name(device)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
