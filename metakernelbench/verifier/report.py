"""The plain-text report an agent (or a person) reads after a grade."""

from __future__ import annotations

import re

from .result import GradeResult

__all__ = ["kernel_frame", "render_report"]

_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')
# the grader's own code and the helpers a kernel may import, wherever the package is installed
_GRADER = re.compile(r"/metakernelbench/(verifier/|problem_kit\.py|problems\.py)")


def _is_library(path: str) -> bool:
    return (path.startswith("<") or _GRADER.search(path) is not None or "site-packages" in path
            or "dist-packages" in path or "/lib/python3" in path)


def kernel_frame(traceback: str) -> str | None:
    """Where an error arose in the submission: the innermost traceback frame outside the grader,
    the installed libraries and the standard library, with its source line; None when no such frame.

    The report shows it beside the message, so a person reading ``mkb grade`` without ``--json``
    sees the file and line of a RUNTIME_ERROR or COMPILE_ERROR, not only its text.
    """
    lines = traceback.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = _FRAME.match(lines[i])
        if m and not _is_library(m["file"]):
            where = f"{m['file']}, line {m['line']}, in {m['fn']}"
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            code = nxt if nxt and not _FRAME.match(lines[i + 1]) and not set(nxt) <= set("^~ ") else ""
            return where + (f": {code}" if code else "")
    return None


def render_report(result: GradeResult, submissions_left: int | None = None,
                  minutes_left: float | None = None) -> str:
    lines = [f"status: {result.status.value}", f"problem: {result.problem} ({result.dsl})",
             f"message: {result.message}"]
    where = kernel_frame(result.details.get("traceback", ""))
    if where:
        lines.append(f"where: {where}")
    m = result.mismatch
    if m:
        where = f" at {m.index}" if m.index is not None else ""
        lines.append(f"first mismatch: output {m.output!r}, draw {m.draw}, {m.check} check{where}: {m.detail}")
        if m.got is not None or m.expected is not None:
            lines.append(f"  got {m.got!r}, expected {m.expected!r}")
        if m.excess is not None:
            lines.append(f"  error {m.error:.4g} = {m.excess:.3g}x the allowance {m.allowance:.4g}")
    if result.kernel_ms is not None:
        lines.append(f"kernel median: {result.kernel_ms:.4f} ms")
    if result.eager_ms is not None:
        lines.append(f"eager median: {result.eager_ms:.4f} ms"
                     + (" (the eager baseline drifted >10% and was measured again: a noisy machine)"
                        if result.eager_drift_flag else ""))
    if result.speedup is not None:
        lines.append(f"speedup: {result.speedup:.3f}x (scored {result.score_speedup:.3f}x, cap 100x)")
    if result.speed_of_light is not None:
        lines.append(f"speed of light: {100 * result.speed_of_light:.1f}% of the physical floor")
    if result.launch_sites:
        lines.append("DSL launch sites: " + ", ".join(result.launch_sites))
    for site, outcome in result.bypass.items():
        lines.append(f"  bypass test, {site} suppressed: {outcome}")
    for v in result.violations[:10]:
        lines.append(f"rule: {v}")
    if submissions_left is not None:
        lines.append(f"submissions left: {submissions_left}")
    if minutes_left is not None:
        lines.append(f"minutes left: {minutes_left:.1f}")
    if result.grade_wall_s is not None:
        lines.append(f"grading took {result.grade_wall_s:.1f} s")
    return "\n".join(lines)
