"""Isolation of the candidate process (design.md §4): no secrets inside it, and nothing it does ends the grader.

Each test grades a small submission on CPU at problem 28's small workload. The secret search runs
the full pipeline; the crash, hang, huge-output and OOM submissions end at their first call, and
each must give a clear status while the grader process carries on and leaves no worker behind.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import time
from pathlib import Path

import pytest

from metakernelbench.problems import find_problem
from metakernelbench.verifier.grader import GradeConfig, grade
from metakernelbench.verifier.result import Status

HERE = Path(__file__).resolve().parent
SEARCH = HERE / "submissions" / "search_secrets.py"
FAST = GradeConfig(correctness_draws=2, warmup=2, timed=5, rechecks=2)

HEADER = "import os\n\nimport torch\nimport tvm\nfrom tvm.script import tirx as T\n\n"
CRASHES = {
    "exit": "def solve(hidden_states, residual, weight):\n    os._exit(3)\n",
    "abort": "def solve(hidden_states, residual, weight):\n    os.abort()\n",
    # a TIRx kernel indexing a terabyte past its buffer: a real segmentation fault in compiled code
    "segfault": '''
@T.prim_func
def wild(a_h: T.handle):
    n = T.int32()
    a = T.match_buffer(a_h, (n,), "float32")
    for i in range(n):
        a[T.int64(i) * T.int64(1 << 36) + T.int64(1 << 40)] = T.float32(1.0)


def solve(hidden_states, residual, weight):
    exe = tvm.compile(tvm.IRModule({"main": wild}), target=tvm.target.Target("llvm"), tir_pipeline="tirx")
    exe.mod["main"](torch.zeros(4))
''',
}
HANG = "def solve(hidden_states, residual, weight):\n    while True:\n        pass\n"
# the launch rule comes first, so the huge output is written (in part) by a real TIRx kernel
HUGE = '''
@T.prim_func
def fill(a_h: T.handle):
    n = T.int32()
    a = T.match_buffer(a_h, (n,), "uint8")
    for i in range(n):
        a[i] = T.uint8(7)


def solve(hidden_states, residual, weight):
    out = torch.zeros(64 << 20, dtype=torch.uint8)  # 64 MiB for a 3.5 KiB answer
    exe = tvm.compile(tvm.IRModule({"main": fill}), target=tvm.target.Target("llvm"), tir_pipeline="tirx")
    exe.mod["main"](out[:4096])
    return out
'''
OOM = ("def solve(hidden_states, residual, weight):\n"
       "    return torch.empty(1 << 50, dtype=torch.uint8)  # a petabyte\n")


@pytest.fixture(scope="module")
def problem():
    loaded = find_problem("28")
    loaded.spec = loaded.spec.model_copy(update={"workload": {**loaded.spec.workload,
                                                              **loaded.spec.small_workload}})
    return loaded


def _submit(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "kernel.py"
    path.write_text(HEADER + body)
    return path


def _no_workers_left() -> None:
    alive = [p for p in multiprocessing.active_children() if p.is_alive()]
    assert not alive, f"worker processes left running: {alive}"


def test_candidate_process_holds_no_secrets(problem):
    """The probe walks its own process during every phase; it raises if it finds a secret."""
    result = grade(problem, SEARCH, "tirx", device="cpu", config=FAST)
    assert result.status is Status.PASSED, result.message
    _no_workers_left()


@pytest.mark.filterwarnings("ignore::FutureWarning")  # the walk touches deprecated torch aliases
def test_secret_search_would_find_secrets_where_they_are():
    """The probe is not blind: in this (trusted) process the problem loader and modules are found."""
    find_problem("28")  # loads the problem module here, as the grader does
    spec = importlib.util.spec_from_file_location("mkb_search_probe", SEARCH)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    found, _ = probe._search()
    assert any("problem" in f for f in found), found


@pytest.mark.parametrize("how", sorted(CRASHES))
def test_crash_is_a_runtime_error(problem, tmp_path, how):
    result = grade(problem, _submit(tmp_path, CRASHES[how]), "tirx", device="cpu", config=FAST)
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "died" in result.message
    _no_workers_left()


def test_hang_is_a_timeout(problem, tmp_path):
    config = GradeConfig(correctness_draws=2, warmup=2, timed=5, rechecks=2, call_timeout_s=5,
                         compile_timeout_s=5)
    started = time.perf_counter()
    result = grade(problem, _submit(tmp_path, HANG), "tirx", device="cpu", config=config)
    assert result.status is Status.TIMEOUT, result.message
    assert time.perf_counter() - started < 300
    _no_workers_left()


def test_huge_output_is_incorrect(problem, tmp_path):
    result = grade(problem, _submit(tmp_path, HUGE), "tirx", device="cpu", config=FAST)
    assert result.status is Status.INCORRECT, result.message
    assert result.mismatch is not None and result.mismatch.check == "structure"
    _no_workers_left()


def test_output_beyond_the_channel_limit_is_incorrect(problem, tmp_path):
    config = GradeConfig(correctness_draws=2, warmup=2, timed=5, rechecks=2, max_output_bytes=16 << 20)
    result = grade(problem, _submit(tmp_path, HUGE), "tirx", device="cpu", config=config)
    assert result.status is Status.INCORRECT, result.message
    assert "larger than any valid answer" in result.message
    _no_workers_left()


def test_out_of_memory_is_a_runtime_error(problem, tmp_path):
    result = grade(problem, _submit(tmp_path, OOM), "tirx", device="cpu", config=FAST)
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "allocate" in result.message.lower()
    _no_workers_left()
