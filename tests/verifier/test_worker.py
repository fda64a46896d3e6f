"""The worker's thread check (``worker.Worker._contract_checks``) and honest work at full size.

A thread that appears during the timed calls reads as work left running after ``solve`` returned,
so the threads a library starts on its own (torch's intra-op pool, on the first operator large
enough to split) must already exist when the baseline is taken. The first test shows that the
worker's start leaves no intra-op thread to be started later; the second grades an honest CPU
kernel of problem 25 at its full workload (its in-place copies are 64 MiB a tensor), where the
check once misfired, with the contract's stages all run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCKCOPY = REPO / "tests" / "fixtures" / "kernels" / "blockcopy_tirx_llvm.py"

PROBE = """
import os, torch
torch.set_num_threads(4)  # a pool to start, whatever this machine's core count
from metakernelbench.verifier.worker import _start_thread_pools
_start_thread_pools()
before = len(os.listdir('/proc/self/task'))
x = torch.ones(64 << 20, dtype=torch.uint8)
x.clone().sum()  # the kind of eager glue a kernel runs on a full-size tensor
print(before, len(os.listdir('/proc/self/task')))
"""


def test_no_intra_op_thread_is_left_to_start_after_the_workers_start():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = (int(n) for n in done.stdout.split())
    assert after == before, f"a large operator started {after - before} more threads after the pool was started"


@pytest.mark.slow
def test_an_honest_cpu_kernel_passes_at_full_workload():
    from metakernelbench.problems import find_problem
    from metakernelbench.verifier.grader import GradeConfig, grade
    from metakernelbench.verifier.result import Status

    problem = find_problem("25")  # the full workload: 1024 blocks of 64 KiB, 256 pairs copied
    # every call at the full workload; few of them (the verdict is the point here, not the timing)
    config = GradeConfig(correctness_draws=1, warmup=1, timed=3, rechecks=1, eager_baseline_warmup=1,
                         eager_baseline_timed=3, eager_check_warmup=1, eager_check_timed=2)
    result = grade(problem, BLOCKCOPY, "tirx", device="cpu", config=config)
    assert result.status is Status.PASSED, result.message
