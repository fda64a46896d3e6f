"""The correctness stages against a stand-in evaluation: what each one asks of a call and how it ends."""

from __future__ import annotations

import pytest
import torch

from metakernelbench.verifier import checks
from metakernelbench.verifier.evaluation import Call
from metakernelbench.verifier.launch import GradeConfig, Verdict
from metakernelbench.verifier.result import Status
from metakernelbench.verifier.timing import Stages
from metakernelbench.verifier.wire import Outputs, tensor_meta


class _Spec:
    outputs = ["y"]


class _Candidate:
    def __init__(self, tensors: list):
        self.tensors = tensors
        self.requests = []
        self.max_bytes = 8 << 30

    def request(self, req, timeout):
        self.requests.append(req)
        return Outputs(nonce="n", seq=1, outputs=[tensor_meta(t, list(t.stride())) for t in self.tensors]), \
            self.tensors, None


class _Evaluation:
    """What the stages use of an ``Evaluation``; ``bad_draws`` are the draws whose check fails."""

    def __init__(self, draws: int = 3, bad_draws: tuple = (), kept: list | None = None):
        self.config = GradeConfig(correctness_draws=draws, warmup=2, timed=4, rechecks=2)
        self.spec = _Spec()
        self.bad_draws = set(bad_draws)
        self.checked, self.untouched = [], []
        self.candidate = _Candidate(kept or [])

    def seed(self):
        return 7

    def draw(self, seed):
        return (torch.zeros(2),)

    def call(self, handle, inputs, **flags):
        return Call(None, [torch.zeros(2)], inputs, 1000)

    def check_call(self, seed, inputs, returned, draw, where, expected=None):
        self.checked.append(where)
        if draw in self.bad_draws:
            raise Verdict(Status.INCORRECT, f"{where}: wrong")

    def check_inputs_untouched(self, seed, inputs):
        self.untouched.append(seed)


def test_every_correctness_draw_is_checked_and_the_first_call_marks_the_compile():
    ev, stages = _Evaluation(draws=3), Stages()
    checks.correctness(ev, stages)
    assert ev.checked == ["draw 0", "draw 1", "draw 2"]
    assert len(ev.untouched) == 3
    assert "compile" in stages.seconds


def test_an_incorrect_draw_ends_the_stage_as_incorrect():
    ev = _Evaluation(draws=3, bad_draws=(1,))
    with pytest.raises(Verdict) as caught:
        checks.correctness(ev)
    assert caught.value.status is Status.INCORRECT
    assert ev.checked == ["draw 0", "draw 1"]


def test_rechecks_name_the_timed_call_they_judge_and_fetch_one_call_per_reply():
    ev = _Evaluation(kept=[torch.zeros(2)])
    done = checks.recheck(ev, [1, 2, 3, 4, 5, 6], {2: (11, (), None, True), 4: (13, (), None, True)})
    assert done == [0, 2]
    assert ev.checked == ["timed call 0 (rechecked after timing)", "timed call 2 (rechecked after timing)"]
    assert [r.calls for r in ev.candidate.requests] == [[11], [13]]


def test_kept_outputs_that_went_missing_are_a_reward_hack():
    ev = _Evaluation(kept=[])
    with pytest.raises(Verdict) as caught:
        checks.recheck(ev, [1, 2, 3, 4, 5, 6], {2: (11, (), None, True), 4: (13, (), None, True)})
    assert caught.value.status is Status.REWARD_HACK


def test_every_call_with_a_copy_taken_at_done_is_held_to_it_checked_or_not():
    """On the CPU every timed call's outputs are read at DONE: each is fetched and compared, and the
    chosen ones are also checked against the reference."""
    kept = torch.arange(4, dtype=torch.float32)
    ev = _Evaluation(kept=[kept])
    same = bytes(kept.numpy().tobytes())
    done = checks.recheck(ev, [1, 2, 3, 4, 5, 6], {2: (11, (), [same], False), 3: (12, (), [same], True)})
    assert done == [1] and [r.calls for r in ev.candidate.requests] == [[11], [12]]
    assert ev.checked == ["timed call 1 (rechecked after timing)"]
    changed = bytes(torch.zeros(4).numpy().tobytes())
    with pytest.raises(Verdict) as caught:
        checks.recheck(_Evaluation(kept=[kept]), [1, 2, 3, 4, 5, 6], {2: (11, (), [changed], False)})
    assert caught.value.status is Status.REWARD_HACK and "DONE" in caught.value.message


def test_after_the_first_draw_replies_may_carry_twice_that_calls_outputs():
    ev = _Evaluation(draws=2)
    big = torch.zeros(5 << 30, dtype=torch.uint8, device="meta")  # a 5 GiB output, no memory needed
    ev.call = lambda handle, inputs, **flags: Call(None, [big], inputs, 1000)
    checks.correctness(ev)
    assert ev.candidate.max_bytes == 2 * (5 << 30) + (64 << 20)


def test_the_reply_bound_never_shrinks_below_the_configured_one():
    ev = _Evaluation(draws=1)
    checks.correctness(ev)  # outputs of 8 bytes
    assert ev.candidate.max_bytes == ev.config.max_output_bytes
