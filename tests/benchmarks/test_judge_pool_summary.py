"""``judge_pool.summary``: the per-mode figures judge-pool.json holds, and the recorded CPU run's shape."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.judge_pool import summary

REPO = Path(__file__).resolve().parents[2]


def test_medians_and_warm_count_come_from_the_gradings():
    gradings = [{"wall_s": w, "client_s": w + 0.1, "grade_wall_s": w - 1, "warm": warm, "stages_s": {"start": s}}
                for w, warm, s in ((3.0, "true", 0.2), (5.0, "true", 0.4), (4.0, "false", 3.0))]
    got = summary(gradings)
    assert got["wall_s"] == {"median": 4.0, "min": 3.0, "max": 5.0, "n": 3}
    assert got["client_s"]["median"] == 4.1 and got["grade_wall_s"]["median"] == 3.0
    assert got["warm"] == 2 and got["stages_s_median"] == {"start": 0.4}
    assert summary([])["wall_s"] == {}


def test_the_recorded_cpu_run_dispatched_every_pooled_grading_warm():
    record = json.loads((REPO / "results" / "cpu" / "judge-pool.json").read_text())
    on, off = record["gradings"]["on"], record["gradings"]["off"]
    assert all(g["status"] == "PASSED" for g in on + off)
    assert all(g["warm"] == "true" for g in on) and all(g["warm"] == "false" for g in off)
    assert record["summary"]["on"]["wall_s"]["median"] < record["summary"]["off"]["wall_s"]["median"]
