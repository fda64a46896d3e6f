"""The timing stage: the grader's clock over a worker's calls, the eager baseline, and what the
doorbell's signals say about the worker's honesty.

Every timed call goes through ``Evaluation.call``: the span between the grader's GO and the
worker's DONE in shared memory (``doorbell``) is the call's time. ``timing_loop`` times one side
(the candidate, or the trusted reference worker for the eager baseline); ``time_candidate`` adds
the GPU-exclusivity rule (time again, or INFRA_ERROR, never a silently slow grade);
``check_signal_gaps`` turns a worker stopwatch that disagrees with the grader on every call into
REWARD_HACK; ``window_charges`` adds to a call's time what the worker took before GO, with the draw
in its buffers, beyond what the trusted reference worker takes there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import baseline as baseline_mod
from .launch import GradeConfig, Verdict, WorkerHandle
from .protocol import FetchRequest
from .result import Status, Timing

__all__ = [
    "SIGNAL_GAP_MIN_CALLS", "EagerBaseline", "LoopTimes", "Stages", "charged_spans_ms", "check_calls",
    "check_signal_gaps", "eager_baseline",
    "interleaved_loops", "kernel_timing", "median", "time_candidate", "time_interleaved", "timing_loop",
    "window_charges",
]

if TYPE_CHECKING:
    from .evaluation import Evaluation

# The fewest timed calls from which a gap on every call is taken as evidence (check_signal_gaps).
SIGNAL_GAP_MIN_CALLS = 10


def median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])


@dataclass
class LoopTimes:
    """One side's timed calls by the grader's clock, and what its worker's own stopwatch said."""

    spans_ms: list[float]
    worker_ms: list[float]
    returned_ms: list[float] = field(default_factory=list)  # worker-reported host time until solve returned
    exposed_us: list[float] = field(default_factory=list)  # per call: the draw's first byte to TOUCHED

    def signal_overhead_us(self) -> tuple[float, float, float]:
        """Median, min and max of (grader span - worker stopwatch), in microseconds: the doorbell's
        cost, which is all an honest worker's gap is."""
        gaps = sorted(1e3 * (s - w) for s, w in zip(self.spans_ms, self.worker_ms, strict=True))
        return (median(gaps), gaps[0], gaps[-1]) if gaps else (0.0, 0.0, 0.0)


class Stages:
    """Wall seconds per grading stage, for the result's breakdown."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._at = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._at, 3)
        self._at = now


@dataclass
class EagerBaseline:
    """The eager reference's timing for one grading."""

    base: Timing  # the baseline the speedup divides (cached or measured now)
    check: Timing  # this grading's short re-timing of it
    drift: float  # |check - base| / base, by medians
    remeasured: bool  # the cached baseline drifted and was measured again
    source: str  # "cached" or "measured"
    ref_gap_us: float  # the trusted reference worker's smallest signal gap (grader span - its stopwatch)
    ref_exposed_us: float = 0.0  # the trusted reference worker's median stretch from the draw's first byte to TOUCHED


class _Side:
    """One worker's timed calls in a loop, one call at a time (``timing_loop``, ``interleaved_loops``).

    For the candidate (``keep`` given), timed calls are kept for ``checks.recheck``: the ``chosen``
    ones (drawn in secret before timing) with the grader's copy of their in-place outputs at DONE,
    and on the CPU every timed call with its returned outputs read out of the worker at DONE. Where
    the worker keeps them is the memory plan's (``memory.Placement.keep_on_device``): in its own
    memory, every timed call's outputs until the rechecks fetch them (the contract's way; 50 calls'
    outputs on the GPU); or sent back after every timed call, all of them alike so that the worker
    cannot tell the chosen calls, the grader holding the chosen calls' outputs in host memory.
    """

    def __init__(self, ev: Evaluation, handle: WorkerHandle, warmup: int, keep: dict[int, tuple] | None,
                 chosen: set[int] = frozenset()):
        self.ev, self.handle, self.warmup, self.keep, self.chosen = ev, handle, warmup, keep, chosen
        self.cpu = ev.device.type == "cpu"
        self.keeping = keep is not None
        self.sent_back = self.keeping and not ev.memory.placement.keep_on_device
        self.host = self.sent_back or ev.memory.placement.expected_on_host
        self.loop = LoopTimes([], [], [], [])

    def call(self, i: int, seed: int) -> None:
        """Call ``i`` of the loop (warmup before ``warmup``), on a fresh draw of ``seed``."""
        ev, keep, loop, sent_back = self.ev, self.keep, self.loop, self.sent_back
        timed = i >= self.warmup
        snapshot = self.keeping and timed and (self.cpu or i in self.chosen)
        call = ev.call(self.handle, ev.draw(seed), snapshot=snapshot,
                       keep_outputs=timed and self.keeping and not sent_back,
                       send_outputs=timed and sent_back, check_threads=timed, light_checks=True)
        if not timed:
            return
        loop.spans_ms.append(call.span_ns / 1e6)
        loop.exposed_us.append(call.exposed_ns / 1e3)
        loop.worker_ms.append(call.result.elapsed_ns / 1e6)
        loop.returned_ms.append(call.result.returned_ns / 1e6)
        if self.keeping and (i in self.chosen or (call.done_outputs is not None and not sent_back)):
            # in-place inputs now hold the call's results (equal to the grader's copy at DONE):
            # copied now, since the buffers take the next draw. The other inputs are not kept:
            # the recheck compares with the reference of the seed, and holding whole draws (GBs
            # of weights at upstream sizes) would crowd the GPU at the recheck. (Sent back, the
            # outputs were held to the grader's copy at DONE when they arrived: ``Evaluation.call``.)
            inplace = tuple((v.cpu() if self.host else v.clone()) if name in ev.spec.inplace and i in self.chosen
                            else None for name, v in zip(ev.spec.inputs, call.inputs, strict=True))
            held = call.outputs if sent_back else None
            keep[i] = (call.result.seq, inplace, None if sent_back else call.done_outputs, i in self.chosen, held)

    def finish(self) -> LoopTimes:
        """The loop's times, after the checks its calls deferred (``CallRequest.light_checks``): they
        run now, before any figure of the loop is used (a fetch of nothing)."""
        self.handle.request(FetchRequest(0, "", []), self.ev.config.call_timeout_s)
        return self.loop


def timing_loop(ev: Evaluation, handle: WorkerHandle, seeds: list[int], warmup: int,
                keep: dict[int, tuple] | None, chosen: set[int] = frozenset()) -> LoopTimes:
    """Time one side: each call's span between GO and DONE on the grader's clock (what is kept for
    the rechecks: ``_Side``)."""
    side = _Side(ev, handle, warmup, keep, chosen)
    for i, seed in enumerate(seeds):
        side.call(i, seed)
    return side.finish()


def interleaved_loops(ev: Evaluation, seeds: list[int], reference_seeds: list[int], warmup: int,
                      keep: dict[int, tuple], chosen: set[int]) -> tuple[LoopTimes, LoopTimes]:
    """Time the candidate and the eager reference call by call, alternately: (candidate, reference).

    The loop of ``GradeConfig.interleave_eager``. A host whose speed moves between minutes (a shared
    CPU machine: ``results/cpu/host-drift.json``) moves both sides' calls alike, so their ratio, the
    speedup, holds where either time alone does not. The order within a pair alternates (ABBA), so
    that whatever one call leaves behind for the next falls on both sides alike. Each side keeps its
    own fresh draws, and the candidate's calls are kept for the rechecks as ``timing_loop`` keeps them.
    """
    candidate = _Side(ev, ev.candidate, warmup, keep, chosen)
    reference = _Side(ev, ev.reference, warmup, None)
    for i, (seed, reference_seed) in enumerate(zip(seeds, reference_seeds, strict=True)):
        first, second = (candidate, reference) if i % 2 == 0 else (reference, candidate)
        first.call(i, seed if first is candidate else reference_seed)
        second.call(i, seed if second is candidate else reference_seed)
    return candidate.finish(), reference.finish()


def window_charges(loop: LoopTimes, allowance_us: float) -> list[float]:
    """Per timed call, the microseconds added to its span: how far the stretch from the draw's first
    byte to TOUCHED exceeded ``allowance_us``, the trusted reference worker's median of the same
    stretch in this grading.

    That stretch is the only time in which the worker's process can see a draw before the clock
    starts: the grader writes the draw, evicts the L2 and synchronises (work of the worker's on
    the GPU meanwhile makes the GPU switch contexts, ~140 us each way on an H100, and the grader's
    synchronise waits for it), then the worker runs its one tiny kernel and synchronises. An honest
    worker takes what the reference worker takes; computing there on the draw takes longer, and
    the difference lands on the call's time. Nothing is ever subtracted: a call never reads less
    than its span.
    """
    return [max(0.0, e - allowance_us) for e in loop.exposed_us]


def charged_spans_ms(loop: LoopTimes, charges_us: list[float]) -> list[float]:
    """The spans the grade uses: each call's span plus its window charge."""
    return [s + c / 1e3 for s, c in zip(loop.spans_ms, charges_us, strict=True)]


def kernel_timing(loop: LoopTimes, eager: EagerBaseline) -> tuple[Timing, list[float]]:
    """The candidate's timing as the grade uses it (its spans with their window charges against the
    reference worker's stretch of this grading) and the charges, per timed call, in microseconds."""
    charges = window_charges(loop, eager.ref_exposed_us)
    return Timing.from_samples(charged_spans_ms(loop, charges)), charges


def check_calls(cfg: GradeConfig, cached: baseline_mod.EagerBaseline | None) -> int:
    """Timed calls of this grading's drift check: ``eager_check_timed``, fewer for a slow cached reference.

    The check only has to show that the cached median still holds; a reference of seconds a call
    (an upstream-sized workload) would otherwise spend most of a grading re-timing itself.
    """
    if cached is None:
        return cfg.eager_check_timed
    fit = int(cfg.eager_check_budget_s * 1e3 / max(cached.median_ms, 1e-6))
    return max(min(cfg.eager_check_min, cfg.eager_check_timed), min(cfg.eager_check_timed, fit))


def eager_baseline(ev: Evaluation, device_name: str) -> EagerBaseline:
    """The eager reference's baseline (cached, or measured now) and this grading's check of it."""
    cfg = ev.config
    key = baseline_mod.baseline_key(ev.spec.path, ev.spec.workload, device_name,
                                    cfg.eager_baseline_warmup, cfg.eager_baseline_timed)
    cache = baseline_mod.default_cache_dir() if cfg.eager_cache else None
    cached = baseline_mod.load(cache, key)
    check_seeds = [ev.seed() for _ in range(cfg.eager_check_warmup + check_calls(cfg, cached))]
    check_loop = timing_loop(ev, ev.reference, check_seeds, cfg.eager_check_warmup, None)
    check = Timing.from_samples(check_loop.spans_ms)
    ref_gap_us = check_loop.signal_overhead_us()[1]
    ref_exposed_us = median(check_loop.exposed_us)
    if cached is not None:
        base = Timing.from_samples(cached.samples_ms)
        drift = abs(check.median_ms - base.median_ms) / base.median_ms
        if drift <= cfg.eager_drift_flag:
            return EagerBaseline(base, check, drift, False, "cached", ref_gap_us, ref_exposed_us)
    seeds = [ev.seed() for _ in range(cfg.eager_baseline_warmup + cfg.eager_baseline_timed)]
    loop = timing_loop(ev, ev.reference, seeds, cfg.eager_baseline_warmup, None)
    base = Timing.from_samples(loop.spans_ms)
    baseline_mod.store(cache, baseline_mod.make_entry(key, loop.spans_ms, base.median_ms, device_name))
    drift = abs(check.median_ms - base.median_ms) / base.median_ms
    return EagerBaseline(base, check, drift, cached is not None, "measured", ref_gap_us, ref_exposed_us)


def time_candidate(ev: Evaluation, seeds: list[int], recheck_at: list[int]) -> tuple[LoopTimes, dict, str | None]:
    """Time the candidate alone on the GPU: (its loop, the kept calls to recheck, why it was re-timed)."""
    def loop(keep: dict) -> LoopTimes:
        return timing_loop(ev, ev.candidate, seeds, ev.config.warmup, keep, set(recheck_at))

    (kernel_loop, keep), retimed = _exclusively(ev, loop)
    return kernel_loop, keep, retimed


def time_interleaved(ev: Evaluation, seeds: list[int],
                     recheck_at: list[int]) -> tuple[LoopTimes, dict, str | None, EagerBaseline]:
    """Time the candidate and the eager reference alternately (``interleaved_loops``): the candidate's
    loop, the kept calls to recheck, why it was re-timed, and the eager baseline of this grading,
    which is the reference's calls of the same loop (never a cached baseline: the point is that both
    sides are timed on the same host at the same moments)."""
    reference_seeds = [ev.seed() for _ in seeds]

    def loop(keep: dict) -> tuple[LoopTimes, LoopTimes]:
        return interleaved_loops(ev, seeds, reference_seeds, ev.config.warmup, keep, set(recheck_at))

    ((kernel_loop, reference_loop), keep), retimed = _exclusively(ev, loop)
    eager = Timing.from_samples(reference_loop.spans_ms)
    baseline = EagerBaseline(eager, eager, 0.0, False, "interleaved", reference_loop.signal_overhead_us()[1],
                             median(reference_loop.exposed_us))
    return kernel_loop, keep, retimed, baseline


def _exclusively(ev: Evaluation, loop):
    """Run a timing ``loop`` (given the dict it keeps the rechecks' calls in) with the GPU to itself:
    ((its result, the kept calls), why it was re-timed).

    Another process on the GPU before timing means waiting and then INFRA_ERROR; one that appears
    during timing means waiting for it and timing again, never a silently slow grade.
    """
    keep: dict[int, tuple] = {}
    result = loop(keep)
    others = ev.gpu.foreign(ev.worker_pids()) if ev.config.exclusive_gpu else []
    if not others:
        return (result, keep), None
    if ev.gpu_is_ours():
        raise Verdict(Status.INFRA_ERROR, f"other processes held the GPU during timing ({others})")
    keep = {}
    result = loop(keep)
    return (result, keep), f"another process ({others}) held the GPU during the first timing"


def check_signal_gaps(loop: LoopTimes, kernel: Timing, has_core_plan: bool, ref_gap_us: float) -> None:
    """REWARD_HACK when the candidate worker's stopwatch reads far below the grader's clock on every
    call while the trusted reference worker's agrees with it on this machine.

    The grade uses the grader's clock, but an honest worker's stopwatch agrees with it to a few
    microseconds: a gap on every call means its reporting was replaced. Only where the grader's
    spin has a core of its own: on a machine with too few cores a scheduler tick can delay every
    look, and nothing is concluded from the gaps there. And only from at least
    ``SIGNAL_GAP_MIN_CALLS`` timed calls: on a busy host a few calls in a row can each meet a
    scheduler delay of ~100 us (three calls of a small-count grading did), while the contract's 50
    all meeting one is what a replaced stopwatch looks like.
    """
    _, sig_min, _ = loop.signal_overhead_us()
    min_span_us = 1e3 * kernel.min_ms
    enough_calls = len(loop.spans_ms) >= SIGNAL_GAP_MIN_CALLS
    if has_core_plan and enough_calls and sig_min > max(0.25 * min_span_us, 50.0) and ref_gap_us < 50.0:
        raise Verdict(Status.REWARD_HACK, f"the worker's own stopwatch read at least {sig_min:.1f} us less "
                                          "than the grader's clock on every call (its timing code was "
                                          "tampered with)")
