"""Operating-system limits on the candidate's worker, set after the DSL stack is loaded.

Python-level guards recognise the submission by its frames, which code the submission writes to a
file, compiles from a string or loads from elsewhere can step around. The limits here do not look at
frames at all: once they are set, *everything* that runs in the process is held to them, the
submission and every library it calls alike, native code included.

- ``seccomp``: no new process (``fork``, ``vfork``, ``execve``, ``clone`` without ``CLONE_THREAD``;
  ``clone3`` answers ``ENOSYS`` so the C library falls back to ``clone``, whose flags the filter can
  read), no signal to any other process (``kill``/``tgkill``/``rt_sigqueueinfo`` only to this
  process), no ``ptrace``, no reading or writing another process's memory, no ``io_uring``, no
  ``userfaultfd``, no ``READ_IMPLIES_EXEC`` personality, and no seccomp filter but the prepared
  executable-memory seal (below).
- ``landlock``: files may be created, written, truncated, renamed or removed only under the
  evaluation's scratch folder (plus writes to the NVIDIA device nodes, which the CUDA driver opens
  as it goes, ``/dev/null`` and friends, and existing shared-memory files). A ``.pth`` file
  dropped into site-packages, a poisoned cache or a rewritten problem file are refused by the
  kernel, whatever code asks. With ``unreadable`` (the problem folder, the folder that holds every
  evaluation's scratch, the grader's folders) those folders cannot be read or listed either
  (``read_cover``): a library's native ``open`` raises no audit event, the kernel refuses it anyway.
- ``seal_executable_memory``: once the DSL has compiled (the first call), a second filter refuses
  every new anonymous or writable executable mapping, ``mprotect`` to executable, executable SysV
  shared memory and ``memfd_create``. From then on the only new machine code that can run is in a
  file mapped read-only, which shows up by name in ``/proc/<pid>/maps``. The grader sees the seal
  from outside (``seccomp_filter_count``), and since the first filter admits no other filter than
  the seal's own, immutable program, a higher count can only mean the seal.
- ``PR_SET_PDEATHSIG``: the worker dies with the grader; no capabilities (a worker started as root
  could otherwise load a kernel module or read a raw disk, around every limit above).

Native libraries are checked after every call (``new_native_mappings``): an executable file mapping
that was not there before the submission was imported and does not lie inside an installed library
folder means native code was loaded from somewhere else.

What this cannot see: code that runs in threads the process had before the limits were set is
restricted by seccomp (``TSYNC``) but by landlock only where the kernel offers thread sync (ABI 8);
the submission's Python runs on the main thread, which is always restricted. Executable memory
made before the seal (during the first call, while the DSL's JIT is allowed to make it) stays
usable afterwards.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import struct
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "AUDIT_ARCH_X86_64", "CLONE_THREAD", "DENIED", "FS_CHANGE_V1", "FS_EXECUTE", "FS_FILE_RIGHTS", "FS_READ",
    "FS_READ_DIR", "FS_READ_FILE", "FS_REFER", "FS_TRUNCATE", "FS_TRUNCATE_BIT", "FS_WRITE_FILE", "JEQ_K", "JGE_K",
    "JSET_K", "LANDLOCK_CREATE_RULESET_VERSION", "LANDLOCK_RESTRICT_SELF_TSYNC", "LANDLOCK_RULE_PATH_BENEATH",
    "LD_W_ABS", "LINUX_CAPABILITY_VERSION_3", "MAP_ANONYMOUS", "MAP_PRIVATE", "NR", "OFF_ARCH", "OFF_ARG0", "OFF_NR",
    "PERSONALITY_QUERY", "PROT_EXEC", "PROT_READ", "PROT_WRITE", "PR_CAPBSET_DROP", "PR_CAP_AMBIENT",
    "PR_CAP_AMBIENT_CLEAR_ALL", "PR_SET_NO_NEW_PRIVS", "PR_SET_PDEATHSIG", "PR_SET_SECCOMP", "READ_IMPLIES_EXEC",
    "RET_K", "SEALED_OUT", "SECCOMP_FILTER_FLAG_SPEC_ALLOW", "SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_RET_ALLOW",
    "SECCOMP_RET_ERRNO", "SECCOMP_SET_MODE_FILTER", "SELF_ONLY", "SHM_EXEC", "SYS_CAPSET", "SYS_LANDLOCK_ADD_RULE",
    "SYS_LANDLOCK_CREATE_RULESET", "SYS_LANDLOCK_RESTRICT_SELF", "SYS_MSEAL", "SYS_SECCOMP", "Sandbox",
    "SandboxError", "X32_SYSCALL_BIT", "device_nodes", "drop_capabilities", "enter", "executable_mappings",
    "install_landlock", "install_seccomp", "installed_roots", "landlock_abi", "landlock_read_rules", "load_libc",
    "mount_aliases", "read_cover", "seal_executable_memory", "seal_program", "seccomp_filter_count",
    "seccomp_program", "speculation_state",
]

# --- seccomp -------------------------------------------------------------------------------------
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SYS_SECCOMP = 317
SYS_MSEAL = 462
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
SECCOMP_FILTER_FLAG_SPEC_ALLOW = 4
AUDIT_ARCH_X86_64 = 0xC000003E
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
CLONE_THREAD = 0x00010000
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20
SHM_EXEC = 0o100000
READ_IMPLIES_EXEC = 0x0400000
PERSONALITY_QUERY = 0xFFFFFFFF

# x86-64 syscall numbers
NR = {"mmap": 9, "mprotect": 10, "shmat": 30, "clone": 56, "fork": 57, "vfork": 58, "execve": 59,
      "kill": 62, "ptrace": 101, "rt_sigqueueinfo": 129, "personality": 135, "prctl": 157, "tkill": 200,
      "tgkill": 234, "rt_tgsigqueueinfo": 297, "process_vm_readv": 310, "process_vm_writev": 311,
      "seccomp": 317, "memfd_create": 319, "execveat": 322, "userfaultfd": 323, "pkey_mprotect": 329,
      "pidfd_send_signal": 424, "io_uring_setup": 425, "pidfd_open": 434, "clone3": 435,
      "pidfd_getfd": 438, "memfd_secret": 447}
# userfaultfd: a fault handler can fill a read-only executable page (a private /dev/zero mapping,
# which the seal cannot tell from a library's) with any bytes, so no process here may own one
DENIED = ("fork", "vfork", "execve", "execveat", "ptrace", "tkill", "process_vm_readv",
          "process_vm_writev", "pidfd_send_signal", "pidfd_open", "pidfd_getfd", "io_uring_setup",
          "userfaultfd")
SELF_ONLY = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")  # first argument is a pid
# after the seal: no file descriptor whose memory can be mapped executable and written through a
# second mapping (a memfd's mapping would still show in /proc/<pid>/maps, but by no installed name)
SEALED_OUT = ("memfd_create", "memfd_secret", "userfaultfd", "seccomp")

# classic BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
X32_SYSCALL_BIT = 0x40000000
OFF_NR, OFF_ARCH, OFF_ARG0 = 0, 4, 16


class SandboxError(RuntimeError):
    """The limits could not be set where they must be (an infrastructure fault, never the kernel's)."""


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _assemble(items: list) -> bytes:
    """Classic BPF from instructions whose jump targets may be label names (strings in ``items``
    mark where a label is); offsets are counted here rather than by hand, since one miscounted
    offset silently allows a syscall."""
    labels, pos = {}, 0
    for item in items:
        if isinstance(item, str):
            labels[item] = pos
        else:
            pos += 1
    out, pos = [], 0
    for item in items:
        if isinstance(item, str):
            continue
        code, jt, jf, k = item
        jt, jf = (t if isinstance(t, int) else labels[t] - pos - 1 for t in (jt, jf))
        out.append(_insn(code, jt, jf, k))
        pos += 1
    return b"".join(out)


def _ld(offset: int) -> tuple:
    return (LD_W_ABS, 0, 0, offset)


def _ret(value: int) -> tuple:
    return (RET_K, 0, 0, value)


def _arg(i: int, high: bool = False) -> int:
    """Offset of the low (or high) 32 bits of syscall argument ``i`` in ``struct seccomp_data``."""
    return OFF_ARG0 + 8 * i + (4 if high else 0)


def _personality_rule() -> list:
    """``personality(READ_IMPLIES_EXEC)`` makes the kernel add ``PROT_EXEC`` to every readable
    mapping *after* the filter has seen the arguments, which would turn an allowed read-write
    anonymous mapping into an executable one; only queries and personalities without it pass."""
    return [(JEQ_K, 0, "not_personality", NR["personality"]), _ld(_arg(0)),
            (JEQ_K, "allow", 0, PERSONALITY_QUERY), (JSET_K, "deny", "allow", READ_IMPLIES_EXEC),
            "not_personality"]


def seccomp_program(pid: int, seal_at: int | None = None) -> bytes:
    """The filter, as raw ``sock_filter`` instructions (exposed for the tests).

    ``seal_at``: the address of the prepared seal (``_SealPage``). The filter then lets ``seccomp``
    install a filter only from that address, with thread sync, and refuses ``prctl(PR_SET_SECCOMP)``:
    no other filter can be added, so the count the grader reads from outside can only grow by the seal.
    """
    eperm, enosys = SECCOMP_RET_ERRNO | errno.EPERM, SECCOMP_RET_ERRNO | errno.ENOSYS
    # another architecture's calling convention (int 0x80) or the x32 ABI: refused outright
    prog: list = [_ld(OFF_ARCH), (JEQ_K, 1, 0, AUDIT_ARCH_X86_64), _ret(eperm), _ld(OFF_NR),
                  (JGE_K, 0, 1, X32_SYSCALL_BIT), _ret(eperm)]
    for name in DENIED:
        prog += [(JEQ_K, 0, 1, NR[name]), _ret(eperm)]
    prog += [(JEQ_K, 0, 1, NR["clone3"]), _ret(enosys)]
    # clone: a thread (CLONE_THREAD set) is allowed, anything else is a new process
    prog += [(JEQ_K, 0, "not_clone", NR["clone"]), _ld(_arg(0)), (JSET_K, "allow", "deny", CLONE_THREAD),
             "not_clone"]
    for name in SELF_ONLY:
        prog += [(JEQ_K, 0, f"not_{name}", NR[name]), _ld(_arg(0)), (JEQ_K, "allow", "deny", pid), f"not_{name}"]
    prog += _personality_rule()
    if seal_at is not None:
        prog += [(JEQ_K, 0, "not_prctl", NR["prctl"]), _ld(_arg(0)), (JEQ_K, "deny", "allow", PR_SET_SECCOMP),
                 "not_prctl",
                 (JEQ_K, 0, "not_seccomp", NR["seccomp"]), _ld(_arg(0)),
                 (JEQ_K, 0, "allow", SECCOMP_SET_MODE_FILTER), _ld(_arg(1)),
                 (JEQ_K, "synced", 0, SECCOMP_FILTER_FLAG_TSYNC),
                 (JEQ_K, 0, "deny", SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_SPEC_ALLOW), "synced",
                 _ld(_arg(2)), (JEQ_K, 0, "deny", seal_at & 0xFFFFFFFF),
                 _ld(_arg(2, high=True)), (JEQ_K, "allow", "deny", seal_at >> 32), "not_seccomp"]
    prog += ["allow", _ret(SECCOMP_RET_ALLOW), "deny", _ret(eperm)]
    return _assemble(prog)


def seal_program() -> bytes:
    """The executable-memory seal, stacked on the first filter once the DSL has compiled.

    Refused: ``mmap`` asking for ``PROT_EXEC`` together with ``MAP_ANONYMOUS`` or ``PROT_WRITE``
    (fresh machine code, or a file mapping it could be written through), any ``mprotect`` or
    ``pkey_mprotect`` with ``PROT_EXEC`` (the filter cannot see what a range had, so it cannot
    tell adding from keeping), ``shmat`` with ``SHM_EXEC``, ``READ_IMPLIES_EXEC``, and the calls in
    ``SEALED_OUT``. A library loaded later still maps its code read-only from its file, which is all
    ``dlopen`` needs; a library that asks for an executable stack or carries text relocations fails
    to load.
    """
    eperm = SECCOMP_RET_ERRNO | errno.EPERM
    prog: list = [_ld(OFF_ARCH), (JEQ_K, 1, 0, AUDIT_ARCH_X86_64), _ret(eperm), _ld(OFF_NR)]
    prog += [(JEQ_K, "mmap", 0, NR["mmap"]), (JEQ_K, "prot", 0, NR["mprotect"]),
             (JEQ_K, "prot", 0, NR["pkey_mprotect"]), (JEQ_K, "shmat", 0, NR["shmat"]),
             (JEQ_K, "prctl", 0, NR["prctl"])]
    prog += [(JEQ_K, "deny", 0, NR[name]) for name in SEALED_OUT]
    prog += _personality_rule()
    prog += [_ret(SECCOMP_RET_ALLOW),
             "mmap", _ld(_arg(2)), (JSET_K, 0, "allow", PROT_EXEC), (JSET_K, "deny", 0, PROT_WRITE),
             _ld(_arg(3)), (JSET_K, "deny", "allow", MAP_ANONYMOUS),
             "prot", _ld(_arg(2)), (JSET_K, "deny", "allow", PROT_EXEC),
             "shmat", _ld(_arg(2)), (JSET_K, "deny", "allow", SHM_EXEC),
             "prctl", _ld(_arg(0)), (JEQ_K, "deny", "allow", PR_SET_SECCOMP),
             "allow", _ret(SECCOMP_RET_ALLOW), "deny", _ret(eperm)]
    return _assemble(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_libc():
    """The C library, with errno kept: prctl, seccomp and landlock have no Python binding."""
    return ctypes.CDLL(None, use_errno=True)


def install_seccomp(libc, spec_allow: bool = True, seal_at: int | None = None) -> int:
    """Install the filter on every thread of this process; returns the flags it was installed with.

    ``spec_allow``: by default (``spec_store_bypass_disable=seccomp`` and ``spectre_v2_user=seccomp``,
    the defaults of many kernels before 5.16) a filtered process is also forced into the speculation
    mitigations for untrusted code running *inside* it (store-bypass disable, indirect-branch
    barriers), which makes its Python dispatch markedly slower than a user's plain process -- an
    extra cost in every timed call. Those mitigations protect a process from code in its own
    address space; here the submission is the only untrusted code in the worker and nothing secret
    is in it, so the filter is installed with ``SECCOMP_FILTER_FLAG_SPEC_ALLOW`` (kernels without
    the flag answer EINVAL and get the plain filter).
    """
    program = seccomp_program(os.getpid(), seal_at)
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    flags = SECCOMP_FILTER_FLAG_TSYNC | (SECCOMP_FILTER_FLAG_SPEC_ALLOW if spec_allow else 0)
    if libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(fprog)) == 0:
        return flags
    if spec_allow and ctypes.get_errno() == errno.EINVAL:
        return install_seccomp(libc, spec_allow=False, seal_at=seal_at)
    raise SandboxError(f"seccomp filter refused: {os.strerror(ctypes.get_errno())}")


@dataclass(frozen=True)
class _SealPage:
    """The seal's ``sock_fprog`` and program in one page of their own, read-only and, where the
    kernel has ``mseal``, immutable: the first filter admits a new filter only from this address, so
    a submission can neither install a filter of its own nor rewrite the seal into one."""

    address: int
    immutable: bool


# (page, flags, filters right after enter) prepared by enter(); only the worker's convenience: the
# grader trusts the page's address, which the first filter holds, and the count it reads itself
_SEAL: list[tuple[_SealPage, int, int]] = []


def _mmap_fn(libc):
    fn = libc.mmap
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    return fn


def _prepare_seal(libc) -> _SealPage:
    program = seal_program()
    size = os.sysconf("SC_PAGE_SIZE")
    page = _mmap_fn(libc)(None, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if page in (None, ctypes.c_void_p(-1).value):
        raise SandboxError(f"no page for the seal: {os.strerror(ctypes.get_errno())}")
    header = ctypes.sizeof(_SockFprog)
    ctypes.memmove(page + header, program, len(program))
    _SockFprog.from_address(page).len = len(program) // 8
    _SockFprog.from_address(page).filter = page + header
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(ctypes.c_void_p(page), ctypes.c_size_t(size), PROT_READ) != 0:
        raise SandboxError(f"seal page stays writable: {os.strerror(ctypes.get_errno())}")
    sealed = libc.syscall(SYS_MSEAL, ctypes.c_void_p(page), ctypes.c_size_t(size), ctypes.c_ulong(0)) == 0
    return _SealPage(page, sealed)


def _filters_of(status_path: str) -> int | None:
    try:
        with open(status_path) as fh:
            for line in fh:
                if line.startswith("Seccomp_filters:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def seccomp_filter_count(pid: int) -> int:
    """How many seccomp filters every thread of process ``pid`` has (the fewest over its threads),
    read from ``/proc`` by anyone outside the process: the grader's proof that the seal is in place.

    The first filter admits no filter but the seal (``seccomp_program``), so a count one higher than
    right after ``enter`` means sealed, whatever the code inside the process did. The minimum over
    threads, because a filter installed on one thread only would leave the others unsealed (the
    first filter requires thread sync anyway). ``SandboxError`` where the kernel does not report it
    (before Linux 5.9) or the process is gone.
    """
    counts = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tasks = []
    for tid in tasks:
        found = _filters_of(f"/proc/{pid}/task/{tid}/status")
        if found is not None:
            counts.append(found)
    if not counts:
        found = _filters_of(f"/proc/{pid}/status")
        if found is None:
            raise SandboxError(f"no seccomp filter count for process {pid}")
        counts.append(found)
    return min(counts)


def seal_executable_memory() -> None:
    """Refuse new executable memory in this process from now on (``seal_program``), every thread.

    Called once the DSL has compiled the submission's kernels: its JIT writes host code into
    anonymous executable memory during the first call, and nothing honest needs to afterwards.
    Without ``enter`` (tests) the seal is prepared here. ``SandboxError`` if the kernel refuses it;
    the grader confirms it from outside with ``seccomp_filter_count`` either way, since code in this
    process can replace this function.
    """
    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise SandboxError(f"no executable-memory seal on {sys.platform}/{platform.machine()}")
    libc = load_libc()
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SandboxError(f"no_new_privs refused: {os.strerror(ctypes.get_errno())}")
    if not _SEAL:
        _SEAL.append((_prepare_seal(libc), SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_SPEC_ALLOW,
                      seccomp_filter_count(os.getpid())))
    page, flags, at_enter = _SEAL[0]
    for attempt in (flags, SECCOMP_FILTER_FLAG_TSYNC):
        if libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, attempt, ctypes.c_void_p(page.address)) == 0:
            return
        if ctypes.get_errno() != errno.EINVAL:
            break
    error = ctypes.get_errno()
    if error == errno.EPERM and seccomp_filter_count(os.getpid()) > at_enter:
        return  # sealed already (the seal refuses a second one): by the submission's own hand, say
    raise SandboxError(f"executable-memory seal refused: {os.strerror(error)}")


# --- landlock ------------------------------------------------------------------------------------
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RESTRICT_SELF_TSYNC = 1 << 3  # ABI 8
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR, FS_TRUNCATE = 1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 14
# every right that changes the file system
FS_CHANGE_V1 = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))
FS_REFER, FS_TRUNCATE_BIT = 1 << 13, 1 << 14
FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# the rights a rule on a file (not a folder) may carry; landlock refuses folder rights there
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE_BIT


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi(libc=None) -> int:
    libc = libc or load_libc()
    version = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _unescape(field: str) -> str:
    r"""A path as ``/proc/self/mountinfo`` writes it (space, tab, newline, backslash as ``\ooo``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mounts() -> list[tuple[str, str, str]]:
    """(device, root inside the file system, mount point) of every mount, in mount order."""
    found = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 5:
                    found.append((parts[2], _unescape(parts[3]), _unescape(parts[4])))
    except OSError:
        pass
    return found


def _beneath(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def mount_aliases(path: str, mounts: list[tuple[str, str, str]] | None = None) -> set[str]:
    """Every other path under which the folder at ``path`` (a real path) is mounted too.

    A landlock rule covers what lies beneath its folder *along the path the access takes*, so a bind
    mount of the problem folder (or of a folder above it) beneath a readable folder would open it
    again; each alias is protected like the path itself.
    """
    mounts = _mounts() if mounts is None else mounts
    here = None
    for mount in mounts:  # the last mount at the longest mount point is the one that is visible
        if _beneath(path, mount[2]) and (here is None or len(mount[2]) >= len(here[2])):
            here = mount
    if here is None:
        return set()
    dev, root, point = here
    inside = os.path.normpath(os.path.join(root, os.path.relpath(path, point)))
    aliases = set()
    for other_dev, other_root, other_point in mounts:
        if other_dev != dev or (other_root, other_point) == (root, point):
            continue
        if _beneath(inside, other_root):
            aliases.add(os.path.normpath(os.path.join(other_point, os.path.relpath(inside, other_root))))
        elif _beneath(other_root, inside):  # a part of the protected folder mounted elsewhere
            aliases.add(other_point)
    aliases.discard(path)
    return aliases


def read_cover(unreadable: Iterable[str]) -> tuple[list[str], list[str]]:
    """The folders and files to grant reading so that everything but ``unreadable`` stays readable.

    Landlock only grants, and a right granted on a folder holds for everything beneath it. So
    reading is granted to every entry that is neither protected nor on the way to a protected path,
    walking down from ``/``: at each folder above a protected path, its other entries (each a whole
    subtree). The folders on the way get nothing themselves: ``READ_DIR`` on one of them would hold
    for the protected folders beneath it too and list their contents, so they cannot be listed
    (opening something inside them by name still works; landlock does not limit path lookup). A
    file or folder created later in one of them is unreadable too -- another evaluation's scratch
    folder, made after this one started, included. Symbolic links are skipped (the kernel checks
    the file they lead to, which the cover already decides on) and protected paths are taken as
    real paths, with their bind-mount aliases (``mount_aliases``). Returns (granted, protected).
    """
    mounts = _mounts()
    protected: set[str] = set()
    for path in unreadable:
        if path:
            real = os.path.realpath(path)
            protected |= {real} | mount_aliases(real, mounts)
    on_the_way: set[str] = set()
    for path in protected:
        while path != "/":
            path = os.path.dirname(path)
            on_the_way.add(path)
    granted = []
    for folder in sorted(on_the_way):
        if any(_beneath(folder, p) for p in protected):
            continue
        try:
            names = os.listdir(folder)
        except OSError:  # nothing of it can be granted, so nothing of it is readable (fail closed)
            continue
        for name in names:
            entry = os.path.join(folder, name)
            if entry in on_the_way or entry in protected or os.path.islink(entry):
                continue
            granted.append(entry)
    return sorted(granted), sorted(protected)


def landlock_read_rules(unreadable: Iterable[str]) -> tuple[list[tuple[str, int]], list[str]]:
    """``read_cover`` as (path, rights) landlock rules, with ``/dev`` narrowed to ``device_nodes``.

    ``/dev`` holds the raw disks: a worker running as root (a CI container, a GPU host) could read
    the problem file's blocks straight off the file system's device, past every path rule. So
    ``/dev`` itself may only be listed, and reading is granted to the device nodes a worker uses.
    Returns (rules, protected).
    """
    granted, protected = read_cover(unreadable)
    rules = [(path, FS_READ) for path in granted if path != "/dev"]
    if "/dev" in granted:
        rules.append(("/dev", FS_READ_DIR))
        rules += [(path, FS_READ) for path in device_nodes() if _beneath(path, "/dev")]
    return rules, protected


def install_landlock(libc, writable: list[str], device_dirs: list[str],
                     readable: list[tuple[str, int]] | None = None, read_files: Sequence[str] = ()) -> int:
    """Restrict file-system changes to ``writable`` (and writes of existing files under ``device_dirs``).

    ``readable``: when given, reading, listing and executing are limited too, to the (path, rights)
    rules of ``landlock_read_rules`` (whole subtrees), ``read_files`` (single files, the kernel file) and
    ``writable``.
    """
    abi = landlock_abi(libc)
    if abi < 1:
        return 0
    handled = FS_CHANGE_V1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE_BIT if abi >= 3 else 0)
    if readable is not None:
        handled |= FS_READ
    attr = _RulesetAttr(handled)
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise SandboxError(f"landlock ruleset refused: {os.strerror(ctypes.get_errno())}")
    try:
        rules = [(p, handled, True) for p in writable] + \
                [(p, FS_WRITE_FILE | (FS_TRUNCATE_BIT if abi >= 3 else 0), True) for p in device_dirs] + \
                [(p, access, False) for p, access in readable or ()] + \
                [(p, FS_EXECUTE | FS_READ_FILE, True) for p in (read_files if readable is not None else ())]
        for path, access, follow in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
            except FileNotFoundError:
                continue
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISLNK(mode):  # replaced by a link since the cover was taken
                    continue
                rule = _PathBeneath(access if stat.S_ISDIR(mode) else access & FS_FILE_RIGHTS, fd)
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
    read_rules: int = 0  # landlock rules of the read cover; 0 when reading is not limited
    unreadable: tuple[str, ...] = ()  # what the kernel refuses to read (real paths and mount aliases)
    seal_immutable: bool = False  # the seal's program cannot be changed (mseal)

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
                 f"landlock={'abi ' + str(self.landlock_abi) if self.landlock_abi else 'off'}",
                 f"reads={'limited (' + str(self.read_rules) + ' rules)' if self.read_rules else 'open'}"]
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


def _needed_for_reading(submission: str) -> list[str]:
    """What the worker itself reads after the limits: the interpreter, its libraries, this package,
    every folder on ``sys.path`` and the kernel file (a protected folder that holds one of them is
    noted in the result, not silently opened)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(__file__))}
    paths.update(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    if submission:
        paths.add(submission)
    return sorted(os.path.realpath(p) for p in paths if p)


SYS_CAPSET = 126
LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4


def drop_capabilities(libc) -> bool:
    """Give up every capability (effective, permitted, inheritable, ambient and the bounding set).

    A worker started as root keeps root's capabilities through ``no_new_privs``, and several of them
    go around every other limit here: loading a kernel module, reading kernel memory, overriding
    file permissions the landlock rules rely on. The worker needs none of them. A no-op for an
    unprivileged worker (the judge's slots run as their own users). True when none is left.
    """
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            last = int(fh.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):  # needs CAP_SETPCAP, so before the capability sets are cleared
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # {effective, permitted, inheritable} for capabilities 0-31 and 32-63
    return libc.syscall(SYS_CAPSET, ctypes.byref(header), ctypes.byref(data)) == 0


def _clear_read_implies_exec(libc) -> None:
    """An inherited ``READ_IMPLIES_EXEC`` would make every readable mapping executable; the filter
    refuses setting it, so it is cleared before."""
    current = libc.personality(ctypes.c_ulong(PERSONALITY_QUERY))
    if current != -1 and current & READ_IMPLIES_EXEC:
        libc.personality(ctypes.c_ulong(current & ~READ_IMPLIES_EXEC))


def enter(scratch: str, require: bool = False, submission: str = "", spec_allow: bool = True, *,
          unreadable: Sequence[str] = ()) -> Sandbox:
    """Set the limits for the rest of this process's life; ``require`` turns an unavailable limit
    into ``SandboxError`` instead of a note in the result.

    ``unreadable``: folders (or files) the process may not read, list or execute from, enforced by
    landlock (``read_cover``); the scratch folder and the kernel file stay readable even inside one
    of them. Empty: reading is not limited (only the audit hook refuses it).
    """
    box = Sandbox(scratch=scratch, roots=installed_roots((scratch, os.path.dirname(submission) if submission else "")))
    box.baseline_maps = executable_mappings()
    if sys.platform != "linux":
        box.notes.append(f"no OS limits on {sys.platform}")
        if require:
            raise SandboxError(box.notes[-1])
        return box
    libc = load_libc()
    libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SandboxError(f"no_new_privs refused: {os.strerror(ctypes.get_errno())}")
    _clear_read_implies_exec(libc)
    if not drop_capabilities(libc):
        box.notes.append(f"capabilities kept: {os.strerror(ctypes.get_errno())}")
    readable, read_files = None, [submission] if submission else []
    if unreadable:
        readable, protected = landlock_read_rules(unreadable)
        box.unreadable = tuple(protected)
        hidden = [p for p in _needed_for_reading(submission) if p != os.path.realpath(submission or "/")
                  and any(_beneath(p, q) for q in protected)]
        if hidden:
            box.notes.append(f"unreadable under the limits: {', '.join(hidden)}")
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    try:
        box.landlock_abi = install_landlock(libc, [scratch], device_nodes(), readable, read_files)
        box.read_rules = len(readable) if readable is not None and box.landlock_abi else 0
    except SandboxError as exc:
        box.notes.append(str(exc))
        if readable is not None:  # the write limits without the read limits, as before they existed
            try:
                box.landlock_abi = install_landlock(libc, [scratch], device_nodes())
            except SandboxError as again:
                box.notes.append(str(again))
    if not box.landlock_abi:
        box.notes.append("landlock unavailable: file writes limited by the audit hook only")
    elif box.landlock_abi < 8 and threads > 1:  # no thread sync: those threads keep every file open to them
        box.notes.append(f"{threads - 1} thread(s) started before landlock are not limited by it")
    if unreadable and not box.read_rules:
        box.notes.append("reads limited by the audit hook only")
    if platform.machine() == "x86_64":
        page = None
        try:
            page = _prepare_seal(libc)
        except SandboxError as exc:
            box.notes.append(str(exc))
        flags = install_seccomp(libc, spec_allow, page.address if page else None)
        box.seccomp = True
        if page is not None:
            _SEAL[:] = [(page, flags, seccomp_filter_count(os.getpid()))]
            box.seal_immutable = page.immutable
            if not page.immutable:
                box.notes.append("seal program mutable (no mseal): the filter count proves less")
    else:
        box.notes.append(f"seccomp filter not built for {platform.machine()}")
    if require and (not box.seccomp or not box.landlock_abi or (unreadable and not box.read_rules)):
        raise SandboxError("; ".join(box.notes))
    return box
