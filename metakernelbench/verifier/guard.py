"""Runtime guards inside the candidate process: an audit hook that fails closed, and an import gate.

The static scan (``rules``) is the first line; the hook catches what it cannot see statically
(dynamic imports, calls hidden in strings). It refuses:
- imports of other kernel languages and kernel libraries, and of the grader's own modules -- by the
  ``import`` event, and by the ``exec`` event of any module code that lives in such a package, so
  ``importlib.import_module`` (which raises no ``import`` event) is refused too;
- opening the problem file or the grader's directories (the reference and secrets live there);
- starting processes or threads, loading native libraries or reading memory through ctypes, and
  walking the interpreter's objects or frames (``gc``, ``sys._getframe``, traceback frames) from
  submission code;
- rewriting the grader's own classes and functions (``TAMPERING``: REWARD_HACK).

**A refusal cannot be undone.** The hook does not raise an exception the submission could catch, nor
append to a list it could empty: it writes the reason into the evaluation's shared page (the grader's
side of it, ``doorbell``) and ends the process at once, before the submission runs another line. The
grader reads the reason when it sees the process gone.

**Nothing the hook decides depends on state the submission can write.** Its switch, its cache of
trusted files, its folders and every function it calls live in one closure built by
``install_guard``, reachable only through the interpreter's list of audit hooks, which Python does not
expose. It calls no module-level name at decision time (a submission may rebind ``os.path.realpath``
or ``builtins.len``): every function it uses is captured when it is built. The import gate on
``sys.meta_path`` holds no state at all; it only raises an audit event the hook answers.

This is still code inside the candidate's process, which native code or raw memory writes could
reach: an early warning that makes a verdict clearer. The verdicts rest on what the grader sees
from outside (``launch``, ``evaluation``) and on the kernel's limits (``sandbox``).

Who asked: once the guard is armed, every event is attributed to the nearest frame outside the
standard library. Library code installed with the interpreter (site-packages: torch, the DSL
compilers, ...) and the grader's own modules are trusted to inspect frames, load libraries and the
like; *anything else* is the submission's -- the kernel file itself, files it writes and runs
(``runpy``, ``exec`` of a file), code compiled from strings (``<string>``), modules it loads from
outside the installed libraries. Code compiled under a file name inside a trusted folder that is not
a real file there is refused at compile time, so a submission cannot dress its code up as a
library's.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from metakernelbench.contract import AUDIT_FORBIDDEN_IMPORTS, AUDIT_SUBMISSION_ONLY, FOREIGN_DSL_PACKAGES

__all__ = [
    "DSL_FOREIGN", "FILE_CHANGE_EVENTS", "FIND_SPEC_EVENT", "FORBIDDEN_IMPORTS", "FRAME_ATTRIBUTES", "GuardViolation",
    "ImportGate", "REFUSE_EVENT", "START_EVENTS", "SUBMISSION_ONLY_EVENTS", "TAMPERING", "TORCH_LAZY", "WRITE_FLAGS",
    "describe_threads", "install_guard", "make_policy", "thread_count", "thread_ids",
]

# The modules this hook refuses are the contract's (metakernelbench.contract, which says what the static
# scan refuses besides and why the lists differ): FORBIDDEN_IMPORTS whoever imports them, the other
# DSL's package (DSL_FOREIGN), and TORCH_LAZY, which torch itself loads lazily (its profiler, its own
# compile paths), so their code is refused only when the submission asks for it
FORBIDDEN_IMPORTS = AUDIT_FORBIDDEN_IMPORTS
DSL_FOREIGN = FOREIGN_DSL_PACKAGES
TORCH_LAZY = AUDIT_SUBMISSION_ONLY
SUBMISSION_ONLY_EVENTS = {
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "_thread.start_new_thread",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe", "sys._current_frames",
    "sys.settrace", "sys.setprofile", "socket.connect", "socket.bind", "ctypes.call_function",
    "ctypes.string_at", "ctypes.wstring_at", "ctypes.addressof", "sys._current_exceptions",
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


REFUSE_EVENT = "metakernelbench.refuse"  # raised by the launch hooks and the worker: refuse (args: text,)
FIND_SPEC_EVENT = "metakernelbench.find_spec"  # raised by the stateless import gate (args: module name,)


class GuardViolation(PermissionError):
    """A contract violation found by an in-process hook other than the audit hook (kept for callers
    that refuse by raising; the audit hook itself ends the process instead)."""


def _package_places(names: tuple[str, ...]) -> tuple[tuple[str, ...], frozenset[str]]:
    """(folders, files) holding the code of the forbidden modules that are installed here, found
    without importing them: the ``exec`` of a module body from there is refused however it was
    imported."""
    import importlib.util

    folders, files = set(), set()
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError, AttributeError):
            continue
        if spec is None:
            continue
        for location in spec.submodule_search_locations or ():
            folders.add(os.path.realpath(location) + os.sep)
        if spec.origin and not spec.submodule_search_locations and os.path.isfile(spec.origin):
            files.add(os.path.realpath(spec.origin))
    return tuple(sorted(folders)), frozenset(files)


def make_policy(submission_file: str, protected_paths: list[str] | tuple[str, ...], dsl: str,
                scratch: str | None = None, roots: tuple[str, ...] | None = None) -> SimpleNamespace:
    """The guard's decisions as closures over private state, every helper captured now.

    The audit hook builds its own policy and never exposes it; tests build one to check the rules.
    """
    import stat as _stat_mod

    lstat, readlink, getcwd, s_islnk = os.lstat, os.readlink, os.getcwd, _stat_mod.S_ISLNK
    fsdecode, fspath = os.fsdecode, os.fspath
    str_, bytes_, isinstance_, oserror = str, bytes, isinstance, OSError
    path_like = (str, bytes, os.PathLike)
    io_open = open

    def resolve(path) -> str:
        """``os.path.realpath`` from captured system calls only (nothing the submission can rebind)."""
        text = fsdecode(fspath(path)) if not isinstance_(path, str_) else path
        if not text.startswith("/"):
            text = getcwd() + "/" + text
        todo = text.split("/")
        todo.reverse()
        done: list[str] = []
        links = 0
        while todo:
            part = todo.pop()
            if part == "" or part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            here = "/" + "/".join(done + [part])
            try:
                mode = lstat(here).st_mode
            except oserror:
                done.append(part)
                continue
            if s_islnk(mode) and links < 40:
                links += 1
                target = readlink(here)
                if target.startswith("/"):
                    done = []
                rest = target.split("/")
                rest.reverse()
                todo.extend(rest)
            else:
                done.append(part)
        return "/" + "/".join(done)

    submission = resolve(submission_file)
    protected = tuple(resolve(p) for p in protected_paths if p)
    scratch_real = resolve(scratch) if scratch else None
    trusted_roots = roots if roots is not None else _library_roots()
    stdlib = _STDLIB
    banned = FORBIDDEN_IMPORTS + DSL_FOREIGN.get(dsl, ())
    banned_folders, banned_files = _package_places(banned)
    cache: dict[str, bool] = {}

    def is_stdlib(filename: str) -> bool:
        if filename.startswith("<frozen "):
            return True
        return (filename.startswith(stdlib) and "site-packages" not in filename
                and "dist-packages" not in filename)

    def trusted(filename: str) -> bool:
        """Library code (site-packages, the grader) as opposed to code the submission brought."""
        known = cache.get(filename)
        if known is None:
            if filename == submission or filename.startswith("<"):
                known = False
            else:
                real = resolve(filename)
                known = real != submission and real.startswith(trusted_roots)
            cache[filename] = known
        return known

    def blocked_module(name: str) -> str:
        """'always', 'submission' (torch's lazily imported compile packages) or '' (allowed)."""
        for b in TORCH_LAZY:
            if name == b or name.startswith(b + "."):
                return "submission"
        for b in banned:
            if name == b or name.startswith(b + "."):
                return "always"
        return ""

    lazy_folders, lazy_files = _package_places(TORCH_LAZY)

    def forbidden_code(filename: str) -> str:
        """'always' for module code of a forbidden package (its ``exec`` is an import of it),
        'submission' for torch's lazily loaded compile packages, '' for anything else."""
        if not filename or filename.startswith("<"):
            return ""
        real = resolve(filename)
        if real in lazy_files or real.startswith(lazy_folders):
            return "submission"
        return "always" if real in banned_files or real.startswith(banned_folders) else ""

    def is_protected(path) -> bool:
        real = resolve(path)
        for p in protected:
            if real == p or real.startswith(p + "/"):
                return True
        return False

    def in_scratch(path) -> bool:
        if scratch_real is None:
            return True
        real = resolve(path)
        return real == scratch_real or real.startswith(scratch_real + "/") or real == "/dev/null"

    def is_that_file(source, path: str) -> bool:
        """True when ``source`` is exactly the file's text (an import compiling the module's own file)."""
        if not isinstance_(source, (str_, bytes_)):
            return False
        try:
            with io_open(path, "rb") as fh:
                content = fh.read()
        except oserror:
            return False
        return content == (source.encode() if isinstance_(source, str_) else source)

    return SimpleNamespace(resolve=resolve, trusted=trusted, is_stdlib=is_stdlib, blocked_module=blocked_module,
                           forbidden_code=forbidden_code, is_protected=is_protected, in_scratch=in_scratch,
                           is_that_file=is_that_file, roots=trusted_roots, submission=submission,
                           path_like=path_like, scratch=scratch_real)


def install_guard(submission_file: str, protected_paths: list[str], dsl: str, report: Callable[[str, bool], None],
                  scratch: str | None = None, enforce: bool = True) -> Callable[[], None]:
    """Add the irremovable audit hook, disarmed; returns the function that arms it.

    ``report(text, hack)`` is called once on the first refusal and must not return (it records the
    reason where the grader reads it and ends the process: ``doorbell.Doorbell.refusal_reporter``).
    The returned ``arm`` is the only handle on the hook's switch; the caller drops it after use.
    ``enforce=False`` (the trusted reference worker) installs a hook that checks nothing: an event
    costs it the hook's call only, not the checks (the candidate's frame walk included), so the two
    workers pay alike only where a call raises no audited event. What a call raises, and what the
    armed hook adds to it, is measured by ``benchmarks/audit_events.py``.
    """
    policy = make_policy(submission_file, protected_paths, dsl, scratch)
    getframe, get_ident = sys._getframe, threading.get_ident
    getattr_, isinstance_, str_, int_, len_ = getattr, isinstance, str, int, len
    getpid, fsdecode, fspath = os.getpid, os.fsdecode, os.fspath
    resolve, trusted, is_stdlib = policy.resolve, policy.trusted, policy.is_stdlib
    blocked_module, forbidden_code = policy.blocked_module, policy.forbidden_code
    is_protected, in_scratch, is_that_file = policy.is_protected, policy.in_scratch, policy.is_that_file
    path_like, roots, submission = policy.path_like, policy.roots, policy.submission
    frame_attributes, submission_only, start_events = FRAME_ATTRIBUTES, SUBMISSION_ONLY_EVENTS, START_EVENTS
    file_change, write_flags, tampering = FILE_CHANGE_EVENTS, WRITE_FLAGS, TAMPERING
    state = {"armed": False}
    busy: set[int] = set()
    this_file = __file__

    def untrusted_origin() -> bool:
        """True when the nearest frame outside the standard library and this module is not library code."""
        frame = getframe(1)
        for _ in range(256):
            if frame is None:
                return False
            name = frame.f_code.co_filename
            if name != this_file and not is_stdlib(name):
                return not trusted(name)
            frame = frame.f_back
        return False

    def refuse(what: str, hack: bool = False) -> None:
        report(f"forbidden by the MetaKernelBench contract: {what}", hack)

    def check(event: str, args: tuple) -> None:
        if event == "import":
            which = blocked_module(str_(args[0])) if args else ""
            if which == "always" or (which == "submission" and untrusted_origin()):
                refuse(f"import of {args[0]}")
        elif event == "exec":
            code = args[0] if args else None
            filename = getattr_(code, "co_filename", None)
            which = forbidden_code(filename) if isinstance_(filename, str_) else ""
            if which == "always" or (which == "submission" and untrusted_origin()):
                refuse(f"running the code of a forbidden module ({filename})")
        elif event == FIND_SPEC_EVENT:
            if args and blocked_module(str_(args[0])) and untrusted_origin():
                refuse(f"import of {args[0]}")
        elif event == REFUSE_EVENT:
            text = str_(args[0]) if args else "a refusal"
            refuse(text, tampering in text)
        elif event == "open":
            path = args[0] if args else None
            if not isinstance_(path, path_like):
                return
            if is_protected(path):
                refuse(f"opening {resolve(path)}")
            mode, flags = (args[1] if len_(args) > 1 else None), (args[2] if len_(args) > 2 else 0)
            writing = (isinstance_(mode, str_) and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)) or \
                      (isinstance_(flags, int_) and flags & write_flags)
            if writing and not in_scratch(path) and not resolve(path).startswith("/dev/") and untrusted_origin():
                refuse(f"writing {resolve(path)} (outside the evaluation's scratch folder)")
        elif event == "object.__getattr__":
            if len_(args) > 1 and args[1] in frame_attributes and untrusted_origin():
                refuse(f"frame introspection ({args[1]})")
        elif event == "object.__setattr__" and len_(args) > 1:
            owner = str_(getattr_(args[0], "__module__", "") or "")
            code = getattr_(args[0], "__code__", None)
            library_function = code is not None and trusted(str_(getattr_(code, "co_filename", "<?>")))
            if owner.startswith("metakernelbench.") or (
                    args[1] in ("__code__", "__globals__", "__defaults__", "__kwdefaults__", "__closure__")
                    and (owner.startswith("torch") or library_function)):
                refuse(f"{tampering} ({getattr_(args[0], '__qualname__', '?')}.{args[1]})", True)
        elif event == "compile":
            filename = args[1] if len_(args) > 1 else None
            if not isinstance_(filename, str_) or filename.startswith("<") or not untrusted_origin():
                return
            real = resolve(filename)
            if real.startswith(roots) and real != submission and not is_that_file(args[0], real):
                refuse(f"compiling code under a library's file name ({filename})")
        elif event == "os.kill" or event == "os.killpg":
            if event == "os.killpg" or (args and args[0] != getpid()):
                refuse(f"{event} of another process ({args[0] if args else '?'})")
        elif event in start_events or event.startswith("os.exec") or event.startswith("os.spawn") \
                or event in submission_only:
            if untrusted_origin():
                refuse(event)
        elif event in file_change:
            paths = [a for a in args if isinstance_(a, path_like)]
            if event in ("shutil.copyfile", "os.link", "os.symlink"):
                paths = paths[-1:]  # only the destination changes
            for path in paths:
                if not in_scratch(path) and untrusted_origin():
                    refuse(f"{event} outside the scratch folder ({fsdecode(fspath(path))})")

    def hook(event: str, args: tuple) -> None:
        if not state["armed"]:
            return
        me = get_ident()
        if me in busy:  # the checks' own frame reads and file opens raise events of their own
            return
        busy.add(me)
        try:
            check(event, args)
        finally:
            busy.discard(me)

    def no_checks(event: str, args: tuple) -> None:
        if not state["armed"]:
            return
        me = get_ident()
        if me in busy:
            return
        busy.add(me)
        busy.discard(me)

    sys.addaudithook(hook if enforce else no_checks)
    sys.meta_path.insert(0, ImportGate())

    def arm() -> None:
        state["armed"] = True

    return arm


class ImportGate:
    """A meta-path finder that asks the audit hook about every module imported through importlib.

    ``importlib.import_module`` (and so ``pkgutil.resolve_name``, ``runpy``, ``pydoc.locate``...)
    raises no ``import`` audit event, but every import asks the meta-path finders. The gate holds
    no state: it raises ``FIND_SPEC_EVENT`` and the hook refuses requests whose nearest
    non-standard-library caller is the submission (libraries probing for optional packages with
    ``importlib.util.find_spec`` are not). Removing the gate changes nothing the verdict rests on:
    the module's code is refused when it runs (the ``exec`` event).
    """

    def find_spec(self, name, path=None, target=None, _audit=sys.audit):
        _audit(FIND_SPEC_EVENT, name)
        return None


def thread_count() -> int:
    """Threads of this process, Python-level and native (the kernel's view)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def thread_ids() -> set[int]:
    """The ids of this process's threads (empty where ``/proc`` is missing)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def describe_threads(tids: set[int]) -> str:
    """Each thread's name (``comm``, which any code can set: for a message, never for a verdict)."""
    names = []
    for tid in sorted(tids):
        try:
            with open(f"/proc/self/task/{tid}/comm") as fh:
                names.append(f"{tid} {fh.read().strip()!r}")
        except OSError:
            names.append(f"{tid} (ended)")
    return ", ".join(names)
