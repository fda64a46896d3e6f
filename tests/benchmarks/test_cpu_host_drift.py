"""``cpu_host_drift.py``: the plain loop that measures how far a CPU host's own speed moves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "problems" / "kv_cache" / "25_batched_kv_cache_block_copy_remap_uint8.py"
KERNEL = REPO / "tests" / "fixtures" / "kernels" / "blockcopy_tirx_llvm.py"


def test_bursts_of_the_eager_call_and_the_kernel_taking_turns(tmp_path):
    out = tmp_path / "drift.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.cpu_host_drift", str(PROBLEM), str(KERNEL), "--small",
                           "--seconds", "1", "--interval", "0.2", "--calls", "5", "--warmup", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert {"command", "commit", "date", "host", "torch", "summary", "per_burst"} <= set(record)
    assert record["bursts"] == len(record["per_burst"]) >= 2
    for row in record["per_burst"]:
        assert row["eager"] > 0 and row["kernel"] > 0
        assert abs(row["kernel_over_eager"] - row["kernel"] / row["eager"]) < 1e-12
    kernels = [row["kernel"] for row in record["per_burst"]]
    assert record["summary"]["kernel"]["max_over_min"] == max(kernels) / min(kernels)
    assert "--interval 0.2" in record["command"]
