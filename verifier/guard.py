"""Runtime guards inside the candidate process: an audit hook, an import gate and an integrity snapshot.

The static scan (``rules``) is the first line; these catch what it cannot see statically
(dynamic imports, calls hidden in strings). A Python audit hook cannot be removed once added, so
it outlives anything the submission does in Python. It refuses:
- imports of other kernel languages and kernel libraries, and of the grader's own modules;
- opening the problem file or the grader's directories (the reference and secrets live there);
- starting processes or threads, loading native libraries through ctypes, and walking the
  interpreter's objects or frames (``gc``, ``sys._getframe``, traceback frames) from submission code.

Refusals raise inside the submission and are also recorded, so a submission that swallows the
exception is still reported. Events from library code (the DSL compilers legitimately inspect
frames) are allowed: only events whose nearest Python caller is the submission file count, and for
thread and process starts the nearest caller outside the standard library (a thread started by
``logging.handlers.QueueListener`` on the submission's behalf is the submission's thread).

``importlib.import_module`` raises no ``import`` audit event, so a meta-path finder (``ImportGate``)
refuses the same modules when the submission asks for them through importlib-based helpers.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from dataclasses import dataclass, field

FORBIDDEN_IMPORTS = (
    "triton", "cupy", "numba", "tilelang", "jax", "cuda.core", "cuda.cccl", "cuda.compute",
    "nvmath", "quack", "flash_attn", "flashinfer", "cudnn", "cutlass_cppgen", "cutlass_library",
    "liger_kernel", "sgl_kernel", "deep_gemm", "tvm_tirx", "torch._inductor", "torch._dynamo",
    "metakernelbench.verifier", "metakernelbench.problems", "metakernelbench.adapters",
    "metakernelbench.skill_transfer", "mkb_problem",
)
DSL_FOREIGN = {"cutedsl": ("tvm",), "tirx": ("cutlass",)}
SUBMISSION_ONLY_EVENTS = {
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "_thread.start_new_thread",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe", "sys._current_frames",
    "sys.settrace", "sys.setprofile", "socket.connect", "socket.bind",
}
FRAME_ATTRIBUTES = {"tb_frame", "f_back", "f_locals", "f_globals", "gi_frame", "cr_frame", "ag_frame"}
# starting a thread or a process is refused however many standard-library layers sit in between
# (threading.Thread, concurrent.futures, logging.handlers.QueueListener, subprocess.run, ...)
START_EVENTS = {"_thread.start_new_thread", "subprocess.Popen", "os.system", "os.fork", "os.forkpty",
                "os.posix_spawn", "pty.spawn"}
_STDLIB = tuple(os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib"))


class GuardViolation(PermissionError):
    """Raised inside the submission when it does something the contract forbids."""


@dataclass
class Guard:
    submission_file: str
    protected_paths: tuple[str, ...]
    dsl: str
    violations: list[str] = field(default_factory=list)
    armed: bool = False
    gate: object = None
    _busy: threading.local = field(default_factory=threading.local)

    def _blocked_module(self, name: str) -> bool:
        banned = FORBIDDEN_IMPORTS + DSL_FOREIGN.get(self.dsl, ())
        return any(name == b or name.startswith(b + ".") for b in banned)

    def _from_submission(self, through_stdlib: bool = False) -> bool:
        frame = sys._getframe(2)
        for _ in range(3):  # the event's caller, or a stdlib wrapper one or two levels up
            if frame is None:
                return False
            if frame.f_code.co_filename == self.submission_file:
                return True
            if through_stdlib and _is_stdlib(frame.f_code.co_filename):
                return self._nearest_library_frame_is_submission(frame)
            frame = frame.f_back
        return False

    def _nearest_library_frame_is_submission(self, frame) -> bool:
        """True when the first frame above ``frame`` outside the standard library is the submission."""
        for _ in range(64):
            if frame is None:
                return False
            if not _is_stdlib(frame.f_code.co_filename):
                return frame.f_code.co_filename == self.submission_file
            frame = frame.f_back
        return False

    def _refuse(self, what: str) -> None:
        if what not in self.violations:
            self.violations.append(what)
        raise GuardViolation(f"forbidden by the MetaKernelBench contract: {what}")

    def __call__(self, event: str, args: tuple) -> None:
        if not self.armed or getattr(self._busy, "on", False):
            return
        self._busy.on = True  # the checks below raise audit events of their own
        try:
            self._check(event, args)
        finally:
            self._busy.on = False

    def _check(self, event: str, args: tuple) -> None:
        if event == "import":
            if self._blocked_module(str(args[0])):
                self._refuse(f"import of {args[0]}")
        elif event == "open":
            path = args[0]
            if isinstance(path, (str, bytes, os.PathLike)):
                real = os.path.realpath(os.fsdecode(path))
                if any(real == p or real.startswith(p + os.sep) for p in self.protected_paths):
                    self._refuse(f"opening {real}")
        elif event == "object.__getattr__":
            if len(args) > 1 and args[1] in FRAME_ATTRIBUTES and self._from_submission():
                self._refuse(f"frame introspection ({args[1]})")
        elif event in START_EVENTS or event.startswith(("os.exec", "os.spawn")):
            if self._from_submission(through_stdlib=True):
                self._refuse(event)
        elif event in SUBMISSION_ONLY_EVENTS:
            if self._from_submission():
                self._refuse(event)


class ImportGate:
    """A meta-path finder that refuses forbidden modules imported on the submission's behalf.

    ``importlib.import_module`` (and so ``pkgutil.resolve_name``, ``runpy``, ``pydoc.locate``,
    ``unittest.mock``...) raises no ``import`` audit event, but every import asks the meta-path
    finders. Requests whose nearest non-standard-library caller is the submission are refused;
    libraries probing for optional packages (``importlib.util.find_spec("triton")``) are not.
    """

    def __init__(self, guard: Guard):
        self.guard = guard

    def find_spec(self, name, path=None, target=None):
        guard = self.guard
        if guard.armed and guard._blocked_module(name) and \
                guard._nearest_library_frame_is_submission(sys._getframe(1)):
            guard._refuse(f"import of {name}")
        return None


def _is_stdlib(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return True
    return (filename.startswith(_STDLIB) and "site-packages" not in filename
            and "dist-packages" not in filename)


def install_guard(submission_file: str, protected_paths: list[str], dsl: str) -> Guard:
    """Add the (irremovable) audit hook, disarmed; arm it right before importing the submission."""
    guard = Guard(os.path.realpath(submission_file),
                  tuple(os.path.realpath(p) for p in protected_paths if p), dsl)
    sys.addaudithook(guard)
    guard.gate = ImportGate(guard)
    sys.meta_path.insert(0, guard.gate)
    return guard


def thread_count() -> int:
    """Threads of this process, Python-level and native (the kernel's view)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()
