"""One evaluation, in its own process (subprocess isolation) or its own container (Docker isolation).

The judge starts ``python -m metakernelbench.verifier.judge.runner ...`` per evaluation and reads
its report from the runner's original standard output: one JSON object per line, ``{"stage": ...}``
while it works and ``{"result": <GradeResult>}`` at the end. Before anything else the runner moves
that stream to a private descriptor and points fd 1 at stderr, so the processes it spawns (the
candidate's worker among them) inherit no way to write on the report channel, and it marks itself
non-dumpable, so a process of the same user cannot open its descriptors or memory through /proc or
ptrace (that also protects the seeds and expected outputs held in this process).

Stages tell the judge who to blame when no result arrives: before ``grading`` nothing of the
submission has run, so a failure is the infrastructure's (not charged); after it, a grader that was
killed, stopped or silenced is a verdict against the submission. The runner may start the
evaluation's workers while ``loading`` (before it imports torch: their start is the longest stage),
but the candidate's worker imports the kernel file only when the grader releases it, after
``grading`` (``protocol.LoadRequest``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import traceback

from metakernelbench.contract import DSLS  # standard library only, like everything this runner imports first

PR_SET_DUMPABLE = 4


def _private_report_stream():
    """The report channel: a private duplicate of stdout; fd 1 now goes to stderr."""
    sys.stdout.flush()
    fd = os.dup(1)  # inheritable=False by default (PEP 446)
    os.dup2(2, 1)
    return os.fdopen(fd, "w", buffering=1)


PR_SET_PDEATHSIG = 1


def _undumpable() -> None:
    """No /proc or ptrace access from the same user; and die with the judge (no orphaned evaluation
    keeps a GPU busy after its judge is gone)."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to protect against here
        pass
    if os.getppid() != parent:  # the judge died before the death signal was armed
        os._exit(3)


# The GradeConfig fields a judge sets per evaluation, as this runner's flags (``GradeSettings.runner_flags``
# writes them; tests shrink the counts, ``serve`` passes its time limits): field -> (flag, type, help).
# An absent flag keeps GradeConfig's default, as ``mkb grade`` does.
CONFIG_FLAGS: dict[str, tuple[str, type, str | None]] = {
    "correctness_draws": ("--draws", int, None),
    "warmup": ("--warmup", int, None),
    "timed": ("--timed", int, None),
    "rechecks": ("--rechecks", int, None),
    "compile_timeout_s": ("--compile-timeout", float, "the compile budget, seconds"),
    "call_timeout_s": ("--call-timeout", float, "the call budget, seconds"),
}


def config_flags(overrides: dict) -> list[str]:
    """The runner's flags for GradeConfig ``overrides`` (field -> value), in ``CONFIG_FLAGS``' order."""
    flags: list[str] = []
    for field, (flag, kind, _) in CONFIG_FLAGS.items():
        if overrides.get(field) is not None:
            value = overrides[field]
            flags += [flag, repr(float(value)) if kind is float else str(value)]
    return flags


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="metakernelbench.verifier.judge.runner", description=__doc__)
    p.add_argument("--problem", required=True, help="problem id or NN_slug")
    p.add_argument("--dsl", required=True, choices=DSLS)
    p.add_argument("--kernel", required=True)
    p.add_argument("--device", default=None)
    p.add_argument("--problems-root", default=None)
    p.add_argument("--small", action="store_true", help="grade at the problem's small workload (CPU tests)")
    for field, (flag, kind, text) in CONFIG_FLAGS.items():
        p.add_argument(flag, type=kind, default=None, dest=field, metavar=flag[2:].replace("-", "_").upper(), help=text)
    return p.parse_args(argv)


def _start_workers_early(args: argparse.Namespace):
    """Start the evaluation's two workers before this process imports torch (they take the longest
    to start; ``launch.start_workers``), when everything they need is known without torch: the
    device is given, the kernel passes the static rules, the problem file declares its outputs as a
    literal. None otherwise (``grade`` then starts them itself)."""
    from pathlib import Path

    from metakernelbench.problems import PROBLEMS_DIR, ProblemError, declared_output_count, find_problem_path
    from metakernelbench.verifier.launch import GradeConfig, start_workers
    from metakernelbench.verifier.rules import static_refusal

    if not args.device:
        return None
    try:
        kernel = Path(args.kernel).resolve()
        source = kernel.read_bytes()
        problem_file = find_problem_path(args.problem, Path(args.problems_root) if args.problems_root
                                         else PROBLEMS_DIR).resolve()
    except (OSError, ProblemError):
        return None
    outputs = declared_output_count(problem_file)
    if outputs is None or static_refusal(args.problem, args.dsl, source, 0.0) is not None:
        return None
    return start_workers(kernel, args.dsl, problem_file, outputs, args.device, GradeConfig(**_overrides(args)))


def _overrides(args: argparse.Namespace) -> dict:
    """The GradeConfig fields the flags set."""
    return {field: getattr(args, field) for field in CONFIG_FLAGS if getattr(args, field) is not None}


def main(argv: list[str] | None = None) -> int:
    report = _private_report_stream()
    _undumpable()
    args = parse_args(argv)

    def emit(obj: dict) -> None:
        report.write(json.dumps(obj) + "\n")
        report.flush()

    emit({"stage": "loading"})
    early = None
    try:
        early = _start_workers_early(args)
    except Exception:  # noqa: BLE001 - an early start is an optimisation: grade() starts them otherwise
        early = None
    try:
        from pathlib import Path

        from metakernelbench.problems import PROBLEMS_DIR, find_problem
        from metakernelbench.verifier.grader import GradeConfig, grade

        root = Path(args.problems_root) if args.problems_root else PROBLEMS_DIR
        problem = find_problem(args.problem, root)
        if args.small:
            problem.spec = problem.spec.model_copy(
                update={"workload": {**problem.spec.workload, **problem.spec.small_workload}})
        config = GradeConfig(**_overrides(args))
        import torch  # noqa: F401 - a broken install must fail here, before grading starts
    except Exception as exc:  # noqa: BLE001 - an infrastructure fault: nothing of the kernel was graded
        from metakernelbench.verifier.launch import close_quietly

        close_quietly(early)
        emit({"infra": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=5)})
        return 3
    emit({"stage": "grading"})
    result = grade(problem, args.kernel, args.dsl, device=args.device, config=config, workers=early)
    emit({"result": result.model_dump(mode="json")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
