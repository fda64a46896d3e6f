"""The bypass test against a stand-in evaluation: a kernel that can be skipped does not compute."""

from __future__ import annotations

import pytest
import torch

from metakernelbench.verifier import provenance
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
        return None, [torch.zeros(2)], []

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
