"""The state of one evaluation and the one way its stages talk to the workers and judge a call.

An ``Evaluation`` holds the problem, the device, the secret seeds' source and the two workers. Its
``call`` sends one draw to a worker and returns the reply timed by the grader's clock; ``check_call``
is the single check every stage (correctness, rechecks, audit, bypass) applies to a call's results.
The stages themselves live in their own modules (``checks``, ``timing``, ``provenance``, ``score``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from random import SystemRandom

import torch
import torch.multiprocessing  # noqa: F401 - registers the CUDA IPC pickling the requests' tensors travel by

from metakernelbench.problem_kit import anchor_mode
from metakernelbench.problems import Problem

from .correctness import check_draw
from .gpu_procs import GpuProcesses, pci_bus_id
from .launch import GradeConfig, Started, Verdict, WorkerHandle, candidate_setup, spawn_worker
from .protocol import CallRequest
from .result import Mismatch, Status
from .tensors import promote_floats, snapshot_graded
from .wire import CallResult, Ready


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

    def check_call(self, seed: int, inputs: tuple, returned: list[torch.Tensor], draw: int, where: str,
                   expected: tuple[dict, dict] | None = None) -> None:
        """The one check every stage applies to a call's results: INCORRECT unless they are valid."""
        self.require_correct(self.judge_draw(seed, inputs, returned, draw, expected), where)

    def restart_candidate(self) -> None:
        if self.candidate:
            self.candidate.close()
        self.start_candidate()
