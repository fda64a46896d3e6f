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

__all__ = ["build_comparisons", "chosen_attempts", "compare", "make_cell"]


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


def _times(solo: Attempt, transfer: Attempt) -> tuple[str, float | None, float | None]:
    """(basis, solo time, transfer time) for the paired ratio.

    The design's r = t_solo / t_transfer divides the kernels' times. Where both grades timed the eager
    reference call by call beside the kernel (``Attempt.eager_interleaved``), each time is taken in
    units of the eager call timed with it, 1 / speedup, so r = s_transfer / s_solo: on a host whose speed
    moves between gradings (a shared CPU machine) the two times alone can differ 2x for one kernel,
    while each grading's ratio holds. With one eager baseline for both grades (the contract's GPU
    timing) the two bases give the same r.
    """
    if solo.eager_interleaved and transfer.eager_interleaved:
        return "speedup", 1 / solo.speedup, 1 / transfer.speedup
    return "time", solo.runtime_ms, transfer.runtime_ms


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
            basis, solo_t, transfer_t = _times(solo, transfer)
            r, outcome = metrics.paired_ratio(
                solo.passed,
                solo_t,
                transfer.passed,
                transfer_t,
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
                    basis=basis,
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
