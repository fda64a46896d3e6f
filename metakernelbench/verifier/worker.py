"""The untrusted side: the process that imports the candidate's kernel file and times its calls.

It holds no reference, no seeds and no expected outputs. It holds the grader's input buffers (shared
from the grader through CUDA IPC / shared memory), which hold no draw when the worker rings READY:
the grader writes each draw into them from its own process after READY and times, from its first
byte until GO, the only stretch in which this process could see a draw's values before the clock
starts (what it takes there beyond the trusted reference worker is added to the call's time). The
worker replies with the call's wall time and, when asked, its outputs as raw bytes (``wire``). The
loop is identical for every phase (warmup, timed, checked, bypass), so a submission cannot tell them
apart.

Everything in this process is the submission's once it is imported: the checks here (integrity of
the grader's functions, threads, the persisting-L2 limit, native mappings) are early warnings that
make a verdict clearer. What a verdict rests on is observed by the grader from outside: its clock,
its own copy of the outputs at DONE (the CPU path reads them out of this process, ``outside``; the
in-place outputs live in the grader's buffers), the refusal record the audit hook leaves before it
ends the process (``guard``), and the kernel's limits (``sandbox``).

The same loop also times the eager reference (``mode="reference"``, a trusted worker), so both
sides carry exactly the same harness overhead.

A candidate worker loads torch, its DSL, the launch hooks, the audit hook and its OS limits, and
then waits for the grader's release (``protocol.LoadRequest``) before it imports the kernel file:
it can be started before the grader has checked anything, and nothing of the submission runs early.
A warm worker (``WorkerSetup.warm``, the judge's pool of pre-started evaluations) starts even earlier,
before its evaluation exists: it loads torch, its device and (a candidate) its DSL with the code
loaders removed, then waits on its pipe for the evaluation's setup, and only then applies what is the
evaluation's: the problem (a reference), the audit hook for the kernel file and the OS limits with
the problem's folder unreadable (a candidate), exactly as a worker started for it would.
The grader ends a worker by killing its process group.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import traceback
import types
from typing import Any

import torch

from . import capabilities, hooks, sandbox
from .device import DeviceTools
from .doorbell import DONE, Doorbell
from .guard import REFUSE_EVENT, TAMPERING, GuardViolation, describe_threads, install_guard, thread_count, thread_ids
from .protocol import WARM_READY, CallRequest, FetchRequest, LoadRequest, WorkerSetup
from .wire import CallResult, Failure, KernelTime, Outputs, Ready, send, tensor_meta

__all__ = ["CallFailed", "GO_TIMEOUT_S", "STARTUP", "Worker", "critical_callables", "main"]

_perf_ns = time.perf_counter_ns  # bound before any submission code can patch the module
GO_TIMEOUT_S = 600.0  # the grader rings GO microseconds after READY; this only bounds a dead grader


class CallFailed(Exception):
    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.category = category


def critical_callables() -> dict[str, int]:
    """Identity of the functions the timing and result path relies on.

    Besides the timers, this covers the grader's own code loaded in this process (the worker,
    launch-hook, wire, device and guard modules and their classes): those modules are reachable
    from submission code without an import (``sys.modules`` and friends), and patching, say,
    ``Worker.send`` would rewrite every reported time.
    """
    import statistics

    from . import device, guard, wire

    found = {
        "time.perf_counter_ns": id(time.perf_counter_ns),
        "time.perf_counter": id(time.perf_counter),
        "torch.cuda.synchronize": id(torch.cuda.synchronize),
        "torch._C._cuda_synchronize": id(getattr(torch._C, "_cuda_synchronize", None)),
        "torch.cuda.Event.elapsed_time": id(torch.cuda.Event.elapsed_time),
        "statistics.median": id(statistics.median),
        "worker.send": id(globals()["send"]),
        "hooks.REGISTRY": id(hooks.REGISTRY),
        "hooks.REGISTRY.<instance>": hash(tuple(sorted(vars(hooks.REGISTRY)))),
    }
    from . import doorbell

    for owner in (sys.modules[__name__], hooks, wire, device, guard, doorbell, Worker, hooks.LaunchRegistry,
                  DeviceTools, doorbell.Doorbell):
        for key, value in vars(owner).items():
            if not (key.startswith("__") and key.endswith("__")):
                found[f"{owner.__name__}.{key}"] = id(value)
                code = getattr(value, "__code__", None)
                if code is not None:  # a function whose body was swapped keeps its identity
                    found[f"{owner.__name__}.{key}.__code__"] = id(code)
    return found


def _load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ban_cuda_graphs() -> None:
    """CUDA graphs amortise launches across calls; the contract forbids them (the audit hook ends
    the process on the event)."""
    graph_cls = getattr(torch.cuda, "CUDAGraph", None)
    if graph_cls is None:
        return
    original = graph_cls.capture_begin
    audit = sys.audit

    def capture_begin(self, *args, **kwargs):
        audit(REFUSE_EVENT, "CUDA graph capture")
        raise GuardViolation("CUDA graphs are forbidden by the MetaKernelBench contract")

    capture_begin.__wrapped__ = original
    graph_cls.capture_begin = capture_begin


def _is_compile_error(exc: BaseException) -> bool:
    """True when the exception escaped from a DSL compiler (tracing, lowering, codegen)."""
    markers = ("/cutlass/", "/tvm/", "/tvm_ffi/")
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        path, name = frame.f_code.co_filename, frame.f_code.co_name
        if any(m in path for m in markers) and ("compile" in name or "build" in name
                                                or "preprocess" in name or "trace" in name):
            return True
    return type(exc).__module__.startswith(("cutlass", "tvm")) and "Compil" in type(exc).__name__


def _violation_category(violations: list[str]) -> str:
    """Rewriting the grader's own code is a hack on the grade; any other refusal breaks a rule."""
    return "hack" if any(TAMPERING in v for v in violations) else "violation"


def _foreign_native(loaded: list[str]) -> str:
    return "native code loaded from outside the installed libraries: " + ", ".join(loaded[:5])


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """(address, bytes) of the memory a tensor's elements span, as the grader reads it at DONE (in the
    timed window: a contiguous tensor, the usual output, costs four C calls)."""
    if t.is_contiguous():
        return t.data_ptr(), t.nbytes
    if t.numel() == 0:
        return t.data_ptr(), 0
    last = sum((size - 1) * step for size, step in zip(t.shape, t.stride(), strict=True))
    return t.data_ptr(), (last + 1) * t.element_size()


def _profiled(run, cuda: bool):
    """Run ``run()`` under torch's profiler (its C interface: ``torch.profiler`` imports torch's compile
    packages, which probe for Triton): (its result, time per kernel name in us).

    On the GPU: every device kernel's device time. On the CPU: every torch operator's own host time
    (its duration less its nested operators', so nothing is counted twice): the eager work beside
    the DSL's.
    """
    from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, _ExperimentalConfig
    from torch.autograd import _disable_profiler, _enable_profiler, _prepare_profiler

    config = ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig())
    activities = {ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU}
    _prepare_profiler(config, activities)
    _enable_profiler(config, activities)
    try:
        result = run()
        if cuda:
            torch.cuda.synchronize()
    finally:
        events = _disable_profiler().events()
    kernel_us: dict[str, float] = {}
    wanted = "CUDA" if cuda else "CPU"
    mine = [e for e in events if str(e.device_type()).endswith(wanted)]
    if cuda:
        for e in mine:
            kernel_us[e.name()] = kernel_us.get(e.name(), 0.0) + e.duration_ns() / 1e3
        return result, kernel_us
    by_thread: dict[int, list] = {}
    for e in mine:
        by_thread.setdefault(e.start_thread_id(), []).append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.start_ns(), -e.duration_ns()))
        stack: list[list] = []  # [end_ns, name, own_ns]
        for e in evs + [None]:
            start = e.start_ns() if e is not None else None
            while stack and (start is None or start >= stack[-1][0]):
                end, name, own = stack.pop()
                kernel_us[name] = kernel_us.get(name, 0.0) + max(own, 0) / 1e3
            if e is None:
                break
            if stack:
                stack[-1][2] -= e.duration_ns()
            stack.append([e.start_ns() + e.duration_ns(), e.name(), e.duration_ns()])
    return result, kernel_us


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


class Worker:
    def __init__(self, conn, setup: WorkerSetup):
        self.conn = conn
        self.setup = setup
        self.device = torch.device(setup.device)
        self.tools = DeviceTools.create(self.device, flush=False)  # the grader flushes (``stage``)
        self.tools.reset_persisting_l2()  # once; each call then checks that it stayed at 0
        self.kept: dict[int, tuple] = {}
        self.stage: tuple = ()  # the grader's input buffers (``protocol.CallRequest.inputs``)
        self.removed: list[str] = []  # the code-loading entry points taken away (``capabilities``)
        self.sealed = False  # the executable-memory seal (``sandbox.seal_executable_memory``) is on
        self.thread_baseline: int | None = None
        self.baseline_tids: set[int] = set()
        self.solve = None
        self.integrity: dict[str, int] = {}
        self.deferred_checks = False  # light-checked calls ran since the last heavy checks
        # The submission can reach this class (not this instance) through the loaded module and replace
        # its methods; class attribute assignments raise no audit event. Every method is bound into
        # the instance now, before the submission is imported, so this worker keeps running the
        # grader's code, and the integrity check (itself pinned here) reports the replacement.
        for name, value in vars(Worker).items():
            if isinstance(value, types.FunctionType) and not name.startswith("__"):
                self.__dict__[name] = value.__get__(self)
        self._integrity_now = critical_callables
        self.bell = Doorbell.attach(setup.doorbell)
        # bound now, like the methods above: a submission that replaces Doorbell.ready_and_wait on the
        # class during the timing loop (where the integrity check is deferred) does not reach it
        self._ready_and_wait = Doorbell.ready_and_wait.__get__(self.bell)
        self.box: sandbox.Sandbox | None = None
        self._sync = DeviceTools.sync.__get__(self.tools)  # bound now: later patches do not reach it
        self._touch = DeviceTools.touch.__get__(self.tools)
        self._warm = self._warm_context  # run between STAGED and TOUCHED (doorbell.ready_and_wait)

    def send(self, message, tensors=()) -> None:
        send(self.conn, message, list(tensors))

    def fail(self, seq: int, stage: str, category: str, exc: BaseException | str) -> None:
        if isinstance(exc, BaseException):
            tb = "".join(traceback.format_exception(exc))[-6000:]
            self.send(Failure(nonce=self._nonce, seq=seq, stage=stage, category=category,
                              error_type=type(exc).__name__, message=str(exc)[:2000], traceback=tb))
        else:
            self.send(Failure(nonce=self._nonce, seq=seq, stage=stage, category=category,
                              error_type="Contract", message=exc[:2000]))

    # ---- setup -------------------------------------------------------------------------------
    def _prepare(self) -> tuple[str, Exception | None]:
        """What a candidate loads before anything of its evaluation is needed: the DSL with its launch
        hooks, then the GPU code loaders the DSL did not produce taken out of the process. Returns the
        DSL's version and the error that stopped it (raised once the evaluation is known, ``load``)."""
        setup = self.setup
        if setup.mode == "reference":
            return "reference", None
        start = time.perf_counter()
        try:
            version = hooks.INSTALLERS[setup.dsl]() if setup.dsl in hooks.INSTALLERS else "none"
            STARTUP["dsl"] = time.perf_counter() - start
            removed_at = time.perf_counter()
            self.removed = capabilities.remove(setup.dsl)  # GPU code loaders the DSL did not produce
            STARTUP["capabilities"] = time.perf_counter() - removed_at
        except Exception as exc:  # noqa: BLE001 - every failure becomes a verdict (``load``)
            return "none", exc
        return str(version), None

    def _await_evaluation(self) -> bool:
        """A warm worker (``WorkerSetup.warm``): wait on the pipe for its evaluation's setup, for the
        same kind of worker on the same device, page and scratch folder. Nothing of an evaluation
        (kernel file, problem, protected folders) was in this process before; everything in the
        start-up breakdown so far is renamed ``warm_*``: it ran before the evaluation was dispatched."""
        warm, waiting_at = self.setup, time.perf_counter()
        try:
            self.conn.send_bytes(WARM_READY)
            setup = self.conn.recv()
        except (EOFError, OSError):  # the grader is gone, or never dispatched an evaluation here
            return False
        same = ("mode", "dsl", "device", "doorbell", "scratch")
        if not isinstance(setup, WorkerSetup) or setup.warm or any(getattr(setup, k) != getattr(warm, k)
                                                                   for k in same):
            return False
        for key in list(STARTUP):
            STARTUP[f"warm_{key}"] = STARTUP.pop(key)
        STARTUP["warm_idle"] = time.perf_counter() - waiting_at
        self.setup = setup
        return True

    def load(self) -> bool:
        start = time.perf_counter()
        version, prepare_error = self._prepare()
        if self.setup.warm:
            if not self._await_evaluation():
                return False
            start = time.perf_counter()  # the import's time counts from the evaluation's dispatch
        setup = self.setup
        self._nonce = setup.nonce
        try:
            if prepare_error is not None:
                raise prepare_error
            if setup.mode == "reference":
                from metakernelbench.problems import load_problem

                self.solve = load_problem(setup.path).reference
                version = "reference"
                # trusted code: an audit hook is installed as in the candidate, one that checks
                # nothing (``install_guard``: an event costs it less than the candidate's checks)
                install_guard(os.devnull + ".no-submission", [], "none", self.bell.refusal_reporter(),
                              enforce=False)()
                self.integrity = critical_callables()
            else:
                limits_at = time.perf_counter()  # (the DSL and the code loaders' removal: ``_prepare``)
                # the only handle on the hook's switch is ``arm``: called below and then dropped
                arm = install_guard(setup.path, setup.protected_paths, setup.dsl, self.bell.refusal_reporter(),
                                    scratch=setup.scratch or None)
                _ban_cuda_graphs()
                # the profiler's first use loads its libraries: once now, before the hook is armed
                _profiled(lambda: torch.zeros(4, device=self.device).add_(1), self.device.type == "cuda")
                self.integrity = critical_callables()
                # from here on the process is the submission's: OS limits first, then the guard
                # unreadable by the kernel's rules: the problem's folder, the folders the caller protects,
                # and the folder holding every evaluation's scratch (this one's stays readable)
                unreadable = [*setup.protected_paths, os.path.dirname(os.path.realpath(setup.scratch))] \
                    if setup.scratch else list(setup.protected_paths)
                self.box = sandbox.enter(setup.scratch or os.getcwd(), require=setup.require_sandbox,
                                         submission=setup.path, unreadable=unreadable)
                STARTUP["limits"] = time.perf_counter() - limits_at
                waiting_at = time.perf_counter()
                if not isinstance(self.conn.recv(), LoadRequest):  # the grader's go-ahead (protocol)
                    return False
                STARTUP["waited_for_the_grader"] = time.perf_counter() - waiting_at
                self.bell.loading()  # the grader's compile budget starts now (``Evaluation.await_candidate``)
                arm()
                del arm
                import_at = time.perf_counter()
                module = _load_module(setup.path, "kernel")
                STARTUP["kernel_import"] = time.perf_counter() - import_at
                self.solve = getattr(module, "solve", None)
                if not callable(self.solve):
                    self.fail(-1, "import", "structure", "kernel.py defines no callable solve(*inputs)")
                    return False
        except GuardViolation as exc:
            self.fail(-1, "import", _violation_category([str(exc)]), exc)
            return False
        except sandbox.SandboxError as exc:
            self.fail(-1, "setup", "infra", exc)
            return False
        except Exception as exc:  # noqa: BLE001 - every failure becomes a verdict
            self.fail(-1, "import", "compile" if not isinstance(exc, ImportError) or
                      _is_compile_error(exc) else "runtime", exc)
            return False
        loaded = self.box.new_native_mappings() if self.box is not None else []
        if loaded:
            self.fail(-1, "import", "violation", _foreign_native(loaded))
            return False
        self.send(Ready(nonce=setup.nonce, device=self.tools.name(), torch_version=torch.__version__,
                        dsl_version=str(version), import_s=time.perf_counter() - start,
                        startup_s={k: round(v, 3) for k, v in STARTUP.items()},
                        sandbox=(self.box.summary() if self.box else "") + (
                            f", {len(self.removed)} code loaders removed" if self.removed else "")))
        return True

    # ---- one call ------------------------------------------------------------------------------
    def _as_outputs(self, returned: Any) -> tuple:
        n = self.setup.num_outputs
        if n == 0:
            if returned is not None:
                raise CallFailed("structure", f"solve must return None, got {type(returned).__name__}")
            return ()
        values = (returned,) if n == 1 else returned
        if n > 1 and type(returned) is not tuple:
            raise CallFailed("structure", f"solve must return a tuple of {n} tensors, "
                                          f"got {type(returned).__name__}")
        if len(values) != n:
            raise CallFailed("structure", f"solve must return {n} outputs, got {len(values)}")
        for i, v in enumerate(values):
            if type(v) is not torch.Tensor:  # exact type: a subclass could defer its compute
                category = "hack" if isinstance(v, torch.Tensor) else "structure"
                raise CallFailed(category, f"output {i} is a {type(v).__name__}, not a plain torch.Tensor")
        return values

    def _contract_checks(self, req: CallRequest, outputs: tuple, inputs: list) -> None:
        for i, out in enumerate(outputs):
            if out.device.type != self.device.type:
                raise CallFailed("structure", f"output {i} is on {out.device}, expected {self.device.type}")
            lo, hi = _storage_span(out)
            for j, inp in enumerate(inputs):
                if isinstance(inp, torch.Tensor) and inp.numel() and out.numel():
                    ilo, ihi = _storage_span(inp)
                    if lo < ihi and ilo < hi:
                        raise CallFailed("hack", f"output {i} shares memory with input {j}")
        if req.check_threads:  # both modes: the reference pays the same overhead (see timing.timing_loop)
            if self.thread_baseline is None:
                self.thread_baseline, self.baseline_tids = thread_count(), thread_ids()
            elif thread_count() > self.thread_baseline and self.setup.mode == "candidate":
                raise CallFailed("hack", f"threads grew from {self.thread_baseline} to {thread_count()} "
                                         "during timing (work left running after solve returned?); new: "
                                         + describe_threads(thread_ids() - self.baseline_tids))
        if req.light_checks:
            self.deferred_checks = True
        else:
            self._heavy_checks()
        if self.tools.persisting_l2_bytes():
            raise CallFailed("violation", "the call set a persisting-L2 carve-out (cudaLimitPersistingL2CacheSize): "
                                          "forbidden, it keeps data in the L2 across the grader's flush")

    def _heavy_checks(self) -> None:
        """The grader's code in this process unchanged, and no native code from outside the
        installed libraries mapped (after every call, or deferred to the fetch after a timing loop)."""
        self.deferred_checks = False
        now = self._integrity_now()
        if now != self.integrity:
            changed = [k for k, v in now.items() if self.integrity.get(k) != v]
            raise CallFailed("hack", f"timing or result functions were replaced: {changed}")
        if self.box is not None:
            loaded = self.box.new_native_mappings()
            if loaded:
                raise CallFailed("violation", _foreign_native(loaded))

    def _warm_context(self) -> None:
        """Between STAGED and TOUCHED: one tiny kernel of this process's and a sync, so that the GPU's
        switch back from the grader's context (which just wrote the draw) is taken here, outside the
        call's span. The grader times this stretch and charges what exceeds the trusted reference
        worker's (``timing.window_charges``): it is no place to compute."""
        self._touch()
        self._sync()

    def call(self, req: CallRequest) -> None:
        """One call: READY over empty buffers / the grader fills them / GO / solve / sync / DONE."""
        hooks.REGISTRY.begin_call(req.suppress)
        if req.inputs is not None:
            self.stage = tuple(req.inputs)
        inputs = list(self.stage)
        for position, value in req.values:
            inputs[position] = value
        self._sync()
        bell = self.bell
        if not self._ready_and_wait(req.seq, GO_TIMEOUT_S, self._warm):
            self.fail(req.seq, "call", "runtime", "the grader never started the call")
            return
        kernels = None
        try:
            t0 = _perf_ns()
            with torch.no_grad():
                if req.profile:
                    returned, kernels = _profiled(lambda: self.solve(*inputs), self.device.type == "cuda")
                else:
                    returned = self.solve(*inputs)
            t_ret = _perf_ns()
            self._sync()
            t1 = _perf_ns()
            if bell.slots[DONE] == req.seq:
                raise CallFailed("hack", "the call's DONE signal was written before the call ended")
            outputs, malformed = None, None
            if req.publish_outputs:
                try:
                    if self.setup.num_outputs == 1 and type(returned) is torch.Tensor:
                        outputs = (returned,)  # the common case, checked without a call
                    else:
                        outputs = self._as_outputs(returned)
                    bell.publish_outputs([_extent(o) for o in outputs])
                except CallFailed as exc:
                    malformed = exc
                    bell.publish_outputs([(-1, -1)] * 99)
            bell.slots[DONE] = req.seq
            if req.publish_outputs:
                # the outputs stay as they are until the grader has read its own copy of them
                bell.wait_copied(req.seq, GO_TIMEOUT_S)
            if malformed is not None:
                raise malformed
            if outputs is None:
                outputs = self._as_outputs(returned)
            # Timed outputs are kept as they were when solve returned: work that finishes later
            # (a thread, a side stream launched after the sync) cannot complete a kept output.
            kept = tuple((o.clone(), list(o.stride())) for o in outputs) if req.keep_outputs else None
            self._contract_checks(req, outputs, inputs)
            if not self.sealed and self.box is not None and self.box.seccomp:
                # the DSL has compiled the kernels (its JIT writes host code during the first call):
                # no new executable memory from here on; the grader checks the seal from outside
                sandbox.seal_executable_memory()
                self.sealed = True
        except sandbox.SandboxError as exc:
            self.fail(req.seq, "call", "infra", exc)
            return
        except CallFailed as exc:
            self.fail(req.seq, "call", exc.category, str(exc))
            return
        except GuardViolation as exc:
            self.fail(req.seq, "call", _violation_category([str(exc)]), exc)
            return
        except torch.cuda.OutOfMemoryError as exc:
            self.fail(req.seq, "call", "oom", exc)
            return
        except Exception as exc:  # noqa: BLE001 - every failure becomes a verdict
            self.fail(req.seq, "call", "compile" if _is_compile_error(exc) else "runtime", exc)
            return
        if kept is not None and self.setup.mode == "candidate":
            self.kept[req.seq] = kept
        sent = list(outputs) if req.send_outputs else []
        registry = hooks.REGISTRY
        self.send(CallResult(nonce=req.nonce, seq=req.seq, elapsed_ns=t1 - t0, returned_ns=t_ret - t0,
                             launches=dict(registry.counts), dsl_ns=registry.dsl_ns,
                             outputs=[tensor_meta(o, list(o.stride())) for o in sent] if req.send_outputs else None,
                             threads=thread_count(),
                             kernels=None if kernels is None else [KernelTime(name=k, us=v)
                                                                   for k, v in kernels.items()],
                             kernel_names={site: registry.kernel_names.get(site, []) for site in registry.counts}),
                  sent)

    def fetch(self, req: FetchRequest) -> None:
        if self.deferred_checks:
            try:
                self._heavy_checks()
            except CallFailed as exc:
                self.fail(req.seq, "call", exc.category, str(exc))
                return
        tensors, metas = [], []
        for call in req.calls:
            for out, stride in self.kept.get(call, ()):
                tensors.append(out)
                metas.append(tensor_meta(out, stride))
        if not req.calls and torch.cuda.is_available() and torch.cuda.is_initialized():
            # a loop has ended: give the allocator's cached blocks back before replying, so the
            # next stage (another process's loop, the rechecks) has the GPU's memory; upstream-sized
            # problems need most of it, and each process would otherwise keep its own peak
            torch.cuda.empty_cache()
        self.send(Outputs(nonce=req.nonce, seq=req.seq, outputs=metas), tensors)

    def serve(self) -> None:
        if not self.load():
            return
        conn, hot_ns = self.conn, self.setup.hot_wait_ns
        while True:
            try:
                # (GradeConfig.hot_wait_ms) a core that slept before a call runs the call's host
                # side slower on the H200 host; polling for a short while after each reply (the
                # pace of a timing loop) keeps it awake, and then the worker sleeps, so a worker
                # that is not being timed leaves the cores to the one that is
                hot_until = _perf_ns() + hot_ns if hot_ns else 0
                while hot_ns and not conn.poll(0) and _perf_ns() < hot_until:
                    pass
                req = conn.recv()
            except EOFError:
                return
            except Exception as exc:  # noqa: BLE001 - e.g. shared inputs that cannot be opened here
                self.fail(-1, "call", "runtime", exc)
                return
            if isinstance(req, CallRequest):
                self._nonce = req.nonce
                self.call(req)
            elif isinstance(req, FetchRequest):
                self.fetch(req)
            else:
                return


STARTUP: dict[str, float] = {}  # wall-clock marks of this process's start (the Ready message's breakdown)


def _start_thread_pools() -> None:
    """Start torch's intra-op threads, all of them, while the process is still the grader's.

    OpenMP starts a thread pool's threads on the first parallel region that needs them: a torch
    operator large enough to split (tens of thousands of elements) starts some, a larger one more. In
    a worker that would happen whenever the kernel's eager glue first meets a large enough tensor (a
    full-size workload, a draw with more rows than the ones before), possibly in the middle of the
    timed calls, where a new thread reads as work left running after ``solve`` returned
    (``Worker._contract_checks``). A reduction split across every intra-op thread starts the whole
    pool now, so the thread baseline already holds it. The profiler's thread is started the same way
    (``Worker.load``); a pool the kernel itself starts (TVM's, for a parallel loop) starts in its first
    calls, before the baseline is taken at the first timed call.
    """
    threads = torch.get_num_threads()
    if threads > 1:
        torch.ones(threads << 16).sum()


def main(conn, setup: WorkerSetup) -> None:
    """Process entry point (spawned by the grader)."""
    STARTUP["interpreter_and_torch"] = time.time() - setup.spawned_at if setup.spawned_at else 0.0
    os.setsid()  # own process group: the grader kills the whole group at the end
    if setup.warm and sys.platform == "linux":  # a warm runner ended unused takes its workers with it
        sandbox.load_libc().prctl(sandbox.PR_SET_PDEATHSIG, 9, 0, 0, 0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    _start_thread_pools()
    if setup.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(setup.device))
    started = time.time()
    worker = Worker(conn, setup)
    STARTUP["device"] = time.time() - started
    worker.serve()
