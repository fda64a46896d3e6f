"""``mkb grade``: grade one kernel file on the local GPU and print the report an agent would see."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from metakernelbench.problems import find_problem

from .grader import GradeConfig, grade
from .report import render_report


def grade_command(
    problem: str = typer.Argument(..., help="problem id, NN_slug, task name or problem file"),
    kernel: Path = typer.Argument(..., help="the kernel file (defines solve)"),
    dsl: str = typer.Option(..., "--dsl", help="cutedsl | tirx"),
    device: str = typer.Option(None, "--device", help="cuda (default when present) or cpu"),
    reward_dir: Path = typer.Option(None, "--reward-dir", help="write grade.json and reward.json here"),
    json_out: bool = typer.Option(False, "--json", help="print the full result as JSON"),
    small: bool = typer.Option(False, "--small", help="grade at the problem's small workload (tests)"),
) -> None:
    """Grade KERNEL against PROBLEM."""
    if dsl not in ("cutedsl", "tirx"):
        raise typer.BadParameter("--dsl must be cutedsl or tirx")
    loaded = find_problem(problem)
    if small:
        loaded.spec = loaded.spec.model_copy(update={"workload": {**loaded.spec.workload,
                                                                  **loaded.spec.small_workload}})
    result = grade(loaded, kernel, dsl, device=device, config=GradeConfig())
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
