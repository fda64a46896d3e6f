"""Starting an evaluation's workers ahead of the grader (``launch``): nothing of the submission runs early."""

from __future__ import annotations

import time
from pathlib import Path

from metakernelbench.problems import find_problem_path
from metakernelbench.verifier.launch import GradeConfig, close_quietly, start_workers
from metakernelbench.verifier.wire import Ready

KERNEL = ("import os\n"
          "open(os.path.join(os.environ['TMPDIR'], 'imported'), 'w').close()\n"
          "def solve(*inputs):\n"
          "    return None\n")


def test_the_candidate_imports_the_kernel_only_when_released(tmp_path):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(KERNEL)
    started = start_workers(kernel, "tirx", find_problem_path("28"), 1, "cpu", GradeConfig(pin_cores=False))
    try:
        started.reference.expect(600, started.reference.nonce, None)  # the reference worker is up
        time.sleep(10.0)  # the candidate loads the same stack plus its DSL and warms the profiler, then waits
        marker = Path(started.scratch) / "imported"
        assert not marker.exists(), "the kernel file ran before the grader released it"
        released_at = time.perf_counter()
        started.candidate.release()
        ready, _ = started.candidate.expect(600, started.candidate.nonce, None)
        assert isinstance(ready, Ready) and marker.exists()
        waited = ready.startup_s["waited_for_the_grader"]
        assert waited >= 0.5, f"the worker reached the gate only {waited:.2f} s before its release"
        assert time.perf_counter() - released_at < 60
    finally:
        close_quietly(started)
    assert not Path(started.scratch).exists()


def test_declared_outputs_are_read_without_running_the_problem_file():
    from metakernelbench.problems import declared_output_count

    assert declared_output_count(find_problem_path("28")) == 1
    assert declared_output_count(find_problem_path("01")) == 2


class _Handle:
    def __init__(self):
        self.closed, self.released = 0, 0

    def close(self):
        self.closed += 1

    def release(self):
        self.released += 1


def test_workers_end_once_on_every_way_out_and_own_a_relaunched_candidate(tmp_path, monkeypatch):
    from metakernelbench.verifier import launch

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    first, reference, second = _Handle(), _Handle(), _Handle()
    spawned = []
    monkeypatch.setattr(launch, "spawn_worker", lambda setup, *rest: spawned.append(setup) or second)
    workers = launch.Workers(str(scratch), ["/p"], first, reference, None, None,
                             (str(tmp_path / "k.py"), "tirx", str(tmp_path / "p.py"), "cpu"))
    try:
        with workers:
            assert workers.relaunch_candidate(2, GradeConfig()) is second
            raise RuntimeError("a fault in the middle of a grade")
    except RuntimeError:
        pass
    assert first.closed == 1 and second.released == 1 and workers.candidate is second
    assert spawned[0].path == str(tmp_path / "k.py") and spawned[0].num_outputs == 2
    assert (second.closed, reference.closed) == (1, 1) and not scratch.exists()
    launch.close_quietly(workers)  # ending again does nothing
    assert (second.closed, reference.closed) == (1, 1)
