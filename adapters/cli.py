"""``mkb build``: generate tasks/ and dataset.toml from problems/ (``--check``: verify they are current)."""

from __future__ import annotations

from pathlib import Path

import typer

from metakernelbench.problems import ProblemError


def register(app: typer.Typer) -> None:
    """Add ``build`` to the ``mkb`` app."""

    @app.command("build")
    def build_command(
        out: Path = typer.Option(Path("tasks"), "--out", help="Folder of generated task folders."),
        problems: Path = typer.Option(Path("problems"), "--problems", help="Problem files root."),
        only: list[str] | None = typer.Option(
            None, "--only", help="Only this problem (id, stem or task name); repeatable."
        ),
        check: bool = typer.Option(
            False, "--check", help="Render into a temporary folder and list every difference; "
            "exit 1 if any (CI)."
        ),
        oracles: Path = typer.Option(Path("oracles"), "--oracles", help="Oracle kernels folder."),
        manifest: Path = typer.Option(Path("dataset.toml"), "--manifest", help="Dataset manifest."),
        remote_judge: str = typer.Option(None, "--remote-judge", help="Render the remote-judge variant "
                                         "(judge URL; allowlist network, no compose files) into --out "
                                         "(not tasks/); docs/running.md."),
        fmt: str = typer.Option("harbor", "--format", help="harbor | terminal-bench (Terminal-Bench 0.2 "
                                "layout, written to --out, not tasks/)."),
    ) -> None:
        """Render every problem into tasks/<NN>_<slug>_{cutedsl,tirx}/ and write dataset.toml."""
        from .build import build  # deferred: keeps `mkb --help` fast
        from .build import check as check_tasks

        if (remote_judge or fmt != "harbor") and out == Path("tasks"):
            typer.echo("error: --remote-judge and --format terminal-bench write a variant: give another --out",
                       err=True)
            raise typer.Exit(2)
        try:
            if fmt == "terminal-bench":
                from .terminal_bench import build_terminal_bench

                written = build_terminal_bench(problems, out, oracles, only)
                typer.echo(f"wrote {len(written)} Terminal-Bench task folder(s) under {out}")
                return
            if fmt != "harbor":
                raise typer.BadParameter("--format must be harbor or terminal-bench")
            if remote_judge:
                report = build(problems, out, out / "dataset.toml", oracles, only, remote_judge=remote_judge)
                typer.echo(f"wrote {len(report.written)} remote-judge task folder(s) under {out}")
                return
            if check:
                differences = check_tasks(problems, out, manifest, oracles, only, images=Path("."))
                for line in differences:
                    typer.echo(line)
                if differences:
                    typer.echo(f"{len(differences)} difference(s): run `mkb build` and commit.", err=True)
                    raise typer.Exit(1)
                typer.echo(f"{out} and {manifest} are up to date.")
                return
            report = build(problems, out, manifest, oracles, only, images=Path("."))
        except ProblemError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        typer.echo(f"wrote {len(report.written)} task folder(s) under {out}")
        for name in report.removed:
            typer.echo(f"removed stale {out}/{name}")
        typer.echo(f"wrote {report.manifest}")
