"""``mkb grade``: grade one kernel file on the local GPU and print the report an agent would see."""

from __future__ import annotations

from pathlib import Path

import typer

# the grading settings are torch-free (their defaults are the options' defaults); torch, the problem
# loader and the grader are imported inside the command: `mkb grade --help` answers at once
from metakernelbench.contract import DSLS, GradeConfig

__all__ = ["grade_command", "register"]


def _fail(message: str) -> None:
    """One line on stderr, no traceback, exit status 2 (a usage error: nothing was graded)."""
    typer.echo(f"mkb grade: {message}", err=True)
    raise typer.Exit(2)


def _near(key: str) -> str:
    import difflib

    from metakernelbench.problems import problem_paths

    stems = [p.stem for p in problem_paths()]
    close = difflib.get_close_matches(key, stems, n=3, cutoff=0.3) or \
        [s for s in stems if s.startswith(key[:1])][:3]
    return ", ".join(close) if close else "ids 01-" + f"{len(stems):02d}"


def _check_device(device: str | None) -> None:
    import torch

    if device is None:
        return
    if device != "cpu" and not device.startswith("cuda"):
        _fail(f"unknown device {device!r}: use cpu or cuda[:N]")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            _fail("no CUDA GPU on this machine: grade on the CPU with --device cpu (TIRx kernels built for llvm)")
        index = device.partition(":")[2]
        count = torch.cuda.device_count()
        if index and (not index.isdigit() or int(index) >= count):
            _fail(f"no device {device!r}: this machine has cuda:0" + (f" to cuda:{count - 1}" if count > 1 else ""))


def grade_command(
    problem: str = typer.Argument(..., help="problem id, NN_slug, task name or problem file"),
    kernel: Path = typer.Argument(..., help="the kernel file (defines solve)"),
    dsl: str = typer.Option(..., "--dsl", help=" | ".join(DSLS)),
    device: str = typer.Option(None, "--device", help="cuda (default when present) or cpu"),
    reward_dir: Path = typer.Option(None, "--reward-dir", help="write grade.json and reward.json here"),
    json_out: bool = typer.Option(False, "--json", help="print the full result as JSON"),
    small: bool = typer.Option(False, "--small", help="grade at the problem's SMALL_WORKLOAD instead of the upstream "
                               "one, every check the same (for CPUs and tests: its speedup says little about the "
                               "real size)"),
    compile_timeout: float = typer.Option(
        GradeConfig.compile_timeout_s, "--compile-timeout", metavar="SECONDS",
        help="the compile budget: the kernel file's import and its DSL compile (at import or in the first call)"),
    call_timeout: float = typer.Option(
        GradeConfig.call_timeout_s, "--call-timeout", metavar="SECONDS",
        help="the call budget: each call (the first one gets it on top of what the import left of the compile budget)"),
    interleave_eager: bool = typer.Option(
        False, "--interleave-eager",
        help="time the eager reference call by call beside the kernel (for a host whose speed moves between "
             "minutes, such as a shared CPU machine): the speedup is the ratio of the two medians of one loop; it "
             "trusts the kernel not to slow the reference's calls beside it (docs/grading.md)"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress lines on stderr"),
) -> None:
    """Grade KERNEL (a file defining solve) against PROBLEM and print the report; exit 0 when it passed.

    Without a GPU: a TIRx kernel built for the CPU (llvm), --device cpu --small (tests/fixtures/kernels/).
    A progress line goes to stderr as each stage begins.
    """
    from rich.console import Console

    from metakernelbench.problems import ProblemError, find_problem

    from .grader import grade
    from .report import render_report

    if dsl not in DSLS:
        _fail(f"--dsl must be {' or '.join(DSLS)}, not {dsl!r}")
    for flag, value in (("--compile-timeout", compile_timeout), ("--call-timeout", call_timeout)):
        if not value > 0:
            _fail(f"{flag} must be a positive number of seconds, not {value:g}")
    if not kernel.is_file():
        _fail(f"no kernel file at {kernel}")
    _check_device(device)
    try:
        loaded = find_problem(problem)
    except ProblemError:
        _fail(f"no problem matches {problem!r} (near: {_near(problem)}); ids, NN_slug names and task names work")
    if small:
        loaded.spec = loaded.spec.model_copy(update={"workload": {**loaded.spec.workload,
                                                                  **loaded.spec.small_workload}})
    config = GradeConfig(compile_timeout_s=compile_timeout, call_timeout_s=call_timeout,
                         interleave_eager=interleave_eager)
    progress = None if quiet else (lambda line: typer.echo(f"mkb grade {line}", err=True))
    result = grade(loaded, kernel, dsl, device=device, config=config, progress=progress)
    if reward_dir:
        result.write(reward_dir)
    console = Console()
    if json_out:
        console.print_json(result.model_dump_json())
    else:
        console.print(render_report(result))
    raise typer.Exit(0 if result.passed else 1)


def register(app: typer.Typer) -> None:
    app.command("grade")(grade_command)
