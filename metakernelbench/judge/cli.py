"""``mkb judge ...``: the judge's commands under the ``mkb`` tool (the same as ``python -m
metakernelbench.judge ...``, which needs fewer dependencies)."""

from __future__ import annotations

import typer

__all__ = ["judge_command", "register"]


def judge_command(ctx: typer.Context) -> None:
    """Run the grading service for Harbor trials: serve, relay, token, status, stop (mkb judge --help)."""
    from .__main__ import main

    raise typer.Exit(main(list(ctx.args), prog="mkb judge"))


def register(app: typer.Typer) -> None:
    app.command("judge", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                           "help_option_names": []})(judge_command)
