"""The paired comparison: attempts -> comparisons -> cells, standing and reverse agreement.

Pairing rules (see ``metrics`` for the ratio itself):

- one attempt per (model, problem, DSL, arm) is used: the latest finished one that is not an
  ``INFRA_ERROR``; older valid ones are counted as superseded;
- a comparison needs the target's solo attempt and the transfer attempt (a ``skipped`` row stands
  for a transfer that was never run); when either exists only as ``INFRA_ERROR`` the comparison is
  dropped and counted (an infrastructure fault is never scored), when either is missing it is
  counted as unpaired;
- the standing of a comparison needs the source DSL's solo attempt as well; without it the
  comparison still counts everywhere except in the standing table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from . import metrics
from .models import (
    DIRECTIONS,
    STANDINGS,
    STATUS_SKIPPED,
    Attempt,
    Cell,
    CompareResult,
    Comparison,
    Exclusions,
    ReverseRow,
    StandingRow,
    split_direction,
)


def _pick(attempts: Iterable[Attempt]) -> tuple[dict[tuple, Attempt], set[tuple], dict[str, int]]:
    """(chosen valid attempt per key, keys seen only as INFRA_ERROR, superseded count per model)."""
    valid: dict[tuple, list[Attempt]] = defaultdict(list)
    infra: set[tuple] = set()
    for a in attempts:
        if a.excluded:
            infra.add(a.key)
        else:
            valid[a.key].append(a)
    chosen: dict[tuple, Attempt] = {}
    superseded: dict[str, int] = defaultdict(int)
    for key, rows in valid.items():
        rows.sort(key=lambda a: (a.finished_at is not None, a.finished_at or 0))
        chosen[key] = rows[-1]
        superseded[key[0]] += len(rows) - 1
    return chosen, infra - set(chosen), superseded


def chosen_attempts(attempts: Iterable[Attempt]) -> list[Attempt]:
    """The attempts the comparison uses: one valid attempt per (model, problem, DSL, arm)."""
    return sorted(_pick(attempts)[0].values(), key=lambda a: a.key)


def build_comparisons(attempts: Sequence[Attempt]) -> tuple[list[Comparison], list[Exclusions]]:
    """Every scorable (model, problem, direction) comparison, and what was left out per model."""
    chosen, infra_only, superseded = _pick(attempts)
    models = sorted({a.model for a in attempts})
    excluded = {
        m: Exclusions(model=m, superseded=superseded.get(m, 0), infra_error_attempts=0) for m in models
    }
    for a in attempts:
        if a.excluded:
            excluded[a.model].infra_error_attempts += 1
    families = {(a.model, a.problem): a.family for a in attempts}
    comparisons: list[Comparison] = []
    for model, problem in sorted(families):
        for direction in DIRECTIONS:
            source_dsl, target_dsl = split_direction(direction)
            solo_key = (model, problem, target_dsl, "solo")
            transfer_key = (model, problem, target_dsl, "transfer")
            solo, transfer = chosen.get(solo_key), chosen.get(transfer_key)
            if solo is None or transfer is None:
                if solo_key in infra_only or transfer_key in infra_only:
                    excluded[model].comparisons_lost_to_infra += 1
                elif solo is not None or transfer is not None:
                    excluded[model].unpaired += 1
                continue
            r, outcome = metrics.paired_ratio(
                solo.passed,
                solo.runtime_ms,
                transfer.passed,
                transfer.runtime_ms,
                skipped=transfer.status == STATUS_SKIPPED,
            )
            source = chosen.get((model, problem, source_dsl, "solo"))
            stand = (
                metrics.standing(source.passed, source.speedup, solo.passed, solo.speedup)
                if source is not None
                else None
            )
            comparisons.append(
                Comparison(
                    model=model,
                    problem=problem,
                    family=families[(model, problem)],
                    direction=direction,
                    r=r,
                    outcome=outcome,
                    solo_status=solo.status,
                    transfer_status=transfer.status,
                    solo_ms=solo.runtime_ms,
                    transfer_ms=transfer.runtime_ms,
                    standing=stand,
                )
            )
    return comparisons, [excluded[m] for m in models]


def make_cell(
    model: str,
    direction: str,
    family: str | None,
    comps: Sequence[Comparison],
    seed: int,
    n_boot: int,
) -> Cell:
    ratios = [c.r for c in comps]
    outcomes = [c.outcome for c in comps]
    rng = metrics.cell_rng(seed, model, direction, family or "*")
    return Cell(
        model=model,
        direction=direction,
        family=family,
        n=len(ratios),
        paired_lift=metrics.lift(ratios),
        help_rate=metrics.help_rate(ratios),
        harm_rate=metrics.harm_rate(ratios),
        rescues=outcomes.count("rescue"),
        breaks=outcomes.count("break"),
        both_pass=outcomes.count("both_pass"),
        joint_fail=outcomes.count("joint_fail"),
        skipped=outcomes.count("skipped"),
        lift_ci95=metrics.bootstrap_lift_ci(ratios, rng, n_boot),
    )


def compare(attempts: Sequence[Attempt], seed: int = 0, n_boot: int = 2000) -> CompareResult:
    """The full comparison of an attempts table."""
    comparisons, excluded = build_comparisons(attempts)
    models = sorted({a.model for a in attempts})
    cells: list[Cell] = []
    standing_rows: list[StandingRow] = []
    reverse_rows: list[ReverseRow] = []
    for model in models:
        mine = [c for c in comparisons if c.model == model]
        families = sorted({c.family for c in mine})
        for direction in DIRECTIONS:
            here = [c for c in mine if c.direction == direction]
            cells.append(make_cell(model, direction, None, here, seed, n_boot))
            for family in families:
                fam = [c for c in here if c.family == family]
                cells.append(make_cell(model, direction, family, fam, seed, n_boot))
            for tier in STANDINGS:
                ratios = [c.r for c in here if c.standing == tier]
                standing_rows.append(
                    StandingRow(
                        model=model,
                        direction=direction,
                        standing=tier,
                        n=len(ratios),
                        help_rate=metrics.help_rate(ratios),
                        harm_rate=metrics.harm_rate(ratios),
                    )
                )
        by_problem = {(c.problem, c.direction): c for c in mine}
        helped = [c for c in mine if metrics.helped(c.r)]
        reverses = []
        for c in helped:
            other = DIRECTIONS[1 - DIRECTIONS.index(c.direction)]
            if (c.problem, other) in by_problem:
                reverses.append(by_problem[(c.problem, other)].r)
        reverse_rows.append(
            ReverseRow(
                model=model,
                helped=len(helped),
                with_reverse=len(reverses),
                reverse_helped=metrics.help_rate(reverses),
                reverse_harmed=metrics.harm_rate(reverses),
            )
        )
    return CompareResult(
        seed=seed,
        n_boot=n_boot,
        cells=cells,
        standing=standing_rows,
        reverse=reverse_rows,
        excluded=excluded,
        comparisons=comparisons,
    )


# ---- readable tables -------------------------------------------------------------------------


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
