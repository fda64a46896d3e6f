"""Typed answers of the annotator and the records ``mkb annotate`` writes.

Each layer has one answer schema. The model is shown the schema and must answer with one JSON
object that validates against it; the quotes in the answer are then checked against the material
the model was shown (``quotes``). ``AnnotationRecord`` is one line of the annotations file written
beside ``attempts.jsonl``: which attempt or comparison, which annotator, rubric and pass, and either
the answer or, for an unlabelled item, why none could be had.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .models import Direction, Dsl
from .rubric import Category, FailureClass, FollowLevel

__all__ = [
    "ANSWER_SCHEMAS", "AnnotationRecord", "Answer", "CategoryLabel", "FailureAnswer", "FollowAnswer", "LAYERS",
    "Layer", "PropagationAnswer", "SkillLabels", "SourceClaim",
]

Layer = Literal["labels", "follow", "propagation", "failure"]
LAYERS: tuple[str, ...] = ("labels", "follow", "propagation", "failure")


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CategoryLabel(_Answer):
    """One category present in the skill, with a passage of the skill that shows it."""

    category: Category
    quote: str = Field(min_length=1, description="A passage copied verbatim from the skill.")


class SkillLabels(_Answer):
    """Layer 1: every rubric category present in a skill (absent categories are left out)."""

    labels: list[CategoryLabel]

    @model_validator(mode="after")
    def _unique(self) -> SkillLabels:
        seen = [label.category for label in self.labels]
        if len(seen) != len(set(seen)):
            raise ValueError("each category may appear once")
        return self

    @property
    def categories(self) -> set[str]:
        return {label.category for label in self.labels}


class FollowAnswer(_Answer):
    """Layer 2: how far a skill-conditioned attempt followed the skill it was given."""

    level: FollowLevel
    evidence: list[str] = Field(description="Passages copied verbatim from the trajectory.")
    rationale: str = Field(min_length=1)

    @model_validator(mode="after")
    def _evidence(self) -> FollowAnswer:
        if self.level != "none" and not self.evidence:
            raise ValueError("a full or partial follow needs at least one quoted passage")
        return self


class SourceClaim(_Answer):
    """One claim of the source skill: whether the source attempt verified it, and whether it reappears."""

    claim: str = Field(min_length=1, description="The claim, copied verbatim from the source skill.")
    verified: bool = Field(description="True when a graded submission of the source attempt supports it.")
    support: str | None = Field(None, description="Verbatim passage of the source trajectory that verifies it.")
    reappears: str | None = Field(None, description="Verbatim passage of the target skill repeating it.")

    @model_validator(mode="after")
    def _support(self) -> SourceClaim:
        if self.verified and not self.support:
            raise ValueError("a verified claim needs the supporting passage")
        return self


class PropagationAnswer(_Answer):
    """Layer 3: the source skill's claims, their verification, and which reappear in the target skill."""

    claims: list[SourceClaim]

    @property
    def unverified(self) -> list[SourceClaim]:
        return [c for c in self.claims if not c.verified]

    @property
    def propagated(self) -> list[SourceClaim]:
        return [c for c in self.claims if not c.verified and c.reappears]


class FailureAnswer(_Answer):
    """Layer 4: the one primary cause of a harmed comparison, on the target side."""

    primary_class: FailureClass
    evidence: list[str] = Field(min_length=1, description="Passages copied verbatim from the trajectory.")
    rationale: str = Field(min_length=1)


ANSWER_SCHEMAS: dict[str, type[_Answer]] = {
    "labels": SkillLabels,
    "follow": FollowAnswer,
    "propagation": PropagationAnswer,
    "failure": FailureAnswer,
}

Answer = SkillLabels | FollowAnswer | PropagationAnswer | FailureAnswer


class AnnotationRecord(BaseModel):
    """One annotated item: a solo skill (labels) or a transfer comparison (the other layers).

    ``dsl`` is the DSL of the attempt the item is about (the skill's for ``labels``, the target's
    otherwise); ``direction`` is the transfer direction the item belongs to (for ``labels``, the
    direction in which that skill is handed on). ``r`` and ``outcome`` are the comparison's, for
    the layers that are about a comparison. ``status`` is ``unlabelled`` when no valid answer was
    had after every try; ``error`` then says why, and ``answer`` is null: nothing is guessed.
    """

    model_config = ConfigDict(extra="forbid")

    layer: Layer
    model: str
    problem: str
    family: str
    dsl: Dsl
    direction: Direction
    r: float | None = None
    outcome: str | None = None
    annotator: str
    pass_id: int = 1
    rubric_version: str
    input_hash: str
    status: Literal["labelled", "unlabelled"]
    answer: Answer | None = None
    error: str | None = None
    tries: int = 0
    cached: bool = False

    @model_validator(mode="before")
    @classmethod
    def _typed_answer(cls, data: Any) -> Any:
        """Parse ``answer`` with its layer's schema (the union alone cannot tell them apart)."""
        if isinstance(data, dict) and isinstance(data.get("answer"), dict) and data.get("layer") in ANSWER_SCHEMAS:
            data = {**data, "answer": ANSWER_SCHEMAS[data["layer"]].model_validate(data["answer"])}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> AnnotationRecord:
        if (self.status == "labelled") != (self.answer is not None):
            raise ValueError("a labelled record carries an answer, an unlabelled one none")
        if self.answer is not None and not isinstance(self.answer, ANSWER_SCHEMAS[self.layer]):
            raise ValueError(f"answer is not a {self.layer} answer")
        return self

    @property
    def item(self) -> tuple[str, str, str, str, str]:
        """What the record is about, the same across annotators and passes."""
        return (self.layer, self.model, self.problem, self.dsl, self.direction)
