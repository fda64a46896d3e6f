"""``results/h200/audit-events.json`` and what docs/grading.md says from it: each figure the section
"What moves a call's time" quotes is recomputed from the record, so the two cannot drift apart."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECORD = json.loads((REPO / "results" / "h200" / "audit-events.json").read_text())
DOC = " ".join((REPO / "docs" / "grading.md").read_text().split())
PLAINS = ("plain", "plain_b", "plain_c")


def run(name: str) -> dict:
    return next(r for r in RECORD["runs"] if r["name"] == name)


def plain_range(name: str, digits: int) -> str:
    medians = [run(name)["variants"][v]["median_ms"] for v in PLAINS]
    return f"{min(medians):.{digits}f}-{max(medians):.{digits}f}"


def test_every_run_names_its_command_and_no_call_raised_an_audit_event():
    assert len(RECORD["runs"]) >= 6
    for r in RECORD["runs"]:
        assert r["command"].startswith("python3 -m benchmarks.audit_events ")
        assert r["events_per_call"] == {}, r["name"]
        assert set(PLAINS) | {"nap", "hook", "guard"} <= set(r["variants"])
        assert all(not refused for refused in r["refusals"].values()), r["name"]


def test_the_docs_quote_the_records_figures():
    assert f"plain {plain_range('28c-pin', 3)} ms, hook {run('28c-pin')['variants']['hook']['median_ms']:.3f}" in DOC
    assert f"plain {plain_range('25t-pin', 3)} ms, hook {run('25t-pin')['variants']['hook']['median_ms']:.3f}" in DOC
    assert f"read 0.{round(run('28c-pin')['variants']['nap']['median_ms'] * 1000):03d} ms on 28 CuTe DSL" in DOC
    assert f"0.{round(run('25t-pin')['variants']['nap']['median_ms'] * 1000):03d} ms on 25 TIRx" in DOC
    assert f"reads {plain_range('69ref', 2)} ms by the medians of three plain processes" in DOC
    assert f"(unpinned; {plain_range('69ref-pin', 2)} ms pinned)" in DOC
    assert f"of 01 {plain_range('01ref-pin', 1)} ms pinned" in DOC


def test_sleeping_before_a_call_reads_above_every_plain_process_on_short_kernels():
    for name in ("28c-pin", "25t-pin"):
        variants = run(name)["variants"]
        assert variants["nap"]["median_ms"] > max(variants[v]["median_ms"] for v in PLAINS), name
