"""Difficulty and time estimates of a task, derived by a fixed rule from its oracle kernel.

Harbor's task metadata has a ``difficulty`` (easy, medium, hard) and Terminal-Bench's convention adds
``expert_time_estimate_min`` and ``junior_time_estimate_min``. Nobody has timed people solving these
tasks, and solve rates are not measured yet, so the figures are not guessed per task: they follow
from the size of the task's oracle kernel, the one solution every task ships, by the rule below.
It is a rule, not a measurement; it is stated in every task's README and in docs/adding-a-problem.md.

The rule (``RULE``):

- ``oracle_code_lines``: the oracle kernel's lines of code, counted on ``ast.unparse`` of the file
  with every docstring removed (so comments, docstrings, blank lines and formatting do not count);
- difficulty: easy below 150 lines, medium below 300, hard from 300;
- expert time: 30 minutes to read the problem and the contract, plus one minute per 4 lines of
  kernel code (writing, checking and tuning), rounded up to 5 minutes;
- junior time: three times the expert's.

A task without an oracle kernel (a problem added without one) gets ``difficulty = "unknown"`` and
no time estimates: there is nothing to derive them from.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

from pydantic import BaseModel

__all__ = [
    "EASY_BELOW", "Estimate", "JUNIOR_FACTOR", "LINES_PER_MIN", "MEDIUM_BELOW", "READING_MIN", "RULE", "code_lines",
    "estimate",
]

EASY_BELOW = 150
MEDIUM_BELOW = 300
READING_MIN = 30
LINES_PER_MIN = 4
JUNIOR_FACTOR = 3
RULE = (f"from the oracle kernel's lines of code (docstrings, comments and blank lines excluded): easy below "
        f"{EASY_BELOW}, medium below {MEDIUM_BELOW}, hard from {MEDIUM_BELOW}; expert minutes = {READING_MIN} + "
        f"lines / {LINES_PER_MIN}, rounded up to 5; junior minutes = {JUNIOR_FACTOR} x expert")


class Estimate(BaseModel):
    """What the rule gives for one task (``None`` fields: no oracle to derive them from)."""

    difficulty: str
    oracle_code_lines: int | None = None
    expert_time_estimate_min: int | None = None
    junior_time_estimate_min: int | None = None


def code_lines(source: str) -> int:
    """Lines of code of a Python module, docstrings, comments and blank lines excluded."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return sum(1 for line in ast.unparse(tree).splitlines() if line.strip())


def _round_up(minutes: float, step: int = 5) -> int:
    return int(math.ceil(minutes / step) * step)


def estimate(oracle: Path) -> Estimate:
    """The rule applied to the oracle kernel at ``oracle`` (absent: unknown)."""
    if not oracle.is_file():
        return Estimate(difficulty="unknown")
    lines = code_lines(oracle.read_text())
    difficulty = "easy" if lines < EASY_BELOW else "medium" if lines < MEDIUM_BELOW else "hard"
    expert = _round_up(READING_MIN + lines / LINES_PER_MIN)
    return Estimate(difficulty=difficulty, oracle_code_lines=lines, expert_time_estimate_min=expert,
                    junior_time_estimate_min=JUNIOR_FACTOR * expert)
