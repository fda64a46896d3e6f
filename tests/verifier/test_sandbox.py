"""The candidate worker's operating-system limits (``verifier.sandbox``), checked in a child process.

Each check runs in a fresh interpreter that enters the sandbox and then tries what a submission
would: start a process, signal its parent, write outside its scratch folder. Without the limits
every one of these succeeds (the first test shows it), so each assertion fails without its defence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from metakernelbench.verifier import sandbox

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="seccomp and landlock are Linux features")

PROBE = textwrap.dedent("""
    import json, os, sys, threading
    from metakernelbench.verifier import sandbox
    scratch, outside, enter = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    box = sandbox.enter(scratch) if enter else None
    out = {"summary": box.summary() if box else ""}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "ok"
        except OSError as exc:
            out[name] = f"errno {exc.errno}"
    attempt("fork", lambda: os.waitpid(pid, 0) if (pid := os.fork()) else os._exit(0))
    attempt("spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}))
    attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
    attempt("signal_self", lambda: os.kill(os.getpid(), 0))
    attempt("write_outside", lambda: open(outside, "w").write("x"))
    attempt("write_scratch", lambda: open(os.path.join(scratch, "f"), "w").write("x"))
    t = threading.Thread(target=lambda: None); t.start(); t.join()
    out["thread"] = "ok"
    print(json.dumps(out))
""")


def _probe(tmp_path, enter: bool) -> dict:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-c", PROBE, str(scratch), str(tmp_path / "outside.pth"),
                           "1" if enter else "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_without_the_sandbox_everything_is_allowed(tmp_path):
    got = _probe(tmp_path, enter=False)
    assert {k: got[k] for k in ("fork", "spawn", "signal_parent", "write_outside")} == \
        {"fork": "ok", "spawn": "ok", "signal_parent": "ok", "write_outside": "ok"}


def test_the_sandbox_refuses_processes_signals_and_foreign_writes(tmp_path):
    if not sandbox.landlock_abi():
        pytest.skip("this kernel has no landlock")
    got = _probe(tmp_path, enter=True)
    assert got["fork"] == "errno 1" and got["spawn"] in ("errno 1", "errno 38"), got
    assert got["signal_parent"] == "errno 1" and got["signal_self"] == "ok", got
    assert got["write_outside"] == "errno 13" and not (tmp_path / "outside.pth").exists(), got
    assert got["write_scratch"] == "ok" and got["thread"] == "ok", got
    assert "seccomp=on" in got["summary"] and "landlock=abi" in got["summary"]


def test_filter_program_is_well_formed():
    program = sandbox.seccomp_program(os.getpid())
    assert len(program) % 8 == 0 and len(program) // 8 < 4096
    # every jump stays inside the program
    import struct

    n = len(program) // 8
    for i in range(n):
        code, jt, jf, _ = struct.unpack_from("<HBBI", program, 8 * i)
        if code & 0x07 == 0x05:  # BPF_JMP
            assert i + 1 + max(jt, jf) < n


def test_new_native_mappings_flags_what_lies_outside_installed_folders(tmp_path):
    mapped = sandbox.executable_mappings()
    assert mapped, "a Python process maps at least its interpreter or libpython"
    nothing_installed = sandbox.Sandbox(scratch=str(tmp_path), roots=())
    assert set(nothing_installed.new_native_mappings()) == mapped
    all_installed = sandbox.Sandbox(scratch=str(tmp_path), roots=("/",))
    assert all_installed.new_native_mappings() == []
    some_lib = sorted(mapped)[0]
    scratch_is_never_installed = sandbox.Sandbox(scratch=os.path.dirname(some_lib), roots=("/",))
    assert some_lib in scratch_is_never_installed.new_native_mappings()
    seen_before = sandbox.Sandbox(scratch=str(tmp_path), roots=(), baseline_maps=set(mapped))
    assert seen_before.new_native_mappings() == []


def test_device_nodes_exclude_nothing_the_driver_needs():
    nodes = sandbox.device_nodes()
    assert "/dev/null" in nodes and "/dev/shm" in nodes
