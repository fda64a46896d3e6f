"""``h200_oracle_check.py`` on the CPU: a correct and a wrong kernel for one task, small workload."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TASK = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"
KERNEL = REPO / "tests" / "fixtures" / "kernels" / "rmsnorm_tirx_llvm.py"


def _sweep(tmp_path, kernel: Path) -> dict:
    out = tmp_path / "check.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.h200_oracle_check", "--out", str(out),
                           "--device", "cpu", "--small-only", "--only", "28_tirx", "--kernel", f"{TASK}={kernel}"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(out.read_text())


def test_a_correct_kernel_is_ok(tmp_path):
    record = _sweep(tmp_path, KERNEL)
    assert {"command", "commit", "device", "date", "entries", "ok"} <= set(record)
    (entry,) = record["entries"]
    assert entry["task"] == TASK and entry["ok"] and entry["draws"][0]["workload"] == "small"


def test_a_wrong_kernel_is_reported_with_its_mismatch(tmp_path):
    wrong = tmp_path / "wrong_tirx.py"
    wrong.write_text(KERNEL.read_text().replace("EPS = 1e-5", "EPS = 1e-1"))
    record = _sweep(tmp_path, wrong)
    (entry,) = record["entries"]
    assert not entry["ok"] and record["ok"] == 0 and entry["draws"][0]["mismatch"]


def test_alone_names_tasks_by_number_dsl_or_name():
    from benchmarks.h200_oracle_check import _matches

    assert _matches(f"{TASK}", {"28"}) and _matches(TASK, {"28_tirx"}) and _matches(TASK, {TASK})
    assert not _matches(TASK, {"28_cutedsl"}) and not _matches(TASK, {"2"}) and not _matches(TASK, set())


def test_stats_give_the_kernels_and_the_references_errors(tmp_path):
    out = tmp_path / "check.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.h200_oracle_check", "--out", str(out),
                           "--device", "cpu", "--small-only", "--only", "28_tirx", "--kernel", f"{TASK}={KERNEL}",
                           "--stats", "28"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (entry,) = json.loads(out.read_text())["entries"]
    errors = entry["draws"][0]["errors"]
    assert errors and all({"max_abs", "norm", "rows"} <= set(e) for e in errors.values())
    for e in errors.values():
        assert e["max_abs"]["over_allowance"] <= 1 and e["rows"]["rows_over"] == 0


def test_merge_adds_a_run_and_keeps_what_it_replaces(tmp_path):
    from benchmarks.h200_oracle_check import merge

    def entry(task, ok):
        return {"task": task, "kernel": f"oracles/x/{task}.py", "ok": ok, "draws": []}

    record = tmp_path / "record.json"
    record.write_text(json.dumps({"about": "union", "runs": [{"run": 1}], "oracle_files": 2, "checked": 2, "ok": 1,
                                  "entries": [{**entry("a", True), "run": 1}, {**entry("b", False), "run": 1}],
                                  "superseded_entries": []}))
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"command": "c", "commit": "abc", "date": "d", "device": "GPU", "wall_s": 1.0,
                               "oracle_files": 3, "ok": 2, "complete": True,
                               "entries": [entry("b", True), entry("c", True)]}))
    merge(run, record)
    merged = json.loads(record.read_text())
    assert merged["runs"][-1] == {"run": 2, "command": "c", "commit": "abc", "date": "d", "device": "GPU",
                                  "wall_s": 1.0, "oracles": 2, "ok": 2, "complete": True}
    assert [(e["task"], e["ok"], e["run"]) for e in merged["entries"]] == [("a", True, 1), ("b", True, 2),
                                                                          ("c", True, 2)]
    assert merged["superseded_entries"] == [{**entry("b", False), "run": 1}]
    assert (merged["checked"], merged["ok"], merged["oracle_files"]) == (3, 3, 3)
