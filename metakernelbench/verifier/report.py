"""The plain-text report an agent (or a person) reads after a grade."""

from __future__ import annotations

from .result import GradeResult


def render_report(result: GradeResult, submissions_left: int | None = None,
                  minutes_left: float | None = None) -> str:
    lines = [f"status: {result.status.value}", f"problem: {result.problem} ({result.dsl})",
             f"message: {result.message}"]
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
