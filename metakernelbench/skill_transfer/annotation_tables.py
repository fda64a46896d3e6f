"""The paper's analysis tables from annotations: labels, follow, propagation, failure, agreement.

Only labelled records count in a share; unlabelled ones are counted in the coverage table, never
guessed. Every share carries a 95 % percentile bootstrap interval over the problems of its model
and direction (``stats``), like the lift tables; the rank correlation resamples its cells.

- Label frequencies: per model and direction (the direction a solo skill is handed on in), the
  share of skills that contain each category.
- Follow by outcome: per model and direction, the full / partial / none counts among helped
  (r >= 5/4), neutral and harmed (r <= 4/5) comparisons, and the full-follow share.
- Follow against lift: Spearman's rho between a cell's full-follow share and its paired lift, over
  model x family cells (per direction, and with both directions pooled into one cell).
- Propagation: per model and direction, the share of the source skills' unverified claims that the
  target skill repeats, and the share of attempts (with at least one unverified source claim) whose
  skill repeats one.
- Failure classes: per model and direction, the share of harmed comparisons given each class.
- Agreement: Cohen's kappa per layer between two annotation files (two annotators or two passes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from . import metrics, stats
from .annotation_models import LAYERS, AnnotationRecord, FailureAnswer, FollowAnswer, PropagationAnswer, SkillLabels
from .models import DIRECTIONS, Comparison
from .rubric import CATEGORIES, FAILURE_CLASSES

__all__ = [
    "AgreementRow", "AnnotationTables", "CI", "CoverageRow", "FailureRow", "FollowRow", "LabelRow", "PropagationRow",
    "SpearmanRow", "agreement_rows", "annotation_tables", "coverage_rows", "failure_rows", "follow_rows",
    "label_rows", "outcome_group", "propagation_rows", "provenance", "spearman_rows",
]

CI = tuple[float, float] | None


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CoverageRow(_Row):
    layer: str
    items: int
    labelled: int
    unlabelled: int


class LabelRow(_Row):
    model: str
    direction: str
    category: str
    skills: int
    with_category: int
    share: float | None
    ci95: CI


class FollowRow(_Row):
    model: str
    direction: str
    group: str  # helped | neutral | harmed
    n: int
    full: int
    partial: int
    none: int
    full_share: float | None
    ci95: CI


class SpearmanRow(_Row):
    direction: str  # a direction, or "both" (the two directions pooled per cell)
    cells: int
    rho: float | None
    ci95: CI


class PropagationRow(_Row):
    model: str
    direction: str
    attempts: int
    with_unverified: int
    propagating: int
    attempt_rate: float | None
    attempt_ci95: CI
    unverified_claims: int
    propagated_claims: int
    claim_rate: float | None
    claim_ci95: CI


class FailureRow(_Row):
    model: str
    direction: str
    failure_class: str
    harmed: int
    count: int
    share: float | None
    ci95: CI


class AgreementRow(_Row):
    layer: str
    items: int
    observed: float | None
    kappa: float | None


class AnnotationTables(_Row):
    """Everything the report shows about annotations, and what produced them."""

    annotator: str
    rubric_version: str
    pass_id: int
    second_annotator: str | None = None
    coverage: list[CoverageRow]
    labels: list[LabelRow]
    follow: list[FollowRow]
    spearman: list[SpearmanRow]
    propagation: list[PropagationRow]
    failure: list[FailureRow]
    agreement: list[AgreementRow]


def provenance(records: Sequence[AnnotationRecord]) -> tuple[str, str, int]:
    """(annotator, rubric version, pass) shared by every record; mixed files are refused."""
    kinds = {(r.annotator, r.rubric_version, r.pass_id) for r in records}
    if len(kinds) != 1:
        found = ", ".join(f"{a} rubric {v} pass {p}" for a, v, p in sorted(kinds)) or "no records"
        raise ValueError(f"an annotations file must come from one annotator, rubric and pass; found {found}")
    return kinds.pop()


def _labelled(records: Sequence[AnnotationRecord], layer: str) -> list[AnnotationRecord]:
    return [r for r in records if r.layer == layer and r.status == "labelled"]


def _by_cell(records: Sequence[AnnotationRecord]) -> dict[tuple[str, str], list[AnnotationRecord]]:
    cells: dict[tuple[str, str], list[AnnotationRecord]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.model, r.direction, r.problem)):
        cells[(r.model, r.direction)].append(r)
    return cells


def coverage_rows(records: Sequence[AnnotationRecord]) -> list[CoverageRow]:
    rows = []
    for layer in LAYERS:
        mine = [r for r in records if r.layer == layer]
        labelled = sum(r.status == "labelled" for r in mine)
        rows.append(CoverageRow(layer=layer, items=len(mine), labelled=labelled, unlabelled=len(mine) - labelled))
    return rows


def label_rows(records: Sequence[AnnotationRecord], seed: int, n_boot: int) -> list[LabelRow]:
    rows = []
    for (model, direction), cell in _by_cell(_labelled(records, "labels")).items():
        present = [r.answer.categories for r in cell if isinstance(r.answer, SkillLabels)]
        for category in CATEGORIES:
            hits = [float(category in p) for p in present]
            rng = metrics.cell_rng(seed, "labels", model, direction, category)
            rows.append(LabelRow(model=model, direction=direction, category=category, skills=len(hits),
                                 with_category=int(sum(hits)), share=stats.share(hits, [1.0] * len(hits)),
                                 ci95=stats.bootstrap_share_ci(hits, [1.0] * len(hits), rng, n_boot)))
    return rows


def outcome_group(r: float) -> str:
    return "helped" if metrics.helped(r) else "harmed" if metrics.harmed(r) else "neutral"


def _level(r: AnnotationRecord) -> str:
    assert isinstance(r.answer, FollowAnswer)
    return r.answer.level


def follow_rows(records: Sequence[AnnotationRecord], seed: int, n_boot: int) -> list[FollowRow]:
    rows = []
    for (model, direction), cell in _by_cell(_labelled(records, "follow")).items():
        for group in ("helped", "neutral", "harmed"):
            levels = [_level(r) for r in cell if r.r is not None and outcome_group(r.r) == group]
            full = [float(level == "full") for level in levels]
            rng = metrics.cell_rng(seed, "follow", model, direction, group)
            rows.append(FollowRow(model=model, direction=direction, group=group, n=len(levels),
                                  full=levels.count("full"), partial=levels.count("partial"),
                                  none=levels.count("none"), full_share=stats.share(full, [1.0] * len(full)),
                                  ci95=stats.bootstrap_share_ci(full, [1.0] * len(full), rng, n_boot)))
    return rows


def spearman_rows(records: Sequence[AnnotationRecord], comparisons: Sequence[Comparison], seed: int,
                  n_boot: int) -> list[SpearmanRow]:
    """Full-follow share against paired lift over (model, family) cells with a labelled follow."""
    follow = _labelled(records, "follow")
    rows = []
    for scope in (*DIRECTIONS, "both"):
        def wanted(direction: str, scope: str = scope) -> bool:
            return scope == "both" or direction == scope

        levels: dict[tuple[str, str], list[str]] = defaultdict(list)
        for r in follow:
            if wanted(r.direction):
                levels[(r.model, r.family)].append(_level(r))
        ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
        for c in comparisons:
            if wanted(c.direction):
                ratios[(c.model, c.family)].append(c.r)
        cells = sorted(k for k in levels if ratios.get(k))
        xs = [levels[k].count("full") / len(levels[k]) for k in cells]
        ys = [metrics.lift(ratios[k]) for k in cells]
        rng = metrics.cell_rng(seed, "spearman", scope)
        rows.append(SpearmanRow(direction=scope, cells=len(cells), rho=stats.spearman(xs, ys),
                                ci95=stats.bootstrap_spearman_ci(xs, ys, rng, n_boot)))
    return rows


def propagation_rows(records: Sequence[AnnotationRecord], seed: int, n_boot: int) -> list[PropagationRow]:
    rows = []
    for (model, direction), cell in _by_cell(_labelled(records, "propagation")).items():
        answers = [r.answer for r in cell if isinstance(r.answer, PropagationAnswer)]
        unverified = [float(len(a.unverified)) for a in answers]
        propagated = [float(len(a.propagated)) for a in answers]
        exposed = [a for a in answers if a.unverified]
        repeats = [float(bool(a.propagated)) for a in exposed]
        rng_a = metrics.cell_rng(seed, "propagation-attempts", model, direction)
        rng_c = metrics.cell_rng(seed, "propagation-claims", model, direction)
        rows.append(PropagationRow(
            model=model, direction=direction, attempts=len(answers), with_unverified=len(exposed),
            propagating=int(sum(repeats)), attempt_rate=stats.share(repeats, [1.0] * len(repeats)),
            attempt_ci95=stats.bootstrap_share_ci(repeats, [1.0] * len(repeats), rng_a, n_boot),
            unverified_claims=int(sum(unverified)), propagated_claims=int(sum(propagated)),
            claim_rate=stats.share(propagated, unverified),
            claim_ci95=stats.bootstrap_share_ci(propagated, unverified, rng_c, n_boot)))
    return rows


def failure_rows(records: Sequence[AnnotationRecord], seed: int, n_boot: int) -> list[FailureRow]:
    rows = []
    for (model, direction), cell in _by_cell(_labelled(records, "failure")).items():
        classes = [r.answer.primary_class for r in cell if isinstance(r.answer, FailureAnswer)]
        for name in FAILURE_CLASSES:
            hits = [float(c == name) for c in classes]
            rng = metrics.cell_rng(seed, "failure", model, direction, name)
            rows.append(FailureRow(model=model, direction=direction, failure_class=name, harmed=len(classes),
                                   count=classes.count(name), share=stats.share(hits, [1.0] * len(hits)),
                                   ci95=stats.bootstrap_share_ci(hits, [1.0] * len(hits), rng, n_boot)))
    return rows


def _decisions(record: AnnotationRecord) -> list[tuple[str, object]]:
    """The (sub-item, decision) pairs a record contributes to its layer's kappa."""
    a = record.answer
    if isinstance(a, SkillLabels):
        return [(category, category in a.categories) for category in CATEGORIES]
    if isinstance(a, FollowAnswer):
        return [("", a.level)]
    if isinstance(a, PropagationAnswer):
        return [("", bool(a.propagated))]
    if isinstance(a, FailureAnswer):
        return [("", a.primary_class)]
    return []


def agreement_rows(first: Sequence[AnnotationRecord], second: Sequence[AnnotationRecord]) -> list[AgreementRow]:
    """Cohen's kappa per layer over the items both files labelled.

    Labels: one binary decision per (skill, category); follow: the level; propagation: whether the
    target skill repeats any unverified source claim (claims are free text and not matched across
    annotators); failure: the primary class.
    """
    other = {r.item: r for r in second if r.status == "labelled"}
    rows = []
    for layer in LAYERS:
        a_side: list[object] = []
        b_side: list[object] = []
        items = 0
        for r in first:
            if r.layer != layer or r.status != "labelled" or r.item not in other:
                continue
            items += 1
            mine, theirs = dict(_decisions(r)), dict(_decisions(other[r.item]))
            for sub in mine:
                a_side.append(mine[sub])
                b_side.append(theirs[sub])
        kappa, observed = stats.cohen_kappa(a_side, b_side)
        rows.append(AgreementRow(layer=layer, items=items, observed=observed, kappa=kappa))
    return rows


def annotation_tables(records: Sequence[AnnotationRecord], comparisons: Sequence[Comparison], seed: int = 0,
                      n_boot: int = 2000, second: Sequence[AnnotationRecord] | None = None) -> AnnotationTables:
    """All annotation tables of one annotations file (and agreement with a second, if given)."""
    annotator, rubric_version, pass_id = provenance(records)
    second_annotator = None
    agreement: list[AgreementRow] = []
    if second is not None:
        other, other_rubric, other_pass = provenance(second)
        if other_rubric != rubric_version:
            raise ValueError(f"agreement needs one rubric; got {rubric_version} and {other_rubric}")
        if (other, other_pass) == (annotator, pass_id):
            raise ValueError("agreement needs a second annotator or a second pass, not the same file twice")
        second_annotator = f"{other} (pass {other_pass})"
        agreement = agreement_rows(records, second)
    return AnnotationTables(
        annotator=annotator, rubric_version=rubric_version, pass_id=pass_id, second_annotator=second_annotator,
        coverage=coverage_rows(records), labels=label_rows(records, seed, n_boot),
        follow=follow_rows(records, seed, n_boot), spearman=spearman_rows(records, comparisons, seed, n_boot),
        propagation=propagation_rows(records, seed, n_boot), failure=failure_rows(records, seed, n_boot),
        agreement=agreement)
