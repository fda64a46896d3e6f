"""``mkb report``: the comparison as Markdown, CSV and one self-contained HTML page.

Everything is derived from the attempts table by ``compare.compare`` (the same numbers that
``mkb compare --json`` prints), plus two descriptive tables: attempt pass rates per arm and skill
hygiene per model (``hygiene``), and, when ``mkb annotate`` has run, the annotation tables
(``annotation_tables``). The HTML page embeds its charts as inline SVG and its style in a
``<style>`` block, so it opens from disk without a server, scripts or network.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path

from . import annotation_report, svg
from .annotation_models import AnnotationRecord
from .annotation_tables import AnnotationTables, annotation_tables
from .compare import chosen_attempts, compare
from .hygiene import KINDS
from .models import DIRECTIONS, STANDINGS, STATUS_SKIPPED, Attempt, CompareResult
from .tables import CELL_HEADERS, cell_rows, md_table, pct, render_tables

__all__ = [
    "CSS", "DEFINITIONS", "HYGIENE_HEADERS", "PASS_HEADERS", "charts", "hygiene_rows", "pass_rate_rows",
    "render_html", "render_markdown", "write_report",
]

DEFINITIONS = """\
Per (model, problem, direction) the transfer attempt is compared with the solo attempt on the same
target task: r = t_solo / t_transfer clipped to [1/4, 4] when both pass (r = s_transfer / s_solo, the
speedups' ratio, where both grades timed the eager reference beside the kernel, as the CPU demo
does: each time in units of the eager call timed with it); r = 4 for a rescue (only
the transfer passes); r = 1/4 for a break (only the solo passes); r = 1 for a joint failure or a
skipped treatment (the source left no skill). Paired lift = geometric mean of r − 1; help rate =
share with r ≥ 5/4; harm rate = share with r ≤ 4/5. Intervals: 95 % percentile bootstrap over the
problems of each cell. Source standing: the source attempt is *above* the target's solo attempt
when it passes where the solo fails, or both pass and its speedup is at least 5/4 of the solo's;
*below* symmetrically; otherwise *same*. Attempts that ended in an infrastructure error are left
out of every comparison and counted under "Left out".
"""


def pass_rate_rows(attempts: Sequence[Attempt]) -> list[list[object]]:
    """Per model, arm and DSL: attempts graded, passed, pass rate, median speedup of passes.

    Counts the attempts the comparison uses (one per problem; superseded reruns left out), plus the
    skipped treatments and the infrastructure errors seen.
    """
    def group_key(a: Attempt) -> tuple[str, str, str]:
        return a.model, "solo" if a.arm == "solo" else f"{a.source_dsl}→{a.dsl}", a.dsl

    groups: dict[tuple[str, str, str], list[Attempt]] = defaultdict(list)
    for a in chosen_attempts(attempts):
        groups[group_key(a)].append(a)
    infra: dict[tuple[str, str, str], int] = defaultdict(int)
    for a in attempts:
        if a.excluded:
            infra[group_key(a)] += 1
            groups.setdefault(group_key(a), [])
    rows = []
    for key, group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != "solo", kv[0][2])):
        graded = [a for a in group if a.status != STATUS_SKIPPED]
        passed = [a for a in graded if a.passed]
        speedups = [a.speedup for a in passed if a.speedup is not None]
        rows.append([
            *key, len(graded), len(passed),
            pct(len(passed) / len(graded)) if graded else "–",
            f"{statistics.median(speedups):.2f}x" if speedups else "–",
            len(group) - len(graded),
            infra[key],
        ])
    return rows


PASS_HEADERS = ("model", "arm", "dsl", "graded", "passed", "pass rate", "median speedup",
                "skipped", "infra errors")


def hygiene_rows(attempts: Sequence[Attempt]) -> list[list[object]]:
    """Per model: skills checked, share with any violation, share with each kind, mean count.

    Over the solo attempts the comparison uses (their skills are the ones that get transferred).
    """
    by_model: dict[str, list[Attempt]] = defaultdict(list)
    for a in chosen_attempts(attempts):
        if a.arm == "solo":
            by_model[a.model].append(a)
    rows = []
    for model, group in sorted(by_model.items()):
        checked = [a.skill_violations for a in group if a.skill_violations is not None]
        missing = sum(not a.skill_chars for a in group)
        n = len(checked)
        any_rate = sum(any(v.values()) for v in checked) / n if n else None
        kind_rates = [sum(v.get(k, 0) > 0 for v in checked) / n if n else None for k in KINDS]
        mean = sum(sum(v.values()) for v in checked) / n if n else None
        rows.append([model, n, missing, pct(any_rate), *map(pct, kind_rates),
                     "–" if mean is None else f"{mean:.2f}"])
    return rows


HYGIENE_HEADERS = ("model", "skills", "no skill", "any violation", *KINDS, "violations per skill")


def _csv(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return buf.getvalue()


def _raw_tables(result: CompareResult) -> dict[str, tuple[list[str], list[list[object]]]]:
    """Machine-friendly CSVs: unformatted numbers, one file per table."""
    cell_fields = ["model", "direction", "family", "n", "paired_lift", "lift_ci95_lo", "lift_ci95_hi",
                   "help_rate", "harm_rate", "rescues", "breaks", "both_pass", "joint_fail", "skipped"]
    cells = [[c.model, c.direction, c.family or "all", c.n, c.paired_lift,
              *(c.lift_ci95 or (None, None)), c.help_rate, c.harm_rate, c.rescues, c.breaks,
              c.both_pass, c.joint_fail, c.skipped] for c in result.cells]

    def dump(rows, fields):
        return [[getattr(r, f) for f in fields] for r in rows]

    standing_f = ["model", "direction", "standing", "n", "help_rate", "harm_rate"]
    reverse_f = ["model", "helped", "with_reverse", "reverse_helped", "reverse_harmed"]
    excluded_f = ["model", "infra_error_attempts", "comparisons_lost_to_infra", "unpaired", "superseded"]
    comp_f = ["model", "problem", "family", "direction", "r", "outcome", "solo_status",
              "transfer_status", "solo_ms", "transfer_ms", "standing"]
    return {
        "cells": (cell_fields, cells),
        "standing": (standing_f, dump(result.standing, standing_f)),
        "reverse": (reverse_f, dump(result.reverse, reverse_f)),
        "excluded": (excluded_f, dump(result.excluded, excluded_f)),
        "comparisons": (comp_f, dump(result.comparisons, comp_f)),
    }


def render_markdown(attempts: Sequence[Attempt], result: CompareResult, note: str | None,
                    annotations: AnnotationTables | None = None) -> str:
    parts = ["# Skill transfer report", ""]
    if note:
        parts += [f"> **{note}**", ""]
    parts += ["## Definitions", "", DEFINITIONS, render_tables(result), "",
              "## Attempts by arm", "", md_table(PASS_HEADERS, pass_rate_rows(attempts)), "",
              "## Skill hygiene (solo skills; code, commands and API calls are against the rules)", "",
              md_table(HYGIENE_HEADERS, hygiene_rows(attempts)), ""]
    if annotations is not None:
        parts += ["# Why transfers helped or harmed (LLM annotations)", "",
                  annotation_report.provenance_line(annotations), ""]
        for title, headers, rows, _name in annotation_report.sections(annotations):
            parts += [f"## {title}", "", md_table(headers, rows), ""]
    return "\n".join(parts)


def _html_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def charts(result: CompareResult) -> dict[str, str]:
    """The four charts of the report, as SVG strings."""
    pooled = [c for c in result.cells if c.family is None]
    forest = svg.lift_forest([(f"{c.model} {c.direction}", c.paired_lift, c.lift_ci95, c.n) for c in pooled])
    families = sorted({c.family for c in result.cells if c.family is not None})
    row_labels = [f"{c.model} {c.direction}" for c in pooled]
    values = {(f"{c.model} {c.direction}", c.family): (c.paired_lift, c.n)
              for c in result.cells if c.family is not None}
    heat = svg.heatmap(row_labels, families, values)
    groups = []
    for c in pooled:
        data = {s.standing: (s.help_rate, s.harm_rate, s.n) for s in result.standing
                if s.model == c.model and s.direction == c.direction}
        groups.append((f"{c.model} {c.direction}", {t: data.get(t, (None, None, 0)) for t in STANDINGS}))
    bars = svg.standing_bars(groups)
    strips = []
    for c in pooled:
        points = [(x.problem, x.r, x.family) for x in result.comparisons
                  if x.model == c.model and x.direction == c.direction]
        strips.append((f"{c.model} {c.direction}", points))
    strip = svg.problem_strip(strips)
    return {"lift": forest, "families": heat, "standing": bars, "problems": strip}


CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f5f5f5; } td:first-child, th:first-child { text-align: left; }
.note { background: #fff4e6; border: 1px solid #f59f00; padding: 0.6em 1em; font-weight: bold; }
figure { margin: 1em 0 2em; overflow-x: auto; }
"""


def render_html(attempts: Sequence[Attempt], result: CompareResult, note: str | None,
                annotations: AnnotationTables | None = None) -> str:
    pooled = [c for c in result.cells if c.family is None]
    families = [c for c in result.cells if c.family is not None]
    figs = charts(result)
    sections = [
        "<h1>Skill transfer report</h1>",
        f'<p class="note">{escape(note)}</p>' if note else "",
        "<h2>Definitions</h2>", f"<p>{escape(DEFINITIONS)}</p>",
        "<h2>Paired lift</h2>", f"<figure>{figs['lift']}</figure>",
        _html_table(CELL_HEADERS, cell_rows(pooled)),
        "<h2>By family</h2>", f"<figure>{figs['families']}</figure>",
        _html_table(CELL_HEADERS, cell_rows(families)),
        "<h2>Source standing</h2>", f"<figure>{figs['standing']}</figure>",
        _html_table(("model", "direction", "standing", "n", "help", "harm"),
                    [[s.model, s.direction, s.standing, s.n, pct(s.help_rate), pct(s.harm_rate)]
                     for s in result.standing]),
        "<h2>Per problem</h2>", f"<figure>{figs['problems']}</figure>",
        "<h2>Reverse-direction agreement (among helped comparisons)</h2>",
        _html_table(("model", "helped", "with reverse", "reverse helped", "reverse harmed"),
                    [[r.model, r.helped, r.with_reverse, pct(r.reverse_helped), pct(r.reverse_harmed)]
                     for r in result.reverse]),
        "<h2>Attempts by arm</h2>", _html_table(PASS_HEADERS, pass_rate_rows(attempts)),
        "<h2>Skill hygiene</h2>",
        "<p>Share of solo skills that contain code, shell commands or API call syntax "
        "(the skill rules ask for prose findings only).</p>",
        _html_table(HYGIENE_HEADERS, hygiene_rows(attempts)),
        "<h2>Left out</h2>",
        _html_table(("model", "INFRA_ERROR attempts", "comparisons lost to infra", "unpaired", "superseded"),
                    [[e.model, e.infra_error_attempts, e.comparisons_lost_to_infra, e.unpaired,
                      e.superseded] for e in result.excluded]),
        f"<p>Bootstrap: {result.n_boot} resamples of problems per cell, seed {result.seed}. "
        f"Directions: {', '.join(DIRECTIONS)}.</p>",
    ]
    if annotations is not None:
        sections += ["<h1>Why transfers helped or harmed (LLM annotations)</h1>",
                     f"<p>{escape(annotation_report.provenance_line(annotations))}</p>"]
        for title, headers, rows, _name in annotation_report.sections(annotations):
            sections += [f"<h2>{escape(title)}</h2>", _html_table(headers, rows)]
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>Skill transfer report</title>"
            f"<style>{CSS}</style></head><body>" + "\n".join(s for s in sections if s) + "</body></html>\n")


def write_report(attempts: Sequence[Attempt], out: Path, seed: int = 0, n_boot: int = 2000,
                 note: str | None = None, annotations: Sequence[AnnotationRecord] | None = None,
                 second: Sequence[AnnotationRecord] | None = None) -> CompareResult:
    """Write report.md, index.html, compare.json and one CSV per table into ``out``.

    With ``annotations`` (from ``mkb annotate``) the annotation tables are added, and
    ``annotations.json`` and one CSV per annotation table are written; with ``second`` (another
    annotator or pass over the same attempts) the agreement table too.
    """
    result = compare(attempts, seed=seed, n_boot=n_boot)
    tables = None
    if annotations is not None:
        tables = annotation_tables(annotations, result.comparisons, seed=seed, n_boot=n_boot, second=second)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(render_markdown(attempts, result, note, tables))
    (out / "index.html").write_text(render_html(attempts, result, note, tables))
    if tables is not None:
        (out / "annotations.json").write_text(tables.model_dump_json(indent=2) + "\n")
        for _title, headers, rows, name in annotation_report.sections(tables):
            (out / f"{name}.csv").write_text(_csv(headers, rows))
    (out / "compare.json").write_text(result.model_dump_json(indent=2) + "\n")
    for name, (headers, rows) in _raw_tables(result).items():
        (out / f"{name}.csv").write_text(_csv(headers, rows))
    (out / "pass_rates.csv").write_text(_csv(PASS_HEADERS, pass_rate_rows(attempts)))
    (out / "hygiene.csv").write_text(_csv(HYGIENE_HEADERS, hygiene_rows(attempts)))
    for name, chart in charts(result).items():
        (out / f"{name}.svg").write_text(chart + "\n")
    return result
