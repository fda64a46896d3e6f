"""Where the grader and its workers run (``grader.core_plan``): the spin never shares a core."""

from __future__ import annotations

from metakernelbench.verifier.grader import _cpu_list, core_plan


def test_cpu_lists_parse():
    assert _cpu_list("0-3,8") == {0, 1, 2, 3, 8}
    assert _cpu_list("5\n") == {5}


def test_too_few_cpus_means_no_pinning():
    assert core_plan({0, 1}) is None


def test_the_grader_core_and_its_sibling_are_kept_from_the_workers():
    plan = core_plan(set(range(16)))
    assert plan is not None
    spin, workers = plan
    assert len(spin) == 1 and not (spin & workers) and len(workers) >= 14
