"""``mkb annotate``: the four annotation layers over the attempts the comparison uses.

Items, one question each (``docs/annotation.md``):

- ``labels``: every solo attempt's skill, against the content rubric;
- ``follow``: every skill-conditioned attempt that ran (skipped treatments had no skill), from its
  trajectory and the skill it was given;
- ``propagation``: every skill-conditioned attempt that left a skill of its own: the source skill's
  claims, whether the source attempt verified them (from its trajectory), and whether the target's
  skill repeats them;
- ``failure``: every harmed comparison (r <= 4/5), the primary target-side cause, from the target's
  trajectory.

The attempts are the ones ``mkb compare`` pairs (one per model, problem, DSL and arm), read back from
their Harbor trial folders for the skills and trajectories. An item whose material is missing (no
trajectory, no source skill) is recorded unlabelled with the reason and never sent.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from metakernelbench.contract import other_dsl

from . import metrics, prompts
from .annotation_models import LAYERS, AnnotationRecord, Answer
from .compare import build_comparisons, chosen_attempts
from .llm import Annotator
from .models import STATUS_SKIPPED, Attempt, Comparison, direction_of, split_direction
from .quotes import missing_quotes
from .rubric import RUBRIC_VERSION
from .skill import read_skill, skill_from_attachment
from .trajectory import read_trajectory
from .trials import TrialReadError, iter_trial_dirs, read_trial

__all__ = ["Item", "Materials", "build_items", "default_output", "index_trials", "read_annotations", "run_items"]


def default_output(attempts_path: Path, pass_id: int = 1) -> Path:
    """Where annotations go: beside attempts.jsonl, ``<stem>.annotations[.passN].jsonl``."""
    suffix = "" if pass_id == 1 else f".pass{pass_id}"
    return attempts_path.with_name(f"{attempts_path.stem}.annotations{suffix}.jsonl")


def index_trials(job_dirs: Iterable[Path]) -> dict[tuple[str, str], Path]:
    """(job folder name, trial name) -> trial folder, the two provenance fields of an attempt row."""
    index: dict[tuple[str, str], Path] = {}
    for path in job_dirs:
        for trial_dir in iter_trial_dirs(Path(path)):
            index[(trial_dir.parent.name, trial_dir.name)] = trial_dir
    return index


@dataclass
class Item:
    """One question before it is asked: what it is about and the material it shows."""

    layer: str
    attempt: Attempt
    direction: str
    context: str
    sections: dict[str, str]
    check: Callable[[Answer], list[str]]
    comparison: Comparison | None = None
    missing: str | None = None  # why the item cannot be asked (its material is absent)


@dataclass
class Materials:
    """Reads skills and trajectories of attempts from their trial folders, once each."""

    trials: dict[tuple[str, str], Path]
    max_chars: int = 60_000
    max_output_chars: int = 3_000
    _trajectories: dict[Path, str] = field(default_factory=dict)

    def trial_dir(self, a: Attempt | None) -> Path | None:
        if a is None or a.job is None or a.trial is None:
            return None
        return self.trials.get((a.job, a.trial))

    def skill(self, a: Attempt | None) -> str | None:
        d = self.trial_dir(a)
        return read_skill(d) if d else None

    def trajectory(self, a: Attempt | None) -> str:
        d = self.trial_dir(a)
        if d is None:
            return ""
        if d not in self._trajectories:
            self._trajectories[d] = read_trajectory(d, self.max_chars, self.max_output_chars)
        return self._trajectories[d]

    def given_skill(self, transfer: Attempt, source: Attempt | None) -> str | None:
        """The skill a transfer attempt was given: its attachment, else its source's SKILL.md."""
        d = self.trial_dir(transfer)
        if d is not None:
            try:
                outcome = read_trial(d)
            except (TrialReadError, ValueError):
                outcome = None
            if outcome is not None and outcome.attachment is not None and outcome.attachment.is_file():
                skill = skill_from_attachment(outcome.attachment.read_text(errors="replace"))
                if skill is not None:
                    return skill
        return self.skill(source)


def _describe(a: Attempt) -> str:
    verdict = f"PASSED at {a.runtime_ms:g} ms" if a.passed else a.status
    return f"problem {a.problem} ({a.family}), {a.dsl} attempt, graded {verdict}"


def _checker(**sources: tuple[Callable[[Answer], list[str]], str, str]) -> Callable[[Answer], list[str]]:
    """A quote check: for each named source, (quotes of the answer, source text, its name)."""
    def check(answer: Answer) -> list[str]:
        problems: list[str] = []
        for quotes_of, text, where in sources.values():
            problems += missing_quotes(quotes_of(answer), text, where)
        return problems
    return check


def build_items(attempts: Sequence[Attempt], materials: Materials, layers: Sequence[str] = LAYERS) -> list[Item]:
    """Every question of the requested layers, in a stable order."""
    chosen = {a.key: a for a in chosen_attempts(attempts)}
    comparisons, _ = build_comparisons(attempts)
    items: list[Item] = []
    if "labels" in layers:
        for a in chosen.values():
            if a.arm != "solo":
                continue
            skill = materials.skill(a)
            if skill is None:
                continue  # no skill: a skipped treatment, nothing to label
            items.append(Item(
                "labels", a, direction_of(a.dsl, other_dsl(a.dsl)), _describe(a), {"SKILL": skill},
                _checker(skill=(lambda x: [lb.quote for lb in x.labels], skill, "skill"))))
    for c in comparisons:
        if c.outcome == "skipped":
            continue
        source_dsl, target_dsl = split_direction(c.direction)
        transfer = chosen[(c.model, c.problem, target_dsl, "transfer")]
        if transfer.status == STATUS_SKIPPED:
            continue
        source = chosen.get((c.model, c.problem, source_dsl, "solo"))
        given = materials.given_skill(transfer, source)
        trajectory = materials.trajectory(transfer)
        context = f"Target attempt: {_describe(transfer)}. Comparison outcome: {c.outcome}, r = {c.r:.3g}."
        absent = None if given else "the skill the attempt was given cannot be found"
        if absent is None and not trajectory:
            absent = "the target attempt left no readable trajectory"
        if "follow" in layers:
            items.append(Item(
                "follow", transfer, c.direction, context,
                {"SKILL": given or "", "TRAJECTORY": trajectory},
                _checker(t=(lambda x: x.evidence, trajectory, "trajectory")), c, absent))
        if "failure" in layers and metrics.harmed(c.r):
            items.append(Item(
                "failure", transfer, c.direction, context,
                {"SKILL": given or "", "TRAJECTORY": trajectory},
                _checker(t=(lambda x: x.evidence, trajectory, "trajectory")), c, absent))
        target_skill = materials.skill(transfer)
        if "propagation" in layers and target_skill is not None:
            source_traj = materials.trajectory(source)
            why = None if given else "the skill the attempt was given cannot be found"
            if why is None and not source_traj:
                why = "the source attempt left no readable trajectory"
            items.append(Item(
                "propagation", transfer, c.direction, context,
                {"SOURCE SKILL": given or "", "SOURCE TRAJECTORY": source_traj, "TARGET SKILL": target_skill},
                _checker(
                    claim=(lambda x: [k.claim for k in x.claims], given or "", "source skill"),
                    support=(lambda x: [k.support for k in x.claims if k.support], source_traj, "source trajectory"),
                    again=(lambda x: [k.reappears for k in x.claims if k.reappears], target_skill, "target skill"),
                ), c, why))
    return items


def run_items(items: Sequence[Item], annotator: Annotator,
              progress: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> list[AnnotationRecord]:
    """Ask every item (through the cache) and record the answer or why there is none."""
    records: list[AnnotationRecord] = []
    for n, item in enumerate(items, start=1):
        msgs = prompts.messages(item.layer, item.context, item.sections)
        key = annotator.input_hash(item.layer, msgs)
        if item.missing:
            reply_fields = {"input_hash": key, "status": "unlabelled", "error": item.missing}
        else:
            reply = annotator.ask(item.layer, msgs, item.check)
            reply_fields = {"input_hash": reply.input_hash, "answer": reply.answer, "error": reply.error,
                            "tries": reply.tries, "cached": reply.cached,
                            "status": "labelled" if reply.answer is not None else "unlabelled"}
        a, c = item.attempt, item.comparison
        records.append(AnnotationRecord(
            layer=item.layer, model=a.model, problem=a.problem, family=a.family, dsl=a.dsl,
            direction=item.direction, r=c.r if c else None, outcome=c.outcome if c else None,
            annotator=annotator.settings.model, pass_id=annotator.settings.pass_id,
            rubric_version=RUBRIC_VERSION, **reply_fields))
        if n % 10 == 0 or n == len(items):
            progress(f"annotated {n}/{len(items)} ({annotator.calls} requests sent)")
    return records


def read_annotations(path: Path) -> list[AnnotationRecord]:
    """Parse an annotations file; a bad line fails with its line number."""
    records: list[AnnotationRecord] = []
    with open(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    records.append(AnnotationRecord.model_validate_json(line))
                except ValueError as exc:
                    raise ValueError(f"{path}:{lineno}: not an annotation record: {exc}") from exc
    return records

