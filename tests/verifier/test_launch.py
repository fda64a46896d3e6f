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


def _thread_started_now(cpus_seen: list, go_on):
    """A thread started now (as torch's intra-op pool is, by the first large CPU operator), which
    records its CPUs and then waits; its native id lets the test read its CPUs from outside."""
    import os
    import threading

    started = threading.Event()

    def body():
        cpus_seen.append(os.sched_getaffinity(0))
        started.set()
        go_on.wait(30)

    thread = threading.Thread(target=body)
    thread.start()
    started.wait(30)
    return thread


def test_the_graders_own_computing_runs_on_every_cpu_and_its_threads_return_to_the_spin_cpu():
    import os
    import threading

    import pytest

    from metakernelbench.verifier.launch import grader_cpus

    original = os.sched_getaffinity(0)
    if len(original) < 2:
        pytest.skip("needs two CPUs")
    spin = {max(original)}
    go_on = threading.Event()
    os.sched_setaffinity(0, spin)  # the grader after its workers' start (spawn_worker)
    threads = []
    try:
        seen_pinned: list = []
        threads.append(_thread_started_now(seen_pinned, go_on))
        # the fault this fixes: a thread started while pinned gets only the spin CPU
        assert seen_pinned == [spin]
        seen_inside: list = []
        import torch

        torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a grader that imported torch after its workers' start has one thread
        with grader_cpus(original, spin):
            assert os.sched_getaffinity(0) == original
            assert torch.get_num_threads() == len(original)
            assert os.sched_getaffinity(threads[0].native_id) == original  # the earlier thread too
            threads.append(_thread_started_now(seen_inside, go_on))
            assert seen_inside == [original]
        # back for timing: the main thread and the earlier thread where they were, the new one on the spin CPU
        assert os.sched_getaffinity(0) == spin
        assert os.sched_getaffinity(threads[0].native_id) == spin
        assert os.sched_getaffinity(threads[1].native_id) == spin
        assert torch.get_num_threads() == 1
        torch.set_num_threads(torch_threads)
    finally:
        go_on.set()
        for thread in threads:
            thread.join(30)
        os.sched_setaffinity(0, original)


def test_without_a_core_plan_the_graders_computing_changes_no_cpu(tmp_path):
    import os

    from metakernelbench.verifier import launch

    workers = launch.Workers(str(tmp_path), [], _Handle(), _Handle(), None, None, ("k", "tirx", "p", "cpu"))
    before = os.sched_getaffinity(0)
    with workers.grader_compute():
        assert os.sched_getaffinity(0) == before
    workers.ended = True  # nothing was started


def test_what_the_grader_expects_is_computed_on_every_cpu_of_the_evaluation(tmp_path, monkeypatch):
    import os

    import pytest

    from metakernelbench.verifier import evaluation, launch

    original = os.sched_getaffinity(0)
    if len(original) < 2:
        pytest.skip("needs two CPUs")
    spin = {max(original)}
    seen = []
    monkeypatch.setattr(evaluation, "reference_values", lambda *a: seen.append(os.sched_getaffinity(0)) or {})
    monkeypatch.setattr(evaluation, "anchor_values", lambda *a: seen.append(os.sched_getaffinity(0)) or {})
    ev = evaluation.Evaluation.__new__(evaluation.Evaluation)
    ev.workers = launch.Workers(str(tmp_path), [], _Handle(), _Handle(), (spin, original - spin), original,
                                ("k", "tirx", "p", "cpu"))
    ev.workers.ended = True  # nothing was started
    ev.quiet_candidate = lambda: None
    ev._memory = object()
    ev.problem = None
    os.sched_setaffinity(0, spin)
    try:
        ev.expected(1)
        assert seen == [original, original] and os.sched_getaffinity(0) == spin
    finally:
        os.sched_setaffinity(0, original)
