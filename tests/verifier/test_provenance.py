"""The bypass test and the DSL share against a stand-in evaluation: a kernel that can be skipped does not
compute, and DSL kernels that take a small part of a call's time did not do its main computation."""

from __future__ import annotations

import pytest
import torch

from metakernelbench.verifier import provenance
from metakernelbench.verifier.evaluation import Call
from metakernelbench.verifier.launch import GradeConfig, Verdict
from metakernelbench.verifier.result import Mismatch, Status


class _Process:
    def __init__(self, alive: bool):
        self.alive = alive

    def is_alive(self):
        return self.alive


class _Candidate:
    def __init__(self):
        self.process = _Process(True)


class _Evaluation:
    """``outcome[site]``: "broken" (outputs wrong without it), "valid", or a Status the call ends with."""

    def __init__(self, outcome: dict):
        self.config = GradeConfig()
        self.launch_sites = list(outcome)
        self.outcome = outcome
        self.candidate = _Candidate()
        self.restarts = 0
        self.site = None

    def seed(self):
        return 1

    def draw(self, seed):
        return (torch.zeros(2),)

    def expected(self, seed):
        return {}, {}

    def call(self, handle, inputs, suppress=None, **flags):
        what = self.outcome[suppress]
        if isinstance(what, Status):
            raise Verdict(what, "call failed")
        self.site = suppress
        return Call(None, [torch.zeros(2)], inputs, 1000)

    def judge_draw(self, seed, inputs, returned, draw, expected=None):
        if self.outcome[self.site] == "valid":
            return None
        return Mismatch(output="y", draw=0, check="max_abs", detail="wrong")

    def restart_candidate(self):
        self.restarts += 1


def test_kernels_whose_suppression_breaks_the_outputs_pass():
    outcomes = provenance.bypass(_Evaluation({"k1": "broken", "k2": "broken"}))
    assert set(outcomes) == {"k1", "k2"}
    assert all("broken without it" in v for v in outcomes.values())


def test_a_kernel_that_can_be_skipped_is_a_rule_violation():
    with pytest.raises(Verdict) as caught:
        provenance.bypass(_Evaluation({"k1": "broken", "k2": "valid"}))
    assert caught.value.status is Status.RULE_VIOLATION
    assert "'k2'" in caught.value.message


def test_a_call_that_times_out_without_a_kernel_restarts_the_worker():
    ev = _Evaluation({"k1": Status.TIMEOUT, "k2": "broken"})
    outcomes = provenance.bypass(ev)
    assert ev.restarts == 1
    assert "call failed without it" in outcomes["k1"]


@pytest.mark.parametrize("status", [Status.REWARD_HACK, Status.RULE_VIOLATION])
def test_a_hack_or_rule_break_during_the_bypass_ends_the_grade(status):
    with pytest.raises(Verdict) as caught:
        provenance.bypass(_Evaluation({"k1": status}))
    assert caught.value.status is status


class _Result:
    def __init__(self, kernels, dsl_ns=0, launches=None):
        self.kernels, self.dsl_ns, self.launches = kernels, dsl_ns, launches or {"tirx:k@1": 1}


class _ShareEvaluation:
    def __init__(self, device: str, dsl: str, result: _Result, names=None):
        self.device, self.dsl, self.result = torch.device(device), dsl, result
        self.kernel_names = names or {}
        self.candidate = None

    def seed(self):
        return 1

    def draw(self, seed):
        return ()

    def call(self, handle, inputs, **flags):
        assert flags.get("profile") and flags.get("snapshot")
        return Call(self.result, [], inputs, 100_000)

    def check_call(self, *args, **kwargs):
        pass


def _kernels(**us):
    from metakernelbench.verifier.wire import KernelTime

    return [KernelTime(name=name, us=value) for name, value in us.items()]


def test_the_gpu_share_counts_the_dsl_kernels_device_time():
    ev = _ShareEvaluation("cuda", "cutedsl", _Result(_kernels(kernel_cutlass_gemm_0=90.0, elementwise_kernel=10.0)))
    record = provenance.dsl_share(ev)
    assert record["dsl_share"] == 0.9 and [k["dsl"] for k in record["kernels"]] == [True, False]


def test_an_eager_result_gated_through_a_dsl_kernel_is_a_rule_violation():
    kernels = _kernels(rmsnorm_eager=95.0, one_kernel=5.0)
    ev = _ShareEvaluation("cuda", "tirx", _Result(kernels), names={"tirx:one_kernel@1": ["one_kernel"]})
    with pytest.raises(Verdict) as caught:
        provenance.dsl_share(ev)
    assert caught.value.status is Status.RULE_VIOLATION and "5.0 %" in caught.value.message


def test_on_the_cpu_views_and_allocations_count_for_neither_side():
    kernels = _kernels(**{"aten::empty_like": 400.0, "aten::view": 300.0, "aten::add": 20.0})
    ev = _ShareEvaluation("cpu", "tirx", _Result(kernels, dsl_ns=60_000))
    record = provenance.dsl_share(ev)
    assert record["dsl_share"] == 0.75  # 60 us of DSL against 20 us of computing torch operators
