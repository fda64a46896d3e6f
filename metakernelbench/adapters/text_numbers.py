"""Every number a problem's description quotes must be backed by the graded workload.

The description (the problem file's docstring, title included) is what the agent reads first, in its
instruction and at the top of ``/app/problem.py``. A hand-written number there goes stale silently when
the workload changes: a description that says 64 sequences while ``make_inputs`` draws 40 sends the
agent after the wrong shapes. So the build refuses a description that quotes a number nothing in the
graded problem backs, and the workload stays the single source of truth.

A quoted number is backed when it equals one of:

- a keyword default of ``make_inputs`` (the graded workload);
- a dimension of an input tensor or a scalar input's value at the graded workload (as the inputs
  table shows them);
- a module-level constant of the problem file (an upper-case name; numbers inside tuples, lists and
  dicts count), except ``SMALL_WORKLOAD``: the CPU workload is not graded;
- a value of the optional ``text_values(**workload)`` function of the problem file, which derives the
  numbers the description quotes from the graded workload (a capacity, a byte offset);
- an exact whole quotient of two of the numbers above (query heads per KV head, channels per group);
- for the last index ``b`` of an inclusive range ``a..b``: a count ``b + 1`` backed as above.

Numbers the description quotes that are facts of a formula or of the source rather than of the
workload (a GELU coefficient, the source's expert count) are module constants with a name that says
so, typically in a ``TEXT_CONSTANTS`` dict.

0, 0.5, 1 and 2 are not checked (indices, halves, "2-norm", "base-2"), nor are exponents (``d^-0.5``,
``2^(-5-h)``). Digits inside a name are not numbers (``bf16``, ``h32``, ``sm_90a``, ``Qwen3``,
``Llama-3.1-8B``, ``TP=8``). The provenance notes are not checked: they describe the source and the
history of the workload, whose numbers differ from the graded ones by design.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from metakernelbench.problems import Problem, ProblemError

from .workload import describe_inputs

__all__ = ["NOT_GRADED", "UNCHECKED", "backing_numbers", "check_description", "quoted_numbers", "unbacked_numbers"]

_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_NAME_BEFORE_HYPHEN = re.compile(r"([A-Za-z][\w.\-]*)-$")
_SETTING = re.compile(r"\b[A-Z]{2,}=$")  # TP=8, EP=32: a deployment setting of the source
_EXPONENT = re.compile(r"\^[(]?-?$")
UNCHECKED = (0.0, 0.5, 1.0, 2.0)
NOT_GRADED = ("SMALL_WORKLOAD",)


def quoted_numbers(text: str) -> list[tuple[str, float, bool]]:
    """The numbers ``text`` quotes, as (literal, value, ends an inclusive range ``a..b``), leaving out
    digits that belong to a name."""
    found = []
    for m in _NUMBER.finditer(text):
        before, after = text[: m.start()], text[m.end():]
        if before[-1:].isalnum() or before[-1:] == "_":
            continue  # bf16, h32, sm_90
        if before[-1:] == "." and before[-2:-1] != ".":
            continue  # the tail of a version (3.1.2) or an attribute; a range a..b is two numbers
        if _SETTING.search(before) or _EXPONENT.search(before):
            continue
        if after[:1].isalnum() or after[:1] == "_":
            continue  # 8B, 2D, 128k
        if after[:1] == "." and after[1:2].isdigit():
            continue  # 3.1.2: a version
        name = _NAME_BEFORE_HYPHEN.search(before)
        if name and (name.group(1) != name.group(1).lower() or any(c.isdigit() for c in name.group(1))):
            continue  # Llama-3.1, Gemma-3: a model name (top-8 and base-2 are numbers)
        found.append((m.group(0), float(m.group(0)), before.endswith("..")))
    return found


def _numbers_in(value: Any) -> Iterable[float]:
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield float(value)
    elif isinstance(value, (tuple, list, set, frozenset)):
        for item in value:
            yield from _numbers_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers_in(item)


def backing_numbers(problem: Problem) -> set[float]:
    """Every number the graded problem itself defines (see the module docstring)."""
    workload = problem.spec.workload
    numbers = set(_numbers_in(workload))
    for info in describe_inputs(problem):
        if info.shape.startswith("["):
            numbers.update(float(d) for d in info.shape.strip("[]").split(",") if d.strip())
        if info.value:
            try:
                numbers.add(float(info.value))
            except ValueError:
                pass
    for name, value in vars(problem.module).items():
        if name.isupper() and name not in NOT_GRADED:
            numbers.update(_numbers_in(value))
    derive = getattr(problem.module, "text_values", None)
    if callable(derive):
        numbers.update(_numbers_in(derive(**workload)))
    return numbers


def _quotients(numbers: set[float]) -> set[float]:
    """Exact whole quotients a / b (b > 1) of whole numbers: heads per KV head, channels per group."""
    whole = sorted({int(n) for n in numbers if math.isfinite(n) and n == int(n) and n > 1})
    return {float(a // b) for a in whole for b in whole if a > b and a % b == 0}


def _backed(value: float, numbers: set[float], range_end: bool = False) -> bool:
    """Backed by a number, or (the last index of an inclusive range a..b) by the count b + 1."""
    candidates = (value, value + 1) if range_end else (value,)
    return value in UNCHECKED or any(math.isclose(c, n, rel_tol=1e-9, abs_tol=0.0)
                                     for c in candidates for n in numbers)


def unbacked_numbers(problem: Problem) -> list[str]:
    """The literals of the description that nothing in the graded problem backs, in text order."""
    numbers = backing_numbers(problem)
    numbers |= _quotients(numbers)
    text = problem.module.__doc__ or ""
    return [literal for literal, value, range_end in quoted_numbers(text) if not _backed(value, numbers, range_end)]


def check_description(problem: Problem) -> None:
    """Raise ``ProblemError`` naming the numbers the description quotes that the workload does not back."""
    stale = unbacked_numbers(problem)
    if stale:
        raise ProblemError(
            f"{problem.spec.path}: the description quotes {', '.join(stale)}, which the graded workload does "
            "not back (a make_inputs default, an input's dimension or value, a module constant, or a value "
            "of text_values(**workload)); fix the text or derive the number in text_values")
