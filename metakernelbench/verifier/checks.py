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


def recheck(ev: Evaluation, seeds: list[int], keep: dict[int, tuple]) -> list[int]:
    """The kept results of timed calls (chosen in secret before timing) checked after timing; the
    rechecked calls' indices among the timed calls."""
    calls = sorted(keep)
    fetched, tensors, _ = ev.candidate.request(FetchRequest(0, "", [keep[i][0] for i in calls]),
                                                 ev.config.call_timeout_s)
    assert isinstance(fetched, Outputs)
    per_call = len(ev.spec.outputs)
    if len(tensors) != per_call * len(calls):
        raise Verdict(Status.REWARD_HACK, "the kept outputs of timed calls went missing")
    for k, i in enumerate(calls):
        returned = tensors[k * per_call:(k + 1) * per_call]
        ev.check_call(seeds[i], keep[i][1], returned, i, f"timed call {i - ev.config.warmup} (rechecked after timing)")
    return [i - ev.config.warmup for i in calls]
