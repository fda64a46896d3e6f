"""An oracle whose final grade is slower than eager says why in its docstring, with the record's figures
and a route that would beat eager: an oracle is also the evidence of what a DSL reaches on a problem."""

from __future__ import annotations

import ast
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECORD = json.loads((REPO / "results" / "h200" / "oracles.json").read_text())


def slower_than_eager() -> list[dict]:
    return [e for e in RECORD["entries"] if e.get("status") == "PASSED" and e.get("speedup") is not None
            and e["speedup"] < 1.0]


def test_each_slower_oracle_states_its_measured_speed_the_reason_and_a_route():
    slow = slower_than_eager()
    assert slow, "the record has no oracle slower than eager: this test would check nothing"
    for entry in slow:
        path = next((REPO / "oracles").glob(f"*/{entry['task']}.py"))
        doc = " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())
        assert "Speed (final grade" in doc, f"{path.name}: {entry['speedup']:.2f}x, no Speed paragraph"
        speed = doc.split("Speed (final grade", 1)[1]
        assert f"({entry['speedup']:.2f}x)" in speed and f"run {entry['run']}" in speed, (
            f"{path.name}: the Speed paragraph does not match the record ({entry['speedup']:.2f}x, run {entry['run']})")
        assert "route that would beat eager" in speed, f"{path.name}: no route that would beat eager"
