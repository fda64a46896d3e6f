"""The demo's lift for identical kernels, run after run: how far apart two gradings of one kernel read.

    python -m benchmarks.demo_lift [--runs 2] [--out results/cpu/demo-lift.json] [--keep DIR]

The miniature study (``demo.study``, CPU mode) gives the solo and the transfer attempt of each TIRx
task the same prepared kernel, so every paired ratio would be 1 on a grader and a host that held
still, and the lift 0. The study's judge times the eager reference call by call beside each kernel
(``--interleave-eager``), so the ratio is r = s_transfer / s_solo (each row's ``basis``); without it, r =
t_solo / t_transfer. Each run's ratios and lift, its wall time, and for every graded kernel its
medians and speedup and the medians of its timed calls in blocks of 50 (how far the host moved
inside one grading) go into the record; the ratios are the product's own (``compare.build_comparisons``).
Another run of the same command on the same host is the independent check of the figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.h200_judge import git_commit
from metakernelbench.skill_transfer import metrics
from metakernelbench.skill_transfer.collect import read_attempts
from metakernelbench.skill_transfer.compare import build_comparisons, chosen_attempts
from metakernelbench.skill_transfer.models import split_direction

REPO = Path(__file__).resolve().parents[1]
BLOCK = 50  # timed calls per block of the within-grading spread


def block_medians(samples_ms: list[float], block: int = BLOCK) -> list[float]:
    """Median of each run of ``block`` consecutive timed calls (the last block may be shorter)."""
    return [statistics.median(samples_ms[i:i + block]) for i in range(0, len(samples_ms), block)]


def grade_of(study: Path, job: str | None, trial: str | None) -> dict | None:
    path = study / "jobs" / str(job) / str(trial) / "verifier" / "grade.json"
    return json.loads(path.read_text()) if job and trial and path.is_file() else None


def summarize(study: Path) -> dict:
    """One finished study folder: each paired comparison where both attempts passed, and the lift
    per direction over them (the same kernels in both arms, so the ideal is r = 1 and lift 0)."""
    attempts = read_attempts(study / "attempts.jsonl")
    by_key = {a.key: a for a in chosen_attempts(attempts)}  # the attempts the comparisons used
    comparisons, _ = build_comparisons(attempts)
    rows, lifts = [], {}
    for c in comparisons:
        if c.outcome != "both_pass":
            continue
        _, target = split_direction(c.direction)
        spread = {}
        for arm in ("solo", "transfer"):
            attempt = by_key[(c.model, c.problem, target, arm)]
            grade = grade_of(study, attempt.job, attempt.trial) or {}
            samples = grade.get("kernel_timing", {}).get("samples_ms") or []
            blocks = block_medians(samples) if samples else []
            spread[arm] = {"timed_calls": len(samples), "block_median_min_ms": min(blocks, default=None),
                           "block_median_max_ms": max(blocks, default=None),
                           "eager_ms": grade.get("eager_ms"), "speedup": grade.get("speedup"),
                           "eager_baseline": grade.get("details", {}).get("eager_baseline")}
        rows.append({"problem": c.problem, "direction": c.direction, "basis": c.basis, "solo_ms": c.solo_ms,
                     "transfer_ms": c.transfer_ms, "r": c.r, "within_grading": spread})
    for direction in sorted({row["direction"] for row in rows}):
        lifts[direction] = metrics.lift([row["r"] for row in rows if row["direction"] == direction])
    return {"comparisons": rows, "lift": lifts}


def _recorded(argv: list[str]) -> list[str]:
    """The command line as the record states it: without ``--keep DIR``, which only says where this
    host kept the study folders (a path of that machine, nothing the figures depend on)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--keep":
            skip = True
        elif not arg.startswith("--keep="):
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--out", type=Path, default=REPO / "results" / "cpu" / "demo-lift.json")
    p.add_argument("--keep", type=Path, default=None, help="keep the study folders here (default: a temporary one)")
    p.add_argument("--study-args", default="", help="extra arguments for demo.study (e.g. '--problems 28')")
    args = p.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="mkb-demo-lift-"))
    runs = []
    for i in range(args.runs):
        out = root / f"run-{i + 1}"
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "demo.study", "--out", str(out), *args.study_args.split()],
                              capture_output=True, text=True, cwd=REPO)
        wall = time.monotonic() - started
        if done.returncode:
            sys.stdout.write(done.stdout[-3000:] + done.stderr[-3000:])
            raise SystemExit(f"run {i + 1}: demo.study failed ({done.returncode})")
        runs.append({"run": i + 1, "wall_s": round(wall, 1), **summarize(out)})
        print(f"run {i + 1}: {wall:.0f} s, lift " + ", ".join(f"{d} {v:+.1%}" for d, v in runs[-1]["lift"].items())
              + "; r " + ", ".join(f"{row['problem'][:2]} {row['r']:.3f}" for row in runs[-1]["comparisons"]),
              flush=True)
    ratios = [row["r"] for run in runs for row in run["comparisons"]]
    record = {
        "command": "python -m benchmarks.demo_lift " + " ".join(_recorded(argv if argv is not None else sys.argv[1:])),
        "commit": git_commit(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, {platform.platform()}",
        "runs": runs,
        "summary": {
            "lifts": [v for run in runs for v in run["lift"].values()],
            "ratios": ratios,
            "ratios_within_10_percent": sum(0.9 <= r <= 1 / 0.9 for r in ratios),
            "wall_s": [run["wall_s"] for run in runs],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
