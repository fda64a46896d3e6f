"""The state of one evaluation and the one way its stages talk to the workers and judge a call.

An ``Evaluation`` holds the problem, the device, the secret seeds' source and the two workers. Its
``call`` sends one draw to a worker and returns the reply timed by the grader's clock; ``check_call``
is the single check every stage (correctness, rechecks, audit, bypass) applies to a call's results.
The stages themselves live in their own modules (``checks``, ``timing``, ``provenance``, ``score``).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from random import SystemRandom

import torch
import torch.multiprocessing  # noqa: F401 - registers the CUDA IPC pickling the requests' tensors travel by

from metakernelbench.problems import Problem

from . import memory, outside, sandbox
from .correctness import check_draw
from .expected import anchor_values, reference_values
from .gpu_procs import GpuProcesses, pci_bus_id
from .launch import GradeConfig, Verdict, WorkerHandle, Workers
from .protocol import CallRequest, FetchRequest
from .result import Mismatch, Status
from .stage import InputStage
from .wire import CallResult, Outputs, Ready, TensorMeta

__all__ = ["Call", "Evaluation", "require_done_copy"]


@dataclass
class Call:
    """One call as the grader saw it."""

    result: CallResult
    outputs: list[torch.Tensor]  # the returned outputs the reply carried (when asked for)
    inputs: tuple  # the inputs after the call, as the grader holds them (in-place results included)
    span_ns: int  # the grader's clock between GO and DONE
    exposed_ns: int = 0  # the grader's clock from the draw's first byte to TOUCHED (launch.CallClock)
    done_outputs: list[bytes] | None = None  # the grader's own copy of the returned outputs at DONE (CPU)
    done_inplace: dict[str, torch.Tensor] | None = None  # its copy of the in-place outputs at DONE


def _matches(raw: bytes, meta: TensorMeta, tensor: torch.Tensor) -> bool:
    """Whether the bytes read at DONE, laid out as the worker said the output lay, equal the output."""
    if tensor.numel() == 0:
        return len(raw) == 0
    if meta.stride is None or len(meta.stride) != tensor.dim() or len(raw) % tensor.element_size():
        return False
    try:
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(tensor.dtype)
        laid = torch.as_strided(flat, tuple(tensor.shape), tuple(meta.stride))
        return torch.equal(laid.contiguous().reshape(-1).view(torch.uint8),
                           tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8))
    except (RuntimeError, ValueError):
        return False


def require_done_copy(done: list[bytes], metas: list[TensorMeta], tensors: list[torch.Tensor], what: str) -> None:
    """REWARD_HACK unless each output the worker sent equals the grader's own copy taken at DONE."""
    if len(done) != len(tensors) or len(metas) != len(tensors):
        raise Verdict(Status.REWARD_HACK, f"{what}: the outputs sent are not the ones described at DONE")
    for i, (raw, meta, tensor) in enumerate(zip(done, metas, tensors, strict=True)):
        if not _matches(raw, meta, tensor):
            raise Verdict(Status.REWARD_HACK, f"{what}: output {i} differs from the grader's own copy taken when "
                                              "the call signalled DONE (work went on after the clock stopped)")


class Evaluation:
    """State of one grade: the problem, the device, the seeds and the two worker processes."""

    def __init__(self, problem: Problem, kernel_path: Path, dsl: str, device: torch.device,
                 config: GradeConfig, workers: Workers, progress: Callable[[str], None] | None = None):
        self.problem, self.spec = problem, problem.spec
        self.kernel_path, self.dsl, self.device, self.config = kernel_path, dsl, device, config
        self.workers = workers  # their owner: relaunches the candidate; grade() ends them
        self.candidate, self.reference = workers.candidate, workers.reference
        self.rng = SystemRandom()
        self.launch_sites: list[str] = []
        self.kernel_names: dict[str, list[str]] = {}  # launch site -> the kernel symbols it runs
        self._stages: dict[WorkerHandle, InputStage] = {}  # each worker's input buffers
        self._gpu: GpuProcesses | None = None
        self.say = progress or (lambda line: None)  # one line of progress (``grade``'s caller shows it)
        self.first_call = False  # the candidate's next call is its first (it may still compile)
        self.compile_left_s = config.compile_timeout_s  # what the kernel file's import left of the budget
        self.kernel_load_s: float | None = None  # the import as the grader's clock saw it
        self._memory: memory.Planner | None = None
        self._candidate_holds = False  # the candidate's last call may have left memory in its allocator's cache

    @property
    def memory(self) -> memory.Planner:
        """Where the grade's movable tensors live (``verifier.memory``): planned from the device's
        memory on first use (that reads it, so it waits until the workers are starting)."""
        if self._memory is None:
            budget = memory.device_budget(self.device, self.config.memory_budget_bytes)
            self._memory = memory.Planner(self.device, budget, timed=self.config.timed)
        return self._memory

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
        """Reference and float64-anchor graded values for a seed (computed here, never shipped), in
        stages placed by the memory plan (``verifier.expected``); the candidate, idle meanwhile,
        first gives back the device memory its last call left cached."""
        self.quiet_candidate()
        draw = lambda: self.draw(seed)  # noqa: E731
        with self.workers.grader_compute():  # the anchor may run on the CPU: on every CPU of the evaluation
            ref = reference_values(self.problem, draw, self.memory)
            return ref, anchor_values(self.problem, draw, self.memory)

    # ---- workers -----------------------------------------------------------------------------
    def spawn_candidate(self) -> None:
        """A new candidate worker in place of the current one (after a timeout or crash in the bypass
        test), started and ended by the evaluation's ``Workers``."""
        self.candidate = self.workers.relaunch_candidate(len(self.spec.outputs), self.config)

    def await_candidate(self) -> Ready:
        """Wait for the released candidate worker to start (the start limit: the grader's code) and to
        import the kernel file (the compile budget, on the grader's clock from the worker's LOADING
        mark). The first call then gets what the import left of the compile budget (``call``)."""
        cfg, handle = self.config, self.candidate
        budget = cfg.compile_timeout_s
        loading = handle.await_loading(cfg.start_timeout_s)
        if loading is not None:
            self.say(f"importing the kernel file (compile budget {budget:g} s)")
        left = budget - (time.perf_counter_ns() - loading) / 1e9 if loading is not None else 0.0
        ready, _ = handle.expect(left, handle.nonce, None,
                                 f"the kernel file did not finish loading within the compile budget of {budget:g} s "
                                 "(its import, where TIRx kernels usually compile)")
        if not isinstance(ready, Ready) or loading is None:
            raise Verdict(Status.REWARD_HACK, "the candidate worker answered before it imported the kernel file")
        self.kernel_load_s = (time.perf_counter_ns() - loading) / 1e9
        self.compile_left_s = max(budget - self.kernel_load_s, 0.0)
        self.first_call = True
        self.seal_base = self._sandbox_filters()
        return ready

    def _sandbox_filters(self) -> int | None:
        """The seccomp filter count the candidate has on top of this process's own, read from ``/proc``
        (None where the kernel or the platform gives none, or the worker set no filter: then there is
        no seal to hold it to)."""
        if platform.machine() != "x86_64":
            return None
        try:
            own = sandbox.seccomp_filter_count(os.getpid())
            count = sandbox.seccomp_filter_count(self.candidate.process.pid)
        except sandbox.SandboxError:
            return None
        return own if count > own else None

    def require_seal(self) -> None:
        """After the first call the worker must have sealed executable memory: two filters on top of
        this process's (the sandbox's, which admits no other filter than the prepared seal, and the
        seal), read from outside."""
        if self.seal_base is None:
            return
        try:
            now = sandbox.seccomp_filter_count(self.candidate.process.pid)
        except sandbox.SandboxError:
            now = None
        if now is None or now < self.seal_base + 2:
            raise Verdict(Status.REWARD_HACK, "the executable-memory seal was not in place after the first call "
                                              f"(seccomp filters {now}, expected {self.seal_base + 2})")

    def start_candidate(self) -> Ready:
        self.spawn_candidate()
        return self.await_candidate()

    def await_reference(self) -> WorkerHandle:
        try:
            self.reference.expect(self.config.start_timeout_s, self.reference.nonce, None)
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

    def stage_for(self, handle: WorkerHandle) -> InputStage:
        if handle not in self._stages:  # a restarted worker is a new handle: it gets new buffers
            self._stages[handle] = InputStage(self.device)
        return self._stages[handle]

    def call(self, handle: WorkerHandle, draw: tuple, snapshot: bool = False, **flags) -> Call:
        """One call of ``draw``, timed by the grader's clock; ``snapshot``: take the grader's own copy
        of the outputs the moment DONE rings (in-place outputs from its buffers; on the CPU also the
        returned outputs, read out of the frozen worker) and hold the call's results to it."""
        timeout, limit = self.call_limit(handle is self.candidate and self.first_call)
        first = handle is self.candidate and self.first_call
        if first:
            self.first_call = False
        stage = self.stage_for(handle)
        fresh = stage.prepare(draw)
        cpu_read = snapshot and self.device.type == "cpu" and handle is self.candidate
        req = CallRequest(0, "", fresh, values=stage.values(draw), publish_outputs=cpu_read, **flags)
        taken: dict[str, object] = {}

        def at_done() -> None:
            if snapshot and handle is self.candidate:
                taken.update(self._copy_at_done(handle, stage, cpu_read))

        result, tensors, clock = handle.request(req, timeout, before_go=lambda: stage.fill(draw),
                                                at_done=at_done, limit=limit)
        span_ns = clock.span_ns
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
        self.kernel_names.update(result.kernel_names)
        if first:
            self.require_seal()
        inputs = stage.inputs(draw)
        done = Call(result, tensors, inputs, span_ns, clock.exposed_ns, taken.get("outputs"), taken.get("inplace"))
        if done.done_inplace:
            self._require_unchanged_after_done(done)
        if done.done_outputs is not None and result.outputs is not None:
            require_done_copy(done.done_outputs, result.outputs, tensors, "the call's outputs")
        if handle is self.candidate:
            self._candidate_holds = True
        return done

    def quiet_candidate(self) -> None:
        """On the GPU, have the candidate worker give back its allocator's cached blocks (a fetch of
        nothing) after a call, before the grader's own work on the device: the worker keeps its
        call's peak cached otherwise, and the grader's reference and anchor need the room."""
        if not self._candidate_holds or self.device.type != "cuda":
            return
        self._candidate_holds = False
        reply, _, _ = self.candidate.request(FetchRequest(0, "", []), self.config.call_timeout_s)
        if not isinstance(reply, Outputs):
            raise Verdict(Status.REWARD_HACK, "the candidate worker answered a fetch with something else")

    def call_limit(self, first: bool) -> tuple[float, str]:
        """(seconds, the TIMEOUT message) for a call: the call budget; the candidate's first call also
        what the import left of the compile budget, since the DSLs compile during the first call.

        The worker could report when its compile ends, but the submission controls that process, so
        the boundary is not taken from it: the first call's limit is one span on the grader's clock.
        """
        cfg = self.config
        if not first:
            return cfg.call_timeout_s, f"the call did not return within the call budget of {cfg.call_timeout_s:g} s"
        timeout = self.compile_left_s + cfg.call_timeout_s
        return timeout, (f"the first call did not return within {timeout:.1f} s: the call budget of "
                         f"{cfg.call_timeout_s:g} s plus the {self.compile_left_s:.1f} s left of the compile "
                         f"budget of {cfg.compile_timeout_s:g} s after the kernel file's import (the first call "
                         "includes the DSL's compile)")

    def _copy_at_done(self, handle: WorkerHandle, stage: InputStage, cpu_read: bool) -> dict[str, object]:
        """The grader's own copy of the call's outputs at DONE, the worker held stopped meanwhile."""
        pid = handle.process.pid
        names = [n for n in self.spec.inplace]
        by_name = dict(zip(self.spec.inputs, stage.views, strict=True))
        try:
            with outside.frozen(pid):
                inplace = {n: by_name[n].clone() for n in names if isinstance(by_name[n], torch.Tensor)}
                if self.device.type == "cuda" and inplace:
                    torch.cuda.synchronize(self.device)
                outputs = None
                if cpu_read:
                    spans = handle.bell.output_spans()
                    if spans is None or len(spans) != len(self.spec.outputs):
                        raise Verdict(Status.REWARD_HACK, "the worker did not say where its outputs lie at DONE")
                    outputs = [outside.read_memory(pid, address, length) for address, length in spans]
                    handle.bell.copied(handle.seq)  # the worker may let go of its outputs now
        except outside.OutsideError as exc:
            code = outside.died_with(pid)
            if code is not None:
                handle.note_death(code)
                raise handle.death_verdict() from None
            raise Verdict(Status.INFRA_ERROR, f"the grader could not read the candidate's outputs at DONE: {exc}") \
                from None
        return {"inplace": inplace, "outputs": outputs}

    def _require_unchanged_after_done(self, done: Call) -> None:
        by_name = dict(zip(self.spec.inputs, done.inputs, strict=True))
        for name, at_done in (done.done_inplace or {}).items():
            now = by_name[name]
            if not torch.equal(now.reshape(-1).view(torch.uint8), at_done.reshape(-1).view(torch.uint8)):
                raise Verdict(Status.REWARD_HACK, f"in-place output {name!r} changed after the call signalled "
                                                  "DONE (work went on after the clock stopped)")

    # ---- checks ------------------------------------------------------------------------------
    def graded_from(self, inputs: tuple, returned: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """A call's graded values: the returned outputs (brought to the device when the plan compares
        there, else left in the host memory they arrived in) and the in-place inputs."""
        target = self.memory.values_device
        values = {name: t.to(target) if target is not None else t
                  for name, t in zip(self.spec.outputs, returned, strict=True)}
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
        del pristine
        memory.release(self.device)

    def judge_draw(self, seed: int, inputs: tuple, returned: list[torch.Tensor], draw: int,
                   expected: tuple[dict, dict] | None = None) -> Mismatch | None:
        """The first contract violation of one call's results on the draw ``seed`` (None: correct).
        The grader's own computing here runs on every CPU of the evaluation (``Workers.grader_compute``)."""
        ref, anchor = expected or self.expected(seed)  # ``expected`` widens the CPUs itself
        with self.workers.grader_compute():
            try:
                return check_draw(self.spec, draw, self.graded_from(inputs, returned), ref, anchor,
                                  self.memory.compare_device)
            finally:
                del ref, anchor
                memory.release(self.device)

    @staticmethod
    def require_correct(mismatch: Mismatch | None, where: str) -> None:
        """An incorrect call ends the grade as INCORRECT, naming the call and the failed check."""
        if mismatch:
            raise Verdict(Status.INCORRECT, f"{where}: output {mismatch.output!r} failed the {mismatch.check} "
                                            f"check: {mismatch.detail}", mismatch=mismatch)

    def check_call(self, seed: int, inputs: tuple, returned: list[torch.Tensor], draw: int, where: str,
                   expected: tuple[dict, dict] | None = None) -> None:
        """The one check every stage applies to a call's results: INCORRECT unless they are valid."""
        self.require_correct(self.judge_draw(seed, inputs, returned, draw, expected), where)

    def restart_candidate(self) -> None:
        self.start_candidate()
