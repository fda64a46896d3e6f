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


def test_both_filter_programs_are_well_formed():
    import struct

    for program in (sandbox.seccomp_program(os.getpid(), seal_at=0x7F00_1234_5000), sandbox.seal_program()):
        n = len(program) // 8
        assert len(program) % 8 == 0 and n < 4096
        for i in range(n):
            code, jt, jf, _ = struct.unpack_from("<HBBI", program, 8 * i)
            if code & 0x07 == 0x05:
                assert i + 1 + max(jt, jf) < n
        last, *_ = struct.unpack_from("<HBBI", program, 8 * (n - 1))
        assert last == 0x06, "every path ends in a return"


# --- read limits -----------------------------------------------------------------------------------
def _tree(root):
    """a/secret/file (protected), a/sib/ok, a/top.txt, b/c/deep, a/link -> secret."""
    for folder in ("a/secret", "a/sib", "b/c"):
        (root / folder).mkdir(parents=True)
    for name in ("a/secret/file", "a/sib/ok", "a/top.txt", "b/c/deep"):
        (root / name).write_text(name)
    (root / "a/link").symlink_to(root / "a/secret")


def test_read_cover_grants_everything_but_the_protected_path_and_its_way(tmp_path):
    _tree(tmp_path)
    granted, protected = sandbox.read_cover([str(tmp_path / "a/secret")])
    assert protected == [str(tmp_path / "a/secret")]
    assert {str(tmp_path / p) for p in ("a/sib", "a/top.txt", "b")} <= set(granted)
    # neither the protected folder, nor a folder above it (READ_DIR there would reach it), nor a
    # link into it is granted
    for path in ("a/secret", "a", "", "a/link"):
        assert str(tmp_path / path).rstrip("/") not in granted
    assert "/" not in granted and not any(sandbox._beneath(str(tmp_path / "a/secret"), g) for g in granted)
    # and everything else under tmp_path is beneath a granted entry
    for folder, dirs, files in os.walk(tmp_path):
        for name in dirs + files:
            path = os.path.join(folder, name)
            on_the_way = path == str(tmp_path / "a")
            if os.path.islink(path) or on_the_way or sandbox._beneath(path, str(tmp_path / "a/secret")):
                continue
            assert any(sandbox._beneath(path, g) for g in granted), path


def test_read_cover_protects_bind_mount_aliases():
    mounts = [("8:1", "/", "/"), ("8:1", "/srv/data", "/mnt/data"), ("0:5", "/", "/proc"),
              ("8:1", "/srv/data/problems/attention", "/opt/att")]
    assert sandbox.mount_aliases("/srv/data/problems", mounts) == {"/mnt/data/problems", "/opt/att"}
    assert sandbox.mount_aliases("/srv", mounts) == {"/mnt/data", "/opt/att"}
    assert sandbox.mount_aliases("/mnt/data/x", mounts) == {"/srv/data/x"}
    assert sandbox.mount_aliases("/proc/1", mounts) == set()
    assert sandbox._unescape(r"/a\040b") == "/a b"


READ_PROBE = textwrap.dedent("""
    import json, os, sys
    from metakernelbench.verifier import sandbox
    scratch, secret, sibling, other, limit = sys.argv[1:6]
    protected = [os.path.dirname(secret), os.path.dirname(scratch)]
    disk = None  # a block device this process can read before the limits (as root), if any
    for name in sorted(os.listdir("/sys/class/block")) if os.path.isdir("/sys/class/block") else []:
        try:
            os.close(os.open(os.path.join("/dev", name), os.O_RDONLY))
            disk = os.path.join("/dev", name)
            break
        except OSError:
            continue
    caps_before = [l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1]
    box = sandbox.enter(scratch, unreadable=protected if limit == "1" else ())
    out = {"summary": box.summary()}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "ok"
        except OSError as exc:
            out[name] = f"errno {exc.errno}"
    def read_native(path):  # os.open and numpy's fopen: no Python open(), no audit event for a hook
        os.close(os.open(path, os.O_RDONLY))
        import numpy
        numpy.fromfile(path, dtype=numpy.uint8)
    attempt("secret", lambda: read_native(secret))
    attempt("list_protected", lambda: os.listdir(os.path.dirname(secret)))
    attempt("other_scratch", lambda: read_native(other))
    attempt("list_scratch_parent", lambda: os.listdir(os.path.dirname(scratch)))
    attempt("sibling", lambda: read_native(sibling))
    attempt("scratch", lambda: (open(os.path.join(scratch, "f"), "w").write("x"),
                                read_native(os.path.join(scratch, "f")), os.listdir(scratch)))
    attempt("site_packages", lambda: (os.listdir(os.path.dirname(sandbox.__file__)),
                                      read_native(__import__("numpy").__file__)))
    attempt("stdlib_import", lambda: __import__("fractions"))
    attempt("link_out", lambda: os.link(secret, os.path.join(scratch, "copy")))
    attempt("devices", lambda: (os.close(os.open("/dev/urandom", os.O_RDONLY)), os.listdir("/dev/shm")))
    if disk:
        attempt("raw_disk", lambda: os.close(os.open(disk, os.O_RDONLY)))
    out["caps"] = (caps_before, [l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1])
    print(json.dumps(out))
""")


def _read_probe(tmp_path, limit: bool) -> dict:
    protected, sibling, evals = tmp_path / "protected", tmp_path / "sibling", tmp_path / "evals"
    for folder in (protected, sibling, evals / "mine", evals / "other"):
        folder.mkdir(parents=True, exist_ok=True)
    for path in (protected / "secret.py", sibling / "ok.txt", evals / "other" / "cache.bin"):
        path.write_text("x = 1\n")
    done = subprocess.run([sys.executable, "-c", READ_PROBE, str(evals / "mine"), str(protected / "secret.py"),
                           str(sibling / "ok.txt"), str(evals / "other" / "cache.bin"), "1" if limit else "0"],
                          capture_output=True, text=True, timeout=120, cwd=str(sibling),
                          env={**os.environ, "TMPDIR": str(evals / "mine")})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_without_read_limits_a_native_open_reads_everything(tmp_path):
    got = _read_probe(tmp_path, limit=False)
    assert got["secret"] == got["other_scratch"] == got["list_protected"] == "ok", got
    assert got.get("raw_disk", "ok") == "ok", got
    assert "reads=open" in got["summary"]


def test_read_limits_refuse_native_reads_of_protected_folders(tmp_path):
    if not sandbox.landlock_abi():
        pytest.skip("this kernel has no landlock")
    got = _read_probe(tmp_path, limit=True)
    refused = "errno 13"
    assert got["secret"] == refused and got["list_protected"] == refused, got
    assert got["other_scratch"] == refused and got["list_scratch_parent"] == refused, got
    assert got["sibling"] == got["scratch"] == got["site_packages"] == got["stdlib_import"] == "ok", got
    assert got["link_out"] == "errno 18", got  # no hard link that would carry the file out
    assert got["devices"] == "ok", got
    # a worker running as root reads no raw disk (the problem file's blocks are on it)
    assert got.get("raw_disk", "errno 13") == "errno 13", got
    assert "reads=limited" in got["summary"] and "unreadable under" not in got["summary"], got


REPO_PROBE = textwrap.dedent("""
    import json, os, sys, tempfile
    from pathlib import Path
    import metakernelbench
    from metakernelbench.verifier import sandbox
    scratch = sys.argv[1]
    problems = Path(metakernelbench.__file__).resolve().parent.parent / "problems"
    one = sorted(problems.glob("*/*.py"))[0]
    box = sandbox.enter(scratch, submission=sys.argv[2], unreadable=[str(problems), os.path.dirname(scratch)])
    out = {"summary": box.summary(), "rules": box.read_rules}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "ok"
        except OSError as exc:
            out[name] = f"errno {exc.errno}"
    attempt("problem_file", lambda: os.close(os.open(one, os.O_RDONLY)))
    attempt("package", lambda: __import__("metakernelbench.problem_kit"))
    attempt("kernel_file", lambda: open(sys.argv[2]).read())
    attempt("torch_lib", lambda: __import__("ctypes").CDLL(sys.argv[3]))
    print(json.dumps(out))
""")


def test_read_limits_on_the_repository_layout_keep_the_worker_working(tmp_path):
    """The real layout: the top-level problems folder and the folder of every scratch folder are
    unreadable, while the package (an editable install beside ``problems/``), site-packages, the
    kernel file and torch's own libraries stay readable."""
    if not sandbox.landlock_abi():
        pytest.skip("this kernel has no landlock")
    import tempfile

    import torch

    # as the grader lays them out (launch.evaluations_root): every scratch folder inside one folder of
    # its own, so that folder, not the whole temporary directory (which may hold the checkout), is hidden
    root = tempfile.mkdtemp(prefix="mkb-evaluations-")
    scratch = tempfile.mkdtemp(prefix="mkb-eval-", dir=root)
    try:
        kernel = os.path.join(os.path.dirname(__file__), "..", "exploits", "control_honest_28.py")
        lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
        done = subprocess.run([sys.executable, "-c", REPO_PROBE, scratch, os.path.realpath(kernel), lib],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": scratch})
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["problem_file"] == "errno 13", got
    assert got["package"] == got["kernel_file"] == got["torch_lib"] == "ok", got
    assert "unreadable under" not in got["summary"] and got["rules"] > 0, got


# --- executable-memory seal -------------------------------------------------------------------------
SEAL_PROBE = textwrap.dedent("""
    import ctypes, json, mmap, os, sys
    from metakernelbench.verifier import sandbox
    scratch, library, seal = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    sandbox.enter(scratch)
    print("entered", flush=True)
    sys.stdin.readline()
    out = {}
    def attempt(name, fn):
        try:
            value = fn()
            out[name] = f"errno {ctypes.get_errno()}" if value == -1 else "ok"
        except OSError as exc:
            out[name] = f"errno {exc.errno}"
    def forged_filter():
        allow = sandbox._assemble([sandbox._ret(sandbox.SECCOMP_RET_ALLOW)])
        buf = ctypes.create_string_buffer(allow, len(allow))
        prog = sandbox._SockFprog(1, ctypes.cast(buf, ctypes.c_void_p))
        return libc.syscall(sandbox.SYS_SECCOMP, 1, 1, ctypes.byref(prog))
    attempt("forged_filter", forged_filter)
    attempt("seal_page_writable", lambda: libc.mprotect(sandbox._SEAL[0][0].address, mmap.PAGESIZE, 3))
    if seal:
        sandbox.seal_executable_memory()
    print("sealed", flush=True)
    sys.stdin.readline()
    attempt("anon_rwx", lambda: mmap.mmap(-1, mmap.PAGESIZE, prot=7))
    attempt("anon_rx", lambda: mmap.mmap(-1, mmap.PAGESIZE, prot=5))
    attempt("anon_rw", lambda: mmap.mmap(-1, mmap.PAGESIZE, prot=3))
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=3)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    attempt("mprotect_exec", lambda: libc.mprotect(address, mmap.PAGESIZE, 5))
    attempt("memfd", lambda: os.close(os.memfd_create("code")))
    with open(os.path.join(scratch, "code"), "wb") as fh:
        fh.write(bytes(mmap.PAGESIZE))
    fd = os.open(os.path.join(scratch, "code"), os.O_RDWR)
    attempt("file_wx", lambda: mmap.mmap(fd, mmap.PAGESIZE, prot=7))
    attempt("read_implies_exec", lambda: libc.personality(0x0400000))
    before = sandbox.executable_mappings()
    attempt("dlopen", lambda: ctypes.CDLL(library))
    out["dlopen_mapped"] = library in {os.path.realpath(p) for p in sandbox.executable_mappings() - before}
    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x + 1)
    out["callback"] = callback(41)
    attempt("forged_filter_after", forged_filter)
    print(json.dumps(out), flush=True)
""")


def _unmapped_library() -> str:
    """A system library this interpreter has not loaded (``dlopen`` must map its code anew)."""
    import ctypes.util

    mapped = {os.path.realpath(p) for p in sandbox.executable_mappings()}
    for name in ("bz2", "lzma", "sqlite3", "z", "ffi", "m"):
        found = ctypes.util.find_library(name)
        candidates = [os.path.join(d, found) for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                                                       "/usr/lib64", "/lib64", "/usr/lib")] if found else []
        for path in candidates:
            if os.path.exists(path) and os.path.realpath(path) not in mapped:
                return os.path.realpath(path)
    pytest.skip("no unloaded system library found")


def _seal_probe(tmp_path, seal: bool) -> tuple[dict, list[int]]:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    command = [sys.executable, "-c", SEAL_PROBE, str(scratch), _unmapped_library(), "1" if seal else "0"]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    counts = []
    try:
        for expected in ("entered", "sealed"):
            line = child.stdout.readline().strip()
            assert line == expected, line + child.stderr.read()[-2000:]
            counts.append(sandbox.seccomp_filter_count(child.pid))
            child.stdin.write("\n")
            child.stdin.flush()
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1]), counts


x86_only = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the filters are built for x86-64")


@x86_only
def test_without_the_seal_anonymous_executable_memory_is_allowed(tmp_path):
    got, counts = _seal_probe(tmp_path, seal=False)
    assert got["anon_rwx"] == got["anon_rx"] == got["mprotect_exec"] == got["memfd"] == "ok", got
    assert counts[0] == counts[1]


@x86_only
def test_the_seal_refuses_new_executable_memory_and_shows_from_outside(tmp_path):
    got, counts = _seal_probe(tmp_path, seal=True)
    refused = "errno 1"
    assert got["anon_rwx"] == got["anon_rx"] == got["mprotect_exec"] == refused, got
    assert got["memfd"] == got["file_wx"] == got["read_implies_exec"] == refused, got
    assert got["anon_rw"] == "ok", got
    assert got["dlopen"] == "ok" and got["dlopen_mapped"], got  # installed libraries still load
    assert got["callback"] == 42, got  # ctypes callbacks (libffi trampolines) still work
    assert counts[1] == counts[0] + 1, counts  # the parent sees the seal


@x86_only
def test_no_filter_but_the_seal_can_be_added(tmp_path):
    """The count proves the seal only if nothing else can raise it: the first filter admits a
    filter from the prepared, immutable page alone, with thread sync."""
    got, _ = _seal_probe(tmp_path, seal=True)
    assert got["forged_filter"] == got["forged_filter_after"] == "errno 1", got
    if sandbox._prepare_seal(sandbox.load_libc()).immutable:
        assert got["seal_page_writable"] == "errno 1", got


def test_seccomp_filter_count_reads_this_process():
    assert sandbox.seccomp_filter_count(os.getpid()) >= 0
    with pytest.raises(sandbox.SandboxError):
        sandbox.seccomp_filter_count(2 ** 22 + 12345)


def test_the_kernel_file_keeps_the_write_limits_when_reads_are_open(tmp_path):
    """A read rule for the kernel file in a ruleset that does not handle reading is invalid, and
    one invalid rule would cost every landlock limit: the kernel file is granted only with reads."""
    if not sandbox.landlock_abi():
        pytest.skip("this kernel has no landlock")
    kernel = tmp_path / "kernel.py"
    kernel.write_text("x = 1\n")
    probe = ("import sys; from metakernelbench.verifier import sandbox; "
             "print(sandbox.enter(sys.argv[1], submission=sys.argv[2]).summary())")
    (tmp_path / "scratch").mkdir()
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "scratch"), str(kernel)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "landlock=abi" in done.stdout and "refused" not in done.stdout, done.stdout


def test_a_worker_started_with_capabilities_keeps_none(tmp_path):
    """Root's capabilities survive ``no_new_privs``; loading a kernel module or overriding file
    modes would go around every other limit, so ``enter`` gives them all up."""
    got = _read_probe(tmp_path, limit=False)
    before, after = got["caps"]
    if int(before, 16) == 0:
        pytest.skip("this test runs without capabilities")
    assert int(after, 16) == 0, got
