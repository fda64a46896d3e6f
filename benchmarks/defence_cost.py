"""What the trust-boundary defences cost per call, on the device at hand (CPU or GPU).

    python -m benchmarks.defence_cost [--problem 28] [--kernel tests/exploits/control_honest_28.py]
                                      [--dsl tirx] [--device cpu] [--small] [--calls 40] [--out FILE]

Starts the real workers of one evaluation (``launch.start_workers``) and drives the candidate with
the grader's own ``Evaluation.call`` in two variants, interleaved call by call so that drift of the
host hits both alike:

- ``plain``: a timed call as most timed calls run (the grader writes the draw after READY, no copy
  at DONE);
- ``done_copy``: the same with the grader's own copy of the outputs at DONE (the worker describes
  its outputs before DONE on the CPU; the grader stops it, copies, resumes it).

Per variant it prints the median span (the grader's clock: what a grade uses), the worker's own
stopwatch from GO to the end of its device synchronise (before it describes its outputs and rings
DONE), the median wall time
of the whole call as the grader sees it, and the grader's own time to write a draw into the input
buffers (``stage.fill``, before GO, outside the span). Differences of the span between the variants
are what a defence adds inside the timed window; differences of the wall time are what it adds to a
grading's length.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problem", default="28")
    p.add_argument("--kernel", default=str(REPO / "tests" / "exploits" / "control_honest_28.py"))
    p.add_argument("--dsl", default="tirx")
    p.add_argument("--device", default="cpu")
    p.add_argument("--small", action="store_true", help="the problem's small workload (CPU grading)")
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--out")
    args = p.parse_args()

    import torch

    from metakernelbench.problems import find_problem
    from metakernelbench.verifier import stage as stage_mod
    from metakernelbench.verifier.evaluation import Evaluation
    from metakernelbench.verifier.launch import GradeConfig, close_quietly, start_workers

    problem = find_problem(args.problem)
    if args.small:
        problem.spec = problem.spec.model_copy(update={"workload": {**problem.spec.workload,
                                                                    **problem.spec.small_workload}})
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    config = GradeConfig()
    started = start_workers(Path(args.kernel), args.dsl, problem.spec.path, len(problem.spec.outputs), str(device),
                            config)
    fills: list[float] = []
    original_fill = stage_mod.InputStage.fill

    def timed_fill(self, draw):
        at = time.perf_counter_ns()
        original_fill(self, draw)
        fills.append((time.perf_counter_ns() - at) / 1e3)

    stage_mod.InputStage.fill = timed_fill
    try:
        ev = Evaluation(problem, Path(args.kernel), args.dsl, device, config, started)
        ev.candidate.release()
        ev.await_candidate()
        for _ in range(3):  # compile and warm
            ev.call(ev.candidate, ev.draw(ev.seed()), snapshot=True, send_outputs=True)
        figures: dict[str, dict[str, list[float]]] = {v: {"span_us": [], "worker_us": [], "wall_us": []}
                                                      for v in ("plain", "done_copy")}
        fills.clear()
        for _ in range(args.calls):
            for variant in ("plain", "done_copy"):
                draw = ev.draw(ev.seed())
                at = time.perf_counter_ns()
                call = ev.call(ev.candidate, draw, snapshot=variant == "done_copy", light_checks=True)
                figures[variant]["wall_us"].append((time.perf_counter_ns() - at) / 1e3)
                figures[variant]["span_us"].append(call.span_ns / 1e3)
                figures[variant]["worker_us"].append(call.result.elapsed_ns / 1e3)
    finally:
        stage_mod.InputStage.fill = original_fill
        close_quietly(started)
    record = {
        "command": "python -m benchmarks.defence_cost " + " ".join(sys.argv[1:]),
        "date": datetime.now(UTC).isoformat(), "device": args.device, "host": platform.machine(),
        "problem": problem.spec.name, "workload": problem.spec.workload, "calls_per_variant": args.calls,
        "variants": {v: {k: round(statistics.median(xs), 2) for k, xs in f.items()} for v, f in figures.items()},
        "fill_us_median": round(statistics.median(fills), 2) if fills else None,
    }
    text = json.dumps(record, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
