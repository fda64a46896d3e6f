"""Where the candidate worker's extra host time comes from: the real worker, driven call by call.

    python3 -m benchmarks.h200_worker --problem 28 --kernel oracles/mlp_norm/28_..._tirx.py --dsl tirx [--out FILE]

A plain loop in a process of its own (``h200_drift``'s runner) runs the kernel faster than the
grader's candidate worker does. This starts the real workers (``launch.start_workers``) once per
worker configuration and drives the candidate with the grader's own ``Evaluation.call`` in
variants interleaved segment by segment with the plain process:

- ``fresh``: a fresh draw in the grader before each call, the worker's heavy checks deferred to
  the end of the segment (``CallRequest.light_checks``: the grader's timing loop);
- ``fresh_heavy``: the same with the heavy checks after every call (correctness and audit calls,
  and every call before the deferral);
- ``reuse``: one draw sent again and again (the grader does no GPU work between calls);
- ``paced``: as ``reuse``, with 3 ms of grader-side sleep between calls (the pace of a fresh draw).

Per segment it records the median span (the grader's clock) and the worker's own host time until
``solve`` returned; the plain process's segment gives the same two figures outside any worker.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CONFIGS = {"default": {}, "unpinned": {"pin_cores": False}, "hot": {"hot_wait_ms": 50.0}}


def _segment(ev, variant: str, calls: int) -> dict:
    from metakernelbench.verifier.protocol import FetchRequest

    spans, returned = [], []
    reused = ev.draw(ev.seed()) if not variant.startswith("fresh") else None
    light = variant != "fresh_heavy"
    for i in range(calls + 3):
        inputs = ev.draw(ev.seed()) if reused is None else reused
        if variant == "paced":
            time.sleep(0.003)
        call = ev.call(ev.candidate, inputs, check_threads=False, light_checks=light)
        if i >= 3:
            spans.append(call.span_ns / 1e3)
            returned.append(call.result.returned_ns / 1e3)
    if light:  # the deferred checks, as the grader's timing loop runs them
        ev.candidate.request(FetchRequest(0, "", []), ev.config.call_timeout_s)
    return {"span_us": round(statistics.median(spans), 2), "host_launch_us": round(statistics.median(returned), 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problem", required=True)
    p.add_argument("--kernel", required=True)
    p.add_argument("--dsl", required=True)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--configs", default="default,unpinned,hot")
    p.add_argument("--variants", default="fresh,fresh_heavy,reuse,paced")
    p.add_argument("--segments", type=int, default=4)
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    import random

    import torch

    from benchmarks.h200_drift import Runner
    from metakernelbench.problems import find_problem
    from metakernelbench.verifier.checks import correctness
    from metakernelbench.verifier.evaluation import Evaluation
    from metakernelbench.verifier.launch import GradeConfig, close_quietly, start_workers

    problem = find_problem(args.problem)
    kernel = Path(args.kernel).resolve()
    plain = Runner(str(problem.spec.path), str(kernel), args.device)
    record: dict = {"what": __doc__.strip().splitlines()[0],
                    "command": " ".join(["python3 -m benchmarks.h200_worker", *sys.argv[1:]]), "configs": {}}
    variants = args.variants.split(",")
    for name in args.configs.split(","):
        config = GradeConfig(**CONFIGS[name])
        workers = start_workers(kernel, args.dsl, problem.spec.path, len(problem.spec.outputs), args.device, config)
        try:
            ev = Evaluation(problem, kernel, args.dsl, torch.device(args.device), config, workers)
            ev.candidate.release()
            ev.await_candidate()
            correctness(ev)
            rows: dict[str, list] = {v: [] for v in [*variants, "plain_process"]}
            for s in range(args.segments):
                for v in random.Random(s).sample([*variants, "plain_process"], len(variants) + 1):
                    rows[v].append(plain.run(args.calls, "all") if v == "plain_process"
                                   else _segment(ev, v, args.calls))
            summary = {v: {"span_us": statistics.median(r.get("span_us", r.get("median_us")) for r in rs),
                           "host_launch_us": statistics.median(r["host_launch_us"] for r in rs)}
                       for v, rs in rows.items()}
            record["configs"][name] = {"cores": str(workers.plan), "summary": summary, "segments": rows}
            print(json.dumps({"config": name, "summary": summary}), flush=True)
        except Exception as exc:  # noqa: BLE001 - record and go on with the next configuration
            record["configs"][name] = {"error": repr(exc)[:1000]}
            print(json.dumps({"config": name, "error": repr(exc)[:1000]}), flush=True)
        finally:
            close_quietly(workers)
            if workers.original_cpus:
                import os

                os.sched_setaffinity(0, workers.original_cpus)
    plain.close()
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
