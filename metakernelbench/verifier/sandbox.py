"""Operating-system limits on the candidate's worker, set after the DSL stack is loaded.

Python-level guards recognise the submission by its frames, which code the submission writes to a
file, compiles from a string or loads from elsewhere can step around. The limits here do not look at
frames at all: once they are set, *everything* that runs in the process is held to them, the
submission and every library it calls alike.

- ``seccomp``: no new process (``fork``, ``vfork``, ``execve``, ``clone`` without ``CLONE_THREAD``;
  ``clone3`` answers ``ENOSYS`` so the C library falls back to ``clone``, whose flags the filter can
  read), no signal to any other process (``kill``/``tgkill``/``rt_sigqueueinfo`` only to this
  process), no ``ptrace``, no reading or writing another process's memory, no ``io_uring``.
- ``landlock``: files may be created, written, truncated, renamed or removed only under the
  evaluation's scratch folder (plus writes to the NVIDIA device nodes, which the CUDA driver opens
  as it goes, ``/dev/null`` and friends, and existing shared-memory files). A ``.pth`` file
  dropped into site-packages, a poisoned cache or a rewritten problem file are refused by the
  kernel, whatever code asks.
- ``PR_SET_PDEATHSIG``: the worker dies with the grader.

Native libraries are checked after every call (``new_native_mappings``): an executable file mapping
that was not there before the submission was imported and does not lie inside an installed library
folder means native code was loaded from somewhere else.

What this cannot see: code that runs in threads the process had before the limits were set is
restricted by seccomp (``TSYNC``) but by landlock only where the kernel offers thread sync (ABI 8);
the submission's Python runs on the main thread, which is always restricted.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys
import sysconfig
from dataclasses import dataclass, field

# --- seccomp -------------------------------------------------------------------------------------
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
SYS_SECCOMP = 317
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
SECCOMP_FILTER_FLAG_SPEC_ALLOW = 4
AUDIT_ARCH_X86_64 = 0xC000003E
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
CLONE_THREAD = 0x00010000

# x86-64 syscall numbers
NR = {"clone": 56, "fork": 57, "vfork": 58, "execve": 59, "kill": 62, "ptrace": 101,
      "rt_sigqueueinfo": 129, "tkill": 200, "tgkill": 234, "rt_tgsigqueueinfo": 297,
      "process_vm_readv": 310, "process_vm_writev": 311, "execveat": 322, "pidfd_send_signal": 424,
      "io_uring_setup": 425, "pidfd_open": 434, "clone3": 435, "pidfd_getfd": 438}
DENIED = ("fork", "vfork", "execve", "execveat", "ptrace", "tkill", "process_vm_readv",
          "process_vm_writev", "pidfd_send_signal", "pidfd_open", "pidfd_getfd", "io_uring_setup")
SELF_ONLY = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")  # first argument is a pid

# classic BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
X32_SYSCALL_BIT = 0x40000000
OFF_NR, OFF_ARCH, OFF_ARG0 = 0, 4, 16


class SandboxError(RuntimeError):
    """The limits could not be set where they must be (an infrastructure fault, never the kernel's)."""


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k & 0xFFFFFFFF)


def seccomp_program(pid: int) -> bytes:
    """The filter, as raw ``sock_filter`` instructions (exposed for the tests)."""
    eperm, enosys = SECCOMP_RET_ERRNO | errno.EPERM, SECCOMP_RET_ERRNO | errno.ENOSYS
    # another architecture's calling convention (int 0x80) or the x32 ABI: refused outright
    prog: list[bytes] = [_insn(LD_W_ABS, 0, 0, OFF_ARCH), _insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
                         _insn(RET_K, 0, 0, eperm), _insn(LD_W_ABS, 0, 0, OFF_NR),
                         _insn(JGE_K, 0, 1, X32_SYSCALL_BIT), _insn(RET_K, 0, 0, eperm)]
    for name in DENIED:
        prog += [_insn(JEQ_K, 0, 1, NR[name]), _insn(RET_K, 0, 0, eperm)]
    prog += [_insn(JEQ_K, 0, 1, NR["clone3"]), _insn(RET_K, 0, 0, enosys)]
    # clone: a thread (CLONE_THREAD set) is allowed, anything else is a new process
    prog += [_insn(JEQ_K, 0, 4, NR["clone"]), _insn(LD_W_ABS, 0, 0, OFF_ARG0),
             _insn(JSET_K, 1, 0, CLONE_THREAD), _insn(RET_K, 0, 0, eperm),
             _insn(RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    for name in SELF_ONLY:
        prog += [_insn(JEQ_K, 0, 4, NR[name]), _insn(LD_W_ABS, 0, 0, OFF_ARG0),
                 _insn(JEQ_K, 1, 0, pid), _insn(RET_K, 0, 0, eperm), _insn(RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    prog.append(_insn(RET_K, 0, 0, SECCOMP_RET_ALLOW))
    return b"".join(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def install_seccomp(libc, spec_allow: bool = True) -> None:
    """Install the filter on every thread of this process.

    ``spec_allow``: by default (``spec_store_bypass_disable=seccomp`` and ``spectre_v2_user=seccomp``,
    the defaults of many kernels before 5.16) a filtered process is also forced into the speculation
    mitigations for untrusted code running *inside* it (store-bypass disable, indirect-branch
    barriers), which makes its Python dispatch markedly slower than a user's plain process -- an
    extra cost in every timed call. Those mitigations protect a process from code in its own
    address space; here the submission is the only untrusted code in the worker and nothing secret
    is in it, so the filter is installed with ``SECCOMP_FILTER_FLAG_SPEC_ALLOW`` (kernels without
    the flag answer EINVAL and get the plain filter).
    """
    program = seccomp_program(os.getpid())
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    flags = SECCOMP_FILTER_FLAG_TSYNC | (SECCOMP_FILTER_FLAG_SPEC_ALLOW if spec_allow else 0)
    if libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(fprog)) == 0:
        return
    if spec_allow and ctypes.get_errno() == errno.EINVAL:
        return install_seccomp(libc, spec_allow=False)
    raise SandboxError(f"seccomp filter refused: {os.strerror(ctypes.get_errno())}")


# --- landlock ------------------------------------------------------------------------------------
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RESTRICT_SELF_TSYNC = 1 << 3  # ABI 8
FS_WRITE_FILE, FS_TRUNCATE = 1 << 1, 1 << 14
# every right that changes the file system (reading and executing stay unrestricted)
FS_CHANGE_V1 = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))
FS_REFER, FS_TRUNCATE_BIT = 1 << 13, 1 << 14


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi(libc=None) -> int:
    libc = libc or _libc()
    version = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def install_landlock(libc, writable: list[str], device_dirs: list[str]) -> int:
    """Restrict file-system changes to ``writable`` (and writes of existing files under ``device_dirs``)."""
    abi = landlock_abi(libc)
    if abi < 1:
        return 0
    handled = FS_CHANGE_V1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE_BIT if abi >= 3 else 0)
    attr = _RulesetAttr(handled)
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise SandboxError(f"landlock ruleset refused: {os.strerror(ctypes.get_errno())}")
    try:
        rules = [(p, handled) for p in writable] + \
                [(p, FS_WRITE_FILE | (FS_TRUNCATE_BIT if abi >= 3 else 0)) for p in device_dirs]
        for path, access in rules:
            if not os.path.exists(path):
                continue
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(access, fd)
                if libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule),
                                ctypes.c_uint32(0)) != 0:
                    raise SandboxError(f"landlock rule for {path} refused: {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
        flags = LANDLOCK_RESTRICT_SELF_TSYNC if abi >= 8 else 0
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(flags)) != 0:
            raise SandboxError(f"landlock restriction refused: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi


def device_nodes() -> list[str]:
    """Device files a worker may write: the NVIDIA driver's, the harmless character devices, and
    existing files under ``/dev/shm`` (CUDA tensors shared by the grader come with a reference
    counter there, which the receiving side must open for writing). Nothing can be *created* there,
    and the timing doorbell's file is unlinked before the submission is imported.
    """
    import glob

    nodes = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/shm"]
    return nodes + sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*"))


# --- native code -----------------------------------------------------------------------------------
def executable_mappings() -> set[str]:
    """Files mapped executable into this process (``/proc/self/maps``)."""
    found: set[str] = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and "x" in parts[1] and parts[5].strip() and not parts[5].startswith("["):
                    found.add(parts[5].strip())
    except OSError:
        pass
    return found


def installed_roots(exclude: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Folders whose native libraries count as installed: the interpreter's, the system's, and every
    folder on ``sys.path`` when the limits are set (a DSL installed on ``PYTHONPATH`` loads its runtime
    libraries from there), except ``exclude`` (the scratch folder, the submission's folder)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr", "/lib", "/lib64", "/opt", "/usr/local"}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        roots.add(sysconfig.get_paths()[key])
    roots.update(p for p in sys.path if p and os.path.isdir(p))
    excluded = tuple(os.path.realpath(e) for e in exclude if e)
    real = {os.path.realpath(r) for r in roots if r}
    kept = [r for r in real if not any(r == e or r.startswith(e + os.sep) or e.startswith(r + os.sep)
                                       for e in excluded)]
    return tuple(sorted(r + os.sep for r in kept))


@dataclass
class Sandbox:
    """What was set for this worker, and the native baseline taken before the submission ran."""

    scratch: str
    seccomp: bool = False
    landlock_abi: int = 0
    baseline_maps: set[str] = field(default_factory=set)
    roots: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)

    def new_native_mappings(self) -> list[str]:
        """Executable file mappings added since the baseline that lie outside every installed folder."""
        scratch = os.path.realpath(self.scratch) + os.sep
        out = []
        for path in executable_mappings() - self.baseline_maps:
            real = path.removesuffix(" (deleted)")
            inside = real.startswith(self.roots) and not real.startswith(scratch)
            if not inside:
                out.append(path)
        return sorted(out)

    def summary(self) -> str:
        parts = [f"seccomp={'on' if self.seccomp else 'off'}",
                 f"landlock={'abi ' + str(self.landlock_abi) if self.landlock_abi else 'off'}"]
        parts += [f"{k}={v}" for k, v in speculation_state().items()]
        return ", ".join(parts + self.notes)


def speculation_state() -> dict[str, str]:
    """This process's speculation mitigations as the kernel reports them (``/proc/self/status``):
    a grade records them, since a forced mitigation slows the submission's host code."""
    found = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("Speculation_Store_Bypass", "SpeculationIndirectBranch"):
                    found[key.lower()] = value.strip().replace(" ", "-")
    except OSError:
        pass
    return found


def enter(scratch: str, require: bool = False, submission: str = "", spec_allow: bool = True) -> Sandbox:
    """Set the limits for the rest of this process's life; ``require`` turns an unavailable limit
    into ``SandboxError`` instead of a note in the result."""
    box = Sandbox(scratch=scratch, roots=installed_roots((scratch, os.path.dirname(submission) if submission else "")))
    box.baseline_maps = executable_mappings()
    if sys.platform != "linux":
        box.notes.append(f"no OS limits on {sys.platform}")
        if require:
            raise SandboxError(box.notes[-1])
        return box
    libc = _libc()
    libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SandboxError(f"no_new_privs refused: {os.strerror(ctypes.get_errno())}")
    try:
        box.landlock_abi = install_landlock(libc, [scratch], device_nodes())
    except SandboxError as exc:
        box.notes.append(str(exc))
    if not box.landlock_abi:
        box.notes.append("landlock unavailable: file writes limited by the audit hook only")
    if platform.machine() == "x86_64":
        install_seccomp(libc, spec_allow)
        box.seccomp = True
    else:
        box.notes.append(f"seccomp filter not built for {platform.machine()}")
    if require and (not box.seccomp or not box.landlock_abi):
        raise SandboxError("; ".join(box.notes))
    return box
