"""The grader's times beside an independent stopwatch, for every oracle; writes timing.json.

    python3 -m benchmarks.h200_timing --out results/h200/timing.json [--gradings 5] [--only 28_tirx,02_cutedsl]
                                      [--paths mkb_grade,judge] [--merge]

For each oracle kernel under ``oracles/``:
- the independent loop (``independent_loop.py``, which imports nothing of the grader): kernel and
  eager medians in one plain process, before the gradings and again after them, and with
  ``--interleave`` between every round of gradings too (the host's launch speed drifts within the
  hour, ``results/h200/drift.json``: each grading is then also compared with the loops run just
  before and after it, ``ratio_to_adjacent_independent``);
- ``--gradings`` rounds, each one grading through ``mkb grade`` (the CLI, one process per grading,
  as a user runs it) and one through the judge (a local judge with subprocess isolation, the
  sandbox's own ``submit`` client, one attempt token per oracle), taking turns.

One entry per (oracle, path) in ``entries``: kernel_ms / eager_ms / speedup (one value per grading),
their median, ``ratio_to_independent`` (median kernel_ms / the independent runs' median), ``within`` (the
contract: within 5 % or 10 us of the independent loop), ``speedup_cv``, ``grading_s`` and the
per-stage breakdown of every grading. The record carries the command, commit, device and date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.h200_judge import device_name, git_commit, sandbox_submit, start_judge
from metakernelbench.problems import find_problem, oracle_files

REPO = Path(__file__).resolve().parents[1]


def oracles(only: set[str] | None) -> list[tuple[str, str, str, Path]]:
    """(key NN_dsl, problem id, dsl, file) for every oracle kernel."""
    found = []
    for path in oracle_files():
        dsl = "cutedsl" if path.stem.endswith("_cutedsl") else "tirx"
        key = f"{path.stem[:2]}_{dsl}"
        if only is None or key in only:
            found.append((key, path.stem[:2], dsl, path))
    return found


def independent(problem_file: Path, kernel: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.independent_loop", str(problem_file),
                           str(kernel)], capture_output=True, text=True, timeout=900, cwd=REPO)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def grade_cli(problem: str, kernel: Path, dsl: str) -> dict:
    out = Path(tempfile.mkdtemp(prefix="mkb-timing-"))
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "metakernelbench.cli", "grade", problem, str(kernel), "--dsl", dsl,
                           "--reward-dir", str(out)], capture_output=True, text=True, timeout=1800)
    wall = time.time() - started
    try:
        result = json.loads((out / "grade.json").read_text())
    except OSError:
        return {"status": "NO_RESULT", "message": done.stdout[-1000:] + done.stderr[-1000:], "process_s": wall}
    result["process_s"] = wall
    return result


def grade_once(path: str, pid: str, kernel: Path, dsl: str, task: str, judge, token) -> tuple[dict, float]:
    """One grading through ``mkb grade`` or the judge: (its result, its wall seconds)."""
    if path == "mkb_grade":
        r = grade_cli(pid, kernel, dsl)
        return r, r.get("grade_wall_s") or 0.0
    if path == "judge" and judge is not None:
        out: dict = {}
        sandbox_submit(judge[1], token, f"metakernelbench/{task}", kernel, out)
        answer = out.get("answer", {})
        r = dict(answer.get("result") or {})
        r.setdefault("status", answer.get("status"))
        return r, answer.get("wall_s") or 0.0
    return {"status": "NOT_RUN", "message": f"unknown path {path!r}"}, 0.0


def _number(x) -> bool:
    return isinstance(x, (int, float))


def summarize(task: str, path: str, inds: list[dict], results: list[dict], grading_s: list[float],
              interleaved: bool = False) -> dict:
    """One (oracle, path) entry. ``inds``: the independent loop's runs of this oracle, in order (with
    ``interleaved``, run i and i+1 bracket grading i, so each grading has its own neighbours)."""
    kernel = [r.get("kernel_ms") for r in results]
    speed = [r.get("speedup") for r in results]
    ind_kernel = [i.get("kernel_ms") for i in inds]
    ind_ok = [k for k in ind_kernel if _number(k)]
    ind_speed = [i.get("speedup") for i in inds if _number(i.get("speedup"))]
    ind_eager = [i.get("eager_ms") for i in inds if _number(i.get("eager_ms"))]
    ind_ms = statistics.median(ind_ok) if ind_ok else None
    entry = {"task": task, "path": path, "independent_kernel_ms": ind_ms, "independent_kernel_ms_runs": ind_kernel,
             "independent_eager_ms": statistics.median(ind_eager) if ind_eager else None,
             "independent_speedup": statistics.median(ind_speed) if ind_speed else None,
             "statuses": [r.get("status") for r in results], "kernel_ms": kernel,
             "eager_ms": [r.get("eager_ms") for r in results], "speedup": speed, "grading_s": grading_s,
             "stages_s": [r.get("stages_s") for r in results],
             "signal_overhead_us": [(r.get("details") or {}).get("signal_overhead_us_median") for r in results],
             "host_launch_us": [(r.get("details") or {}).get("host_launch_us_median") for r in results],
             "candidate_start_s": [{k: v for k, v in (r.get("details") or {}).items()
                                    if k.startswith("candidate_start_")} for r in results[:1]],
             "eager_baseline": [(r.get("details") or {}).get("eager_baseline") for r in results],
             # the stretch before GO (the draw's first byte to TOUCHED) and what of it was charged
             "window": [{k: (r.get("details") or {}).get(k) for k in (
                 "exposed_us_median", "reference_exposed_us_median", "window_charge_us_median",
                 "window_charge_us_max", "spans_ms_median")} for r in results],
             "sandbox": results[0].get("sandbox") if results else None}
    if len(inds) >= 2:
        entry["independent_after_kernel_ms"] = ind_kernel[-1]
    ok_k = [k for k in kernel if _number(k)]
    ok_s = [s for s in speed if _number(s)]
    if ok_k and ind_ms:
        med = statistics.median(ok_k)
        entry["kernel_ms_median"] = med
        entry["ratio_to_independent"] = med / ind_ms
        entry["abs_diff_us"] = abs(med - ind_ms) * 1e3
        entry["within"] = abs(med / ind_ms - 1) <= 0.05 or entry["abs_diff_us"] <= 10.0
    if interleaved and len(ind_kernel) == len(kernel) + 1:
        # each grading against the mean of the independent runs just before and just after it
        entry["ratio_to_adjacent_independent"] = [
            k / (0.5 * (a + b)) if _number(k) and _number(a) and _number(b) else None
            for k, a, b in zip(kernel, ind_kernel[:-1], ind_kernel[1:], strict=True)]
    if len(ok_s) >= 2:
        entry["speedup_cv"] = statistics.pstdev(ok_s) / statistics.mean(ok_s)
    if grading_s:
        entry["grading_s_median"] = statistics.median(grading_s)
    return entry


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--gradings", type=int, default=5)
    p.add_argument("--only", default="", help="comma-separated NN_dsl keys (default: every oracle)")
    p.add_argument("--paths", default="mkb_grade,judge")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--merge", action="store_true", help="keep entries of an existing --out not re-measured")
    p.add_argument("--interleave", action="store_true",
                   help="run the independent loop between gradings too (each grading gets its own neighbours)")
    args = p.parse_args(argv)
    command = "python3 -m benchmarks.h200_timing " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    only = {k.strip() for k in args.only.split(",") if k.strip()} or None
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    run = {"command": command, "commit": git_commit(), "date": dt.datetime.now(dt.UTC).isoformat(),
           "device": device_name(args.device), "gradings": args.gradings, "interleave": args.interleave}
    record: dict = {"contract": "grader kernel_ms within 5 % or 10 us of the independent loop; speedup CV <= 2 %",
                    "runs": [], "entries": []}
    if args.merge and args.out.exists():
        record.update(json.loads(args.out.read_text()))  # earlier runs, entries and notes are kept
    record["runs"] = [*record.get("runs", []), run]
    judge = None
    if "judge" in paths:
        work = Path(tempfile.mkdtemp(prefix="mkb-h200-timing-"))
        work.chmod(0o711)
        state = work / "state"
        proc, url = start_judge(state, args.device, [])
        from metakernelbench.judge.client import JudgeClient

        judge = (proc, url, JudgeClient(url, (state / "admin.token").read_text().strip()), work)

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")

    try:
        for key, pid, dsl, kernel in oracles(only):
            problem = find_problem(pid)
            task = f"{problem.spec.name}_{dsl}"
            inds = [independent(problem.spec.path, kernel)]
            print(f"[{key}] independent: {json.dumps({k: inds[0].get(k) for k in ('kernel_ms', 'eager_ms')})}"
                  f" {inds[0].get('error', '')[-300:]}", flush=True)
            results: dict[str, list] = {path: [] for path in paths}
            walls: dict[str, list] = {path: [] for path in paths}
            token = None
            if "judge" in paths and judge is not None:
                token = judge[2].register(f"timing-{key}", f"metakernelbench/{task}", minutes=120)["token"]
            for g in range(args.gradings):
                for path in paths:  # the paths take turns, so drift of the host hits both alike
                    r, wall = grade_once(path, pid, kernel, dsl, task, judge, token)
                    results[path].append(r)
                    walls[path].append(wall)
                if args.interleave or g == args.gradings - 1:
                    # the independent loop again: beside each grading (--interleave), else after all
                    inds.append(independent(problem.spec.path, kernel))
            for path in paths:
                entry = {**summarize(task, path, inds, results[path], walls[path], args.interleave),
                         "commit": run["commit"], "date": run["date"]}
                record["entries"] = [e for e in record["entries"] if (e["task"], e["path"]) != (task, path)]
                record["entries"].append(entry)
                save()
                print(f"[{key}] {path}: {entry['statuses']} kernel {entry.get('kernel_ms_median')} ms "
                      f"ratio {entry.get('ratio_to_independent')} cv {entry.get('speedup_cv')} "
                      f"grading {entry.get('grading_s_median')} s", flush=True)
    finally:
        if judge is not None:
            judge[0].terminate()
            try:
                judge[0].wait(30)
            except subprocess.TimeoutExpired:
                judge[0].kill()
            run["judge_log_tail"] = (judge[3] / "judge.log").read_text(errors="replace")[-2000:]
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
