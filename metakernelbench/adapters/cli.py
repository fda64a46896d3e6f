"""``mkb build`` (generate tasks/ from problems/; ``--check``: verify it is current) and ``mkb registry``."""

from __future__ import annotations

from pathlib import Path

import typer

from metakernelbench.problems import ProblemError

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``build`` to the ``mkb`` app."""

    @app.command("build")
    def build_command(
        out: Path = typer.Option(Path("tasks"), "--out", "--output-dir",
                                 help="Folder of generated task folders (--output-dir: Harbor's adapter name)."),
        problems: Path = typer.Option(Path("problems"), "--problems", help="Problem files root."),
        only: list[str] | None = typer.Option(
            None, "--only", "--task-ids", help="Only this problem (id, stem or task name); repeatable "
            "(--task-ids: Harbor's adapter name)."
        ),
        check: bool = typer.Option(
            False, "--check", help="Render into a temporary folder and list every difference; "
            "exit 1 if any (CI)."
        ),
        oracles: Path = typer.Option(Path("oracles"), "--oracles", help="Oracle kernels folder."),
        manifest: Path = typer.Option(Path("tasks/dataset.toml"), "--manifest",
                                      help="Dataset manifest (Harbor wants it beside the tasks); metric.py "
                                      "is written next to it."),
        remote_judge: str = typer.Option(None, "--remote-judge", help="Render the remote-judge variant "
                                         "(judge URL; allowlist network, no compose files) into --out "
                                         "(not tasks/); docs/running.md."),
        fmt: str = typer.Option("harbor", "--format", help="harbor | terminal-bench (Terminal-Bench 0.2 "
                                "layout, written to --out, not tasks/)."),
    ) -> None:
        """Render every problem into tasks/<NN>_<slug>_{cutedsl,tirx}/ and write tasks/dataset.toml."""
        from .build import ForeignTaskError, build  # deferred: keeps `mkb --help` fast
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
                    fix = "run `mkb build` and commit"
                    if any(line.startswith("foreign") for line in differences):
                        fix = "remove or rewrite as problems the foreign task folders, then " + fix
                    typer.echo(f"{len(differences)} difference(s): {fix}.", err=True)
                    raise typer.Exit(1)
                typer.echo(f"{out} and {manifest} are up to date.")
                return
            report = build(problems, out, manifest, oracles, only, images=Path("."))
        except (ProblemError, ForeignTaskError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        typer.echo(f"wrote {len(report.written)} task folder(s) under {out}")
        for name in report.removed:
            typer.echo(f"removed stale {out}/{name}")
        typer.echo(f"wrote {report.manifest}")

    @app.command("registry")
    def registry_command(
        out: Path = typer.Option(Path.home() / ".cache" / "metakernelbench" / "registry.json", "--out", "-o",
                                 help="Registry file to write."),
        tasks: Path = typer.Option(None, "--tasks", help="Folder of generated task folders (default: "
                                   "the checkout's tasks/, whatever the current folder)."),
        git_url: str = typer.Option(None, "--git-url", help="Pin every task to this public git repository "
                                    "(with --commit) instead of absolute local paths: the published form."),
        commit: str = typer.Option(None, "--commit", help="Full commit id the --git-url entries are pinned to."),
        metric: bool = typer.Option(None, "--metric/--no-metric", help="Name tasks/metric.py as the dataset's "
                                    "metric (local form only; Harbor runs it with uv). Default: when uv is on PATH."),
    ) -> None:
        """Write a Harbor registry for `harbor run --dataset metakernelbench --registry-path FILE`, from any folder.

        Prints the file's absolute path, so `--registry-path "$(mkb registry)"` works.
        """
        import shutil

        from metakernelbench.problems import REPO_ROOT

        from .build import TASK_DIR
        from .registry import git_registry_json, local_registry_json

        tasks = REPO_ROOT / "tasks" if tasks is None else tasks
        task_dirs = sorted(p for p in tasks.iterdir() if p.is_dir() and TASK_DIR.match(p.name)) \
            if tasks.is_dir() else []
        if not task_dirs:
            typer.echo(f"error: no generated task folders under {tasks} (run mkb build, or give --tasks)", err=True)
            raise typer.Exit(2)
        try:
            if git_url or commit:
                if not (git_url and commit):
                    raise ValueError("--git-url and --commit go together")
                text = git_registry_json(task_dirs, git_url, commit)
            else:
                with_metric = shutil.which("uv") is not None if metric is None else metric
                if metric is None and not with_metric:
                    typer.echo("note: uv is not on PATH, so the registry keeps Harbor's mean metric "
                               "(install uv and rerun for the dataset metric)", err=True)
                text = local_registry_json(tasks, task_dirs, with_metric)
        except (ValueError, FileNotFoundError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        typer.echo(str(out.resolve()))
