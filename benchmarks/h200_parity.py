"""Parity on the GPU: every oracle kernel graded by this grader and by the original benchmark's.

Run from the repository root on a GPU host (as root: the original grader reads ``/app/kernel.py``
and writes ``/logs/verifier``, so each of its runs gets those two paths bind-mounted from a
temporary folder in a private mount namespace), with a checkout of the original benchmark at the
commit ``problems/catalog.toml`` names, brought there as a folder (the host needs no network):

    python3 -m benchmarks.h200_parity --original /path/to/MetaKernelBench --runs 3 \\
        --out results/h200/parity.json --experiment adapters/metakernelbench/parity_experiment.json

The original's code is run from its own checkout as an external tool (its ``template/grader.py``
and ``template/contract.py`` beside the problem file as ``task.py``, as its ``build.py`` lays out a
task) and is never copied into this repository. Only problems whose file the original ships are
compared (it ships 32 of the 74; the other 42 must be assembled from SOL-ExecBench first, which its
README describes). Each kernel is graded ``--runs`` times by each grader, alternating, in this
process's Python (the same torch and DSL builds for both). The raw records go to ``--out`` with the
command, commit, device and date; ``--experiment`` is rewritten in Harbor's parity form
(``metakernelbench.adapters.parity``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from metakernelbench.adapters.parity import Grade, KernelRun, parity_experiment

REPO = Path(__file__).resolve().parents[1]

GRADE_TIMEOUT_S = 1800


def pairs(original: Path, only: list[str]) -> list[tuple[str, str, Path, Path]]:
    """(task, dsl, our oracle, the original's problem file) for every problem both ship."""
    found = []
    for oracle in sorted((REPO / "oracles").glob("*/*_*.py")):
        stem, _, dsl = oracle.stem.rpartition("_")
        theirs = original / "problems" / oracle.parent.name / f"{stem}.py"
        if dsl in ("cutedsl", "tirx") and theirs.is_file() and (not only or stem[:2] in only):
            found.append((oracle.stem, dsl, oracle, theirs))
    return found


def grade_ours(task: str, dsl: str, oracle: Path) -> Grade:
    problem = task.rpartition("_")[0]
    done = subprocess.run([sys.executable, "-m", "metakernelbench.cli", "grade", problem, str(oracle), "--dsl", dsl,
                           "--json"], capture_output=True, text=True, cwd=REPO, timeout=GRADE_TIMEOUT_S)
    try:
        result = json.loads(done.stdout[done.stdout.index("{"):])
    except ValueError:
        return Grade(passed=False, status="NO_RESULT", error=(done.stderr or done.stdout)[-2000:])
    return Grade(passed=bool(result["passed"]), status=result["status"], speedup=result.get("speedup"),
                 kernel_ms=result.get("kernel_ms"), eager_ms=result.get("eager_ms"),
                 error=None if result["passed"] else str(result.get("message", ""))[-2000:])


def grade_original(original: Path, problem_file: Path, oracle: Path) -> Grade:
    with tempfile.TemporaryDirectory(prefix="mkb-parity-") as tmp:
        root = Path(tmp)
        grader = root / "grader"
        grader.mkdir()
        for name in ("grader.py", "contract.py"):
            shutil.copy(original / "metakernelbench" / "template" / name, grader / name)
        shutil.copy(problem_file, grader / "task.py")
        (root / "app").mkdir()
        (root / "logs" / "verifier").mkdir(parents=True)
        shutil.copy(oracle, root / "app" / "kernel.py")
        script = (f"mkdir -p /app /logs && mount --bind {shlex.quote(str(root / 'app'))} /app && "
                  f"mount --bind {shlex.quote(str(root / 'logs'))} /logs && "
                  f"exec {shlex.quote(sys.executable)} {shlex.quote(str(grader / 'grader.py'))}")
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                              capture_output=True, text=True, cwd=grader, timeout=GRADE_TIMEOUT_S)
        reward_path = root / "logs" / "verifier" / "reward.json"
        if not reward_path.is_file():
            return Grade(passed=False, status="NO_RESULT", error=(done.stderr or done.stdout)[-2000:])
        reward = json.loads(reward_path.read_text())
        details_path = root / "logs" / "verifier" / "reward-details.json"
        details = json.loads(details_path.read_text()) if details_path.is_file() else {}
    passed = bool(reward.get("passed"))
    ms = details.get("median_ms") or {}
    status = "PASSED" if passed else "INCORRECT" if reward.get("imported") and not details.get("error") else "ERROR"
    return Grade(passed=passed, status=status, speedup=reward.get("speedup_vs_eager") if passed else None,
                 kernel_ms=ms.get("kernel"), eager_ms=ms.get("eager"),
                 error=None if passed else str(details.get("error") or details.get("mismatch") or "")[-2000:])


def _device() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _original_commit(original: Path, given: str | None) -> str:
    """The original's commit: its own checkout's HEAD when ``original`` is the top of a git checkout
    (never the HEAD of a repository that merely contains the folder), else ``given``, else the commit
    that problems/catalog.toml says the problems are aligned to."""
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, cwd=original)
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() == original.resolve():
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=original).stdout.strip()
    if given:
        return given
    found = re.search(r"commit ([0-9a-f]{40})", (REPO / "problems" / "catalog.toml").read_text())
    if not found:
        raise SystemExit(f"{original} is not a git checkout: give --original-commit")
    return found[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--original", type=Path, required=True, help="checkout of the original benchmark")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--only", nargs="*", default=[], help="problem ids (e.g. 28 25); default: every shared one")
    p.add_argument("--out", type=Path, default=REPO / "results" / "h200" / "parity.json")
    p.add_argument("--experiment", type=Path, default=REPO / "adapters" / "metakernelbench" / "parity_experiment.json")
    p.add_argument("--notes", default="", help="what explains a difference (written into the file's notes)")
    p.add_argument("--original-commit", default=None,
                   help="the original's commit when --original is a copy of its files rather than a git checkout "
                        "(default: the commit problems/catalog.toml is aligned to)")
    args = p.parse_args()
    original_commit = _original_commit(args.original, args.original_commit)
    chosen = pairs(args.original, args.only)
    if not chosen:
        p.error(f"no oracle kernel of a problem that {args.original}/problems ships")
    records: list[KernelRun] = []
    for run in range(args.runs):
        for task, dsl, oracle, theirs in chosen:
            ours = grade_ours(task, dsl, oracle)
            original = grade_original(args.original, theirs, oracle)
            records.append(KernelRun(task=task, run=run, harbor=ours, original=original))
            print(f"run {run} {task}: ours {ours.status} {ours.speedup}, original {original.status} "
                  f"{original.speedup}", flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    date, device = dt.date.today().isoformat(), _device()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": shlex.join([Path(sys.executable).name, "-m", "benchmarks.h200_parity", *sys.argv[1:]]),
        "commit": commit,
        "original_commit": original_commit or None, "date": date, "device": device,
        "records": [r.model_dump() for r in records]}, indent=2) + "\n")
    size = sum(1 for d in (REPO / "tasks").iterdir() if (d / "task.toml").is_file())  # (no Harbor import here)
    shown = args.out.resolve()
    shown = shown.relative_to(REPO).as_posix() if shown.is_relative_to(REPO) else args.out.name
    notes = (f"Oracle kernels graded by this grader and by the original's (commit {original_commit or 'unknown'}) "
             f"on {device}, {args.runs} run(s) each; raw records: {shown}. " + args.notes).strip()
    args.experiment.write_text(json.dumps(parity_experiment(records, date=date, device=device, notes=notes,
                                                            adapted_benchmark_size=size), indent=2) + "\n")
    print(f"wrote {args.out} and {args.experiment}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
