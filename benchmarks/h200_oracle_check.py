"""Every oracle against its reference on the GPU, many at once: a correctness sweep before timing.

    python3 benchmarks/h200_oracle_check.py --out results/h200/oracle-check.json [--parallel 8]
                                            [--only 01,28_tirx,moe] [--small-only] [--device cuda]
                                            [--kernel TASK=FILE] [--alone 33,34]

Each oracle runs in its own process (``--one``), ``--parallel`` at a time (the DSLs' first-call
compiles are CPU work, so a 16-core host checks several at once): the small workload once and the
graded workload twice, each draw judged by the grader's own comparison against the reference and
the float64 anchor (``verifier.selfcheck``). No timing and no sandbox: this says which oracles are
correct, quickly, so that ``h200_oracles.py`` then grades and times only those. The record lists,
per oracle, ok, the first mismatch or error, and the seconds of its first call and of the whole
check, with the command, commit, device and date.
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
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def one(task: str, kernel: Path, device: str, small_only: bool) -> dict:
    """Check one oracle in this process; the result as a dict (printed as JSON by ``--one``)."""
    import torch
    from independent_loop import load

    from metakernelbench.problems import find_problem
    from metakernelbench.verifier.selfcheck import draw_mismatch, standard_draws

    started = time.time()
    out: dict = {"task": task, "kernel": str(kernel), "ok": False, "draws": []}
    try:
        problem = find_problem(task.rpartition("_")[0])
        module = load(str(kernel), f"mkb_check_{task}")
        draws = standard_draws(problem)[:1] if small_only else standard_draws(problem)
        for i, (workload, seed) in enumerate(draws):
            t = time.time()
            mismatch = draw_mismatch(problem, module.solve, workload, seed, torch.device(device))
            out["draws"].append({"workload": "small" if workload == problem.spec.small_workload else "graded",
                                 "seed": seed, "ok": mismatch is None, "seconds": round(time.time() - t, 2),
                                 "mismatch": None if mismatch is None else str(mismatch)})
            if i == 0:
                out["first_call_s"] = round(time.time() - t, 2)
        out["ok"] = all(d["ok"] for d in out["draws"])
    except Exception as exc:  # noqa: BLE001 - the record says what broke, the sweep goes on
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-3000:]
    out["seconds"] = round(time.time() - started, 2)
    return out


def _subprocess(task: str, kernel: Path, device: str, small_only: bool, timeout_s: float) -> dict:
    cmd = [sys.executable, __file__, "--one", task, str(kernel), "--device", device]
    if small_only:
        cmd.append("--small-only")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
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
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], Path(args.one[1]), args.device, args.small_only)))
        return 0
    if args.out is None:
        p.error("--out is required")
    from h200_oracles import selected, shown

    from metakernelbench.problems import oracle_files

    only = {k.strip() for k in args.only.split(",") if k.strip()} or None
    overrides = {k: Path(v).resolve() for k, _, v in (x.partition("=") for x in args.kernel)}
    jobs = selected(only, overrides)
    command = "python3 benchmarks/h200_oracle_check.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    from h200_judge import _device_name, _git_commit

    record = {"command": command, "commit": _git_commit(), "date": dt.datetime.now(dt.UTC).isoformat(),
              "device": _device_name(args.device if ":" in args.device else f"{args.device}:0")
              if args.device.startswith("cuda") else args.device,
              "oracle_files": len(oracle_files()), "entries": []}
    alone_keys = {k.strip() for k in args.alone.split(",") if k.strip()}
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
            futures = [pool.submit(_subprocess, task, path, args.device, args.small_only, args.timeout)
                       for task, _, _, path in batch]
            for future in as_completed(futures):
                record_entry(future.result())
    record["entries"].sort(key=lambda e: e["task"])  # completion order above; task order in the file
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


def _matches(task: str, keys: set[str]) -> bool:
    """``task`` (NN_slug_dsl) is named by one of ``keys``: its NN, NN_dsl or its full name."""
    from h200_oracles import task_keys

    return bool(keys & task_keys(task))


if __name__ == "__main__":
    raise SystemExit(main())
