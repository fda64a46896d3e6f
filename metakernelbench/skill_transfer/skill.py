"""The skill file: where Harbor leaves it, and how it is handed to the paired attempt.

The source attempt's ``/app/SKILL.md`` is collected by Harbor as an artifact at
``<trial>/artifacts/app/SKILL.md``. It is transferred verbatim under one neutral heading and nothing
else: no commentary, no name of the DSL it came from and nothing about how that attempt fared
(design.md §6: the skill goes over whether or not the source passed; code and trajectory stay
behind). The skill specification asks for a file without a title, since the heading is added here.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["HEADER", "SKILL_ARTIFACT", "read_skill", "render_attachment", "skill_from_attachment"]

SKILL_ARTIFACT = Path("artifacts") / "app" / "SKILL.md"

HEADER = "## Notes from a previous attempt\n\n"


def read_skill(trial_dir: Path) -> str | None:
    """The skill a trial left, or None when it left none or only whitespace (a skipped treatment).

    Read as bytes and decoded leniently: a skill with a stray invalid byte is still a skill.
    """
    path = trial_dir / SKILL_ARTIFACT
    if not path.is_file():
        return None
    text = path.read_bytes().decode("utf-8", errors="replace")
    return text if text.strip() else None


def render_attachment(skill: str) -> str:
    """The extra instruction text appended to the target task's instruction: the heading, then the
    skill byte for byte (a final newline added if it has none)."""
    body = skill if skill.endswith("\n") else skill + "\n"
    return HEADER + body


def skill_from_attachment(text: str) -> str | None:
    """The verbatim skill inside an attachment written by ``render_attachment`` (None if not one)."""
    if not text.startswith(HEADER):
        return None
    return text[len(HEADER):]
