"""Every oracle against its reference on the GPU, many at once: a correctness sweep before timing.

    python3 -m benchmarks.h200_oracle_check --out results/h200/oracle-check.json [--parallel 8]
                                            [--only 01,28_tirx,moe] [--small-only] [--device cuda]
                                            [--kernel TASK=FILE] [--alone 33,34] [--stats 12,47_cutedsl]
                                            [--memory-budget-gb 80]
    python3 -m benchmarks.h200_oracle_check --merge RUN.json results/h200/oracle-check.json

Each oracle runs in its own process (``--one``), ``--parallel`` at a time (the DSLs' first-call
compiles are CPU work, so a 16-core host checks several at once): the small workload once and the
graded workload twice, each draw judged by the grader's own comparison against the reference and
the float64 anchor (``verifier.correctness.check_draw``). A draw runs in stages (reference, anchor,
kernel), each stage's inputs freed before the next is drawn, and follows a final grade's memory plan
(``verifier.memory``: the anchor computed on the CPU, the comparison one output at a time, where the
device's memory, or ``--memory-budget-gb``, is too small), so a check needs no more GPU memory than
a final grade of the same task; each draw's record names the plan it followed. No timing and no
sandbox: this says which oracles are
correct, quickly, so that ``h200_oracles.py`` then grades and times only those. The record lists,
per oracle, ok, the first mismatch or error, the seconds of its first call and of the whole check
and the process's GPU memory peak, with the command, commit, device and date; ``--stats`` adds, for
the named oracles' draws, the kernel's and the reference's errors against the anchor.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def draw_mismatch_in_stages(problem, solve, workload: dict, seed: int, device, stats: bool = False,
                            planner=None):
    """The grader's comparison of one draw (``testing.selfcheck.draw_mismatch``): the reference, the
    float64 anchor and the kernel in stages, each stage's draw freed before the next, placed by the
    grade's memory plan (``planner``, ``verifier.memory``: the anchor, the comparison and the expected
    values leave the GPU as a final grade's would), so a check holds no more of the GPU than a final
    grade of the task. Returns (mismatch or None, error statistics per floating output when ``stats``)."""
    from metakernelbench.testing.selfcheck import draw_mismatch

    kept: dict = {}
    mismatch = draw_mismatch(problem, solve, workload, seed, device, planner, kept if stats else None)
    errors = error_stats(problem.spec, kept["got"], kept["ref"], kept["anchor"],
                         planner.compare_device if planner else None) if stats else None
    return mismatch, errors


def error_stats(spec, got: dict, ref: dict, anchor: dict, device=None) -> dict:
    """Per floating output, the kernel's and the reference's distance from the float64 anchor, as the
    grader measures it (element-wise maximum, whole 2-norm, 2-norm of each last-dim row), with the
    kernel's error over its allowance at factor F: the numbers a tolerance decision rests on.
    ``device``: where each output's values are brought for it (the plan's comparison device)."""
    import torch

    from metakernelbench.verifier.correctness import ROW_FLOOR_FRACTION

    out = {}
    factor = spec.tolerance_factor
    for name in spec.graded_names:
        r = ref[name]
        if not r.dtype.is_floating_point or name in spec.exact or name in spec.sets:
            continue
        g, r, a = (v.to(device) if device is not None else v for v in (got[name], r, anchor[name]))
        keep = torch.isfinite(r)
        g64, r64, a64 = (torch.where(keep, v.to(torch.float64), 0.0) for v in (g, r, a))
        eps, peak = torch.finfo(r.dtype).eps, float(a64.abs().max())
        err, ref_err = (g64 - a64).abs(), (r64 - a64).abs()
        rows = lambda v: v.reshape(-1, v.shape[-1]) if v.dim() >= 2 else v.reshape(1, -1)  # noqa: E731
        row_err = torch.linalg.vector_norm(rows(g64 - a64), dim=-1)
        row_ref = torch.linalg.vector_norm(rows(r64 - a64), dim=-1)
        row_mag = torch.linalg.vector_norm(rows(a64), dim=-1)
        floor = eps * peak * ROW_FLOOR_FRACTION * rows(a64).shape[-1] ** 0.5
        row_allow = factor * torch.maximum(row_ref, eps * row_mag) + floor
        row_ratio = (row_err / row_allow).float()
        qs = torch.quantile(row_ratio[torch.randperm(row_ratio.numel(), device=row_ratio.device)[:1 << 24]],
                            torch.tensor([0.5, 0.99, 0.9999], device=row_ratio.device)).tolist()
        # the kernel's row error over the reference's, where the reference's is above eps * magnitude
        rel = (row_err / torch.maximum(row_ref, eps * row_mag + floor / factor)).float()
        out[name] = {
            "factor": factor, "peak": peak,
            "max_abs": {"kernel": float(err.max()), "reference": float(ref_err.max()),
                        "over_allowance": float(err.max()) / (factor * max(float(ref_err.max()), eps * peak))},
            "norm": {"kernel": float(torch.linalg.vector_norm(g64 - a64)),
                     "reference": float(torch.linalg.vector_norm(r64 - a64)),
                     "over_allowance": float(torch.linalg.vector_norm(g64 - a64))
                     / (factor * max(float(torch.linalg.vector_norm(r64 - a64)),
                                     eps * float(torch.linalg.vector_norm(a64))))},
            "rows": {"count": row_ratio.numel(), "over_allowance_max": float(row_ratio.max()),
                     "over_allowance_q50_q99_q9999": [round(q, 4) for q in qs],
                     "rows_over": int((row_ratio > 1).sum()),
                     "kernel_over_reference_max": float(rel.max()),
                     "kernel_over_reference_median": float(rel.median()),
                     "rows_kernel_over_reference_gt_2": int((rel > 2).sum())},
        }
        del g64, r64, a64, err, ref_err, row_err, row_ref, row_mag, row_allow, row_ratio, rel
    return out


def one(task: str, kernel: Path, device: str, small_only: bool, stats: bool = False,
        budget_bytes: int | None = None) -> dict:
    """Check one oracle in this process; the result as a dict (printed as JSON by ``--one``).
    ``budget_bytes``: the device memory the plan is made for (the device's own by default)."""
    import torch

    from benchmarks.independent_loop import load
    from metakernelbench.problems import find_problem
    from metakernelbench.testing.selfcheck import standard_draws
    from metakernelbench.verifier import memory

    started = time.time()
    out: dict = {"task": task, "kernel": str(kernel), "ok": False, "draws": []}
    try:
        problem = find_problem(task.rpartition("_")[0])
        module = load(str(kernel), f"mkb_check_{task}")
        draws = standard_draws(problem)[:1] if small_only else standard_draws(problem)
        dev = torch.device(device)
        planners: dict[str, memory.Planner] = {}  # one plan per workload, kept across its draws
        for i, (workload, seed) in enumerate(draws):
            t = time.time()
            graded = workload != problem.spec.small_workload
            key = "graded" if graded else "small"
            if key not in planners:
                planners[key] = memory.Planner(dev, memory.device_budget(dev, budget_bytes))
            planner = planners[key]
            mismatch, errors = draw_mismatch_in_stages(problem, module.solve, workload, seed, dev, stats, planner)
            entry = {"workload": key, "seed": seed, "ok": mismatch is None,
                     "seconds": round(time.time() - t, 2), "mismatch": None if mismatch is None else str(mismatch),
                     "memory_plan": planner.describe()}
            if errors:
                entry["errors"] = errors
            out["draws"].append(entry)
            if i == 0:
                out["first_call_s"] = round(time.time() - t, 2)
        out["ok"] = all(d["ok"] for d in out["draws"])
        if torch.cuda.is_available() and device.startswith("cuda"):
            out["peak_gpu_gib"] = round(memory.process_peak(torch.device(device)) / 2**30, 2)
    except Exception as exc:  # noqa: BLE001 - the record says what broke, the sweep goes on
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-3000:]
    out["seconds"] = round(time.time() - started, 2)
    return out


def _subprocess(task: str, kernel: Path, device: str, small_only: bool, timeout_s: float, stats: bool,
                budget_gb: float | None = None) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.h200_oracle_check", "--one", task, str(kernel), "--device", device]
    if small_only:
        cmd.append("--small-only")
    if stats:
        cmd += ["--stats", "all"]
    if budget_gb is not None:
        cmd += ["--memory-budget-gb", str(budget_gb)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"task": task, "kernel": str(kernel), "ok": False, "error": f"timed out after {timeout_s:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"task": task, "kernel": str(kernel), "ok": False,
                "error": f"exit {done.returncode}: {done.stderr[-2000:]}"}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--one", nargs=2, metavar=("TASK", "FILE"), help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path)
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--only", default="", help="comma-separated task names, NN, NN_dsl or families")
    p.add_argument("--device", default="cuda")
    p.add_argument("--small-only", action="store_true", help="only the small workload's draw")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per oracle")
    p.add_argument("--kernel", action="append", default=[], metavar="TASK=FILE")
    p.add_argument("--alone", default="",
                   help="NN, NN_dsl or task names checked one at a time after the rest (workloads that need "
                        "much of the GPU's memory)")
    p.add_argument("--stats", default="",
                   help="NN, NN_dsl or task names whose draws also record their error statistics "
                        "against the float64 anchor (the kernel's and the reference's)")
    p.add_argument("--memory-budget-gb", type=float, default=None,
                   help="plan the check's placement for a card of this many GB (1e9 bytes; default: the device's "
                        "own memory), e.g. 80 on an H200 to check that an 80 GB card's plan holds")
    p.add_argument("--merge", nargs=2, metavar=("RUN", "RECORD"), type=Path,
                   help="add the run file RUN to the union record RECORD (its entries replace earlier ones "
                        "of the same task, which move to superseded_entries) and exit; no GPU needed")
    args = p.parse_args(argv)
    if args.merge:
        merge(*args.merge)
        return 0
    if args.one:
        args.stats = bool(args.stats)
        budget = None if args.memory_budget_gb is None else int(args.memory_budget_gb * 1e9)
        print(json.dumps(one(args.one[0], Path(args.one[1]), args.device, args.small_only, args.stats, budget)))
        return 0
    if args.out is None:
        p.error("--out is required")
    from benchmarks.h200_oracles import selected, shown
    from metakernelbench.problems import oracle_files

    only = {k.strip() for k in args.only.split(",") if k.strip()} or None
    overrides = {k: Path(v).resolve() for k, _, v in (x.partition("=") for x in args.kernel)}
    jobs = selected(only, overrides)
    command = "python3 -m benchmarks.h200_oracle_check " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    from benchmarks.h200_judge import device_name, git_commit

    record = {"command": command, "commit": git_commit(), "date": dt.datetime.now(dt.UTC).isoformat(),
              "device": device_name(args.device if ":" in args.device else f"{args.device}:0")
              if args.device.startswith("cuda") else args.device,
              "oracle_files": len(oracle_files()), "entries": []}
    alone_keys = {k.strip() for k in args.alone.split(",") if k.strip()}
    stats_keys = {k.strip() for k in args.stats.split(",") if k.strip()}
    alone = [job for job in jobs if _matches(job[0], alone_keys)]
    shared = [job for job in jobs if job not in alone]
    started = time.time()
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def record_entry(entry: dict) -> None:
        """Add one result and rewrite the record, so a sweep stopped part way still leaves what it found."""
        entry["kernel"] = shown(entry["kernel"])
        record["entries"].append(entry)
        record["wall_s"] = round(time.time() - started, 1)
        record["ok"] = sum(e["ok"] for e in record["entries"])
        record["complete"] = len(record["entries"]) == len(jobs)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"{entry['task']}: {'ok' if entry['ok'] else 'FAILED'} ({entry.get('seconds', '?')} s)"
              + ("" if entry["ok"] else f" {entry.get('error') or entry.get('draws')}"[:300]), flush=True)

    for batch, workers in ((shared, args.parallel), (alone, 1)):
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(_subprocess, task, path, args.device, args.small_only, args.timeout,
                                   _matches(task, stats_keys), args.memory_budget_gb)
                       for task, _, _, path in batch]
            for future in as_completed(futures):
                record_entry(future.result())
    record["entries"].sort(key=lambda e: e["task"])  # completion order above; task order in the file
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


def merge(run_path: Path, record_path: Path) -> None:
    """Fold one run's record into the union record (``results/h200/oracle-check.json``): the run's
    command, commit, device and counts join ``runs``; its entries (tagged with the run's number)
    replace the union's entries of the same tasks, which are kept under ``superseded_entries``."""
    run = json.loads(run_path.read_text())
    record = json.loads(record_path.read_text())
    number = max((r["run"] for r in record["runs"]), default=0) + 1
    record["runs"].append({"run": number, **{k: run[k] for k in ("command", "commit", "date", "device", "wall_s")},
                           "oracles": len(run["entries"]), "ok": run["ok"], "complete": run["complete"]})
    by_task = {e["task"]: e for e in record["entries"]}
    for entry in run["entries"]:
        old = by_task.get(entry["task"])
        if old is not None:
            record["superseded_entries"].append(old)
        by_task[entry["task"]] = {**entry, "run": number}
    record["entries"] = sorted(by_task.values(), key=lambda e: e["task"])
    record["oracle_files"] = run["oracle_files"]
    record["checked"] = len(record["entries"])
    record["ok"] = sum(e["ok"] for e in record["entries"])
    record_path.write_text(json.dumps(record, indent=2) + "\n")


def _matches(task: str, keys: set[str]) -> bool:
    """``task`` (NN_slug_dsl) is named by one of ``keys``: its NN, NN_dsl or its full name."""
    from benchmarks.h200_oracles import task_keys

    return bool(keys & task_keys(task))


if __name__ == "__main__":
    raise SystemExit(main())
