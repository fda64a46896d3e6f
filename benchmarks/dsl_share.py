"""The share of GPU kernel time an oracle spends in its own DSL kernels (torch profiler).

    python -m benchmarks.dsl_share PROBLEM_FILE KERNEL_FILE --dsl tirx|cutedsl [--calls 5]

The kernel file is loaded as a plain module; after two warm-up calls, ``--calls`` calls of its
``solve`` on fresh draws of the graded workload run under ``torch.profiler`` with CUDA activities.
Every device kernel is summed by name and classified: a CuTe DSL kernel carries CuTe's symbol
prefix ``kernel_cutlass_``; a TIRx kernel is one of the symbols the oracle's ``precompile`` names.
Everything else (torch's own kernels, cuBLAS, copies and fills) is glue. Prints one JSON object:
the share, the DSL and total microseconds, and every kernel with its time and class, so the figure
can be re-added by hand.
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.independent_loop import load  # the plain loader of the independent stopwatch, beside this file
from metakernelbench.contract import DSLS
from metakernelbench.verifier.provenance import is_dsl_kernel  # the grader's own classification


def dsl_share(kernel_us: dict[str, float], dsl: str, symbols: set[str]) -> dict:
    """(share, dsl_us, total_us, kernels) from device time per kernel name; share is None when no
    device kernel ran at all (nothing to divide)."""
    total = sum(kernel_us.values())
    mine = sum(us for name, us in kernel_us.items() if is_dsl_kernel(name, dsl, symbols))
    kernels = [{"name": n, "us": round(us, 3), "dsl": is_dsl_kernel(n, dsl, symbols)}
               for n, us in sorted(kernel_us.items(), key=lambda kv: -kv[1])]
    return {"dsl_share": (mine / total) if total > 0 else None, "dsl_us": round(mine, 3),
            "total_us": round(total, 3), "kernels": kernels}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("problem")
    p.add_argument("kernel")
    p.add_argument("--dsl", required=True, choices=DSLS)
    p.add_argument("--calls", type=int, default=5)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"dsl_share": None, "note": "no CUDA device: not measured"}))
        return 0
    device = torch.device("cuda")
    problem = load(args.problem, "mkb_share_problem")
    oracle = load(args.kernel, "mkb_share_oracle")
    symbols = set(oracle.precompile("sm_90a")) if args.dsl == "tirx" and hasattr(oracle, "precompile") else set()

    def call(seed: int) -> None:
        gen = torch.Generator(device=device).manual_seed(seed)
        inputs = problem.make_inputs(device, gen)
        with torch.no_grad():
            oracle.solve(*inputs)
        torch.cuda.synchronize()

    call(1)
    call(2)
    draws = [problem.make_inputs(device, torch.Generator(device=device).manual_seed(10 + i)) for i in range(args.calls)]
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof, torch.no_grad():
        for inputs in draws:
            oracle.solve(*inputs)
        torch.cuda.synchronize()
    kernel_us: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernel_us[event.name] = kernel_us.get(event.name, 0.0) + event.time_range.elapsed_us()
    print(json.dumps({**dsl_share(kernel_us, args.dsl, symbols), "calls": args.calls}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
