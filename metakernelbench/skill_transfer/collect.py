"""Harbor job folders -> attempts table (one ``Attempt`` per line of ``attempts.jsonl``).

Besides one row per finished trial, ``collect`` writes one ``skipped`` transfer row for every solo
attempt that left no usable skill and whose paired transfer was therefore never run (design.md §6:
a missing skill is a skipped treatment, scored r = 1). It needs nothing but the solo trial folder
to know this, so the attempts table is complete from the job folders alone.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from metakernelbench.contract import other_dsl

from .families import family_of
from .hygiene import check_skill
from .models import STATUS_INFRA, STATUS_SKIPPED, Attempt
from .skill import skill_from_attachment
from .trials import TrialOutcome, TrialReadError, iter_trial_dirs, read_trial

__all__ = ["CollectStats", "collect", "outcomes_to_attempts", "read_attempts"]


@dataclass
class CollectStats:
    """Counts reported on stderr so that nothing is dropped silently."""

    trials: int = 0
    unfinished: int = 0
    unreadable: list[str] = field(default_factory=list)
    infra_errors: int = 0
    skipped_treatments: int = 0

    def summary(self) -> str:
        parts = [
            f"{self.trials} trials read",
            f"{self.unfinished} still running (left out)",
            f"{self.infra_errors} INFRA_ERROR (kept, excluded from comparisons)",
            f"{self.skipped_treatments} skipped treatments added",
        ]
        if self.unreadable:
            parts.append(f"{len(self.unreadable)} unreadable (left out)")
        return "; ".join(parts)


def _given_skill_chars(outcome: TrialOutcome, solos: dict[tuple, TrialOutcome]) -> int | None:
    """Length of the skill a transfer attempt was given: from its attachment, else its source."""
    if outcome.attachment is not None and outcome.attachment.is_file():
        skill = skill_from_attachment(outcome.attachment.read_text(errors="replace"))
        if skill is not None:
            return len(skill)
    source = solos.get((outcome.model, outcome.problem, outcome.source_dsl))
    if source is not None and source.skill is not None:
        return len(source.skill)
    return None


def _latest(outcomes: Iterable[TrialOutcome]) -> dict[tuple, TrialOutcome]:
    latest: dict[tuple, TrialOutcome] = {}
    for o in outcomes:
        key = (o.model, o.problem, o.dsl)
        # Finished trials always carry finished_at (read_trial drops running ones).
        if key not in latest or o.finished_at > latest[key].finished_at:
            latest[key] = o
    return latest


def outcomes_to_attempts(outcomes: list[TrialOutcome]) -> tuple[list[Attempt], int]:
    """Attempt rows for finished trials plus the skipped treatments; returns (rows, n_skipped)."""
    solos = _latest(o for o in outcomes if o.arm == "solo" and o.status != STATUS_INFRA)
    transfers = {(o.model, o.problem, o.dsl) for o in outcomes if o.arm == "transfer"}
    rows: list[Attempt] = []
    for o in outcomes:
        if o.arm == "solo":
            skill_chars = len(o.skill) if o.skill else 0
            violations = check_skill(o.skill).counts if o.skill else None
        else:
            skill_chars, violations = _given_skill_chars(o, solos), None
        rows.append(
            Attempt(
                model=o.model,
                problem=o.problem,
                family=family_of(o.problem),
                dsl=o.dsl,
                arm=o.arm,
                source_dsl=o.source_dsl,
                passed=o.passed,
                runtime_ms=o.runtime_ms,
                speedup=o.speedup,
                eager_interleaved=o.eager_interleaved,
                skill_chars=skill_chars,
                status=o.status,
                job=o.job,
                trial=o.trial,
                finished_at=o.finished_at,
                skill_violations=violations,
                note=o.note,
            )
        )
    n_skipped = 0
    for (model, problem, dsl), source in sorted(solos.items()):
        target = other_dsl(dsl)
        if source.skill is None and (model, problem, target) not in transfers:
            n_skipped += 1
            rows.append(
                Attempt(
                    model=model,
                    problem=problem,
                    family=family_of(problem),
                    dsl=target,
                    arm="transfer",
                    source_dsl=dsl,
                    passed=False,
                    skill_chars=0,
                    status=STATUS_SKIPPED,
                    job=source.job,
                    trial=source.trial,
                    finished_at=source.finished_at,
                    note=f"source attempt {source.trial} left no usable SKILL.md",
                )
            )
    rows.sort(key=lambda a: (a.model, a.problem, a.dsl, a.arm, str(a.finished_at)))
    return rows, n_skipped


def collect(paths: Iterable[Path], warn=lambda msg: print(msg, file=sys.stderr)) -> tuple[
    list[Attempt], CollectStats
]:
    """Read every trial folder at or under ``paths`` (job folders or folders of job folders)."""
    stats = CollectStats()
    outcomes: list[TrialOutcome] = []
    seen: set[Path] = set()
    for path in paths:
        for trial_dir in iter_trial_dirs(Path(path)):
            if trial_dir.resolve() in seen:
                continue
            seen.add(trial_dir.resolve())
            stats.trials += 1
            try:
                outcome = read_trial(trial_dir)
            except (TrialReadError, ValueError) as exc:
                stats.unreadable.append(str(trial_dir))
                warn(f"warning: {exc}")
                continue
            if outcome is None:
                stats.unfinished += 1
                continue
            stats.infra_errors += outcome.status == STATUS_INFRA
            outcomes.append(outcome)
    rows, stats.skipped_treatments = outcomes_to_attempts(outcomes)
    return rows, stats


def read_attempts(path: Path) -> list[Attempt]:
    """Parse an attempts.jsonl file; a bad line fails with its line number."""
    rows: list[Attempt] = []
    with open(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(Attempt.model_validate_json(line))
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: {exc}") from exc
    return rows
