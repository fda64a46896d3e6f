"""The runner starts an evaluation's workers before it imports torch, only when nothing is left to decide."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from metakernelbench.judge.runner import _early_inputs, _read_dispatch, _start_workers_early, parse_args
from metakernelbench.verifier.launch import close_quietly

HONEST = Path(__file__).resolve().parents[1] / "exploits" / "control_honest_28.py"


def _args(*extra: str):
    return parse_args(["--problem", "28", "--dsl", "tirx", "--kernel", str(HONEST), *extra])


def test_a_known_device_and_a_clean_kernel_start_the_workers_early():
    started = _start_workers_early(_args("--device", "cpu"))
    try:
        assert started is not None
        assert started.key[:2] == (str(HONEST.resolve()), "tirx") and started.key[3] == "cpu"
        assert started.candidate.process.is_alive() and started.reference.process.is_alive()
    finally:
        close_quietly(started)


def test_no_early_start_without_a_device_or_with_a_rule_broken(tmp_path):
    assert _start_workers_early(_args()) is None  # the device needs torch to decide
    bad = tmp_path / "kernel.py"
    bad.write_text("import triton\ndef solve(*a):\n    return None\n")
    args = parse_args(["--problem", "28", "--dsl", "tirx", "--kernel", str(bad), "--device", "cpu"])
    assert _start_workers_early(args) is None  # the static rules refuse it: nothing starts
    missing = parse_args(["--problem", "28", "--dsl", "tirx", "--kernel", str(tmp_path / "no.py"), "--device", "cpu"])
    assert _start_workers_early(missing) is None


def test_a_warm_runner_takes_its_evaluation_from_one_line_of_its_dispatch_channel():
    """``runner --warm`` starts without a problem, DSL or kernel; one JSON line names them (``_read_dispatch``)."""
    warm = parse_args(["--warm", "--device", "cpu", "--warm-dsls", "tirx"])
    assert warm.warm and warm.problem is None and warm.warm_dsls == ["tirx"]
    job = _read_dispatch(warm, io.StringIO(json.dumps({"problem": "28", "dsl": "tirx", "kernel": str(HONEST)}) + "\n"))
    assert (job.problem, job.dsl, job.kernel, job.device, job.warm) == ("28", "tirx", str(HONEST), "cpu", True)
    assert _read_dispatch(warm, io.StringIO("")) is None  # ended unused
    for bad in ('{"problem": "28", "dsl": "triton", "kernel": "k.py"}', '["28"]', "not json"):
        with pytest.raises(ValueError):
            _read_dispatch(warm, io.StringIO(bad + "\n"))
    with pytest.raises(SystemExit):
        parse_args(["--warm"])  # a warm runner is started for one device slot
    with pytest.raises(SystemExit):
        parse_args(["--problem", "28", "--dsl", "tirx"])  # a cold one names its evaluation


def test_the_static_check_runs_once_and_is_handed_to_the_grade(tmp_path):
    """The runner's check of the kernel file is what ``grade`` takes; one of another file or DSL, or a
    refusal, it does not take (it checks the file itself)."""
    from metakernelbench.problems import find_problem
    from metakernelbench.verifier.grader import grade
    from metakernelbench.verifier.result import Status
    from metakernelbench.verifier.rules import StaticCheck

    kernel, _, outputs, checked = _early_inputs(_args("--device", "cpu"))
    assert checked.passed and (checked.kernel, checked.dsl, outputs) == (HONEST.resolve(), "tirx", 1)
    bad = tmp_path / "kernel.py"
    bad.write_text("import triton\ndef solve(*a):\n    return None\n")
    problem = find_problem("28")
    for handed in (StaticCheck(bad.resolve(), "cutedsl", None), StaticCheck(HONEST.resolve(), "tirx", None)):
        assert grade(problem, bad, "tirx", device="cpu", checked=handed).status is Status.RULE_VIOLATION
