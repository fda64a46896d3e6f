"""The annotation tables as titled sections, for the Markdown, HTML and CSV outputs of ``mkb report``.

Formatting only; the numbers come from ``annotation_tables``. Each section is (title, headers,
rows, CSV name), so the three outputs cannot drift apart.
"""

from __future__ import annotations

from .annotation_tables import AnnotationTables
from .tables import pct

__all__ = ["Section", "provenance_line", "sections"]

Section = tuple[str, tuple[str, ...], list[list[object]], str]


def _rho(x: float | None) -> str:
    return "–" if x is None else f"{x:+.3f}"


def _rho_ci(interval: tuple[float, float] | None) -> str:
    return "–" if interval is None else f"[{interval[0]:+.3f}, {interval[1]:+.3f}]"


def _share_ci(interval: tuple[float, float] | None) -> str:
    return "–" if interval is None else f"[{pct(interval[0])}, {pct(interval[1])}]"


def provenance_line(t: AnnotationTables) -> str:
    line = f"Annotator: {t.annotator}, rubric {t.rubric_version}, pass {t.pass_id}."
    if t.second_annotator:
        line += f" Agreement against: {t.second_annotator}."
    return line


def sections(t: AnnotationTables) -> list[Section]:
    out: list[Section] = [
        ("Annotation coverage (unlabelled items are never guessed)", ("layer", "items", "labelled", "unlabelled"),
         [[c.layer, c.items, c.labelled, c.unlabelled] for c in t.coverage], "annotation_coverage"),
        ("Skill content: share of source skills with each category",
         ("model", "direction", "category", "skills", "with", "share", "95% CI"),
         [[r.model, r.direction, r.category, r.skills, r.with_category, pct(r.share), _share_ci(r.ci95)]
          for r in t.labels], "annotation_labels"),
        ("Follow of the source skill, by comparison outcome",
         ("model", "direction", "outcome", "n", "full", "partial", "none", "full share", "95% CI"),
         [[r.model, r.direction, r.group, r.n, r.full, r.partial, r.none, pct(r.full_share), _share_ci(r.ci95)]
          for r in t.follow], "annotation_follow"),
        ("Full-follow share against paired lift (Spearman, model x family cells)",
         ("direction", "cells", "rho", "95% CI"),
         [[r.direction, r.cells, _rho(r.rho), _rho_ci(r.ci95)] for r in t.spearman], "annotation_spearman"),
        ("Propagation of unverified source claims into the target's skill",
         ("model", "direction", "attempts", "with unverified", "propagating", "attempt rate", "95% CI",
          "unverified claims", "propagated", "claim rate", "95% CI"),
         [[r.model, r.direction, r.attempts, r.with_unverified, r.propagating, pct(r.attempt_rate),
           _share_ci(r.attempt_ci95), r.unverified_claims, r.propagated_claims, pct(r.claim_rate),
           _share_ci(r.claim_ci95)] for r in t.propagation], "annotation_propagation"),
        ("Primary failure class of harmed comparisons",
         ("model", "direction", "class", "harmed", "count", "share", "95% CI"),
         [[r.model, r.direction, r.failure_class, r.harmed, r.count, pct(r.share), _share_ci(r.ci95)]
          for r in t.failure], "annotation_failure"),
    ]
    if t.second_annotator:
        out.append(("Agreement between annotations (Cohen's kappa)", ("layer", "items", "observed", "kappa"),
                    [[r.layer, r.items, pct(r.observed), _rho(r.kappa)] for r in t.agreement],
                    "annotation_agreement"))
    return out

