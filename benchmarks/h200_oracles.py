"""Every oracle through its task's own final grade, with its DSL share of GPU time; writes oracles.json.

    python3 -m benchmarks.h200_oracles --out results/h200/oracles.json [--only 01,28_tirx,moe] [--merge]
                                       [--device cuda:0] [--judge-args "--timed 20"] [--kernel TASK=FILE]
    python3 -m benchmarks.h200_oracles --out results/h200/oracles.json --merge-from RUN.json

For each oracle file under ``oracles/<family>/`` (or those ``--only`` names: a task name, ``NN``,
``NN_dsl`` or a family): a local judge (subprocess isolation, as the no-Docker mode runs it) is sent
the file by ``metakernelbench.judge.final`` -- the module the task's ``tests/test.sh`` runs
in Harbor's verifier phase -- with a final-scope token, and the resulting ``grade.json`` and
``reward.json`` give status, kernel_ms, eager_ms and speedup; ``grading_s`` is that client's wall
time. The DSL share is the grader's own (``provenance.dsl_share``: one profiled call inside the
grading, every kernel listed, in ``grade.json``); ``--separate-share`` also profiles the oracle in a
separate plain process (``dsl_share.py``, torch profiler) as an independent check of that figure, and
``--independent`` times each oracle that PASSED with the plain loop (``independent_loop.py``, no grader
code) and records its speedup beside the grade's (``independent``, ``agreement``: within 10 % for a
kernel of a millisecond or more). On a CUDA device each entry's ``gpu_memory`` is the device's used
memory while the grade ran (``gpu_memory_watch.py``: nvidia-smi, all the grade's processes together).

The record holds the command, commit, device and date of each run, the tasks and oracle files that
existed, and one entry per task (``--merge`` keeps entries of an earlier record that this run did not
measure; each entry names the run that produced it; ``--merge-from RUN`` folds a run made on a GPU host
into the record here, keeping the grades it replaces under ``superseded_entries``).
``benchmarks/oracle_coverage.py`` turns it into the README's coverage table. ``--kernel TASK=FILE``
grades another file for a task (used to smoke-test this script on a CPU with a CPU kernel).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.gpu_memory_watch import GpuMemoryWatch, smi_id
from benchmarks.h200_judge import device_name, git_commit, start_judge
from benchmarks.oracle_coverage import AGREEMENT_MIN_KERNEL_MS, AGREEMENT_TOLERANCE
from metakernelbench.contract import DSLS
from metakernelbench.problems import find_problem, oracle_files, problem_paths

REPO = Path(__file__).resolve().parents[1]

SHARE_DETAIL = ("dsl_us", "total_us", "kernels", "source", "calls", "note", "error")
# The grade's own account of its clock (grade.json ``details``), kept so that a grade that disagrees with
# the plain loop can be traced from the record: how the eager baseline was had, what the doorbell and the
# pre-GO window cost each call, and the median span before the window charges.
TIMING_DETAIL = ("eager_baseline", "eager_remeasured", "signal_overhead_us_median", "host_launch_us_median",
                 "reference_signal_overhead_us_min", "exposed_us_median", "reference_exposed_us_median",
                 "window_charge_us_median", "window_charge_us_max", "spans_ms_median")


def task_keys(task: str, family: str | None = None) -> set[str]:
    """The names that pick a task on the command line: its full name, NN, NN_dsl (and its family)."""
    keys = {task, task[:2], f"{task[:2]}_{task.rpartition('_')[2]}"}
    return keys | {family} if family else keys


def selected(only: set[str] | None, overrides: dict[str, Path]) -> list[tuple[str, str, str, Path]]:
    """(task, family, dsl, kernel file) for every oracle picked by ``--only`` (all without it)."""
    found = {}
    for path in oracle_files():
        found[path.stem] = (path.parent.name, path.stem.rpartition("_")[2], path)
    for task, path in overrides.items():
        family = find_problem(task.rpartition("_")[0]).spec.family
        found[task] = (family, task.rpartition("_")[2], path)
    picked = []
    for task, (family, dsl, path) in sorted(found.items()):
        if only is None or task_keys(task, family) & only:
            picked.append((task, family, dsl, path))
    return picked


def final_grade(url: str, token: str, task: str, kernel: Path, timeout_s: float) -> tuple[dict, dict, float]:
    """(grade.json, reward.json, client wall seconds) from the verifier's own final-grade module."""
    out = Path(tempfile.mkdtemp(prefix="mkb-oracle-final-"))
    env = {**os.environ, "MKB_JUDGE_URL": url, "MKB_JUDGE_TOKEN": token}
    started = time.time()
    subprocess.run([sys.executable, "-m", "metakernelbench.judge.final", "--task", f"metakernelbench/{task}",
                    "--kernel", str(kernel), "--out", str(out), "--timeout", str(timeout_s)],
                   env=env, capture_output=True, text=True, timeout=timeout_s + 60)
    wall = time.time() - started
    return (json.loads((out / "grade.json").read_text()), json.loads((out / "reward.json").read_text()), wall)


def _plain_process(module: str, task: str, kernel: Path, device: str, *extra: str,
                   timeout_s: float = 1800) -> tuple[dict | None, str]:
    """``benchmarks.<module> PROBLEM_FILE KERNEL`` for the task's problem, in its own process on ``device``:
    the JSON object of its last stdout line, or None and the tail of what it printed when it failed."""
    problem_file = next(p for p in problem_paths() if p.stem == task.rpartition("_")[0])
    env = {**os.environ}
    if device.startswith("cuda:"):
        env["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", str(problem_file), str(kernel), *extra],
                          capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)
    if done.returncode != 0:
        return None, (done.stderr or done.stdout)[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), ""


def share(task: str, dsl: str, kernel: Path, device: str) -> dict:
    """The oracle's DSL share of GPU kernel time, measured in its own plain process."""
    measured, error = _plain_process("dsl_share", task, kernel, device, "--dsl", dsl)
    return measured if measured is not None else {"dsl_share": None, "error": error}


INDEPENDENT_KEEP = ("kernel_ms", "eager_ms", "speedup", "device")


def independent(task: str, kernel: Path, device: str, timeout_s: float = 1800) -> dict:
    """The oracle timed by the plain loop (``independent_loop.py``: no grader code, its own process):
    medians of the kernel and of the eager reference at the graded workload and their ratio, or the
    error that stopped it. The grade's speedup is checked against this figure, not against itself."""
    try:
        measured, error = _plain_process("independent_loop", task, kernel, device, timeout_s=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"the plain loop did not finish within {timeout_s:g} s"}
    if measured is None:
        return {"error": error}
    return {k: measured[k] for k in INDEPENDENT_KEEP if k in measured}


def agreement(entry: dict) -> dict | None:
    """How the grade's speedup compares with the plain loop's: their ratio, and whether it is within
    ``AGREEMENT_TOLERANCE`` where the check applies (a kernel of ``AGREEMENT_MIN_KERNEL_MS`` or more by
    both stopwatches). None when either figure is missing."""
    loop = entry.get("independent") or {}
    grade, plain = entry.get("speedup"), loop.get("speedup")
    if not isinstance(grade, (int, float)) or not isinstance(plain, (int, float)) or plain <= 0:
        return None
    ratio = grade / plain
    applies = min(entry.get("kernel_ms") or 0.0, loop.get("kernel_ms") or 0.0) >= AGREEMENT_MIN_KERNEL_MS
    return {"ratio": round(ratio, 4), "applies": applies,
            "within": abs(ratio - 1.0) <= AGREEMENT_TOLERANCE if applies else None}


def shown(kernel: Path) -> str:
    """How a record names a kernel file: its path in the repository, else its name (no machine paths)."""
    kernel = Path(kernel).resolve()
    return str(kernel.relative_to(REPO)) if kernel.is_relative_to(REPO) else kernel.name


def portable_command(argv: list[str]) -> str:
    """The command line as a record keeps it: the ``--out`` file named as ``shown`` names a kernel, so
    that a run on another host (whose shell expanded ``$OUT`` to its own folder) leaves no machine path."""
    words = list(argv)
    for i, word in enumerate(words):
        if word == "--out" and i + 1 < len(words):
            words[i + 1] = shown(Path(words[i + 1]))
        elif word.startswith("--out="):
            words[i] = "--out=" + shown(Path(word.removeprefix("--out=")))
    return "python3 -m benchmarks.h200_oracles " + " ".join(shlex.quote(w) for w in words)


def merge_run(run_path: Path, record_path: Path) -> dict:
    """Fold one run's record (a GPU host's ``--out``) into the union record (``results/h200/oracles.json``).

    The run's runs are appended (its commands made portable), its entries renumbered to them and put in
    place of the union's entries of the same tasks, which move to ``superseded_entries``, so that the
    union keeps every grade ever recorded and shows the latest. The union's tasks and oracle files become
    the run's (the newer tree). Returns the union record, written back to ``record_path``.
    """
    run, record = json.loads(run_path.read_text()), json.loads(record_path.read_text())
    offset = len(record["runs"])
    for r in run["runs"]:
        record["runs"].append({**r, "command": portable_command(shlex.split(r["command"])[3:])})
    by_task = {e["task"]: e for e in record["entries"]}
    superseded = record.setdefault("superseded_entries", [])
    for e in run["entries"]:
        if e["task"] in by_task:
            superseded.append(by_task[e["task"]])
        by_task[e["task"]] = {**e, "run": e["run"] + offset}
    record["entries"] = sorted(by_task.values(), key=lambda e: e["task"])
    last = record["runs"][-1]
    record.update(command=last["command"], commit=last["commit"], date=last["date"], device=last["device"],
                  tasks=run["tasks"], oracle_files=run["oracle_files"])
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    return record


def entry(task: str, family: str, dsl: str, kernel: Path, grade: dict, reward: dict, wall: float,
          measured: dict, run_index: int, separate: dict | None = None, memory: dict | None = None) -> dict:
    extra = {"separate_share": separate} if separate is not None else {}
    if memory is not None:
        extra["gpu_memory"] = memory
    return {**extra,"task": task, "family": family, "dsl": dsl, "kernel": shown(kernel),
            "status": grade.get("status"), "kernel_ms": grade.get("kernel_ms"), "eager_ms": grade.get("eager_ms"),
            "speedup": grade.get("speedup"), "reward": reward.get("reward"), "infra_error": reward.get("infra_error"),
            "dsl_share": measured.get("dsl_share"), "grading_s": round(wall, 2), "message": grade.get("message"),
            "mismatch": grade.get("mismatch"),  # an INCORRECT grade's numbers: error and allowance
            "share_detail": {k: measured.get(k) for k in SHARE_DETAIL if measured.get(k) is not None},
            "stages_s": grade.get("stages_s"), "timing_detail": timing_detail(grade), "run": run_index}


def timing_detail(grade: dict) -> dict:
    """The grade's clock details (``TIMING_DETAIL``) as numbers where they are, with the eager drift
    check's median (``eager_timing_after``) beside the baseline the speedup divides."""
    details = grade.get("details") or {}
    out: dict = {}
    for key in TIMING_DETAIL:
        if key in details:
            try:
                out[key] = float(details[key])
            except (TypeError, ValueError):
                out[key] = details[key]
    check = grade.get("eager_timing_after") or {}
    if check.get("median_ms") is not None:
        out["eager_check_ms_median"] = check["median_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--only", default="", help="comma-separated task names, NN, NN_dsl or families")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--judge-args", default="", help="extra `serve` arguments (e.g. '--timed 20')")
    p.add_argument("--kernel", action="append", default=[], metavar="TASK=FILE", help="grade FILE for TASK")
    p.add_argument("--timeout", type=float, default=1500.0, help="seconds per final grade")
    p.add_argument("--merge", action="store_true", help="keep entries of an existing --out not re-measured")
    p.add_argument("--separate-share", action="store_true",
                   help="also measure the DSL share in a separate plain process (dsl_share.py)")
    p.add_argument("--stop-after", type=float, default=None, metavar="S",
                   help="start no grading after S seconds (a host that ends commands at a time limit then "
                        "loses no grading halfway; the record names what was left)")
    p.add_argument("--independent", action="store_true",
                   help="also time each PASSED oracle with the plain loop (independent_loop.py) beside its grade")
    p.add_argument("--merge-from", type=Path, metavar="RUN",
                   help="fold RUN (another host's --out) into --out and exit; grades nothing")
    args = p.parse_args(argv)
    if args.merge_from:
        merged = merge_run(args.merge_from, args.out)
        print(f"{args.out}: {len(merged['entries'])} entries from {len(merged['runs'])} runs")
        return 0
    command = portable_command(argv or sys.argv[1:])
    only = {k.strip() for k in args.only.split(",") if k.strip()} or None
    overrides = dict((k, Path(v).resolve()) for k, _, v in (x.partition("=") for x in args.kernel))
    record: dict = {"runs": [], "entries": []}
    if args.merge and args.out.exists():
        record.update(json.loads(args.out.read_text()))
    run = {"command": command, "commit": git_commit(), "date": dt.datetime.now(dt.UTC).isoformat(),
           "device": device_name(args.device) if args.device.startswith("cuda") else args.device,
           "judge_args": args.judge_args}
    record["runs"] = [*record.get("runs", []), run]
    record.update(command=command, commit=run["commit"], date=run["date"], device=run["device"])
    record["tasks"] = {f"{p.stem}_{dsl}": p.parent.name for p in problem_paths() for dsl in DSLS}
    record["oracle_files"] = sorted(p.stem for p in oracle_files())
    entries = {e["task"]: e for e in record.get("entries", [])}

    def save() -> None:
        record["entries"] = sorted(entries.values(), key=lambda e: e["task"])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")

    work = Path(tempfile.mkdtemp(prefix="mkb-h200-oracles-"))
    work.chmod(0o711)  # the judge drops each evaluation to its own uid: it must traverse to its folder
    state = work / "state"
    proc, url = start_judge(state, args.device, shlex.split(args.judge_args))
    from metakernelbench.judge.client import JudgeClient

    admin = JudgeClient(url, (state / "admin.token").read_text().strip())
    started = time.monotonic()
    picked = selected(only, overrides)
    try:
        for index, (task, family, dsl, kernel) in enumerate(picked):
            if args.stop_after is not None and time.monotonic() - started > args.stop_after:
                run["not_started"] = [t for t, _, _, _ in picked[index:]]
                print(f"--stop-after {args.stop_after:g} s: not started: {', '.join(run['not_started'])}", flush=True)
                break
            token = admin.request("POST", "/v1/tokens", {"scope": "final", "label": f"oracle-{task}"})["token"]
            watch = GpuMemoryWatch(smi_id(args.device)) if args.device.startswith("cuda") else None
            with watch or contextlib.nullcontext():
                grade, reward, wall = final_grade(url, token, task, kernel, args.timeout)
            memory = watch.summary() if watch else None
            measured = grade.get("dsl_share") or {}
            separate = share(task, dsl, kernel, args.device) if args.separate_share else None
            entries[task] = entry(task, family, dsl, kernel, grade, reward, wall, measured, len(record["runs"]) - 1,
                                  separate, memory)
            if args.independent and grade.get("status") == "PASSED":
                entries[task]["independent"] = independent(task, kernel, args.device)
                entries[task]["agreement"] = agreement(entries[task])
            print(f"{task}: {grade.get('status')} speedup={grade.get('speedup')} "
                  f"dsl_share={measured.get('dsl_share')} grading={wall:.1f}s"
                  + (f" gpu_peak={memory.get('peak_gib')}GiB" if memory else "")
                  + (f" plain loop={entries[task].get('independent')}" if args.independent else ""), flush=True)
            save()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
