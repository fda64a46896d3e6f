"""Where the grader and its workers run (``grader.core_plan``): the spin never shares a core."""

from __future__ import annotations

from metakernelbench.verifier.launch import core_plan


def test_too_few_cpus_means_no_pinning():
    assert core_plan({0, 1}) is None


def test_the_grader_core_and_its_sibling_are_kept_from_the_workers():
    plan = core_plan(set(range(16)))
    assert plan is not None
    spin, workers = plan
    assert len(spin) == 1 and not (spin & workers) and len(workers) >= 14


def test_hot_wait_reaches_workers_only_with_a_core_plan(monkeypatch):
    """``GradeConfig.hot_wait_ms`` makes workers poll after each reply, only where cores were set apart."""
    import os
    from pathlib import Path

    from metakernelbench.problems import find_problem
    from metakernelbench.verifier import launch as launch_mod
    from metakernelbench.verifier.grader import GradeConfig, grade

    problem = find_problem("28")
    problem.spec = problem.spec.model_copy(
        update={"workload": {**problem.spec.workload, **problem.spec.small_workload}})
    kernel = Path(__file__).resolve().parents[1] / "exploits" / "control_honest_28.py"
    seen: list[int] = []
    real_handle = launch_mod.WorkerHandle

    def spy(setup, *args, **kwargs):
        handle = real_handle(setup, *args, **kwargs)
        seen.append(setup.hot_wait_ns)
        return handle

    monkeypatch.setattr(launch_mod, "WorkerHandle", spy)
    cpus = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(launch_mod, "core_plan", lambda available=None: ({cpus[-1]}, set(cpus[:-1]) or {cpus[-1]}))
    config = GradeConfig(correctness_draws=1, warmup=1, timed=3, rechecks=1, hot_wait_ms=5.0, exclusive_gpu=False)
    result = grade(problem, kernel, "tirx", device="cpu", config=config)
    assert result.status.value == "PASSED", result.message
    assert seen == [5_000_000, 5_000_000]
    seen.clear()
    monkeypatch.setattr(launch_mod, "core_plan", lambda available=None: None)
    assert grade(problem, kernel, "tirx", device="cpu", config=config).status.value == "PASSED"
    assert seen == [0, 0]
