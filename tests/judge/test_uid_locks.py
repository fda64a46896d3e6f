"""Two judges on one host never share an evaluation uid, so neither ends the other's evaluations.

A judge ends every process of its evaluation uids (after each evaluation, at start and at shutdown);
two judges that dropped evaluations to the same uid read each other's gradings as infrastructure
errors. Checked here: the lock files (held while the holder lives, refused to anyone else, given back
when its process ends), their folder (nobody else can write it), and two subprocess isolations on this
host taking different uids, each ending only its own uid's processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metakernelbench.judge.isolation import GradeSettings, SubprocessIsolation, processes_of
from metakernelbench.judge.uid_locks import UidInUse, UidLocks, lock_folder


def test_a_held_uid_is_refused_to_anyone_else_until_its_holder_lets_go(tmp_path):
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    first, second = UidLocks(folder), UidLocks(folder)
    assert first.acquire(61500) is True and first.acquire(61500) is False  # fresh, then already ours
    with pytest.raises(UidInUse, match=f"pid {os.getpid()}"):
        second.acquire(61500)
    assert second.acquire(61501) is True
    first.release()
    assert second.acquire(61500) is True and second.held == [61500, 61501]


def test_the_kernel_gives_the_uid_back_when_its_holder_dies(tmp_path):
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom pathlib import Path\nfrom metakernelbench.judge.uid_locks import UidLocks\n"
        f"locks = UidLocks(Path({str(folder)!r}))\nlocks.acquire(61502)\nprint('held', flush=True)\ntime.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UidInUse, match=f"pid {holder.pid}"):
            UidLocks(folder).acquire(61502)
    finally:
        holder.kill()
        holder.wait()
    assert UidLocks(folder).acquire(61502) is True


def test_the_lock_folder_is_one_nobody_else_can_write():
    folder = lock_folder()
    st = folder.lstat()
    assert folder.is_dir() and not folder.is_symlink()
    assert st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _isolation(root: Path) -> SubprocessIsolation:
    """A subprocess isolation whose slots take their uids as a dropping judge's do (``_take_uid``); it
    need not run evaluations, so it needs no uid that can import the grader."""
    return SubprocessIsolation(root, GradeSettings(small=True), drop_privileges=False, watch_imports=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="processes of other uids need root")
def test_two_judges_on_one_host_take_different_uids_and_end_only_their_own(tmp_path):
    a, b = _isolation(tmp_path / "a"), _isolation(tmp_path / "b")
    sleepers = []
    try:
        uid_a, uid_b = a._take_uid(0), b._take_uid(0)
        assert uid_a != uid_b and uid_a in a.uid_locks.held and uid_b in b.uid_locks.held
        assert a._take_uid(0) == uid_a  # a slot keeps its uid
        for uid in (uid_a, uid_b):
            sleepers.append(subprocess.Popen(["sleep", "60"], user=uid, group=uid, extra_groups=[], cwd="/"))
        time.sleep(0.2)
        b.kill_all()  # what b does after each evaluation and at its start and end
        assert sleepers[0].poll() is None, "judge b ended a process of judge a's evaluation uid"
        assert processes_of("", uid_b) == []
        a.kill_all()
        assert sleepers[0].wait(5) is not None
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        a.shutdown()
        b.shutdown()
    assert a.uid_locks.held == [] and b.uid_locks.held == []  # given back at shutdown


@pytest.mark.skipif(os.geteuid() != 0, reason="only root tries to drop evaluations to dedicated uids")
def test_a_judge_that_cannot_drop_holds_no_uid(tmp_path):
    iso = SubprocessIsolation(tmp_path / "j", GradeSettings(small=True))
    try:
        if iso.drop:
            pytest.skip("evaluations can run as a dedicated uid here")
        assert iso.uid_locks.held == []
    finally:
        iso.shutdown()
