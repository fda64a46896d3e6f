"""The correctness stages: the draws before timing and the secret rechecks of timed calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .launch import Verdict
from .protocol import FetchRequest
from .result import Status
from .timing import Stages
from .wire import Outputs

if TYPE_CHECKING:
    from .evaluation import Evaluation


def correctness(ev: Evaluation, stages: Stages | None = None) -> None:
    """The correctness draws: each call's results against the reference and the anchor, and the
    inputs unchanged (except those the problem updates in place)."""
    for draw in range(ev.config.correctness_draws):
        seed = ev.seed()
        inputs = ev.draw(seed)
        _, returned, _ = ev.call(ev.candidate, inputs, send_outputs=True)
        if draw == 0 and stages is not None:
            stages.mark("compile")  # the first call: where the DSLs compile
        ev.check_call(seed, inputs, returned, draw, f"draw {draw}")
        ev.check_inputs_untouched(seed, inputs)
        if draw == 0:
            widen_reply_bound(ev, returned)


def widen_reply_bound(ev: Evaluation, returned: list) -> None:
    """Let later replies carry what this problem needs: twice one call's outputs (an audit reply holds
    outputs and snapshots), never less than the configured bound.

    The bound exists so that a candidate cannot make the grader allocate without limit; the first
    call's outputs have just matched the reference's shapes and dtypes, so their size is the
    problem's, not the candidate's choice. Upstream-sized problems (weight gradients of every expert)
    return several GB a call.
    """
    one_call = sum(t.numel() * t.element_size() for t in returned if hasattr(t, "element_size"))
    ev.candidate.max_bytes = max(ev.config.max_output_bytes, 2 * one_call + (64 << 20))


def recheck(ev: Evaluation, seeds: list[int], keep: dict[int, tuple]) -> list[int]:
    """The kept results of timed calls (chosen in secret before timing) checked after timing; the
    rechecked calls' indices among the timed calls."""
    calls = sorted(keep)
    per_call = len(ev.spec.outputs)
    for i in calls:  # one reply per kept call: a reply never holds more than one call's outputs
        fetched, returned, _ = ev.candidate.request(FetchRequest(0, "", [keep[i][0]]), ev.config.call_timeout_s)
        assert isinstance(fetched, Outputs)
        if len(returned) != per_call:
            raise Verdict(Status.REWARD_HACK, "the kept outputs of timed calls went missing")
        ev.check_call(seeds[i], keep[i][1], returned, i, f"timed call {i - ev.config.warmup} (rechecked after timing)")
    return [i - ev.config.warmup for i in calls]
