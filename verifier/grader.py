"""The trusted side of one evaluation: draws, reference, anchor, timing loop, rechecks, bypass test.

Order of one grade (design.md §4):
1. static rules on the source (no code of it runs before this passes);
2. the candidate process imports the file; 5 correctness draws, each compared against the
   reference and the float64 anchor computed here, plus an input-mutation check;
3. the eager reference's baseline (cached per problem, workload, device and software, 100 samples)
   drift-checked by a short loop of the trusted reference worker; the candidate timed (10 warmup +
   50 timed, fresh draws). Every call is timed by the grader's own clock between a GO and a DONE
   signal in shared memory (``doorbell``), so the time is the call's, not a pipe round trip's;
4. 3 of the 50 timed calls, drawn secretly here before timing (never sent), rechecked;
5. the bypass test: each DSL launch site suppressed in turn on a fresh draw; valid outputs mean
   that kernel did not matter, and the submission is rejected;
6. the physical floor: a median below the problem's speed-of-light time is rejected.

Seeds come from ``SystemRandom``; the candidate only ever receives one draw's input tensors per
request, after its previous call returned, and replies through ``wire`` (never unpickled here).
The candidate's worker runs under OS limits (``sandbox``) and writes only in a per-evaluation scratch
folder, removed afterwards; no other process may hold the GPU while timing (``gpu_procs``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from random import SystemRandom
from typing import Any

import torch
import torch.multiprocessing  # noqa: F401 - registers the CUDA IPC pickling the requests' tensors travel by

from metakernelbench.problem_kit import anchor_mode
from metakernelbench.problems import Problem

from . import baseline as baseline_mod
from . import floor as floor_mod
from .correctness import check_draw, check_output
from .gpu_procs import GpuProcesses, pci_bus_id
from .launch import (  # noqa: F401 - _cpu_list and core_plan stay importable from here
    GradeConfig,
    Started,
    Verdict,
    WorkerHandle,
    _cpu_list,
    _cpu_list_text,
    candidate_setup,
    close_quietly,
    core_plan,
    spawn_worker,
    start_workers,
)
from .protocol import CallRequest, FetchRequest
from .result import SPEEDUP_CAP, GradeResult, Mismatch, Status, Timing, failure
from .rules import MAX_KERNEL_BYTES, static_refusal  # noqa: F401 - MAX_KERNEL_BYTES: importable from here
from .tensors import StructureError, promote_floats, snapshot_graded
from .wire import CallResult, Outputs, Ready


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])


@dataclass
class LoopTimes:
    """One side's timed calls by the grader's clock, and what its worker's own stopwatch said."""

    spans_ms: list[float]
    worker_ms: list[float]
    returned_ms: list[float] = field(default_factory=list)  # worker-reported host time until solve returned

    def signal_overhead_us(self) -> tuple[float, float, float]:
        """Median, min and max of (grader span - worker stopwatch), in microseconds: the doorbell's
        cost, which is all an honest worker's gap is."""
        gaps = sorted(1e3 * (s - w) for s, w in zip(self.spans_ms, self.worker_ms, strict=True))
        return (_median(gaps), gaps[0], gaps[-1]) if gaps else (0.0, 0.0, 0.0)


class Stages:
    """Wall seconds per grading stage, for the result's breakdown."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._at = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._at, 3)
        self._at = now


class Evaluation:
    """State of one grade: the problem, the device, the seeds and the two worker processes."""

    def __init__(self, problem: Problem, kernel_path: Path, dsl: str, device: torch.device,
                 config: GradeConfig, workers: Started):
        self.problem, self.spec = problem, problem.spec
        self.kernel_path, self.dsl, self.device, self.config = kernel_path, dsl, device, config
        self.workers = workers  # scratch folder, core plan, protected folders; closed by grade()
        self.candidate, self.reference = workers.candidate, workers.reference
        self.rng = SystemRandom()
        self.launch_sites: list[str] = []
        self._gpu: GpuProcesses | None = None

    @property
    def gpu(self) -> GpuProcesses:
        """The GPU's process list (opened on first use: reading the device's PCI address initialises
        CUDA here, which should not delay the workers' start)."""
        if self._gpu is None:
            self._gpu = GpuProcesses.for_device(pci_bus_id(self.device.index)) if self.device.type == "cuda" \
                else GpuProcesses()
        return self._gpu

    # ---- draws -------------------------------------------------------------------------------
    def seed(self) -> int:
        return self.rng.getrandbits(63)

    def draw(self, seed: int) -> tuple:
        gen = torch.Generator(device=self.device).manual_seed(seed)
        return self.problem.make_inputs(self.device, gen, **self.spec.workload)

    def expected(self, seed: int) -> tuple[dict, dict]:
        """Reference and float64-anchor graded values for a seed (computed here, never shipped)."""
        with torch.no_grad():
            inputs = self.draw(seed)
            ref = snapshot_graded(self.spec, inputs, self.problem.reference(*inputs))
            promoted = promote_floats(self.draw(seed))
            with anchor_mode():
                anchor = snapshot_graded(self.spec, promoted, self.problem.reference(*promoted))
        return ref, anchor

    # ---- workers -----------------------------------------------------------------------------
    def spawn_candidate(self) -> None:
        """A new candidate worker (after a timeout or crash in the bypass test)."""
        w = self.workers
        setup = candidate_setup(self.kernel_path, self.dsl, str(self.device), len(self.spec.outputs),
                                w.protected, w.scratch, self.config)
        w.candidate = self.candidate = spawn_worker(setup, w.scratch, self.config, w.plan)
        self.candidate.release()

    def await_candidate(self) -> Ready:
        ready, _ = self.candidate.expect(self.config.import_timeout_s, self.candidate.nonce, None)
        assert isinstance(ready, Ready)
        self.first_call = True
        return ready

    def start_candidate(self) -> Ready:
        self.spawn_candidate()
        return self.await_candidate()

    def await_reference(self) -> WorkerHandle:
        try:
            self.reference.expect(self.config.import_timeout_s, self.reference.nonce, None)
        except Verdict as exc:  # the trusted worker failing is never the submission's fault
            raise Verdict(Status.INFRA_ERROR, f"the reference worker failed: {exc.message}") from None
        return self.reference

    def worker_pids(self) -> set[int]:
        pids = {os.getpid()}
        for handle in (self.candidate, self.reference):
            if handle is not None and handle.process.pid:
                pids.add(handle.process.pid)
        return pids

    def gpu_is_ours(self) -> list[int]:
        """Wait (up to ``foreign_gpu_wait_s``) until no other process holds the GPU; the PIDs left."""
        deadline = time.monotonic() + self.config.foreign_gpu_wait_s
        while True:
            others = self.gpu.foreign(self.worker_pids())
            if not others or time.monotonic() > deadline:
                return others
            time.sleep(0.25)

    def call(self, handle: WorkerHandle, inputs: tuple, **flags) -> tuple[CallResult, list, list]:
        timeout = self.config.call_timeout_s
        if handle is self.candidate and self.first_call:
            timeout, self.first_call = self.config.first_call_timeout_s, False
        result, tensors, span_ns = handle.request(CallRequest(0, "", inputs, **flags), timeout)
        self.last_span_ns = span_ns
        assert isinstance(result, CallResult)
        if result.elapsed_ns > span_ns:
            # the worker's own stopwatch started after GO and stopped before DONE: it cannot exceed
            # the grader's span unless the signals were rung by someone else (the submission)
            raise Verdict(Status.REWARD_HACK, "the call's signals were forged: the worker timed "
                                              f"{result.elapsed_ns / 1e3:.1f} us, the grader's clock "
                                              f"{span_ns / 1e3:.1f} us between GO and DONE")
        if handle is self.candidate and not flags.get("suppress") and sum(result.launches.values()) < 1:
            raise Verdict(Status.RULE_VIOLATION, "the call launched no DSL kernel (every call must run "
                                                 f"at least one {self.dsl} kernel its outputs depend on)")
        for label in result.launches:
            if label not in self.launch_sites:
                self.launch_sites.append(label)
        n_out = len(result.outputs or [])
        return result, tensors[:n_out], tensors[n_out:]

    # ---- checks ------------------------------------------------------------------------------
    def graded_from(self, inputs: tuple, returned: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        values = {name: t.to(self.device) for name, t in zip(self.spec.outputs, returned, strict=True)}
        by_name = dict(zip(self.spec.inputs, inputs, strict=True))
        for name in self.spec.inplace:
            values[name] = by_name[name]
        return values

    def check_inputs_untouched(self, seed: int, inputs: tuple) -> None:
        pristine = self.draw(seed)
        for name, got, orig in zip(self.spec.inputs, inputs, pristine, strict=True):
            if name in self.spec.inplace or not isinstance(got, torch.Tensor):
                continue
            if not torch.equal(got.contiguous().view(torch.uint8) if got.numel() else got,
                               orig.contiguous().view(torch.uint8) if orig.numel() else orig):
                raise Verdict(Status.REWARD_HACK, f"input {name!r} was modified (only {self.spec.inplace or 'no'}"
                                                  " inputs may be updated in place)")

    def judge_draw(self, seed: int, inputs: tuple, returned: list[torch.Tensor], draw: int,
                   expected: tuple[dict, dict] | None = None) -> Mismatch | None:
        """The first contract violation of one call's results on the draw ``seed`` (None: correct)."""
        ref, anchor = expected or self.expected(seed)
        return check_draw(self.spec, draw, self.graded_from(inputs, returned), ref, anchor)

    @staticmethod
    def require_correct(mismatch: Mismatch | None, where: str) -> None:
        """An incorrect call ends the grade as INCORRECT, naming the call and the failed check."""
        if mismatch:
            raise Verdict(Status.INCORRECT, f"{where}: output {mismatch.output!r} failed the {mismatch.check} "
                                            f"check: {mismatch.detail}", mismatch=mismatch)

    def correctness(self, stages: Stages | None = None) -> None:
        for draw in range(self.config.correctness_draws):
            seed = self.seed()
            inputs = self.draw(seed)
            _, returned, _ = self.call(self.candidate, inputs, send_outputs=True)
            if draw == 0 and stages is not None:
                stages.mark("compile")  # the first call: where the DSLs compile
            self.require_correct(self.judge_draw(seed, inputs, returned, draw), f"draw {draw}")
            self.check_inputs_untouched(seed, inputs)

    def timing_loop(self, handle: WorkerHandle, seeds: list[int], warmup: int,
                    keep: dict[int, tuple] | None) -> LoopTimes:
        """Time one side: each call's span between GO and DONE on the grader's clock."""
        spans, own, returned = [], [], []
        for i, seed in enumerate(seeds):
            timed = i >= warmup
            inputs = self.draw(seed)
            result, _, _ = self.call(handle, inputs, keep_outputs=timed and keep is not None,
                                     check_threads=timed, light_checks=True)
            if timed:
                spans.append(self.last_span_ns / 1e6)
                own.append(result.elapsed_ns / 1e6)
                returned.append(result.returned_ns / 1e6)
                if keep is not None and i in keep:
                    # in-place inputs now hold the call's results: copy them as they are when the
                    # reply arrives, so work still running in the candidate cannot finish them later
                    keep[i] = (result.seq, tuple(v.clone() if name in self.spec.inplace else v
                                                 for name, v in zip(self.spec.inputs, inputs, strict=True)))
        # the checks the loop's calls deferred (``CallRequest.light_checks``) run now, before any
        # figure of this loop is used: a fetch of nothing
        handle.request(FetchRequest(0, "", []), self.config.call_timeout_s)
        return LoopTimes(spans, own, returned)

    def eager_baseline(self, device_name: str) -> tuple[Timing, Timing, float, bool, str, float]:
        """(baseline, this grading's check, drift, re-measured?, source, the reference worker's smallest
        signal gap in us) for the eager reference."""
        cfg = self.config
        key = baseline_mod.baseline_key(self.spec.path, self.spec.workload, device_name,
                                        cfg.eager_baseline_warmup, cfg.eager_baseline_timed)
        cache = baseline_mod.default_cache_dir() if cfg.eager_cache else None
        cached = baseline_mod.load(cache, key)
        check_seeds = [self.seed() for _ in range(cfg.eager_check_warmup + cfg.eager_check_timed)]
        check_loop = self.timing_loop(self.reference, check_seeds, cfg.eager_check_warmup, None)
        check = Timing.from_samples(check_loop.spans_ms)
        ref_gap_us = check_loop.signal_overhead_us()[1]
        if cached is not None:
            base = Timing.from_samples(cached.samples_ms)
            drift = abs(check.median_ms - base.median_ms) / base.median_ms
            if drift <= cfg.eager_drift_flag:
                return base, check, drift, False, "cached", ref_gap_us
        seeds = [self.seed() for _ in range(cfg.eager_baseline_warmup + cfg.eager_baseline_timed)]
        loop = self.timing_loop(self.reference, seeds, cfg.eager_baseline_warmup, None)
        base = Timing.from_samples(loop.spans_ms)
        baseline_mod.store(cache, baseline_mod.make_entry(key, loop.spans_ms, base.median_ms, device_name))
        drift = abs(check.median_ms - base.median_ms) / base.median_ms
        return base, check, drift, cached is not None, "measured", ref_gap_us

    def recheck(self, seeds: list[int], keep: dict[int, tuple]) -> list[int]:
        calls = sorted(keep)
        fetched, tensors, _ = self.candidate.request(FetchRequest(0, "", [keep[i][0] for i in calls]),
                                                     self.config.call_timeout_s)
        assert isinstance(fetched, Outputs)
        per_call = len(self.spec.outputs)
        if len(tensors) != per_call * len(calls):
            raise Verdict(Status.REWARD_HACK, "the kept outputs of timed calls went missing")
        for k, i in enumerate(calls):
            returned = tensors[k * per_call:(k + 1) * per_call]
            self.require_correct(self.judge_draw(seeds[i], keep[i][1], returned, i),
                                 f"timed call {i - self.config.warmup} (rechecked after timing)")
        return [i - self.config.warmup for i in calls]

    def audit(self) -> dict[str, str]:
        """Reject when every DSL launch site only received answers computed outside the DSL.

        One extra call snapshots, right before each DSL launch, every argument the size of a graded
        output that no earlier DSL launch of the call produced. A site is *trivial* when one of its
        snapshots already is a valid answer: that kernel copied or cast a result, it did not compute
        it. (A legitimate pipeline where kernel 2 reads kernel 1's output is exempt: that argument
        was produced by a DSL launch.)
        """
        seed = self.seed()
        inputs = self.draw(seed)
        ref, anchor = self.expected(seed)
        numels = sorted({ref[n].numel() for n in self.spec.graded_names}
                        | {-ref[n].numel() * ref[n].element_size() for n in self.spec.graded_names})
        result, returned, snapshots = self.call(self.candidate, inputs, send_outputs=True, audit_numels=numels,
                                                check_threads=True)
        self.require_correct(self.judge_draw(seed, inputs, returned, -1, (ref, anchor)), "audit draw")
        found: dict[str, str] = {}
        for site, snap in zip(result.snapshot_sites, snapshots, strict=True):
            for name in self.spec.graded_names:
                want = ref[name]
                if site in found or name in self.spec.sets:
                    continue
                same_bytes = snap.numel() * snap.element_size() == want.numel() * want.element_size()
                if same_bytes:
                    candidate = snap.reshape(-1).view(torch.uint8).view(want.dtype).reshape(want.shape)
                elif snap.numel() == want.numel() and want.dtype.is_floating_point:
                    candidate = snap.to(want.dtype).reshape(want.shape)  # a cast is not a computation
                else:
                    continue
                candidate = candidate.to(self.device)
                if check_output(self.spec, name, -1, candidate, want, anchor[name]) is None:
                    found[site] = f"received a finished answer for {name!r} before it ran"
        sites = list(result.launches)
        if sites and all(site in found for site in sites):
            raise Verdict(Status.RULE_VIOLATION, "every DSL kernel only moved results computed outside the "
                                                 "DSL (" + "; ".join(f"{k}: {v}" for k, v in found.items()) + ")")
        return found

    def bypass(self) -> dict[str, str]:
        outcomes: dict[str, str] = {}
        sites = self.launch_sites[: self.config.max_bypass_sites]
        for site in sites:
            seed = self.seed()
            inputs = self.draw(seed)
            try:
                _, returned, _ = self.call(self.candidate, inputs, send_outputs=True, suppress=site, check_threads=True)
                expected = self.expected(seed)  # the trusted side's own faults are not caught below
                try:
                    mismatch = self.judge_draw(seed, inputs, returned, 0, expected)
                except (StructureError, ValueError) as exc:
                    mismatch = Mismatch(output="?", draw=0, check="structure", detail=str(exc))
            except Verdict as exc:
                outcomes[site] = f"call failed without it ({exc.status.value})"
                if exc.status is Status.REWARD_HACK or exc.status is Status.RULE_VIOLATION:
                    raise
                if exc.status is Status.TIMEOUT or not self.candidate.process.is_alive():
                    self.restart_candidate()  # a worker that answered is still usable: no restart
                continue
            if mismatch is None:
                outcomes[site] = "outputs still valid"
                raise Verdict(Status.RULE_VIOLATION, f"bypass test: with the DSL launch {site!r} suppressed "
                                                     "the outputs are still correct, so that kernel does "
                                                     "not compute them", bypass=outcomes)
            outcomes[site] = f"outputs broken without it, as required ({mismatch.check} check on {mismatch.output!r})"
        return outcomes

    def restart_candidate(self) -> None:
        if self.candidate:
            self.candidate.close()
        self.start_candidate()


def _device_of(device: str | None) -> torch.device:
    """The device to grade on, resolved without initialising CUDA in the grader (that can wait until
    the workers are starting)."""
    chosen = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if chosen.type == "cuda" and chosen.index is None:
        chosen = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_initialized() else 0)
    return chosen


def grade(problem: Problem, kernel_path: str | Path, dsl: str, device: str | None = None,
          config: GradeConfig = GradeConfig(), protected_paths: list[str] | None = None,
          workers: Started | None = None) -> GradeResult:
    """Grade one kernel file; never raises for anything the kernel does.

    ``workers``: the evaluation's workers, already started by ``launch.start_workers`` for this
    kernel, problem and device (the judge's runner starts them before importing torch itself);
    otherwise they are started here once the static rules pass.
    """
    started = time.perf_counter()
    stages = Stages()
    kernel_path = Path(kernel_path).resolve()
    name = problem.spec.name
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    try:
        source = kernel_path.read_bytes()
    except OSError as exc:
        close_quietly(workers)
        return failure(Status.COMPILE_ERROR, name, dsl, f"cannot read the kernel file: {exc}")
    refusal = static_refusal(name, dsl, source, started)
    if refusal is not None:
        close_quietly(workers)  # (a caller starts workers only after these checks pass)
        return refusal
    stages.mark("static")
    chosen = _device_of(device)
    problem_file = problem.spec.path.resolve()
    if workers is not None and workers.key != (str(kernel_path), dsl, str(problem_file), str(chosen)):
        close_quietly(workers)  # started for another kernel, problem or device: start afresh
        workers = None
    if workers is None:
        workers = start_workers(kernel_path, dsl, problem_file, len(problem.spec.outputs), str(chosen), config,
                                protected_paths)
    ev = Evaluation(problem, kernel_path, dsl, chosen, config, workers)
    plan = workers.plan
    details: dict[str, str] = {}
    fields: dict[str, Any] = {"stages_s": stages.seconds, "details": details}
    try:
        ev.candidate.release()  # the static rules passed: the candidate may import the kernel now
        if plan:
            details["cores"] = f"grader {sorted(plan[0])}, workers {_cpu_list_text(plan[1])}"
        ready = ev.await_candidate()
        fields.update(device=ready.device, sandbox=ready.sandbox)
        stages.mark("start")
        details["candidate_import_s"] = f"{ready.import_s:.3f}"
        details.update({f"candidate_start_{k}_s": f"{v:.3f}" for k, v in ready.startup_s.items()})
        ev.correctness(stages)
        stages.mark("correctness")
        seeds = [ev.seed() for _ in range(config.warmup + config.timed)]
        recheck_at = ev.rng.sample(range(config.warmup, config.warmup + config.timed), config.rechecks)
        keep: dict[int, tuple] = dict.fromkeys(recheck_at)
        ev.await_reference()
        others = ev.gpu_is_ours() if config.exclusive_gpu else []
        if others:
            raise Verdict(Status.INFRA_ERROR, f"other processes hold the GPU ({others}): not timed")
        base, check, drift, remeasured, source_of_base, ref_gap_us = ev.eager_baseline(ready.device)
        stages.mark("eager")
        kernel_loop = ev.timing_loop(ev.candidate, seeds, config.warmup, keep)
        others = ev.gpu.foreign(ev.worker_pids()) if config.exclusive_gpu else []
        if others:  # someone shared the GPU while we timed: wait for it, time again, or give up
            if ev.gpu_is_ours():
                raise Verdict(Status.INFRA_ERROR, f"other processes held the GPU during timing ({others})")
            keep = dict.fromkeys(recheck_at)
            kernel_loop = ev.timing_loop(ev.candidate, seeds, config.warmup, keep)
            details["retimed"] = f"another process ({others}) held the GPU during the first timing"
        stages.mark("timing")
        kernel = Timing.from_samples(kernel_loop.spans_ms)
        sig_med, sig_min, sig_max = kernel_loop.signal_overhead_us()
        min_span_us = 1e3 * kernel.min_ms
        if plan and sig_min > max(0.25 * min_span_us, 50.0) and ref_gap_us < 50.0:
            # the grade uses the grader's clock, but an honest worker's stopwatch agrees with it to a
            # few microseconds, as the trusted reference worker's just did on this machine: a gap on
            # every call of the candidate means its reporting was replaced. Only where the grader's
            # spin has a core of its own (``plan``): on a machine with too few cores a scheduler tick
            # can delay every look, and nothing is concluded from the gaps there.
            raise Verdict(Status.REWARD_HACK, f"the worker's own stopwatch read at least {sig_min:.1f} us less "
                                              "than the grader's clock on every call (its timing code was "
                                              "tampered with)")
        details.update(eager_baseline=source_of_base, eager_baseline_samples=str(len(base.samples_ms)),
                       eager_remeasured=str(remeasured), signal_overhead_us_median=f"{sig_med:.2f}",
                       signal_overhead_us_max=f"{sig_max:.2f}", signal_overhead_us_min=f"{sig_min:.2f}",
                       host_launch_us_median=f"{1e3 * _median(kernel_loop.returned_ms or [0.0]):.1f}",
                       reference_signal_overhead_us_min=f"{ref_gap_us:.2f}", gpu_process_check=(
                           "nvml" if ev.gpu.available else (ev.gpu.why or "not a GPU")))
        fields.update(kernel_timing=kernel, eager_timing_before=base, eager_timing_after=check)
        fields["rechecked_calls"] = ev.recheck(seeds, keep)
        stages.mark("rechecks")
        fields["launch_sites"] = list(ev.launch_sites)
        trivial = ev.audit()
        if trivial:
            details.update({f"audit {k}": v for k, v in trivial.items()})
        stages.mark("audit")
        fields["bypass"] = ev.bypass()
        stages.mark("bypass")
        eager_ms = base.median_ms
        floor_ms = floor_mod.floor_ms(problem)
        fields.update(eager_ms=eager_ms, kernel_ms=kernel.median_ms, eager_drift=drift,
                      eager_drift_flag=drift > config.eager_drift_flag or remeasured, floor_ms=floor_ms)
        if floor_ms is not None:
            fields["speed_of_light"] = floor_ms / kernel.median_ms
            if kernel.median_ms < floor_ms:
                raise Verdict(Status.REWARD_HACK, f"median {kernel.median_ms:.4f} ms is below the physical "
                                                  f"floor {floor_ms:.4f} ms of this problem on this GPU")
        speedup = eager_ms / kernel.median_ms
        result = GradeResult(status=Status.PASSED, passed=True, problem=name, dsl=dsl,
                             message=f"passed: {kernel.median_ms:.4f} ms vs eager {eager_ms:.4f} ms "
                                     f"({speedup:.2f}x)", speedup=speedup,
                             score_speedup=min(speedup, SPEEDUP_CAP), **fields)
    except Verdict as verdict:
        fields.update(verdict.fields)
        fields.pop("speedup", None)
        result = failure(verdict.status, name, dsl, verdict.message, **fields)
    except Exception as exc:  # noqa: BLE001 - a fault of the grader itself
        result = failure(Status.INFRA_ERROR, name, dsl, f"grader fault: {type(exc).__name__}: {exc}", **fields)
    finally:
        close_quietly(workers)  # both workers (a restarted candidate too), the scratch folder, the CPUs
    result.grade_wall_s = time.perf_counter() - started
    return result
