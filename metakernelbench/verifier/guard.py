"""Runtime guards inside the candidate process: an audit hook, an import gate and an integrity snapshot.

The static scan (``rules``) is the first line; these catch what it cannot see statically
(dynamic imports, calls hidden in strings). A Python audit hook cannot be removed once added, so
it outlives anything the submission does in Python. It refuses:
- imports of other kernel languages and kernel libraries, and of the grader's own modules;
- opening the problem file or the grader's directories (the reference and secrets live there);
- starting processes or threads, loading native libraries through ctypes, and walking the
  interpreter's objects or frames (``gc``, ``sys._getframe``, traceback frames) from submission code.

Refusals raise inside the submission and are also recorded, so a submission that swallows the
exception is still reported.

Who asked: once the guard is armed, every event is attributed to the nearest frame outside the
standard library. Library code installed with the interpreter (site-packages: torch, the DSL
compilers, ...) and the grader's own modules are trusted to inspect frames, load libraries and the
like; *anything else* is the submission's -- the kernel file itself, files it writes and runs
(``runpy``, ``exec`` of a file), code compiled from strings (``<string>``), modules it loads from
outside the installed libraries. Code compiled under a file name inside a trusted folder that is not
a real file there is refused at compile time, so a submission cannot dress its code up as a
library's. The operating-system limits (``sandbox``) back this up without looking at frames.

``importlib.import_module`` raises no ``import`` audit event, so a meta-path finder (``ImportGate``)
refuses the same modules when the submission asks for them through importlib-based helpers.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import threading
from dataclasses import dataclass, field
from pathlib import Path

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
_GRADER = str(Path(__file__).resolve().parent) + os.sep
TAMPERING = "tampering with the grader"  # refusals with this text are REWARD_HACK, not RULE_VIOLATION
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
FILE_CHANGE_EVENTS = {"os.rename", "os.remove", "os.rmdir", "os.link", "os.symlink", "os.mkdir", "os.truncate",
                      "os.chmod", "os.chown", "os.utime", "shutil.copyfile", "shutil.move", "shutil.rmtree"}


def _library_roots() -> tuple[str, ...]:
    """Where trusted library code lives: site-packages, the grader itself, and every package already
    imported when the guard is installed (after the DSL stack: a DSL installed on ``PYTHONPATH``
    rather than in site-packages is as installed as any). A package is trusted by its own folder
    only, so a folder that merely sits on ``sys.path`` (a checkout, the working directory) is not."""
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    try:
        roots.update(site.getsitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    roots.add(str(Path(__file__).resolve().parents[2] / "problems"))  # the checkout's problems: never the submission's
    files = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if "." in name or not isinstance(path, str) or name in ("__main__", "__mp_main__"):
            continue
        if os.path.basename(path).startswith("__init__."):
            roots.add(os.path.dirname(path))
        else:
            files.add(os.path.realpath(path))
    found = tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))
    return found + (_GRADER,) + tuple(sorted(files))


class GuardViolation(PermissionError):
    """Raised inside the submission when it does something the contract forbids."""


@dataclass
class Guard:
    submission_file: str
    protected_paths: tuple[str, ...]
    dsl: str
    scratch: str | None = None  # the only folder the submission may write in (None: no limit)
    enforce: bool = True  # False for the trusted reference worker: nothing is refused
    violations: list[str] = field(default_factory=list)
    armed: bool = False
    gate: object = None
    _busy: threading.local = field(default_factory=threading.local)
    _trusted_files: dict = field(default_factory=dict)
    _roots: tuple = field(default_factory=_library_roots)

    def _trusted(self, filename: str) -> bool:
        """Library code (site-packages, the grader) as opposed to code the submission brought."""
        known = self._trusted_files.get(filename)
        if known is None:
            if filename == self.submission_file or filename.startswith("<"):
                known = False
            else:
                real = os.path.realpath(filename)
                known = real != self.submission_file and real.startswith(self._roots)
            self._trusted_files[filename] = known
        return known

    def _untrusted_origin(self, depth: int = 2) -> bool:
        """True when the nearest frame outside the standard library is not trusted library code."""
        frame = sys._getframe(depth)
        for _ in range(256):
            if frame is None:
                return False
            name = frame.f_code.co_filename
            if not _is_stdlib(name):
                return not self._trusted(name)
            frame = frame.f_back
        return False

    def _blocked_module(self, name: str) -> bool:
        banned = FORBIDDEN_IMPORTS + DSL_FOREIGN.get(self.dsl, ())
        return any(name == b or name.startswith(b + ".") for b in banned)

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
        if not self.enforce:
            return
        if event == "import":
            if self._blocked_module(str(args[0])):
                self._refuse(f"import of {args[0]}")
        elif event == "open":
            self._check_open(args)
        elif event == "object.__getattr__":
            if len(args) > 1 and args[1] in FRAME_ATTRIBUTES and self._untrusted_origin(3):
                self._refuse(f"frame introspection ({args[1]})")
        elif event == "object.__setattr__" and len(args) > 1:
            owner = str(getattr(args[0], "__module__", "") or "")
            if owner.startswith("metakernelbench.") or (
                    args[1] in ("__code__", "__globals__", "__defaults__", "__kwdefaults__")
                    and owner.startswith("torch")):
                # nothing legitimate rewrites the grader's classes or functions, whoever asks
                self._refuse(f"{TAMPERING} ({getattr(args[0], '__qualname__', '?')}.{args[1]})")
        elif event == "compile":
            self._check_compile(args)
        elif event in ("os.kill", "os.killpg"):
            # no signal to another process, whoever asks (seccomp refuses the syscall as well)
            if event == "os.killpg" or (args and args[0] != os.getpid()):
                self._refuse(f"{event} of another process ({args[0] if args else '?'})")
        elif event in START_EVENTS or event.startswith(("os.exec", "os.spawn")) or event in SUBMISSION_ONLY_EVENTS:
            if self._untrusted_origin(3):
                self._refuse(event)
        elif event in FILE_CHANGE_EVENTS and self.scratch is not None:
            paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
            if event in ("shutil.copyfile", "os.link", "os.symlink"):
                paths = paths[-1:]  # only the destination changes
            for path in paths:
                if not self._in_scratch(path) and self._untrusted_origin(3):
                    self._refuse(f"{event} outside the scratch folder ({os.fsdecode(path)})")

    def _in_scratch(self, path) -> bool:
        real = os.path.realpath(os.fsdecode(path))
        return real == self.scratch or real.startswith(self.scratch + os.sep) or real == os.devnull

    def _check_open(self, args: tuple) -> None:
        path = args[0]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return
        real = os.path.realpath(os.fsdecode(path))
        if any(real == p or real.startswith(p + os.sep) for p in self.protected_paths):
            self._refuse(f"opening {real}")
        mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                  (isinstance(flags, int) and flags & WRITE_FLAGS)
        if writing and self.scratch is not None and not self._in_scratch(real) and \
                not real.startswith("/dev/") and self._untrusted_origin(4):
            self._refuse(f"writing {real} (outside the evaluation's scratch folder)")

    def _check_compile(self, args: tuple) -> None:
        """Code compiled under a trusted library's file name must really be that file's code."""
        filename = args[1] if len(args) > 1 else None
        if not isinstance(filename, str) or filename.startswith("<") or not self._untrusted_origin(4):
            return
        real = os.path.realpath(filename)
        if real.startswith(self._roots) and real != self.submission_file and not _is_that_file(args[0], real):
            self._refuse(f"compiling code under a library's file name ({filename})")


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
        if guard.armed and guard.enforce and guard._blocked_module(name) and guard._untrusted_origin(2):
            guard._refuse(f"import of {name}")
        return None


def _is_that_file(source, path: str) -> bool:
    """True when ``source`` is exactly the file's text (an import compiling the module's own file)."""
    if not isinstance(source, (str, bytes)):
        return False
    try:
        with open(path, "rb") as fh:
            content = fh.read()
    except OSError:
        return False
    return content == (source.encode() if isinstance(source, str) else source)


def _is_stdlib(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return True
    return (filename.startswith(_STDLIB) and "site-packages" not in filename
            and "dist-packages" not in filename)


def install_guard(submission_file: str, protected_paths: list[str], dsl: str, scratch: str | None = None,
                  enforce: bool = True) -> Guard:
    """Add the (irremovable) audit hook, disarmed; arm it right before importing the submission."""
    guard = Guard(os.path.realpath(submission_file),
                  tuple(os.path.realpath(p) for p in protected_paths if p), dsl,
                  scratch=os.path.realpath(scratch) if scratch else None, enforce=enforce)
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
