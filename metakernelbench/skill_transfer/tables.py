"""The comparison as readable Markdown tables: what ``mkb compare`` prints and ``mkb report`` embeds.

Only formatting lives here; the numbers come from ``compare`` (computation) and its models.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .models import Cell, CompareResult

__all__ = ["CELL_HEADERS", "cell_rows", "ci", "md_table", "pct", "render_tables"]


def pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def ci(interval: tuple[float, float] | None) -> str:
    return "–" if interval is None else f"[{pct(interval[0], True)}, {pct(interval[1], True)}]"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-style Markdown table (also readable as plain text)."""
    rows = [[str(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


CELL_HEADERS = ("model", "direction", "family", "n", "lift", "95% CI", "help", "harm", "rescues", "breaks")


def cell_rows(cells: Iterable[Cell]) -> list[list[object]]:
    return [
        [
            c.model,
            c.direction,
            c.family or "all",
            c.n,
            pct(c.paired_lift, True),
            ci(c.lift_ci95),
            pct(c.help_rate),
            pct(c.harm_rate),
            c.rescues,
            c.breaks,
        ]
        for c in cells
    ]


def render_tables(result: CompareResult) -> str:
    """The comparison as readable Markdown tables (what ``mkb compare`` prints without --json)."""
    pooled = [c for c in result.cells if c.family is None]
    families = [c for c in result.cells if c.family is not None]
    parts = [
        "## Paired lift, all families",
        md_table(CELL_HEADERS, cell_rows(pooled)),
        "## Paired lift by family",
        md_table(CELL_HEADERS, cell_rows(families)),
        "## Source standing",
        md_table(
            ("model", "direction", "standing", "n", "help", "harm"),
            [[s.model, s.direction, s.standing, s.n, pct(s.help_rate), pct(s.harm_rate)]
             for s in result.standing],
        ),
        "## Reverse-direction agreement (among helped comparisons)",
        md_table(
            ("model", "helped", "with reverse", "reverse helped", "reverse harmed"),
            [[r.model, r.helped, r.with_reverse, pct(r.reverse_helped), pct(r.reverse_harmed)]
             for r in result.reverse],
        ),
        "## Left out",
        md_table(
            ("model", "INFRA_ERROR attempts", "comparisons lost to infra", "unpaired", "superseded"),
            [[e.model, e.infra_error_attempts, e.comparisons_lost_to_infra, e.unpaired, e.superseded]
             for e in result.excluded],
        ),
        f"Bootstrap: {result.n_boot} resamples of problems per cell, seed {result.seed}.",
    ]
    return "\n\n".join(parts) + "\n"
