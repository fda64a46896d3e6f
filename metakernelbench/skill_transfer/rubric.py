"""The annotation rubric: content categories of a skill, follow levels and failure classes.

The annotator's prompts quote these definitions, and ``docs/annotation.md`` documents them with
examples; a test keeps the two identical, so the rubric a reader sees is the one the model saw.
``RUBRIC_VERSION`` is recorded on every annotation: change it whenever a definition, a name or a
prompt changes, so that annotations made under different rubrics are never pooled by accident.

The category and class names follow the paper (arXiv 2610.05014): five categories are what the
skill specification asks for, six are what skills were found to contain besides. The definitions
are written here from the skill specification in the task instruction.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "CATEGORIES", "Category", "FAILURE_CLASSES", "FOLLOW_LEVELS", "FailureClass", "FollowLevel", "PRESCRIBED",
    "RUBRIC_VERSION", "render_definitions",
]

RUBRIC_VERSION = "1.0"

Category = Literal[
    "evidence_backed_finding",
    "work_partitioning",
    "failure_reason",
    "applicability_condition",
    "open_question",
    "unverified_claim",
    "verification_recipe",
    "toolchain_note",
    "implementation_instruction",
    "attempt_narrative",
    "restatement_or_generic_advice",
]

CATEGORIES: dict[str, str] = {
    "evidence_backed_finding": (
        "A conclusion about the correctness or speed of this computation on this GPU, stated together "
        "with the observation from the attempt that supports it: a grader verdict, a time or speedup "
        "from a report, a mismatch, a compiler or runtime message, or what generated code showed."
    ),
    "work_partitioning": (
        "How the computation is divided: which parts run in DSL kernels and which in eager PyTorch, "
        "how work is split across kernels, blocks, warps and threads (the thread mapping), and why "
        "the line was drawn there."
    ),
    "failure_reason": (
        "An approach that did not work (wrong results, slower, would not compile, did not fit in "
        "registers or shared memory) together with the reason the attempt found for it."
    ),
    "applicability_condition": (
        "The conditions a conclusion depends on: shapes, dtypes, precision, hardware, or whether it "
        "is a property of one DSL or of the computation itself."
    ),
    "open_question": (
        "Something the attempt did not settle and would test next, with why it matters."
    ),
    "unverified_claim": (
        "A conclusion stated as fact that no observation from the attempt supports, or that goes "
        "beyond what its observation shows (a guess about a cause, a speed never measured)."
    ),
    "verification_recipe": (
        "A way to check a result that the next attempt can repeat: a control experiment, a "
        "small-workload check against the reference, a diagnostic that isolates a fault."
    ),
    "toolchain_note": (
        "Behaviour of a DSL, its compiler or runtime, or the grading harness: a limitation, an "
        "unsupported construct, what an error message means, a workaround."
    ),
    "implementation_instruction": (
        "Code, shell commands, API call sequences or step-by-step instructions for rebuilding the "
        "kernel, which the skill specification rules out."
    ),
    "attempt_narrative": (
        "The story of the attempt: what was done in which order, how debugging went, how submitting "
        "went, which the skill specification rules out."
    ),
    "restatement_or_generic_advice": (
        "A summary of the problem or of the task's rules, or general optimisation advice that this "
        "attempt did not test, which the skill specification rules out."
    ),
}

# The five categories the skill specification asks for; the other six are what skills contain in
# practice besides (three of them against the specification).
PRESCRIBED: tuple[str, ...] = (
    "evidence_backed_finding",
    "work_partitioning",
    "failure_reason",
    "applicability_condition",
    "open_question",
)

FollowLevel = Literal["full", "partial", "none"]

FOLLOW_LEVELS: dict[str, str] = {
    "full": (
        "The attempt acted on the skill's central recommendations: it used the approach, the work "
        "partitioning or the verification recipe the skill describes, and did not abandon them "
        "without evidence of its own."
    ),
    "partial": (
        "The attempt acted on some of the skill's recommendations and ignored, dropped or contradicted "
        "others, or started from the skill and switched away from it."
    ),
    "none": (
        "Nothing in the trajectory shows that the attempt acted on the skill: it never refers to the "
        "skill's content and its choices do not follow from it."
    ),
}

FailureClass = Literal[
    "search_truncation",
    "unverified_adoption",
    "faulty_execution",
    "toolchain_friction",
    "budget_or_artifact_mismanagement",
    "rule_and_precision_failure",
]

FAILURE_CLASSES: dict[str, str] = {
    "search_truncation": (
        "The attempt stopped exploring too early: it settled on one approach (often the skill's) and "
        "never tried the alternatives that could have matched the solo attempt, or ended with budget "
        "left."
    ),
    "unverified_adoption": (
        "The attempt took a claim or design from the skill without testing it in its own DSL, and that "
        "claim or design was wrong, slower or inapplicable here."
    ),
    "faulty_execution": (
        "The plan was sound but its implementation was wrong (an indexing error, a race, a wrong "
        "layout or mask) and the attempt did not find or fix it."
    ),
    "toolchain_friction": (
        "The attempt lost its budget to the DSL, compiler or runtime: compile errors, unsupported "
        "constructs, API misuse, crashes it could not get past."
    ),
    "budget_or_artifact_mismanagement": (
        "The attempt ran out of time or submissions, or left a worse, broken or missing kernel in "
        "/app/kernel.py although a better one had existed."
    ),
    "rule_and_precision_failure": (
        "The attempt broke a task rule (static rules, the bypass test, eager work routed through a "
        "kernel) or failed the numerical comparison through precision (accumulation dtype, rounding, "
        "tolerance)."
    ),
}


def render_definitions(definitions: dict[str, str]) -> str:
    """The definitions as a Markdown list, as the prompts and the docs show them."""
    return "\n".join(f"- `{name}`: {text}" for name, text in definitions.items())
