"""``mkb`` commands of the skill-transfer part: arms, collect, compare, annotate, report, skill-check."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

# Only light modules here: Harbor, LiteLLM and the report's dependencies are imported inside the
# commands, so that `mkb <command> --help` answers at once.
from .annotation_models import LAYERS

__all__ = [
    "annotate_cmd", "arms", "check_submission_cmd", "collect_cmd", "compare_cmd", "register", "report_cmd",
    "skill_check", "submission_cmd",
]


def _parse_kwargs(pairs: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected key=value, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def arms(
    model: Annotated[str, typer.Option(help="Model as the agent names it, e.g. provider/name.")],
    tasks_dir: Annotated[Path, typer.Option(help="Folder of generated task folders.")] = Path("tasks"),
    jobs_dir: Annotated[Path, typer.Option(help="Harbor jobs folder (harbor run -o).")] = Path("jobs"),
    out: Annotated[Path | None, typer.Option(help="Where configs go (default: runs/<model>).")] = None,
    agent: Annotated[str | None, typer.Option(
        help="Harbor agent name or module:Class (default: the base config's, else terminus-2).")] = None,
    ak: Annotated[list[str] | None, typer.Option("--ak", help="Agent kwarg key=value (JSON values).")] = None,
    env: Annotated[str | None, typer.Option(
        help="Harbor environment type or module:Class (default: the base config's, else docker).")] = None,
    n_concurrent: Annotated[int | None, typer.Option(help="Concurrent trials per job.")] = None,
    problems: Annotated[str | None, typer.Option(help="Comma-separated problem ids or names.")] = None,
    base_config: Annotated[Path | None, typer.Option(help="A JobConfig YAML/JSON to start from.")] = None,
) -> None:
    """Write Harbor job configs for a model's four arms; rerun as solo trials finish."""
    from metakernelbench.contract import DSLS

    from .arms import ArmsError, ArmsOptions, plan_arms
    from .models import DIRECTIONS

    opts = ArmsOptions(
        model=model,
        tasks_dir=tasks_dir,
        jobs_dir=jobs_dir,
        out=out,
        agent=agent,
        agent_kwargs=_parse_kwargs(ak or []),
        env=env,
        n_concurrent=n_concurrent,
        problems=[p.strip() for p in problems.split(",") if p.strip()] if problems else None,
        base_config=base_config,
    )
    try:
        manifest = plan_arms(opts)
    except ArmsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    states = ("planned", "done", "ready", "skipped", "waiting")
    typer.echo(f"Arms of {model} (manifest: {opts.out_dir / 'arms.json'})")
    for arm in (*(f"solo_{d}" for d in DSLS), *DIRECTIONS):
        counts = ", ".join(f"{s} {manifest.count(arm, s)}" for s in states if manifest.count(arm, s))
        typer.echo(f"  {arm:14s} {counts}")
    typer.echo("Run the solo arms (resumable):")
    for path in manifest.solo_configs.values():
        typer.echo(f"  harbor run -c {path}")
    ready = [e.config for e in manifest.entries if e.state == "ready"]
    if ready:
        commands = opts.out_dir / "transfer_commands.txt"
        commands.write_text("".join(f"harbor run -c {c}\n" for c in ready))
        typer.echo(f"Run the {len(ready)} ready transfer attempts: one `harbor run -c FILE` each, "
                   f"listed in {commands} (e.g. xargs -P 4 -L 1 < {commands})")
    waiting = sum(e.state == "waiting" for e in manifest.entries)
    if waiting:
        typer.echo(f"{waiting} transfer attempts wait for their source solo attempt; rerun "
                   "`mkb arms` with the same options once more solo trials have finished.")


def collect_cmd(
    job_dirs: Annotated[list[Path], typer.Argument(help="Harbor job folders (or folders of them).")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here, not stdout.")] = None,
) -> None:
    """Turn Harbor job folders into attempts.jsonl (one JSON line per attempt)."""
    from .collect import collect

    missing = [str(p) for p in job_dirs if not p.exists()]
    if missing:
        typer.echo(f"error: no such folder: {', '.join(missing)}", err=True)
        raise typer.Exit(2)
    rows, stats = collect(job_dirs)
    text = "".join(row.model_dump_json() + "\n" for row in rows)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
    typer.echo(f"{len(rows)} attempts: {stats.summary()}", err=True)


def compare_cmd(
    attempts: Annotated[Path, typer.Argument(help="attempts.jsonl from mkb collect.", exists=True, dir_okay=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    n_boot: Annotated[int, typer.Option(help="Bootstrap resamples per cell.")] = 2000,
) -> None:
    """Paired comparison of transfer against solo attempts: lift, help and harm rates, intervals."""
    from .collect import read_attempts
    from .compare import compare
    from .tables import render_tables

    result = compare(read_attempts(attempts), seed=seed, n_boot=n_boot)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        typer.echo(render_tables(result))


def annotate_cmd(
    attempts: Annotated[Path, typer.Argument(help="attempts.jsonl from mkb collect.", exists=True, dir_okay=False)],
    job_dirs: Annotated[list[Path], typer.Argument(help="The Harbor job folders the attempts came from.")],
    model: Annotated[str, typer.Option(help="Annotator: any LiteLLM model string, e.g. anthropic/claude-x.")],
    api_base: Annotated[str | None, typer.Option(help="API base URL (e.g. a local OpenAI-compatible server).")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Where to write (default: <stem>.annotations.jsonl beside ATTEMPTS).")] = None,
    pass_id: Annotated[int, typer.Option("--pass", help="Pass number: a second pass is a separate cache entry.")] = 1,
    layers: Annotated[str, typer.Option(help="Comma-separated layers.")] = ",".join(LAYERS),
    tries: Annotated[int, typer.Option(help="Requests per item before it is recorded unlabelled.")] = 3,
    cache: Annotated[Path | None, typer.Option(
        help="Cache folder (default: <stem>.annotate-cache beside ATTEMPTS).")] = None,
    max_trajectory_chars: Annotated[int, typer.Option(help="Trajectory text shown per attempt.")] = 60_000,
) -> None:
    """Annotate skills and transfers with an LLM: content labels, follow, propagation, failure class."""
    from .annotate import Materials, build_items, default_output, index_trials, run_items
    from .collect import read_attempts
    from .llm import Annotator, AnnotatorError, AnnotatorSettings

    wanted = [x.strip() for x in layers.split(",") if x.strip()]
    unknown = sorted(set(wanted) - set(LAYERS))
    missing = [str(p) for p in job_dirs if not p.exists()]
    if unknown or missing or tries < 1 or pass_id < 1:
        why = (f"unknown layer(s) {', '.join(unknown)} (expected {', '.join(LAYERS)})" if unknown
               else f"no such folder: {', '.join(missing)}" if missing else "--tries and --pass must be at least 1")
        typer.echo(f"error: {why}", err=True)
        raise typer.Exit(2)
    rows = read_attempts(attempts)
    settings = AnnotatorSettings(model=model, api_base=api_base, pass_id=pass_id, max_tries=tries,
                                 cache_dir=cache or attempts.with_name(f"{attempts.stem}.annotate-cache"))
    annotator = Annotator(settings)
    items = build_items(rows, Materials(index_trials(job_dirs), max_chars=max_trajectory_chars), wanted)
    try:
        records = run_items(items, annotator)
    except AnnotatorError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    target = output or default_output(attempts, pass_id)
    target.write_text("".join(r.model_dump_json() + "\n" for r in records))
    unlabelled = sum(r.status == "unlabelled" for r in records)
    typer.echo(f"{len(records)} items ({unlabelled} unlabelled), {annotator.calls} requests sent, "
               f"{sum(r.cached for r in records)} from the cache; wrote {target}", err=True)


def report_cmd(
    attempts: Annotated[Path, typer.Argument(help="attempts.jsonl from mkb collect.", exists=True, dir_okay=False)],
    out: Annotated[Path, typer.Option("-o", "--out", help="Output folder.")],
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    n_boot: Annotated[int, typer.Option(help="Bootstrap resamples per cell.")] = 2000,
    note: Annotated[str | None, typer.Option(help="A banner shown at the top (e.g. 'synthetic data').")] = None,
    annotations: Annotated[Path | None, typer.Option(
        help="mkb annotate's output (default: <stem>.annotations.jsonl beside ATTEMPTS, if it exists).")] = None,
    agreement: Annotated[Path | None, typer.Option(
        help="A second annotations file (another annotator or pass): adds Cohen's kappa per layer.")] = None,
) -> None:
    """Write the tables (Markdown, CSV) and an HTML page with plots."""
    from .annotate import default_output, read_annotations
    from .collect import read_attempts
    from .report import write_report

    if annotations is None and default_output(attempts).is_file():
        annotations = default_output(attempts)
    for path in (annotations, agreement):
        if path is not None and not path.is_file():
            typer.echo(f"error: no such annotations file: {path}", err=True)
            raise typer.Exit(2)
    if agreement is not None and annotations is None:
        typer.echo("error: --agreement needs the first annotations file (--annotations)", err=True)
        raise typer.Exit(2)
    try:
        first = read_annotations(annotations) if annotations else None
        second = read_annotations(agreement) if agreement else None
        write_report(read_attempts(attempts), out, seed=seed, n_boot=n_boot, note=note,
                     annotations=first, second=second)
    except ValueError as exc:
        typer.echo(f"error: {str(exc).splitlines()[0]}", err=True)
        raise typer.Exit(2) from exc
    extra = f" with the annotations of {annotations}" if annotations else ""
    typer.echo(f"wrote {out / 'index.html'}, {out / 'report.md'} and CSV tables{extra}")


def skill_check(
    paths: Annotated[list[Path], typer.Argument(help="SKILL.md files, or folders searched for them.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per skill.")] = False,
) -> None:
    """Report code, commands and API calls in skills; exits 1 when any skill has a violation."""
    from .hygiene import check_skill

    files: list[Path] = []
    for path in paths:
        files += sorted(path.rglob("SKILL.md")) if path.is_dir() else [path]
    dirty = 0
    for file in files:
        report = check_skill(file.read_bytes().decode("utf-8", errors="replace"))
        dirty += not report.clean
        if as_json:
            typer.echo(json.dumps({"skill": str(file), "chars": report.chars, "counts": report.counts,
                                   "violations": [v.model_dump() for v in report.violations]}))
            continue
        typer.echo(f"{file}: {'clean' if report.clean else f'{len(report.violations)} violation(s)'}")
        for v in report.violations:
            typer.echo(f"  line {v.line}: {v.kind}: {v.excerpt}")
    if not as_json:
        typer.echo(f"{dirty} of {len(files)} skills break the prose-only rule")
    if dirty:
        raise typer.Exit(1)


def check_submission_cmd(
    jobs: list[Path] = typer.Argument(..., help="The submitted Harbor job folders (all four arms)."),
    tasks: Path = typer.Option(Path("tasks"), "--tasks", help="The published tasks to check against."),
) -> None:
    """Check that submitted job folders followed the leaderboard protocol; exit 1 on any departure."""
    from .submission import check_submission, dataset_version

    if not (tasks / "dataset.toml").is_file():
        typer.echo(f"error: {tasks} holds no dataset.toml (give the published tasks folder with --tasks)", err=True)
        raise typer.Exit(2)
    report = check_submission(jobs, tasks)
    for line in report.problems:
        typer.echo(line)
    arms = ", ".join(f"{arm} {n}" for arm, n in report.arms.items()) or "none"
    typer.echo(f"{report.trials} trial(s) of metakernelbench {dataset_version(tasks)}; arms: {arms}; "
               f"agent: {report.agent or 'not one'}")
    if not report.accepted:
        typer.echo(f"rejected: {len(report.problems)} departure(s) from the protocol", err=True)
        raise typer.Exit(1)
    typer.echo("accepted")


def submission_cmd(
    jobs: list[Path] = typer.Argument(..., help="The finished Harbor job folders (all four arms)."),
    tasks: Path = typer.Option(None, "--tasks", help="The published tasks to check against "
                               "(default: the checkout's tasks/)."),
    out: Path = typer.Option(Path("submission"), "--out", "-o", help="Bundle folder to write (must not exist)."),
) -> None:
    """Check finished job folders against the leaderboard protocol and write the submission bundle.

    The bundle: the job folders (for `harbor upload`), leaderboard-row.yaml, submission.json, UPLOAD.md.

    Nothing is written when the check finds a departure (exit 1).
    """
    from metakernelbench.problems import REPO_ROOT

    from .bundle import RejectedSubmission, write_bundle

    tasks = REPO_ROOT / "tasks" if tasks is None else tasks
    if not (tasks / "dataset.toml").is_file():
        typer.echo(f"error: {tasks} holds no dataset.toml (give the published tasks folder with --tasks)", err=True)
        raise typer.Exit(2)
    if out.exists():
        typer.echo(f"error: {out} exists; give a new --out folder", err=True)
        raise typer.Exit(2)
    try:
        submission = write_bundle(jobs, tasks, out)
    except RejectedSubmission as exc:
        for line in exc.problems:
            typer.echo(line)
        typer.echo(f"rejected: {exc}; nothing written", err=True)
        raise typer.Exit(1) from exc
    m = submission.metrics
    typer.echo(f"accepted: {submission.trials} trial(s), {submission.agent} {submission.model or ''}".rstrip()
               + f"; score {m['score']:.3f}, pass rate {m['pass_rate']:.3f}, "
               f"geomean speedup {m['geomean_speedup']:.3f}, INFRA_ERROR {m['infra_errors']}")
    typer.echo(f"wrote {out}/ (jobs/, leaderboard-row.yaml, submission.json, UPLOAD.md); next: {out}/UPLOAD.md")


def register(app: typer.Typer) -> None:
    """Add this part's commands to the ``mkb`` app."""
    app.command("arms")(arms)
    app.command("collect")(collect_cmd)
    app.command("compare")(compare_cmd)
    app.command("annotate")(annotate_cmd)
    app.command("report")(report_cmd)
    app.command("skill-check")(skill_check)
    app.command("check-submission")(check_submission_cmd)
    app.command("submission")(submission_cmd)
