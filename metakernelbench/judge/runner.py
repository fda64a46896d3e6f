"""One evaluation, in its own process (subprocess isolation) or its own container (Docker isolation).

The judge starts ``python -m metakernelbench.judge.runner ...`` per evaluation and reads
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
``grading`` (``protocol.LoadRequest``). The static rules run once, here, before any worker starts;
``grade`` takes their passing check (``rules.StaticCheck``) instead of reading the file again.

``--warm`` (the judge's pool, ``isolation.SubprocessIsolation``): the runner is started before its
evaluation exists, in the evaluation's own folder, uid and CPUs. It starts one candidate worker per
DSL of ``--warm-dsls`` and the reference worker (``launch.start_warm_workers``: torch, the device and
the DSL, nothing of an evaluation), imports the grader and torch itself, reports ``{"warm": "ready"}``
and then blocks on its dispatch channel (its original standard input, moved to a private descriptor
like the report channel, so no worker inherits it) for one JSON line: ``{"problem", "dsl", "kernel"}``.
From there it is the runner above, with its workers already started: the other DSLs' candidate workers
are ended, the candidate and the reference worker get the evaluation's setup (``WarmWorkers.assign``)
and apply it before anything of the submission runs. End of input instead of a dispatch: it exits.
A warm runner grades one evaluation and is never reused. Its result's ``details`` say how it started:
``warm`` (true: its workers were pre-started), ``warm_ready_s`` (its start before the dispatch: the
time a cold start spends first), ``warm_idle_s``, ``warm_fallback`` (why pre-started workers were not
used, then ``grade`` starts its own) and, for every runner, ``runner_before_grade_s``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
import traceback
from contextlib import ExitStack

from metakernelbench.contract import DSLS  # standard library only, like everything this runner imports first

__all__ = ["CONFIG_FLAGS", "PR_SET_DUMPABLE", "PR_SET_PDEATHSIG", "config_flags", "main", "parse_args"]

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
    "interleave_eager": ("--interleave-eager", bool, "time the eager reference call by call beside the kernel"),
}


def config_flags(overrides: dict) -> list[str]:
    """The runner's flags for GradeConfig ``overrides`` (field -> value), in ``CONFIG_FLAGS``' order."""
    flags: list[str] = []
    for field, (flag, kind, _) in CONFIG_FLAGS.items():
        if overrides.get(field) is not None:
            value = overrides[field]
            if kind is bool:  # a switch: present when on
                flags += [flag] if value else []
            else:
                flags += [flag, repr(float(value)) if kind is float else str(value)]
    return flags


def _private_dispatch_stream():
    """The dispatch channel of a warm runner: a private duplicate of stdin; fd 0 now reads /dev/null,
    so the workers it spawns inherit no way to read what the judge dispatches."""
    fd = os.dup(0)  # inheritable=False by default (PEP 446)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return os.fdopen(fd, "r")


def _read_dispatch(args: argparse.Namespace, stream) -> argparse.Namespace | None:
    """The evaluation a warm runner is dispatched (``--problem``, ``--dsl``, ``--kernel`` from one JSON
    line), or None at the end of input (the judge ended the warm runner without using it)."""
    line = stream.readline(1 << 16)
    if not line.strip():
        return None
    job = json.loads(line)
    if not (isinstance(job, dict) and job.get("dsl") in DSLS
            and all(isinstance(job.get(k), str) and job[k] for k in ("problem", "kernel"))):
        raise ValueError("a dispatch names the problem, the DSL and the kernel file")
    return argparse.Namespace(**{**vars(args), "problem": job["problem"], "dsl": job["dsl"], "kernel": job["kernel"]})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="metakernelbench.judge.runner", description=__doc__)
    p.add_argument("--problem", help="problem id or NN_slug (required unless --warm)")
    p.add_argument("--dsl", choices=DSLS, help="(required unless --warm)")
    p.add_argument("--kernel", help="the kernel file (required unless --warm)")
    p.add_argument("--warm", action="store_true",
                   help="start the workers first, then read the evaluation from stdin (the judge's pool)")
    p.add_argument("--warm-dsls", default=",".join(DSLS), type=lambda text: [d for d in text.split(",") if d],
                   help="with --warm: the DSLs to start a candidate worker for (comma-separated)")
    p.add_argument("--device", default=None)
    p.add_argument("--problems-root", default=None)
    p.add_argument("--small", action="store_true", help="grade at the problem's small workload (CPU tests)")
    for field, (flag, kind, text) in CONFIG_FLAGS.items():
        if kind is bool:
            p.add_argument(flag, action="store_const", const=True, default=None, dest=field, help=text)
        else:
            p.add_argument(flag, type=kind, default=None, dest=field, metavar=flag[2:].replace("-", "_").upper(),
                           help=text)
    args = p.parse_args(argv)
    if args.warm and not args.device:
        p.error("--warm needs --device")
    if not args.warm and not (args.problem and args.dsl and args.kernel):
        p.error("--problem, --dsl and --kernel are required (unless --warm)")
    return args


def _early_inputs(args: argparse.Namespace):
    """(kernel file, problem file, number of outputs, the kernel's passing ``rules.StaticCheck``) when
    the workers can be started (or handed the evaluation) before the grader decides anything: the
    device is given, the kernel passes the static rules, the problem file declares its outputs as a
    literal. Otherwise why not (a string). ``grade`` takes the check instead of checking again."""
    from pathlib import Path

    from metakernelbench.problems import ProblemError, declared_output_count, find_problem_path
    from metakernelbench.verifier.rules import check_source

    if not args.device:
        return "no device given"
    try:
        kernel = Path(args.kernel).resolve()
        source = kernel.read_bytes()
        problem_file = find_problem_path(args.problem, Path(args.problems_root) if args.problems_root
                                         else None).resolve()
    except (OSError, ProblemError) as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    outputs = declared_output_count(problem_file)
    if outputs is None:
        return "the problem file does not declare its outputs as a literal"
    checked = check_source(args.problem, args.dsl, kernel, source, 0.0)
    if not checked.passed:
        return "the static rules refuse the kernel file"
    return kernel, problem_file, outputs, checked


def _start_workers_early(args: argparse.Namespace, inputs=None):
    """Start the evaluation's two workers before this process imports torch (they take the longest
    to start; ``launch.start_workers``), when ``_early_inputs`` (``inputs``, read here when not given)
    has everything they need without torch. None otherwise (``grade`` then starts them itself)."""
    from metakernelbench.verifier.launch import GradeConfig, start_workers

    inputs = _early_inputs(args) if inputs is None else inputs
    if isinstance(inputs, str):
        return None
    kernel, problem_file, outputs, _ = inputs
    return start_workers(kernel, args.dsl, problem_file, outputs, args.device, GradeConfig(**_overrides(args)))


def _assign_warm(warm, args: argparse.Namespace, inputs):
    """The warm workers made this evaluation's (``WarmWorkers.assign``) for ``_early_inputs``' ``inputs``:
    (its ``Workers``, None), or (None, why not) with them ended (``grade`` then starts its own, as for
    a runner started cold)."""
    why = inputs if isinstance(inputs, str) else warm.unusable(args.dsl)
    if why is not None:
        warm.close()
        return None, why
    kernel, problem_file, outputs, _ = inputs
    return warm.assign(kernel, args.dsl, problem_file, outputs), None


def _overrides(args: argparse.Namespace) -> dict:
    """The GradeConfig fields the flags set."""
    return {field: getattr(args, field) for field in CONFIG_FLAGS if getattr(args, field) is not None}


def _warm_up(args: argparse.Namespace, facts: dict[str, str]):
    """A warm runner's start, before any evaluation: its workers (``launch.start_warm_workers``), then
    the grader and torch in this process. The workers, or None when they could not start (the
    evaluation then starts its own; the grader's imports failing raises)."""
    from metakernelbench.verifier.launch import GradeConfig, start_warm_workers

    warm, config = None, GradeConfig(**_overrides(args))
    try:
        warm = start_warm_workers(args.warm_dsls, args.device, config)
    except Exception as exc:  # noqa: BLE001 - pre-starting is an optimisation
        facts["warm_fallback"] = f"the warm workers did not start: {type(exc).__name__}: {exc}"[:300]
    try:
        import torch  # noqa: F401 - what the grading imports below, loaded before the dispatch

        import metakernelbench.verifier.grader  # noqa: F401
    except Exception:
        if warm is not None:
            warm.close()
        raise
    if warm is not None:
        warm.wait_ready(config.start_timeout_s)  # one that is not ready by then: ``unusable`` says so
    return warm


def main(argv: list[str] | None = None) -> int:
    began = time.perf_counter()
    report = _private_report_stream()
    _undumpable()
    args = parse_args(argv)

    def emit(obj: dict) -> None:
        report.write(json.dumps(obj) + "\n")
        report.flush()

    facts = {"warm": "false"}  # how this evaluation started (the result's details)
    warm = None
    if args.warm:
        dispatch = _private_dispatch_stream()  # before any worker is spawned
        try:
            warm = _warm_up(args, facts)
        except Exception as exc:  # noqa: BLE001 - no evaluation yet: the judge starts another warm runner
            emit({"infra": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=5)})
            return 3
        ready = time.perf_counter()
        facts["warm_ready_s"] = f"{ready - began:.3f}"
        emit({"warm": "ready"})
        try:
            job = _read_dispatch(args, dispatch)
        except ValueError as exc:  # the judge's own message: an infrastructure fault
            job = exc
        finally:
            dispatch.close()
        if not isinstance(job, argparse.Namespace):
            if warm is not None:
                warm.close()
            if job is None:  # ended unused
                return 0
            emit({"infra": f"a dispatch that cannot be read: {job}"})
            return 3
        args, began = job, time.perf_counter()
        facts["warm_idle_s"] = f"{began - ready:.3f}"

    emit({"stage": "loading"})
    early = checked = None
    try:
        inputs = _early_inputs(args)
        checked = None if isinstance(inputs, str) else inputs[3]  # the static stage, done once
        if warm is not None:
            early, why = _assign_warm(warm, args, inputs)
            facts.update({"warm": "true"} if why is None else {"warm_fallback": why})
        else:
            early = _start_workers_early(args, inputs)
    except Exception as exc:  # noqa: BLE001 - an early start is an optimisation: grade() starts them otherwise
        if warm is not None:
            warm.close()
            facts.update(warm="false", warm_fallback=f"the warm workers could not be assigned: {exc}"[:300])
        early = None
    with ExitStack() as owned:
        if early is not None:
            owned.enter_context(early)  # ended on every way out; ``grade`` ends them itself when it ends
        try:
            from pathlib import Path

            from metakernelbench.problems import find_problem
            from metakernelbench.verifier.grader import GradeConfig, grade

            root = Path(args.problems_root) if args.problems_root else None
            problem = find_problem(args.problem, root)
            if args.small:
                problem.spec = problem.spec.model_copy(
                    update={"workload": {**problem.spec.workload, **problem.spec.small_workload}})
            config = GradeConfig(**_overrides(args))
            import torch  # noqa: F401 - a broken install must fail here, before grading starts
        except Exception as exc:  # noqa: BLE001 - an infrastructure fault: nothing of the kernel was graded
            owned.close()  # the workers end before the report says so
            emit({"infra": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=5)})
            return 3
        emit({"stage": "grading"})
        facts["runner_before_grade_s"] = f"{time.perf_counter() - began:.3f}"
        result = grade(problem, args.kernel, args.dsl, device=args.device, config=config, workers=early,
                       checked=checked)
    result.details.update(facts)
    emit({"result": result.model_dump(mode="json")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
