"""Skill hygiene: does a skill keep to prose, as the skill rules ask?

The attempt's instructions ask for findings, not recipes: no code, no commands, no API
instructions. A skill that carries code smuggles the source attempt's solution into the target
attempt, which would turn "does the knowledge transfer" into "does the code port". This checker
finds the four visible kinds of violation, so reports can show how often each model breaks the
rule and a later stage can filter or redact skills before transfer:

- ``fenced_code``: a fenced block (three or more backticks or tildes);
- ``inline_code``: a backtick span;
- ``shell_command``: a line (or code span) that reads as a shell command line: a ``$`` prompt, or
  a known program followed by a flag, a path or a script;
- ``api_call``: call syntax on a dotted or snake_case name (``cute.make_layout(...)``,
  ``alloc_buffer(...)``), a decorator on a dotted name, or an ``import`` statement.

The checks are deliberately syntactic (they look at form, not intent) so that they are predictable
and cheap; a prose mention of an API name without call syntax is not a violation.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

__all__ = ["HygieneReport", "KINDS", "Violation", "check_skill"]

KINDS: tuple[str, ...] = ("fenced_code", "inline_code", "shell_command", "api_call")

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_INLINE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_PROGRAMS = (
    "python|python3|pip|pip3|uv|conda|bash|sh|zsh|nvcc|nvidia-smi|ncu|nsys|cuobjdump|ptxas|"
    "cd|ls|cat|less|head|tail|grep|rg|sed|awk|find|echo|export|rm|cp|mv|mkdir|chmod|touch|"
    "git|make|cmake|ninja|gcc|g\\+\\+|clang|apt|apt-get|curl|wget|pytest|torchrun|submit|mkb|harbor"
)
_ARG = r"(?:-{1,2}[A-Za-z]|\S*/\S*|\S+\.(?:py|sh|cu|cuh|json|txt|md|toml|yaml|so)\b|install\b|run\b|-m\b)"
_SHELL = re.compile(
    rf"^(?:\$\s+\S.*|(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:sudo\s+)?(?:{_PROGRAMS})\s+{_ARG}.*)$"
)
_CALL = re.compile(
    r"(?<![\w.])(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[A-Za-z]\w*_\w+)\((?:[^()]|\([^()]*\))*\)"
)
_DECORATOR = re.compile(r"(?<![\w@])@[A-Za-z_]\w*\.[A-Za-z_][\w.]*")
_IMPORT = re.compile(r"^\s*(?:from\s+[\w.]+\s+import\s+\S|import\s+[\w.]+(?:\s+as\s+\w+)?\s*$)")
_BULLET = re.compile(r"^\s*(?:[-*+]\s+|\d+[.)]\s+|>\s*)*")


class Violation(BaseModel):
    """One place where a skill breaks the prose-only rule."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    line: int
    excerpt: str


class HygieneReport(BaseModel):
    """All violations found in one skill, with per-kind counts."""

    model_config = ConfigDict(extra="forbid")

    chars: int
    violations: list[Violation]

    @property
    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(KINDS, 0)
        for violation in self.violations:
            counts[violation.kind] += 1
        return counts

    @property
    def clean(self) -> bool:
        return not self.violations


def _excerpt(text: str, limit: int = 80) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _code_like(fragment: str, lineno: int, out: list[Violation]) -> None:
    """Shell-command and API-call checks on one line of prose or one code span."""
    stripped = _BULLET.sub("", fragment, count=1).strip()
    if _SHELL.match(stripped):
        out.append(Violation(kind="shell_command", line=lineno, excerpt=_excerpt(stripped)))
    if _IMPORT.match(stripped):
        out.append(Violation(kind="api_call", line=lineno, excerpt=_excerpt(stripped)))
    for match in _CALL.finditer(fragment):
        out.append(Violation(kind="api_call", line=lineno, excerpt=_excerpt(match.group(0))))
    for match in _DECORATOR.finditer(fragment):
        out.append(Violation(kind="api_call", line=lineno, excerpt=_excerpt(match.group(0))))


def check_skill(text: str) -> HygieneReport:
    """Every violation in ``text``, in order of appearance.

    A fenced block counts once, however long (its contents are not checked again); an unclosed
    fence runs to the end of the text, as Markdown renders it.
    """
    out: list[Violation] = []
    fence: str | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        opener = _FENCE.match(line)
        if fence is not None:
            if opener and opener.group(1)[0] == fence[0] and len(opener.group(1)) >= len(fence):
                fence = None
            continue
        if opener:
            fence = opener.group(1)
            out.append(Violation(kind="fenced_code", line=lineno, excerpt=_excerpt(line)))
            continue
        prose = line
        for match in _INLINE.finditer(line):
            span = match.group(2).strip()
            if not span:
                continue
            out.append(Violation(kind="inline_code", line=lineno, excerpt=_excerpt(span)))
            _code_like(span, lineno, out)
            prose = prose.replace(match.group(0), " ")
        _code_like(prose, lineno, out)
    return HygieneReport(chars=len(text), violations=out)
