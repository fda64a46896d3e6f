"""An agent trajectory as plain text an annotator can read within a bounded prompt.

Harbor agents write ``<trial>/agent/trajectory.json`` in the ATIF format
(``harbor.models.trajectories.Trajectory``: ``steps`` with ``source``, ``message``, ``tool_calls``
and ``observation.results``). It is read leniently here, as plain JSON, because an annotator should
still see what an older or partial trajectory holds; a missing or unreadable file gives an empty
text, which the annotator is told about. Long attempts do not fit a prompt, so every tool output is
cut to its head and tail, and the whole text to its opening and its end (where the final kernel and
skill are written), with a marker saying how much was left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["TRAJECTORY", "clip", "read_trajectory", "render_steps"]

TRAJECTORY = Path("agent") / "trajectory.json"


def _text(content: Any) -> str:
    """Text of an ATIF message or observation: a string, or the text parts of a part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def clip(text: str, limit: int) -> str:
    """``text`` cut to its head and tail around a marker when longer than ``limit`` characters."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - 60) // 2
    return f"{text[:keep]}\n[... {len(text) - 2 * keep} characters left out ...]\n{text[len(text) - keep:]}"


def render_steps(data: dict[str, Any], max_output_chars: int) -> str:
    """Every step as ``[step N] source:`` followed by its message, tool calls and observations."""
    lines: list[str] = []
    for i, step in enumerate(data.get("steps") or [], start=1):
        if not isinstance(step, dict):
            continue
        lines.append(f"[step {step.get('step_id', i)}] {step.get('source', '?')}:")
        message = _text(step.get("message"))
        if message.strip():
            lines.append(clip(message.strip(), max_output_chars))
        for call in step.get("tool_calls") or []:
            if isinstance(call, dict):
                args = json.dumps(call.get("arguments"), ensure_ascii=False)
                lines.append(clip(f"(tool call {call.get('function_name', '?')}) {args}", max_output_chars))
        observation = step.get("observation") or {}
        for result in observation.get("results") or [] if isinstance(observation, dict) else []:
            if isinstance(result, dict):
                out = _text(result.get("content")).strip()
                if out:
                    lines.append("(output) " + clip(out, max_output_chars))
    return "\n".join(lines)


def read_trajectory(trial_dir: Path, max_chars: int = 60_000, max_output_chars: int = 3_000) -> str:
    """The trial's trajectory as bounded text; empty when the trial left none that can be read."""
    path = trial_dir / TRAJECTORY
    try:
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError):
        return ""
    if not isinstance(data, dict):
        return ""
    return clip(render_steps(data, max_output_chars), max_chars)
