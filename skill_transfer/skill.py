"""The skill file: where Harbor leaves it, and how it is handed to the paired attempt.

The source attempt's ``/app/SKILL.md`` is collected by Harbor as an artifact at
``<trial>/artifacts/app/SKILL.md``. It is transferred verbatim, between marker lines, under a
neutral header: the header says where the text came from and nothing about how that attempt fared
(design.md §6: the skill goes over whether or not the source passed; code and trajectory stay behind).
"""

from __future__ import annotations

from pathlib import Path

SKILL_ARTIFACT = Path("artifacts") / "app" / "SKILL.md"

DSL_TITLES = {"cutedsl": "CuTe DSL", "tirx": "TIRx"}

BEGIN_MARK = "----- BEGIN NOTES -----"
END_MARK = "----- END NOTES -----"

HEADER = """\
## Notes from a previous attempt

A previous attempt on this same problem, made in another kernel DSL ({source}), kept the notes
below. They are reproduced verbatim between the two marker lines. They are provided for reference
only; nothing about the outcome of that attempt is implied.
"""


def read_skill(trial_dir: Path) -> str | None:
    """The skill a trial left, or None when it left none or only whitespace (a skipped treatment).

    Read as bytes and decoded leniently: a skill with a stray invalid byte is still a skill.
    """
    path = trial_dir / SKILL_ARTIFACT
    if not path.is_file():
        return None
    text = path.read_bytes().decode("utf-8", errors="replace")
    return text if text.strip() else None


def render_attachment(skill: str, source_dsl: str) -> str:
    """The extra instruction text appended to the target task's instruction."""
    body = skill if skill.endswith("\n") else skill + "\n"
    return f"{HEADER.format(source=DSL_TITLES[source_dsl])}\n{BEGIN_MARK}\n{body}{END_MARK}\n"


def skill_from_attachment(text: str) -> str | None:
    """The verbatim skill inside an attachment written by ``render_attachment`` (None if not one)."""
    start = text.find(BEGIN_MARK + "\n")
    end = text.rfind("\n" + END_MARK)
    if start < 0 or end < start:
        return None
    body = text[start + len(BEGIN_MARK) + 1 : end + 1]
    return body
