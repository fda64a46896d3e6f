"""Per-problem facts on the local GPU: eager time, input bytes, anchor allowance, negative controls,
and a final grade's GPU memory peak.

    python -m benchmarks.h200_problems --out results/h200/problems.json [--only 02,28]
    python -m benchmarks.h200_problems --grade-peak --merge --out results/h200/problems.json --only 06,33,34,45,47 \
        [--dsl cutedsl] [--memory-budget-gb 80]
    python -m benchmarks.h200_problems --peaks-from results/h200/oracles.json --out results/h200/problems.json

For every problem: the eager reference's median over the grader's loop (10 warmup + 50 timed calls,
each on a fresh draw, L2 flushed, device-wide sync around the call: the same ``DeviceTools`` code
the worker uses; a reference slower than ``SLOW_BUDGET_S`` for 60 calls gets fewer, at least
``MIN_TIMED``, and the row says how many), the bytes of one draw's inputs, the GPU memory peak of the
whole measurement (reference, float64 anchor and controls: what the grader must hold), the
float64-anchor allowance each float output gets, the physical floor, and whether each value-level
negative control is rejected by the contract (zeros, passthrough, lower-precision reference, skipped
last row, first output replayed).

There is no ceiling on the eager time: workloads are upstream's, and a slow reference costs the
grader once per device because the baseline is cached (``verifier/baseline.py``). The floor
``EAGER_MIN_MS`` only flags a reference too short for the loop to time.
The controls here are judged in-process against the same ``check_draw`` the grader uses; the full
process-isolated grader runs them for the pilot problems (benchmarks/h200_pilot.py).

``--grade-peak`` measures instead what a final grade holds: each selected problem's oracle (both
DSLs, or ``--dsl``) goes through the grader's own ``grade`` at the graded workload with the default
counts, while a thread samples the device's used memory (``cudaMemGetInfo``: every process on the
GPU, the grader's workers included) every ``--sample-ms``. The row gets ``final_grade_peak_gib`` (per
DSL: the largest used memory seen, GiB) and ``final_grade`` (per DSL: status, message, the memory
plan the grade followed, the used memory before it, its stages' seconds, and the CPU estimate of
``metakernelbench.adapters.memory_estimates`` for the same card). ``--memory-budget-gb`` makes the
grade plan for a smaller card than the one it runs on (80 on an H200: does the 80 GB plan hold?).
With ``--merge`` only these two fields of the existing rows change.

``--peaks-from`` takes the same peak from an oracle sweep instead (``h200_oracles.py`` samples the
device's used memory with nvidia-smi while each final grade runs), so a sweep's gradings need not be
run again for it; each filled peak names its record, run, device and tool in ``final_grade_peak_source``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from metakernelbench.contract import GradeConfig
from metakernelbench.problem_kit import anchor_mode
from metakernelbench.problems import REPO_ROOT, load_problem, problem_paths
from metakernelbench.testing.controls import skip_last_tile
from metakernelbench.verifier.correctness import check_draw
from metakernelbench.verifier.device import DeviceTools
from metakernelbench.verifier.floor import floor_ms
from metakernelbench.verifier.tensors import clone_inputs, promote_floats, snapshot_graded

EAGER_MIN_MS = 0.05
SLOW_BUDGET_S = 90.0  # seconds of eager calls per problem before the timed count shrinks
MIN_TIMED = 12


def draw(problem, device, seed):
    return problem.make_inputs(device, torch.Generator(device=device).manual_seed(seed), **problem.spec.workload)


def graded(problem, inputs):
    return snapshot_graded(problem.spec, inputs, problem.reference(*inputs))


def timed_count(first_call_s: float, warmup: int = GradeConfig.warmup,
                timed: int = GradeConfig.timed) -> tuple[int, int]:
    """(warmup, timed) for a reference whose first graded call took ``first_call_s``."""
    if first_call_s * (warmup + timed) <= SLOW_BUDGET_S:
        return warmup, timed
    timed = max(MIN_TIMED, int(SLOW_BUDGET_S / max(first_call_s, 1e-9)) - 2)
    return 2, timed


def eager_median(problem, tools, device, warmup=GradeConfig.warmup, timed=GradeConfig.timed):
    samples = []
    for i in range(warmup + timed):
        inputs = draw(problem, device, 1000 + i)
        tools.cold_l2()
        tools.sync()
        t0 = time.perf_counter_ns()
        problem.reference(*inputs)
        tools.sync()
        if i >= warmup:
            samples.append((time.perf_counter_ns() - t0) / 1e6)
        del inputs
    samples.sort()
    return statistics.median(samples), samples


def allowances(problem, ref, anchor):
    out = {}
    for name in problem.spec.graded_names:
        r, a = ref[name], anchor[name]
        if not r.dtype.is_floating_point or name in problem.spec.exact:
            out[name] = "exact"
            continue
        finite = torch.isfinite(r)
        err = float((r.double() - a).abs()[finite].max()) if finite.any() else 0.0
        peak = float(a.abs()[finite].max()) if finite.any() else 0.0
        out[name] = problem.spec.tolerance_factor * max(err, torch.finfo(r.dtype).eps * peak)
    return out


def _low_precision(problem, inputs, ref_values, judge) -> str:
    """Re-run the reference with a lower working precision; return how the control was judged.

    The working precision drops to bfloat16, or, when any output is already 16-bit (so bf16 work is
    within the contract for it), every promoted value is also rounded through float8 e4m3. Where an
    op has no kernel for that dtype, the fallback rounds the promoted values and computes in fp32.
    """
    spec, module = problem.spec, problem.module
    outs16 = any(t.dtype in (torch.float16, torch.bfloat16) for t in ref_values.values())
    saved = module.__dict__.get("acc")

    def lowered(compute_low):
        def low(t):
            if not t.dtype.is_floating_point:
                return t
            t = t.to(torch.float8_e4m3fn) if outs16 else t
            return t.to(torch.bfloat16) if compute_low else t.to(torch.bfloat16).to(torch.float32)
        return low

    for compute_low, label in ((True, "bf16 work"), (False, "inputs rounded, fp32 work")):
        module.acc = lowered(compute_low)
        try:
            work = clone_inputs(inputs)
            low_values = snapshot_graded(spec, work, problem.reference(*work))
            low_values = {n: t.to(ref_values[n].dtype) for n, t in low_values.items()}
        except (RuntimeError, NotImplementedError, TypeError):
            continue
        finally:
            module.acc = saved
        judge("low_precision", low_values)
        return f"{judge.last} ({label}{', fp8-rounded' if outs16 else ''})"
    return "could not run in lower precision"


def controls(problem, device, ref_values, inputs, anchor):
    spec = problem.spec
    verdict = {}

    def judge(kind, values):
        mismatch = check_draw(spec, 0, values, ref_values, anchor)
        verdict[kind] = judge.last = "rejected" if mismatch else "PASSED (control not rejected!)"

    judge("zeros", {n: torch.zeros_like(t) for n, t in ref_values.items()})
    first = next(t for t in inputs if isinstance(t, torch.Tensor) and t.numel())
    flat = first.reshape(-1).view(torch.uint8)

    def like(t):
        need = t.numel() * t.element_size()
        return flat.repeat(need // flat.numel() + 1)[:need].view(t.dtype).reshape(t.shape)

    passthrough = {n: like(t) for n, t in ref_values.items() if n in spec.outputs}
    by_name = dict(zip(spec.inputs, inputs, strict=True))
    passthrough.update({n: by_name[n] for n in spec.inplace})  # untouched in-place inputs
    judge("passthrough", passthrough)

    floats = [n for n, t in ref_values.items() if t.dtype.is_floating_point and n not in spec.exact]
    if "acc(" in spec.path.read_text() and floats:
        verdict["low_precision"] = _low_precision(problem, inputs, ref_values, judge)
    else:
        verdict["low_precision"] = "not applicable (no floating work, or only exact outputs)"

    skipped = {}
    for n, t in ref_values.items():
        t = t.clone()
        if n in spec.inplace:
            before = by_name[n]
            changed = (t != before).reshape(t.shape[0], -1).any(dim=1).nonzero().flatten()
            if changed.numel():
                t[int(changed[-1])] = before[int(changed[-1])]
        elif t.dim() >= 1 and t.numel() > 1:
            skip_last_tile(t)
        skipped[n] = t
    judge("skip_last", skipped)
    return verdict


def measure(path: Path, tools, device, small: bool = False) -> dict:
    problem = load_problem(path)
    if small:
        problem.spec = problem.spec.model_copy(update={"workload": {**problem.spec.workload,
                                                                    **problem.spec.small_workload}})
    spec = problem.spec
    row = {"problem": spec.name, "family": spec.family, "workload": spec.workload}
    started = time.time()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with torch.no_grad():
        inputs = draw(problem, device, 7)
        row["input_bytes"] = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
        first = time.perf_counter()
        ref = graded(problem, clone_inputs(inputs))
        first_call_s = time.perf_counter() - first
        promoted = promote_floats(draw(problem, device, 7))
        with anchor_mode():
            anchor = snapshot_graded(spec, promoted, problem.reference(*promoted))
        del promoted
        row["allowance"] = allowances(problem, ref, anchor)
        row["controls"] = controls(problem, device, ref, inputs, anchor)
        second = graded(problem, draw(problem, device, 8))
        # the first call's outputs replayed on a second draw
        mismatch = check_draw(spec, 1, ref, second, {n: t.double() if t.dtype.is_floating_point else t
                                                       for n, t in second.items()})
        row["controls"]["cache_first"] = "rejected" if mismatch else "PASSED (control not rejected!)"
        del inputs, ref, anchor, second
        if device.type == "cuda":
            row["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
            torch.cuda.empty_cache()
        warmup, timed = timed_count(first_call_s)
        median, samples = eager_median(problem, tools, device, warmup, timed)
    row["eager_ms"] = median
    row["eager_samples_ms"] = [round(s, 5) for s in samples]
    row["eager_timed_calls"] = {"warmup": warmup, "timed": timed}
    row["eager_measurable"] = median >= EAGER_MIN_MS
    row["floor_ms"] = floor_ms(problem)
    row["declared_floor"] = problem.physical_floor()
    row["measure_wall_s"] = round(time.time() - started, 1)
    return row


class UsedMemory:
    """The device's used memory (every process), sampled by a thread while a ``with`` block runs."""

    def __init__(self, device, every_s: float):
        self.device, self.every_s = device, every_s
        self.before = self.peak = 0
        self._stop = None

    def used(self) -> int:
        free, total = torch.cuda.mem_get_info(self.device)
        return total - free

    def __enter__(self):
        import threading

        self.before = self.peak = self.used()
        self._stop = threading.Event()

        def sample():
            while not self._stop.is_set():
                self.peak = max(self.peak, self.used())
                self._stop.wait(self.every_s)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.used())


def grade_peak(path: Path, device, dsls: list[str], budget_gb: float | None, every_s: float,
               small: bool = False, kernels: dict[str, Path] | None = None) -> dict:
    """A final grade of the problem's oracle per DSL, with the device's used memory sampled."""
    from metakernelbench.adapters.memory_estimates import FootprintError, footprint
    from metakernelbench.problems import oracle_files
    from metakernelbench.verifier import memory
    from metakernelbench.verifier.grader import GradeConfig, grade

    problem = load_problem(path)
    if small:
        problem.spec = problem.spec.model_copy(update={"workload": {**problem.spec.workload,
                                                                    **problem.spec.small_workload}})
    budget = None if budget_gb is None else int(budget_gb * 1e9)
    oracles = {f.stem.rpartition("_")[2]: f for f in oracle_files() if f.stem.startswith(path.stem)}
    oracles.update({k.rpartition("_")[2]: v for k, v in (kernels or {}).items() if k.startswith(path.stem[:2])})
    try:
        card = budget or (torch.cuda.mem_get_info(device)[1] if device.type == "cuda" else None)
        sizes = footprint(problem)
        estimate = None if card is None else memory.plan(sizes, card)
        planned = None if estimate is None else {"placement": estimate.placement.describe(),
                                                 "peak_gib": memory.gib(estimate.peak), "fits": estimate.fits}
    except FootprintError as exc:
        planned = {"error": str(exc)}
    peaks, grades = {}, {}
    for dsl in dsls:
        if dsl not in oracles:
            continue
        started = time.time()
        config = GradeConfig(memory_budget_bytes=budget)
        if device.type == "cuda":
            with UsedMemory(device, every_s) as used:
                result = grade(problem, oracles[dsl], dsl, str(device), config)
            peaks[dsl] = round(used.peak / 2**30, 2)
            before = round(used.before / 2**30, 2)
        else:
            result = grade(problem, oracles[dsl], dsl, str(device), config)
            peaks[dsl], before = None, None
        grades[dsl] = {"status": result.status.value, "message": result.message[:300],
                       "memory_plan": result.details.get("memory_plan"), "used_before_gib": before,
                       "stages_s": result.stages_s, "grade_wall_s": round(time.time() - started, 1),
                       "budget_gb": budget_gb, "estimate": planned}
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(json.dumps({"problem": path.stem, "dsl": dsl, "peak_gib": peaks[dsl], **grades[dsl]}), flush=True)
    return {"problem": problem.spec.name, "final_grade_peak_gib": peaks, "final_grade": grades}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "results" / "h200" / "problems.json")
    parser.add_argument("--only", default="")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--small", action="store_true", help="small workloads (a CPU check of this script)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of --out for problems not measured in this run (re-measure a few)")
    parser.add_argument("--grade-peak", action="store_true",
                        help="measure a final grade's GPU memory peak per problem (its oracles through the grader)")
    parser.add_argument("--dsl", default="cutedsl,tirx", help="--grade-peak: the oracles' DSLs")
    parser.add_argument("--memory-budget-gb", type=float, default=None,
                        help="--grade-peak: plan the grade for a card of this many GB (default: this device)")
    parser.add_argument("--sample-ms", type=float, default=10.0, help="--grade-peak: the memory sampling period")
    parser.add_argument("--kernel", action="append", default=[], metavar="TASK=FILE",
                        help="--grade-peak: grade this file for a task instead of its oracle (a CPU smoke test)")
    parser.add_argument("--peaks-from", type=Path, metavar="ORACLES_JSON",
                        help="fill the final-grade peaks of --out from an oracle sweep's record (its entries' "
                             "gpu_memory, sampled while each final grade ran) and exit; uses no GPU")
    args = parser.parse_args()
    if args.peaks_from:
        record = json.loads(args.out.read_text())
        filled = peaks_from_sweep(record, json.loads(args.peaks_from.read_text()), args.peaks_from.name)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"{args.out}: final-grade peaks from {args.peaks_from.name} for {filled} task(s)")
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    device = torch.device(args.device)
    tools = DeviceTools.create(device)
    wanted = {x for x in args.only.split(",") if x}
    if args.grade_peak:
        write_grade_peaks(args, device, wanted)
        return
    rows = []
    for path in problem_paths():
        if wanted and path.stem[:2] not in wanted:
            continue
        try:
            row = measure(path, tools, device, args.small)
        except Exception as exc:  # noqa: BLE001 - record and go on to the next problem
            row = {"problem": path.stem, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            if device.type == "cuda":
                torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps({k: row.get(k) for k in ("problem", "eager_ms", "peak_gpu_gib", "controls",
                                                   "error", "measure_wall_s")}), flush=True)
    commands = [" ".join([Path(sys.executable).name, "-m", "benchmarks.h200_problems", *sys.argv[1:]])]
    if args.merge and args.out.exists():
        previous = json.loads(args.out.read_text())
        fresh = {r["problem"] for r in rows}
        rows = sorted([r for r in previous["problems"] if r["problem"] not in fresh] + rows,
                      key=lambda r: r["problem"])
        commands = previous.get("commands", [previous.get("command", "")]) + commands
    # MKB_COMMIT first: a copied tree's git metadata can be older than its files
    commit = os.environ.get("MKB_COMMIT") or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                            text=True, cwd=REPO_ROOT).stdout.strip()
    record = {
        "commands": commands, "commit": commit or "unknown",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "summary": {
            "problems": len(rows),
            "eager_measurable": sum(bool(r.get("eager_measurable")) for r in rows),
            "peak_gpu_gib_max": max((r.get("peak_gpu_gib", 0.0) for r in rows), default=0.0),
            "all_controls_rejected": sum(all(v.startswith(("rejected", "not applicable"))
                                             for v in r.get("controls", {"x": "no"}).values()) for r in rows),
            "errors": [r["problem"] for r in rows if "error" in r],
        },
        "problems": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record["summary"]), flush=True)


def write_grade_peaks(args, device, wanted: set[str]) -> None:
    """``--grade-peak``: the final-grade fields of the selected rows (the other fields kept with ``--merge``)."""
    kernels = {k: Path(v).resolve() for k, _, v in (x.partition("=") for x in args.kernel)}
    found = {}
    for path in problem_paths():
        if wanted and path.stem[:2] not in wanted:
            continue
        try:
            found[path.stem] = grade_peak(path, device, args.dsl.split(","), args.memory_budget_gb,
                                          args.sample_ms / 1e3, args.small, kernels)
        except Exception as exc:  # noqa: BLE001 - record and go on
            found[path.stem] = {"problem": path.stem, "final_grade": {"error": f"{type(exc).__name__}: {exc}"[:300]}}
    command = " ".join([Path(sys.executable).name, "-m", "benchmarks.h200_problems", *sys.argv[1:]])
    record = json.loads(args.out.read_text()) if args.merge and args.out.exists() else {"problems": []}
    rows = {r["problem"]: r for r in record["problems"]}
    for name, fields in found.items():
        row = rows.setdefault(name, {"problem": name})
        row.update({k: v for k, v in fields.items() if k != "problem"})
        row["final_grade_run"] = {"command": command, "commit": _commit(),
                                  "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                                  "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                                  "torch": torch.__version__}
    record["problems"] = sorted(rows.values(), key=lambda r: r["problem"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")


def peaks_from_sweep(record: dict, sweep: dict, source: str) -> int:
    """Copy each sweep entry's final-grade memory peak (``gpu_memory.peak_gib``) into its problem's row as
    ``final_grade_peak_gib[dsl]``, with ``final_grade_peak_source[dsl]`` naming the record, run, device and
    tool. A peak that ``--grade-peak`` measured itself (a ``final_grade`` for that DSL) is kept, and a grade
    that did not complete (``INFRA_ERROR``) gives none: its peak is only a lower bound. Returns how many
    task peaks were written."""
    rows = {r["problem"]: r for r in record["problems"]}
    runs = sweep.get("runs", [])
    filled = 0
    for entry in sweep.get("entries", []):
        peak = (entry.get("gpu_memory") or {}).get("peak_gib")
        problem, _, dsl = entry["task"].rpartition("_")
        row = rows.get(problem)
        if peak is None or row is None or entry.get("status") in (None, "INFRA_ERROR") \
                or dsl in (row.get("final_grade") or {}):
            continue
        run = runs[entry["run"]] if isinstance(entry.get("run"), int) and entry["run"] < len(runs) else {}
        row["final_grade_peak_gib"] = {**(row.get("final_grade_peak_gib") or {}), dsl: peak}
        row.setdefault("final_grade_peak_source", {})[dsl] = {
            "record": source, "run": entry.get("run"), "device": run.get("device"), "commit": run.get("commit"),
            "tool": entry["gpu_memory"].get("tool"), "status": entry.get("status")}
        filled += 1
    return filled


def _commit() -> str:
    return os.environ.get("MKB_COMMIT") or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                          text=True, cwd=REPO_ROOT).stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
