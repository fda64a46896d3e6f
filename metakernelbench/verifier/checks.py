"""The correctness stages: the draws before timing and the secret rechecks of timed calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .evaluation import require_done_copy
from .launch import Verdict
from .protocol import FetchRequest
from .result import Status
from .timing import Stages
from .wire import Outputs

__all__ = ["correctness", "recheck", "widen_reply_bound"]

if TYPE_CHECKING:
    from .evaluation import Evaluation


def correctness(ev: Evaluation, stages: Stages | None = None) -> None:
    """The correctness draws: each call's results against the reference and the anchor, and the
    inputs unchanged (except those the problem updates in place)."""
    for draw in range(ev.config.correctness_draws):
        seed = ev.seed()
        call = ev.call(ev.candidate, ev.draw(seed), snapshot=True, send_outputs=True)
        if draw == 0 and stages is not None:
            stages.mark("compile")  # the first call: where the DSLs compile
        ev.check_call(seed, call.inputs, call.outputs, draw, f"draw {draw}")
        ev.check_inputs_untouched(seed, call.inputs)
        if draw == 0:
            widen_reply_bound(ev, call.outputs)


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
    """The kept results of timed calls checked after timing; the rechecked calls' indices among the
    timed calls.

    ``keep`` maps a timed call's index to (its seq, its in-place results, the grader's copy of its
    returned outputs at DONE or None, whether it was chosen, and its returned outputs when the
    grader holds them itself, else None: ``timing.timing_loop``). Every call with a DONE copy has its
    kept outputs fetched and held to that copy (on the CPU: every timed call); the calls chosen in
    secret before timing are also checked against the reference.
    """
    per_call = len(ev.spec.outputs)
    chosen = sorted(i for i, kept in keep.items() if kept[3])
    for i in sorted(keep):
        seq, inplace, at_done, check, held = (*keep[i], None)[:5]
        if at_done is None and not check:
            continue
        where = f"timed call {i - ev.config.warmup}"
        if held is not None:
            returned = held
        else:
            fetched, returned, _ = ev.candidate.request(FetchRequest(0, "", [seq]), ev.config.call_timeout_s)
            assert isinstance(fetched, Outputs)
            if len(returned) != per_call:
                raise Verdict(Status.REWARD_HACK, "the kept outputs of timed calls went missing")
            if at_done is not None:
                require_done_copy(at_done, fetched.outputs, returned, where)
        if check:
            ev.check_call(seeds[i], inplace, returned, i, f"{where} (rechecked after timing)")
    return [i - ev.config.warmup for i in chosen]
