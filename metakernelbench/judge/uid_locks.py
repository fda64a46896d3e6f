"""Which judge on this host owns an evaluation uid: one lock file per uid, held while the judge lives.

Why: a judge that drops evaluations to dedicated uids ends every process of a slot's uid when an
evaluation ends (nothing of a submission may outlive it) and every process of its uids when it starts
(what a crashed judge left behind). Two judges on one host that used the same uids would end each
other's evaluations, and the victim would read an infrastructure error with no cause in sight. So a
judge takes a uid only when it can hold that uid's lock (``flock``, released by the kernel when the
judge's process ends, however it ends); a uid whose lock another live judge holds is skipped for the
next one of the block. A uid whose lock is free belongs to no live judge, so its processes are
leftovers, and the new owner may end them.

The lock files live in a folder that only this user can write (``/run/metakernelbench`` when it can
be made so, else one under the temporary folder named for this user): an evaluation, which runs as
one of those uids, can neither create a lock file ahead of the judge nor hold one.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import weakref
from pathlib import Path

__all__ = ["BASE_EVAL_UID", "UID_BLOCK", "UidInUse", "UidLocks", "lock_folder"]

BASE_EVAL_UID = 61000  # the first of the evaluation uids
UID_BLOCK = 64  # how many: the judges of one host share them, one per device slot


class UidInUse(RuntimeError):
    """Another live judge on this host holds the uid."""


def _private_folder(path: Path) -> bool:
    """Whether ``path`` is (or could be made) a real folder of this user that nobody else can write."""
    try:
        path.mkdir(mode=0o700, parents=False, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def lock_folder() -> Path:
    """The folder of this host's uid lock files (see the module docstring)."""
    for candidate in (Path("/run/metakernelbench"), Path(tempfile.gettempdir()) / f"metakernelbench-{os.geteuid()}"):
        if _private_folder(candidate):
            return candidate
    raise UidInUse("no private folder for the evaluation uids' lock files (/run/metakernelbench or one under "
                   f"{tempfile.gettempdir()})")


class UidLocks:
    """The evaluation uids this judge holds; each taken at its first use and kept until ``release``."""

    def __init__(self, folder: Path | None = None):
        self._folder = folder
        self._held: dict[int, int] = {}  # uid -> the open lock file's descriptor
        # a judge dropped without shutdown (a test's) gives its uids back when it is collected
        weakref.finalize(self, _close_all, self._held)

    @property
    def held(self) -> list[int]:
        return sorted(self._held)

    def acquire(self, uid: int) -> bool:
        """Hold ``uid``'s lock; True when it was free until now (its processes, if any, are leftovers
        that the caller may end), False when this judge held it already. ``UidInUse`` when another
        live judge holds it."""
        if uid in self._held:
            return False
        folder = self._folder or lock_folder()
        path = folder / f"eval-uid-{uid}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UidInUse(f"evaluation uid {uid} belongs to another judge on this host (pid {holder}, "
                           f"lock {path})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._held[uid] = fd
        return True

    def release(self) -> None:
        """Give every held uid back (the judge stops)."""
        _close_all(self._held)


def _close_all(held: dict[int, int]) -> None:
    for fd in held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    held.clear()
