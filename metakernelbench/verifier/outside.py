"""What the grader reads of the candidate's process from outside it (no torch at import).

Nothing here runs in the candidate's process, so nothing the submission does in its own address
space changes what these functions see:

- ``frozen``: the process held stopped (``SIGSTOP``, confirmed by ``waitpid``) while the grader looks
  at it, so no thread of it can write a byte meanwhile;
- ``read_memory``: bytes of the process's memory (``process_vm_readv``; the kernel checks that the
  grader may read it: its own child, same user);
- ``status_field``: a line of ``/proc/<pid>/status`` (seccomp filters, threads).

The grader uses them at the moment a call rings DONE, on the CPU path, to take its own copy of the
outputs the worker declared in the shared page (``doorbell.Doorbell.publish_outputs``): the call's
final outputs must equal that copy, so work done after DONE is caught.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
from contextlib import contextmanager

__all__ = ["MAX_READ", "OutsideError", "died_with", "frozen", "read_memory", "status_field"]

MAX_READ = 1 << 30  # one DONE snapshot never copies more than this (CPU workloads are small)


class OutsideError(OSError):
    """The grader could not look at the process (it died, or the kernel refused the read)."""


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = None


def _process_vm_readv():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    fn = _libc.process_vm_readv
    fn.restype = ctypes.c_ssize_t
    fn.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                   ctypes.c_ulong]
    return fn


def read_memory(pid: int, address: int, length: int) -> bytes:
    """``length`` bytes at ``address`` in process ``pid`` (OutsideError if any byte is unreadable)."""
    if length < 0 or length > MAX_READ:
        raise OutsideError(errno.EINVAL, f"refusing to read {length} bytes")
    if length == 0:
        return b""
    buf = ctypes.create_string_buffer(length)
    local = _IoVec(ctypes.cast(buf, ctypes.c_void_p), length)
    remote = _IoVec(ctypes.c_void_p(address), length)
    got = _process_vm_readv()(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if got != length:
        err = ctypes.get_errno() if got < 0 else errno.EFAULT
        raise OutsideError(err, f"read {got} of {length} bytes at {address:#x} in process {pid}: {os.strerror(err)}")
    return buf.raw


@contextmanager
def frozen(pid: int):
    """Hold process ``pid`` (a child of this process) stopped for the duration of the block.

    ``waitpid(WUNTRACED)`` returns once the kernel has stopped every thread of it. A child that died
    instead is reported as OutsideError, with its exit status kept for ``died_with``.
    """
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError as exc:
        raise OutsideError(errno.ESRCH, f"process {pid} is gone") from exc
    try:
        _, status = os.waitpid(pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            _DIED[pid] = os.waitstatus_to_exitcode(status)
            raise OutsideError(errno.ESRCH, f"process {pid} ended while it was being stopped")
        yield
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


_DIED: dict[int, int] = {}


def died_with(pid: int) -> int | None:
    """The exit code ``frozen`` collected for ``pid`` when it ended under it (else None): the child is
    reaped there, so its owner's own wait no longer sees it."""
    return _DIED.get(pid)


def status_field(pid: int, key: str) -> str | None:
    """The value of ``key`` in ``/proc/<pid>/status`` (None when the process or the key is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name == key:
                    return value.strip()
    except OSError:
        return None
    return None
