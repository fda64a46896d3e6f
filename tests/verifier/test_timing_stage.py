"""The timing stage's own rules: stage clocks, the signal-gap verdict, re-timing when the GPU is shared."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from metakernelbench.verifier import timing
from metakernelbench.verifier.launch import GradeConfig, Verdict
from metakernelbench.verifier.result import Status, Timing


def test_stages_accumulate_wall_seconds_per_name():
    stages = timing.Stages()
    stages.mark("a")
    stages.mark("b")
    stages.mark("a")
    assert set(stages.seconds) == {"a", "b"}
    assert all(v >= 0 for v in stages.seconds.values())


def test_median_of_odd_and_even_counts():
    assert timing.median([3.0, 1.0, 2.0]) == 2.0
    assert timing.median([4.0, 1.0, 2.0, 3.0]) == 2.5


def _loop(gap_us: float, span_ms: float = 1.0, calls: int = 50) -> timing.LoopTimes:
    return timing.LoopTimes([span_ms] * calls, [span_ms - gap_us / 1e3] * calls)


def test_a_worker_stopwatch_far_below_the_grader_clock_on_every_call_is_a_reward_hack():
    loop = _loop(gap_us=400.0)
    with pytest.raises(Verdict) as caught:
        timing.check_signal_gaps(loop, Timing.from_samples(loop.spans_ms), True, ref_gap_us=3.0)
    assert caught.value.status is Status.REWARD_HACK


@pytest.mark.parametrize("has_core_plan, ref_gap_us, gap_us", [
    (False, 3.0, 400.0),  # no core of its own for the grader's spin: gaps prove nothing
    (True, 80.0, 400.0),  # the trusted reference worker disagrees as much: the machine, not the worker
    (True, 3.0, 3.0),  # an honest worker: a few microseconds
])
def test_gaps_prove_nothing_without_a_core_plan_or_a_trusted_agreement(has_core_plan, ref_gap_us, gap_us):
    loop = _loop(gap_us=gap_us)
    timing.check_signal_gaps(loop, Timing.from_samples(loop.spans_ms), has_core_plan, ref_gap_us)


def test_a_gap_on_a_few_calls_proves_nothing_but_on_the_contracts_count_it_does():
    """Three calls each delayed ~95 us by a busy host's scheduler were once graded REWARD_HACK."""
    few = _loop(gap_us=95.0, span_ms=0.2, calls=3)
    timing.check_signal_gaps(few, Timing.from_samples(few.spans_ms), True, ref_gap_us=3.0)
    enough = _loop(gap_us=95.0, span_ms=0.2, calls=timing.SIGNAL_GAP_MIN_CALLS)
    with pytest.raises(Verdict) as caught:
        timing.check_signal_gaps(enough, Timing.from_samples(enough.spans_ms), True, ref_gap_us=3.0)
    assert caught.value.status is Status.REWARD_HACK


class _GpuOf:
    def __init__(self, foreign_after: list[list[int]]):
        self.answers = foreign_after

    def foreign(self, ours):
        return self.answers.pop(0) if self.answers else []


class _FakeEvaluation:
    """What ``time_candidate`` uses of an evaluation: the GPU's process list and the timing loop."""

    def __init__(self, foreign: list[list[int]], clears: bool):
        self.config = GradeConfig(warmup=1, timed=2, rechecks=1)
        self.gpu = _GpuOf(foreign)
        self.candidate = object()
        self.loops = 0
        self.clears = clears

    def worker_pids(self):
        return {1}

    def gpu_is_ours(self):
        return [] if self.clears else [99]


@pytest.fixture
def counted_loops(monkeypatch):
    def fake_loop(ev, handle, seeds, warmup, keep, chosen=frozenset()):
        ev.loops += 1
        keep.update({i: (i, (), None, True) for i in chosen})
        return timing.LoopTimes([1.0], [1.0])

    monkeypatch.setattr(timing, "timing_loop", fake_loop)


def test_an_exclusive_gpu_is_timed_once(counted_loops):
    ev = _FakeEvaluation(foreign=[[]], clears=True)
    _, keep, retimed = timing.time_candidate(ev, [1, 2, 3], [2])
    assert ev.loops == 1 and retimed is None and list(keep) == [2]


def test_a_process_that_shared_the_gpu_means_timing_again(counted_loops):
    ev = _FakeEvaluation(foreign=[[4242]], clears=True)
    _, _, retimed = timing.time_candidate(ev, [1, 2, 3], [2])
    assert ev.loops == 2 and "4242" in retimed


def test_a_process_that_stays_on_the_gpu_is_an_infra_error(counted_loops):
    ev = _FakeEvaluation(foreign=[[4242]], clears=False)
    with pytest.raises(Verdict) as caught:
        timing.time_candidate(ev, [1, 2, 3], [2])
    assert caught.value.status is Status.INFRA_ERROR


def test_time_spent_before_go_beyond_the_reference_workers_is_charged_to_the_call():
    """A worker that computes on the draw between its arrival and GO (the exposed stretch) gets that
    time added to its span; one that takes what the trusted reference worker takes gets nothing."""
    honest = timing.LoopTimes([0.150] * 3, [0.148] * 3, exposed_us=[300.0, 310.0, 295.0])
    cheat = timing.LoopTimes([0.010] * 3, [0.008] * 3, exposed_us=[440.0, 450.0, 445.0])
    allowance = 305.0
    assert timing.window_charges(honest, allowance) == [0.0, 5.0, 0.0]
    charged = timing.charged_spans_ms(cheat, timing.window_charges(cheat, allowance))
    assert charged == pytest.approx([0.145, 0.155, 0.150])
    # never subtracted: a call quicker than the reference's stretch still reads its own span
    assert timing.charged_spans_ms(honest, timing.window_charges(honest, 10_000.0)) == honest.spans_ms


def test_the_grade_times_a_candidate_by_its_charged_spans():
    base = Timing.from_samples([1.0] * 3)
    eager = timing.EagerBaseline(base, base, 0.0, False, "measured", ref_gap_us=3.0, ref_exposed_us=300.0)
    cheat = timing.LoopTimes([0.010] * 3, [0.008] * 3, exposed_us=[2300.0] * 3)
    kernel, charges = timing.kernel_timing(cheat, eager)
    assert charges == [2000.0] * 3
    assert kernel.median_ms == pytest.approx(2.010)


class _Handle:
    def __init__(self, name: str):
        self.name = name

    def request(self, request, timeout_s):  # the fetch of nothing that ends a loop
        return None


class _InterleavedEvaluation(_FakeEvaluation):
    """What ``time_interleaved`` uses: two workers whose calls take fixed spans, in call order."""

    def __init__(self, foreign: list[list[int]], clears: bool = True):
        super().__init__(foreign, clears)
        self.config = GradeConfig(warmup=1, timed=4, rechecks=1, interleave_eager=True)
        self.candidate, self.reference = _Handle("candidate"), _Handle("reference")
        self.device = SimpleNamespace(type="cuda")
        self.memory = SimpleNamespace(placement=SimpleNamespace(keep_on_device=True, expected_on_host=False))
        self.spec = SimpleNamespace(inplace=(), inputs=())
        self.calls: list[tuple[str, int]] = []
        self._seeds = iter(range(1000, 2000))

    def seed(self):
        return next(self._seeds)

    def draw(self, seed):
        return seed

    def call(self, handle, draw, **_):
        self.calls.append((handle.name, draw))
        span_ms = 2.0 if handle is self.reference else 0.5
        return SimpleNamespace(span_ns=span_ms * 1e6, exposed_ns=7e3, done_outputs=None, inputs=(), outputs=None,
                               result=SimpleNamespace(elapsed_ns=span_ms * 1e6 - 3e3, returned_ns=0, seq=0))


def test_interleaved_timing_alternates_the_two_workers_call_by_call(monkeypatch):
    """``GradeConfig.interleave_eager``: the eager reference's calls sit between the candidate's (ABBA),
    each side on its own fresh draws, and the grading's eager time is those calls', never a cached
    baseline measured at another moment."""
    monkeypatch.setattr(timing.baseline_mod, "load", lambda *a: pytest.fail("no cached baseline is read"))
    ev = _InterleavedEvaluation(foreign=[[]])
    seeds = [1, 2, 3, 4, 5]
    loop, keep, retimed, eager = timing.time_interleaved(ev, seeds, recheck_at=[3])
    order = [name[0] for name, _ in ev.calls]
    assert "".join(order) == "crrccrrccr"  # candidate, reference; reference, candidate; ...
    assert [s for name, s in ev.calls if name == "candidate"] == seeds
    reference_seeds = [s for name, s in ev.calls if name == "reference"]
    assert len(set(reference_seeds)) == 5 and not set(reference_seeds) & set(seeds)
    assert retimed is None and list(keep) == [3]
    assert loop.spans_ms == [0.5] * 4  # the warmup call is not timed
    assert eager.source == "interleaved" and eager.base.median_ms == 2.0 and eager.base.samples_ms == [2.0] * 4
    assert eager.check is eager.base and eager.drift == 0.0 and eager.ref_exposed_us == 7.0


def test_interleaved_timing_is_timed_again_when_the_gpu_was_shared():
    ev = _InterleavedEvaluation(foreign=[[4242]])
    _, _, retimed, _ = timing.time_interleaved(ev, [1, 2, 3], recheck_at=[2])
    assert "4242" in retimed and len(ev.calls) == 12
