"""How much the worker's heavy per-call checks slow the host code that runs right after them.

    python -m benchmarks.worker_checks_cache [--rounds 400] [--out results/cpu/worker-checks-cache.json]

A short torch dispatch path (allocate, convert to DLPack, three small ops: a few microseconds of
Python and C++, like a DSL's launch path) is timed right after either a light step (one small
tensor op, as a plain loop's input draw) or the worker's two heavy checks (``critical_callables``,
the integrity of the grader's code, and ``Sandbox.new_native_mappings``, which parses
``/proc/self/maps``), interleaved in random order. Runs on a CPU; prints the two medians and their
ratio, and what each heavy check costs by itself. The ratio is why timing-loop calls defer those
checks (``CallRequest.light_checks``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from metakernelbench.verifier import sandbox, worker


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=400)
    p.add_argument("--out", type=Path, default=None, help="also write the figures, command and date here")
    args = p.parse_args()
    box = sandbox.Sandbox(scratch=tempfile.mkdtemp(), roots=sandbox.installed_roots((tempfile.gettempdir(),)))
    box.baseline_maps = sandbox.executable_mappings()
    x, w = torch.randn(16, 64), torch.randn(64)

    def dispatch_path() -> torch.Tensor:
        y = torch.empty_like(x)
        a, b = x.contiguous(), w.contiguous()
        for t in (a, b, y):
            torch.utils.dlpack.to_dlpack(t)
        y.copy_(a)
        y.mul_(b)
        return y.add_(a)

    before = {"light": lambda: torch.randn(16, 64),
              "heavy_checks": lambda: (worker.critical_callables(), box.new_native_mappings())}
    samples: dict[str, list[float]] = {k: [] for k in before}
    for r in range(args.rounds):
        for name in random.Random(r).sample(list(before), len(before)):
            before[name]()
            t0 = time.perf_counter_ns()
            dispatch_path()
            samples[name].append((time.perf_counter_ns() - t0) / 1e3)
    skip = min(50, args.rounds // 4)
    medians = {k: statistics.median(v[skip:]) for k, v in samples.items()}

    def cost_us(fn) -> float:
        times = []
        for _ in range(50):
            t0 = time.perf_counter_ns()
            fn()
            times.append((time.perf_counter_ns() - t0) / 1e3)
        return round(statistics.median(times), 1)

    figures = {"dispatch_us_after": {k: round(v, 2) for k, v in medians.items()},
               "ratio": round(medians["heavy_checks"] / medians["light"], 2),
               "check_cost_us": {"critical_callables": cost_us(worker.critical_callables),
                                 "new_native_mappings": cost_us(box.new_native_mappings)}}
    print(json.dumps(figures))
    if args.out:
        record = {"what": __doc__.strip().splitlines()[0],
                  "command": " ".join(["python -m benchmarks.worker_checks_cache", *sys.argv[1:]]),
                  "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                  "host": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, no GPU",
                  **figures}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
