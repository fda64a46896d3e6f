"""Starting the two worker processes of an evaluation, and talking to them (no torch at import).

``grade`` starts a candidate worker (the submission's process) and a reference worker (the trusted
eager reference) for every evaluation. Everything needed to start them lives here, free of torch,
so that a caller that has not imported torch yet (the judge's runner) can start the workers first
and import the grader while they start (``start_workers``); the workers' start is the longest stage
of a grading. The candidate worker then waits for the grader's release (``WorkerHandle.release``)
before it imports the kernel file, so starting early runs nothing of the submission. The judge's pool
starts them earlier still, before the evaluation exists (``start_warm_workers``: a candidate worker per
DSL and the reference worker, given their evaluation later by ``WarmWorkers.assign``). Either way one
``Workers`` owns an evaluation's two workers from there on: the grade relaunches its candidate through
it and ends them by leaving its ``with`` block, whichever way the grade ends. ``GradeConfig``
and ``Verdict`` are the contract's (``metakernelbench.contract``, torch-free as well); this module and
``grader`` re-export them.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
import types
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from metakernelbench.contract import GradeConfig, Status, Verdict

from .cpu_list import siblings
from .doorbell import DONE, READY, TOUCHED, Doorbell
from .guard import thread_ids
from .protocol import WARM_READY, CallRequest, LoadRequest, WorkerSetup

__all__ = [
    "CallClock", "FAILURE_STATUS", "GradeConfig", "SCRUBBED_PREFIXES", "Verdict", "WarmWorkers", "WorkerHandle",
    "Workers", "candidate_setup", "close_quietly", "core_plan", "evaluations_root", "grader_cpus",
    "reference_setup", "scrubbed_env", "spawn_worker", "start_warm_workers", "start_workers", "warm_setup",
]

SCRUBBED_PREFIXES = ("TVM_", "CUTE_DSL_", "CUTLASS_", "PYTORCH_", "TORCH_", "CUDA_LAUNCH_BLOCKING",
                     "LD_PRELOAD", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONBREAKPOINT", "NVIDIA_TF32",
                     "MKB_", "CUDA_CACHE_")


FAILURE_STATUS = {
    "compile": Status.COMPILE_ERROR, "runtime": Status.RUNTIME_ERROR, "oom": Status.RUNTIME_ERROR,
    "structure": Status.INCORRECT, "violation": Status.RULE_VIOLATION, "hack": Status.REWARD_HACK,
    "infra": Status.INFRA_ERROR,
}


def scrubbed_env(scratch: str) -> dict[str, str]:
    """The worker's environment: every cache and temporary folder inside the scratch folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED_PREFIXES)}
    env.update(CUTE_DSL_CACHE_DIR=os.path.join(scratch, "cute"), CUDA_CACHE_PATH=os.path.join(scratch, "nv"),
               TMPDIR=scratch, HOME=scratch, XDG_CACHE_HOME=os.path.join(scratch, "cache"),
               PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", KINETO_LOG_LEVEL="5")
    return env


@contextmanager
def _environment(env: dict[str, str]):
    """The scrubbed environment, and no ``__main__`` for the child to re-import.

    The spawn start method re-runs the parent's main module in the child (as ``__mp_main__``):
    for ``mkb grade`` or a test runner that loads the whole grader and the problem loader into
    the candidate's process. The worker's entry point is importable by name, so during the start
    ``__main__`` is a bare module.
    """
    saved = dict(os.environ)
    main = sys.modules.get("__main__")
    os.environ.clear()
    os.environ.update(env)
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if main is not None:
            sys.modules["__main__"] = main


def _worker_entry(conn, setup: WorkerSetup) -> None:
    """The worker process's entry point: imports the worker (and torch) in the child only."""
    from .worker import main

    main(conn, setup)


@dataclass(frozen=True)
class CallClock:
    """One call on the grader's clock: ``span_ns`` from GO to DONE (the call's time); ``stage_ns`` from
    the first byte of the draw to STAGED (the grader's writing of the draw, the L2 eviction and its
    sync: work of the worker's on the GPU meanwhile makes it longer, the GPU switching contexts
    back and forth); ``window_ns`` from STAGED to TOUCHED (the worker's own tiny kernel and sync).
    Together the last two are the stretch in which the draw is in the buffers before the clock
    starts (``timing.window_charges``)."""

    span_ns: int
    stage_ns: int
    window_ns: int

    @property
    def exposed_ns(self) -> int:
        return self.stage_ns + self.window_ns


class WorkerHandle:
    """One spawned worker process: a strict request/response pipe plus the timing doorbell."""

    def __init__(self, setup: WorkerSetup, env: dict[str, str], max_bytes: int, bell_dir: str | None = None,
                 share_cpu: bool = True, hot_wait_ms: float = 0.0):
        setup.hot_wait_ns = 0 if share_cpu else int(hot_wait_ms * 1e6)  # polling needs a core to spare
        ctx = multiprocessing.get_context("spawn")
        setup.spawned_at = time.time()
        self.hot_wait_ns, self.spawned_at = setup.hot_wait_ns, setup.spawned_at
        self.bell = Doorbell.create(bell_dir)
        setup.doorbell = self.bell.path
        self.parent, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_entry, args=(child, setup), daemon=True)
        with _environment(env):
            self.process.start()
        child.close()
        self.max_bytes = max_bytes
        self.pin = setup.device.startswith("cuda")  # outputs land in page-locked memory: fast to the GPU
        self.seq = 0
        self.nonce = setup.nonce
        self.share_cpu = share_cpu  # no core of its own for the grader's spin (Doorbell.wait_for)

    def release(self) -> None:
        """Let a candidate worker import the kernel file (it waits for this: ``protocol.LoadRequest``)."""
        self.parent.send(LoadRequest())

    def configure(self, setup: WorkerSetup) -> None:
        """Hand a warm worker (``start_warm_workers``) its evaluation: the setup a worker started for it
        would have had, on this worker's page; it applies the rest of its start from there."""
        setup.hot_wait_ns, setup.spawned_at, setup.doorbell = self.hot_wait_ns, self.spawned_at, self.bell.path
        self.nonce = setup.nonce
        self.parent.send(setup)

    def _alive(self) -> bool:
        """Still working on the call: alive and nothing (a failure report) waiting on the pipe."""
        return self.process.is_alive() and not self.parent.poll(0)

    def death_verdict(self) -> Verdict:
        """Why the worker is gone: a refusal its audit hook recorded (fail closed), else a crash."""
        refused = self.bell.refusal()
        if refused is not None:
            hack, reason = refused
            return Verdict(Status.REWARD_HACK if hack else Status.RULE_VIOLATION, reason)
        self.process.join(5)
        return Verdict(Status.RUNTIME_ERROR, f"the kernel process died (exit code {self.process.exitcode})")

    def await_loading(self, timeout: float) -> int | None:
        """Wait for a released candidate worker to begin importing the kernel file (its LOADING mark,
        written by the grader's code before any of the submission runs); the grader's clock then.

        None when the worker sent something first (a failure of its start, for ``expect`` to read) or
        died. A start that takes longer than ``timeout`` is the infrastructure's fault: nothing of the
        submission has run yet.
        """
        at = self.bell.wait_loading(time.perf_counter_ns() + int(timeout * 1e9), self._alive)
        if at is None and self._alive():
            raise Verdict(Status.INFRA_ERROR, f"the candidate worker did not start within the start limit of "
                                              f"{timeout:g} s (before the kernel file was imported)")
        return at

    def expect(self, timeout: float, nonce: str, seq: int | None, limit: str | None = None):
        """Read exactly one message: the reply to the request just sent. ``limit``: what the TIMEOUT
        verdict says when none came within ``timeout`` seconds (the limit that was hit, with its number)."""
        from .wire import Failure, TooLarge, WireError, receive  # torch: imported once a reply is read

        if not self.parent.poll(max(timeout, 0.0)):
            if not self.process.is_alive():
                raise self.death_verdict()
            raise Verdict(Status.TIMEOUT, limit or f"no reply within {timeout:g} s")
        if self.bell.refusal() is not None:  # the hook ended the process; a reply may be half written
            raise self.death_verdict()
        try:
            message, tensors = receive(self.parent, self.max_bytes, pin=self.pin)
        except EOFError:
            raise self.death_verdict() from None
        except TooLarge:
            raise Verdict(Status.INCORRECT, "the outputs are larger than any valid answer") from None
        except WireError as exc:
            if self.bell.refusal() is not None:
                raise self.death_verdict() from None
            raise Verdict(Status.REWARD_HACK, f"malformed message on the result channel: {exc}") from None
        if message.nonce != nonce or (seq is not None and getattr(message, "seq", seq) != seq):
            raise Verdict(Status.REWARD_HACK, "a message on the result channel was not the reply to "
                                              "the grader's request (forged or replayed)")
        if self.parent.poll(0):
            raise Verdict(Status.REWARD_HACK, "extra messages on the result channel")
        if isinstance(message, Failure):
            status = FAILURE_STATUS[message.category]
            text = f"{message.error_type}: {message.message}"
            if message.category == "oom":
                text = "out of memory: " + text
            raise Verdict(status, text, details={"traceback": message.traceback})
        return message, tensors

    def request(self, req, timeout: float, before_go: Callable[[], None] | None = None,
                at_done: Callable[[], None] | None = None, limit: str | None = None):
        """Send one request; for a call, time it by the doorbell. Returns (reply, tensors, clock): a
        ``CallClock`` for a call, else None.

        ``timeout`` bounds the request on the grader's clock from the moment it is sent (for a call:
        until DONE; its reply then has 60 s more to arrive); past it the verdict is TIMEOUT with
        ``limit`` as its message (default: the number of seconds).

        A call's inputs reach the worker only just before the timed window: the worker rings READY
        over buffers that hold no draw yet, ``before_go`` (the grader, in its own process) fills
        them, flushes the L2 and synchronises; STAGED lets the worker bring its CUDA context back
        onto the GPU (one tiny kernel of its own) and ring TOUCHED, and only then does the clock
        start and GO ring. ``at_done`` runs the moment DONE is seen, before anything else of the
        worker's can run (the grader's own copy of the outputs, ``evaluation``).
        """
        self.seq += 1
        req.seq, req.nonce = self.seq, secrets.token_hex(8)
        deadline = time.perf_counter_ns() + int(timeout * 1e9)
        self.parent.send(req)
        clock = None
        if isinstance(req, CallRequest):
            if self.bell.wait_for(READY, req.seq, deadline, self._alive, share_cpu=self.share_cpu) is not None:
                filled_from = time.perf_counter_ns()
                if before_go is not None:
                    before_go()
                staged = self.bell.staged(req.seq)
                touched = self.bell.wait_for(TOUCHED, req.seq, deadline, self._alive, share_cpu=self.share_cpu)
                if touched is not None:
                    start = self.bell.go(req.seq)
                    end = self.bell.wait_for(DONE, req.seq, deadline, self._alive, share_cpu=self.share_cpu)
                    if end is not None:
                        clock = CallClock(end - start, staged - filled_from, touched - staged)
                        if at_done is not None:
                            at_done()
        left = max(deadline - time.perf_counter_ns(), 0) / 1e9
        message, tensors = self.expect(left + 60.0 if clock is not None else left, req.nonce, req.seq,
                                       limit or f"no reply within {timeout:g} s")
        if isinstance(req, CallRequest) and clock is None:
            raise Verdict(Status.REWARD_HACK, "the call replied without its DONE signal")
        return message, tensors, clock

    def note_death(self, exit_code: int) -> None:
        """Record an exit status collected elsewhere (``outside.frozen`` reaps a child that died under
        it), so ``process.is_alive`` and ``exitcode`` stay true."""
        popen = getattr(self.process, "_popen", None)
        if popen is not None and popen.returncode is None:
            popen.returncode = exit_code

    def close(self) -> None:
        """End the worker and everything in its process group at once (nothing it holds is needed
        any more; a polite stop would only wait for torch's teardown)."""
        if self.process.is_alive() and self.process.pid:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
            self.process.join(5)
        self.parent.close()
        self.bell.close()


def core_plan(available: set[int] | None = None) -> tuple[set[int], set[int]] | None:
    """(the grader's core, the workers' cores), or None with fewer than 4 CPUs to spare.

    The grader spins on its clock while a call runs; on the same physical core as the worker (its
    hyper-thread sibling) the spin would slow the worker's Python dispatch, so the grader takes one
    logical CPU and the workers get every CPU that is neither it nor a sibling of it.
    """
    cpus = set(available if available is not None else os.sched_getaffinity(0))
    if len(cpus) < 4:
        return None
    spin = max(cpus)
    workers = cpus - siblings(spin)
    return ({spin}, workers) if workers else None




@dataclass
class Workers:
    """The two workers of one evaluation and everything they hold, owned from their start to their end.

    Started by ``start_workers`` or made an evaluation's by ``WarmWorkers.assign``; whoever holds them
    uses them as a context manager (``with workers:``), which ends them however the block ends:
    both processes (a relaunched candidate included), the scratch folder, and the caller's CPU set
    restored. ``relaunch_candidate`` replaces the candidate worker in place, so the one that ends
    them is always the one that started them. Ending them twice is harmless.
    """

    scratch: str  # the evaluation's scratch folder: the only place its workers may write
    protected: list[str]  # folders the candidate may not open (the problem's, and any the caller added)
    candidate: WorkerHandle
    reference: WorkerHandle
    plan: tuple[set[int], set[int]] | None  # (the grader's spin CPU, the workers' CPUs), see core_plan
    original_cpus: set[int] | None  # the caller's CPU set, restored when the grade ends
    key: tuple[str, str, str, str]  # (kernel file, dsl, problem file, device) they were started for
    ended: bool = field(default=False, init=False)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc_info) -> None:
        self.end()

    def relaunch_candidate(self, num_outputs: int, config: GradeConfig) -> WorkerHandle:
        """End the candidate worker and start a released new one for the same kernel, DSL and device
        (a worker that timed out or crashed cannot be asked again); the new one is returned."""
        kernel, dsl, _, device = self.key
        self.candidate.close()
        setup = candidate_setup(Path(kernel), dsl, device, num_outputs, self.protected, self.scratch, config)
        self.candidate = spawn_worker(setup, self.scratch, config, self.plan)
        self.candidate.release()
        return self.candidate

    def close(self) -> None:
        """End both worker processes (the scratch folder and the CPUs stay: ``end``)."""
        for handle in (self.candidate, self.reference):
            handle.close()

    @contextmanager
    def grader_compute(self):
        """The grader's own heavy work (the float64 anchor, which the memory plan may put on the CPU,
        and the float64 comparisons) on every CPU of the evaluation, not on its one spin CPU
        (``grader_cpus``); a no-op without a core plan."""
        if not (self.plan and self.original_cpus):
            yield
            return
        with grader_cpus(self.original_cpus, self.plan[0]):
            yield

    def end(self) -> None:
        """End both workers, remove the scratch folder and give the CPUs back."""
        if self.ended:
            return
        self.ended = True
        self.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.plan and self.original_cpus:
            os.sched_setaffinity(0, self.original_cpus)


@contextmanager
def grader_cpus(wide: set[int], spin: set[int]):
    """Every thread of this process on ``wide`` for the block, then each back where it was; threads
    started inside the block go to ``spin``, where they would have started without it.

    With a core plan the grader keeps to its spin CPU from the workers' start on (``spawn_worker``),
    and threads it starts later inherit that one CPU: torch's intra-op pool, started by the first
    large CPU operator, which is typically the float64 anchor the memory plan puts on the CPU at
    upstream sizes. That anchor (and the float64 comparisons against it) then ran on one CPU of the
    evaluation's many, the whole pool time-sharing it. Nothing is timed meanwhile: the candidate is
    idle while the grader computes what it expects, and timing starts after this block has put every
    thread back. Setting a thread's CPUs is ``sched_setaffinity`` on its thread id (Linux); a thread
    that ended meanwhile is skipped. torch, where this process has it, sizes its pool from the CPUs
    it had when it was imported (one, for a grader that imported it after its workers' start): for the
    block it gets a thread per CPU, and its former count after.
    """
    before: dict[int, set[int]] = {}
    for tid in thread_ids():
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, wide)
        except OSError:
            continue
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    if torch is not None and threads < len(wide):
        torch.set_num_threads(len(wide))
    try:
        yield
    finally:
        if torch is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        for tid in thread_ids():
            try:
                os.sched_setaffinity(tid, before.get(tid, spin))
            except OSError:
                continue


def candidate_setup(kernel: Path, dsl: str, device: str, num_outputs: int, protected: list[str], scratch: str,
                    config: GradeConfig) -> WorkerSetup:
    return WorkerSetup(mode="candidate", dsl=dsl, path=str(kernel), device=device, num_outputs=num_outputs,
                       nonce=secrets.token_hex(8), protected_paths=protected, scratch=scratch,
                       require_sandbox=config.require_sandbox)


def reference_setup(problem_file: Path, device: str, num_outputs: int) -> WorkerSetup:
    return WorkerSetup(mode="reference", dsl="none", path=str(problem_file), device=device,
                       num_outputs=num_outputs, nonce=secrets.token_hex(8))


def evaluations_root() -> str:
    """The folder that holds every evaluation's scratch folder (this user's, created on first use).

    A worker may not read it (landlock): other evaluations' scratch folders are other submissions'.
    It is a folder of its own, not the temporary folder itself, whose other contents (a DSL unpacked
    there, the grader's own temporary files) a worker may need to read.
    """
    root = os.path.join(tempfile.gettempdir(), f"mkb-evaluations-{os.getuid()}")
    os.makedirs(root, mode=0o700, exist_ok=True)
    return root


def _scratch_and_plan(config: GradeConfig) -> tuple[str, set[int] | None, tuple[set[int], set[int]] | None]:
    """A new scratch folder for one evaluation, the caller's CPU set and the core plan."""
    scratch = tempfile.mkdtemp(prefix="mkb-eval-", dir=evaluations_root())
    original = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return scratch, original, core_plan() if config.pin_cores and original else None


def start_workers(kernel: Path, dsl: str, problem_file: Path, num_outputs: int, device: str,
                  config: GradeConfig, protected_paths: list[str] | None = None) -> Workers:
    """Start the candidate and the reference worker of one evaluation, on their own CPUs.

    The candidate worker imports the kernel file only once released (``WorkerHandle.release``, which
    ``grade`` calls after the static rules pass); callers still start workers only for a file that
    passes them (``rules.scan_source``), so a refused file costs no worker start. Both import torch
    at once, on different cores; with a core plan this process keeps one CPU for its spin from here on.
    """
    kernel, problem_file = Path(kernel).resolve(), Path(problem_file).resolve()
    protected = [str(problem_file.parent), *(protected_paths or [])]
    scratch, original, plan = _scratch_and_plan(config)
    candidate = spawn_worker(candidate_setup(kernel, dsl, device, num_outputs, protected, scratch, config), scratch,
                             config, plan)
    reference = spawn_worker(reference_setup(problem_file, device, num_outputs), scratch, config, plan)
    return Workers(scratch, protected, candidate, reference, plan, original,
                   (str(kernel), dsl, str(problem_file), device))


@dataclass
class WarmWorkers:
    """An evaluation's workers started before the evaluation is known (``start_warm_workers``): one
    candidate worker per DSL it may be for and the reference worker, each holding torch, its device
    and (a candidate) its DSL, and nothing of any evaluation. ``assign`` makes them one evaluation's."""

    scratch: str
    device: str
    config: GradeConfig
    candidates: dict[str, WorkerHandle]
    reference: WorkerHandle
    plan: tuple[set[int], set[int]] | None
    original_cpus: set[int] | None
    ready: set[WorkerHandle] = field(default_factory=set)  # the workers that said WARM_READY

    def wait_ready(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds in all, until every worker has loaded what it loads before
        its evaluation (its ``WARM_READY``); True when all have."""
        deadline = time.monotonic() + timeout
        for handle in (*self.candidates.values(), self.reference):
            if handle in self.ready or not handle.parent.poll(max(deadline - time.monotonic(), 0.0)):
                continue
            try:
                if handle.parent.recv_bytes(len(WARM_READY)) == WARM_READY:
                    self.ready.add(handle)
            except (EOFError, OSError):  # it died, or sent something else: not ready
                pass
        return all(h in self.ready for h in (*self.candidates.values(), self.reference))

    def unusable(self, dsl: str) -> str | None:
        """Why these workers cannot take an evaluation in ``dsl`` (None when they can)."""
        if dsl not in self.candidates:
            return f"no warm candidate worker for {dsl}"
        self.wait_ready(0.0)
        for name, handle in (("candidate", self.candidates[dsl]), ("reference", self.reference)):
            if handle not in self.ready:
                return f"the warm {name} worker was not ready"
            if not handle.process.is_alive() or handle.parent.poll(0):  # gone since
                return f"the warm {name} worker did not stay ready"
        return None

    def assign(self, kernel: Path, dsl: str, problem_file: Path, num_outputs: int,
               protected_paths: list[str] | None = None) -> Workers:
        """Make these workers the evaluation's: the other DSLs' candidate workers are ended first (nothing
        but the evaluation's own workers runs beside the submission), then the candidate and the
        reference worker get the setup ``start_workers`` would have started them with."""
        kernel, problem_file = Path(kernel).resolve(), Path(problem_file).resolve()
        candidate = self.candidates.pop(dsl)
        for other in self.candidates.values():
            other.close()
        self.candidates.clear()
        protected = [str(problem_file.parent), *(protected_paths or [])]
        candidate.configure(candidate_setup(kernel, dsl, self.device, num_outputs, protected, self.scratch,
                                            self.config))
        self.reference.configure(reference_setup(problem_file, self.device, num_outputs))
        return Workers(self.scratch, protected, candidate, self.reference, self.plan, self.original_cpus,
                       (str(kernel), dsl, str(problem_file), self.device))

    def close(self) -> None:
        """End every worker, remove the scratch folder and give the CPUs back (``close_quietly``)."""
        for handle in (*self.candidates.values(), self.reference):
            handle.close()
        self.candidates.clear()
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.plan and self.original_cpus:
            os.sched_setaffinity(0, self.original_cpus)


def warm_setup(mode: str, dsl: str, device: str, scratch: str, config: GradeConfig) -> WorkerSetup:
    """The setup of a worker started before its evaluation: its kind, DSL and device, and the scratch
    folder it will write in, and nothing of an evaluation (``WarmWorkers.assign`` sends the rest)."""
    return WorkerSetup(mode=mode, dsl=dsl, path="", device=device, num_outputs=0, nonce="",
                       scratch=scratch if mode == "candidate" else "", require_sandbox=config.require_sandbox,
                       warm=True)


def start_warm_workers(dsls: list[str], device: str, config: GradeConfig) -> WarmWorkers:
    """Start one evaluation's workers before the evaluation is known (the judge's pool, ``judge.runner
    --warm``): a candidate worker for each of ``dsls`` and the reference worker, in a new scratch folder,
    on the workers' CPUs of the core plan. They load torch, their device and their DSL, then wait."""
    scratch, original, plan = _scratch_and_plan(config)
    candidates = {dsl: spawn_worker(warm_setup("candidate", dsl, device, scratch, config), scratch, config, plan)
                  for dsl in dsls}
    reference = spawn_worker(warm_setup("reference", "none", device, "", config), scratch, config, plan)
    return WarmWorkers(scratch, device, config, candidates, reference, plan, original)


def spawn_worker(setup: WorkerSetup, scratch: str, config: GradeConfig,
                 plan: tuple[set[int], set[int]] | None) -> WorkerHandle:
    """One worker process, on the workers' CPUs of ``plan``; this process then stays on its spin CPU."""
    if plan:
        os.sched_setaffinity(0, plan[1])  # the worker inherits this set when it is spawned
    try:
        return WorkerHandle(setup, scrubbed_env(scratch), config.max_output_bytes, scratch, plan is None,
                            config.hot_wait_ms)
    finally:
        if plan:
            os.sched_setaffinity(0, plan[0])


def close_quietly(workers: Workers | None) -> None:
    """End workers nobody will grade with (``Workers.end``); None: nothing to end."""
    if workers is not None:
        workers.end()
