"""``demo_lift.py``: the demo's paired ratios for identical kernels and the spread inside each grading."""

from __future__ import annotations

import json
import math
from pathlib import Path

from benchmarks.demo_lift import block_medians, summarize
from metakernelbench.skill_transfer.models import Attempt

PROBLEMS = {"25_batched_kv_cache_block_copy_remap_uint8": ("kv_cache", 0.05, 0.04),
            "28_fused_add_rmsnorm_h4096_llama31_8b_bf16": ("mlp_norm", 0.03, 0.06)}


def _study(root: Path) -> Path:
    """A finished study folder: per problem a passed TIRx solo and transfer attempt (its grade.json
    with 120 timed calls, slow in the middle block), a failed CuTe DSL pair."""
    rows = []
    for problem, (family, solo_ms, transfer_ms) in PROBLEMS.items():
        for arm, ms in (("solo", solo_ms), ("transfer", transfer_ms)):
            job, trial = f"job-{arm}", f"{problem[:2]}-{arm}"
            rows.append(Attempt(model="m", problem=problem, family=family, dsl="tirx", arm=arm,
                                source_dsl="cutedsl" if arm == "transfer" else None, passed=True, runtime_ms=ms,
                                speedup=1.0, status="PASSED", job=job, trial=trial))
            grade = root / "jobs" / job / trial / "verifier" / "grade.json"
            grade.parent.mkdir(parents=True)
            samples = [ms] * 50 + [2 * ms] * 50 + [ms] * 20
            grade.write_text(json.dumps({"status": "PASSED", "kernel_timing": {"samples_ms": samples}}))
            rows.append(Attempt(model="m", problem=problem, family=family, dsl="cutedsl", arm=arm,
                                source_dsl="tirx" if arm == "transfer" else None, passed=False,
                                status="RUNTIME_ERROR"))
    (root / "attempts.jsonl").write_text("".join(a.model_dump_json() + "\n" for a in rows))
    return root


def test_block_medians():
    assert block_medians([1.0, 3.0, 2.0, 10.0], block=2) == [2.0, 6.0]
    assert block_medians([1.0, 2.0, 3.0], block=2) == [1.5, 3.0]


def test_ratios_and_lift_are_the_products_own_and_the_spread_is_per_grading(tmp_path):
    summary = summarize(_study(tmp_path))
    rows = {row["problem"][:2]: row for row in summary["comparisons"]}
    assert set(rows) == {"25", "28"}  # the failed CuTe DSL pairs are no both-pass comparison
    assert math.isclose(rows["25"]["r"], 0.05 / 0.04) and math.isclose(rows["28"]["r"], 0.03 / 0.06)
    assert math.isclose(summary["lift"]["cutedsl2tirx"], math.sqrt(1.25 * 0.5) - 1)
    solo = rows["25"]["within_grading"]["solo"]
    assert solo == {"timed_calls": 120, "block_median_min_ms": 0.05, "block_median_max_ms": 0.1,
                    "eager_ms": None, "speedup": None, "eager_baseline": None}
    assert rows["25"]["basis"] == "time"  # these grades used a cached eager baseline


def test_the_recorded_command_leaves_out_where_the_study_folders_were_kept():
    from benchmarks.demo_lift import _recorded

    assert _recorded(["--runs", "2", "--keep", "/tmp/x", "--out", "r.json"]) == ["--runs", "2", "--out", "r.json"]
    assert _recorded(["--keep=/tmp/x", "--runs", "1"]) == ["--runs", "1"]
