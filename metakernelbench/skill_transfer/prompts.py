"""The annotator's prompts, one per layer: a fixed instruction (with the rubric) and the material.

The instructions are documented verbatim in ``docs/annotation.md`` (a test keeps them identical).
Material goes in the user message between plain delimiters, and every answer is one JSON object
that follows the layer's pydantic schema, printed into the instruction.
"""

from __future__ import annotations

import json

from .annotation_models import ANSWER_SCHEMAS
from .rubric import CATEGORIES, FAILURE_CLASSES, FOLLOW_LEVELS, render_definitions

__all__ = [
    "COMMON", "FAILURE", "FOLLOW", "INSTRUCTIONS", "LABELS", "PROPAGATION", "messages", "section", "system_prompt",
]

COMMON = """\
You annotate material from a benchmark of GPU-kernel agents. An agent attempted a kernel problem in \
one kernel DSL (CuTe DSL or TIRx) and wrote a skill file of what it learned; the skill may have been \
given to a fresh attempt at the same problem in the other DSL. Judge only from the material shown. \
Every quote you give must be copied verbatim from the material named (you may shorten a quote with \
"..." between verbatim fragments). Answer with one JSON object and nothing else, following this \
JSON schema:"""

LABELS = """\
Task: label the SKILL with every content category below that it contains. List each category that \
is present once, with one passage of the skill that shows it; leave out categories that are absent. \
A passage may show several categories; label each of them.

Categories:
{categories}"""

FOLLOW = """\
Task: decide how far the TARGET ATTEMPT followed the SKILL it was given, from its TRAJECTORY. Choose \
one level and quote the passages of the trajectory that show it (for "none", quote passages that \
show the attempt going its own way, if any).

Levels:
{levels}"""

PROPAGATION = """\
Task: list the claims of the SOURCE SKILL (each conclusion it states as a finding). For each claim, \
decide whether a graded submission in the SOURCE TRAJECTORY supports it (verified, quoting the \
supporting passage of the source trajectory) or not (unverified), and whether the TARGET SKILL \
repeats it (quoting the passage of the target skill, or null when it does not)."""

FAILURE = """\
Task: this comparison was harmed: the TARGET ATTEMPT, given the SKILL, did worse than the solo \
attempt on the same task. From its TRAJECTORY, choose the one primary cause on the target's side, \
quote the passages of the trajectory that show it, and explain in one or two sentences.

Classes:
{classes}"""

INSTRUCTIONS = {
    "labels": LABELS.format(categories=render_definitions(CATEGORIES)),
    "follow": FOLLOW.format(levels=render_definitions(FOLLOW_LEVELS)),
    "propagation": PROPAGATION,
    "failure": FAILURE.format(classes=render_definitions(FAILURE_CLASSES)),
}


def system_prompt(layer: str) -> str:
    """The fixed instruction of a layer: the common part, the schema, the task and its rubric."""
    schema = json.dumps(ANSWER_SCHEMAS[layer].model_json_schema(), sort_keys=True)
    return f"{COMMON}\n{schema}\n\n{INSTRUCTIONS[layer]}"


def section(name: str, text: str) -> str:
    body = text if text.strip() else "(empty: nothing was recorded)"
    return f"===== {name} =====\n{body.rstrip()}\n===== end of {name} ====="


def messages(layer: str, context: str, sections: dict[str, str]) -> list[dict[str, str]]:
    """The chat messages of one question: the instruction, then the context line and the material."""
    material = "\n\n".join(section(name, text) for name, text in sections.items())
    return [{"role": "system", "content": system_prompt(layer)},
            {"role": "user", "content": f"{context}\n\n{material}"}]
