"""The audit hook (``verifier.guard``): who it holds responsible, and that a refusal cannot be undone.

Everything that is not installed library code is the submission's -- its own file, files it writes
and runs, strings it compiles -- and a library's file name cannot be borrowed for foreign code. A
refusal ends the process at once with its reason in the shared page, and the hook's decisions do
not depend on anything the submission can rebind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap

import torch

from metakernelbench.verifier import guard as guard_mod
from metakernelbench.verifier.guard import make_policy


def _policy(tmp_path, dsl: str = "tirx"):
    return make_policy(str(tmp_path / "kernel.py"), (str(tmp_path / "problem"),), dsl,
                       scratch=str(tmp_path / "scratch"))


def test_installed_libraries_are_trusted(tmp_path):
    policy = _policy(tmp_path)
    assert policy.trusted(torch.__file__)
    assert policy.trusted(os.path.join(sysconfig.get_paths()["purelib"], "anything", "mod.py"))


def test_the_submission_its_files_and_strings_are_not(tmp_path):
    policy = _policy(tmp_path)
    assert not policy.trusted(str(tmp_path / "kernel.py"))
    assert not policy.trusted(str(tmp_path / "scratch" / "helper.py"))
    assert not policy.trusted("<string>")
    assert not policy.trusted("<input>")


def test_compiling_a_librarys_own_text_is_an_import_not_a_forgery(tmp_path):
    policy = _policy(tmp_path)
    source = open(guard_mod.__file__, "rb").read()
    assert policy.is_that_file(source, guard_mod.__file__)
    assert not policy.is_that_file(b"import gc\n", guard_mod.__file__)
    assert not policy.is_that_file(object(), guard_mod.__file__)


def test_writes_outside_scratch_and_protected_reads_are_recognised(tmp_path):
    policy = _policy(tmp_path)
    assert policy.in_scratch(str(tmp_path / "scratch" / "x"))
    assert not policy.in_scratch(os.path.join(sysconfig.get_paths()["purelib"], "evil.pth"))
    assert policy.is_protected(str(tmp_path / "problem" / "problem.py"))
    assert not policy.is_protected(str(tmp_path / "elsewhere.py"))


def test_its_realpath_is_its_own_and_agrees_with_the_standard_one(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    policy = _policy(tmp_path)
    for path in (str(tmp_path / "link" / "x.py"), str(tmp_path / "real" / ".." / "link" / "."), "relative/x", "/"):
        assert policy.resolve(path) == os.path.realpath(path)


def test_forbidden_modules_are_refused_by_their_code_as_well_as_their_name(tmp_path):
    policy = _policy(tmp_path, dsl="tirx")
    assert policy.blocked_module("triton.language") == "always"
    assert policy.blocked_module("cutlass") == "always"  # the other DSL
    assert policy.blocked_module("torch._inductor.codecache") == "submission"  # torch loads it itself
    assert policy.blocked_module("torch.nn") == ""
    assert policy.forbidden_code(os.path.join(os.path.dirname(guard_mod.__file__), "worker.py")) == "always"
    assert policy.forbidden_code(torch.__file__) == ""


_CHILD = textwrap.dedent('''
    import os, sys
    from metakernelbench.verifier.doorbell import Doorbell, REFUSAL_EXIT
    from metakernelbench.verifier.guard import install_guard
    bell = Doorbell.attach(sys.argv[1])
    arm = install_guard(sys.argv[2], [], "tirx", bell.refusal_reporter())
    arm(); del arm
    os.path.realpath = lambda p: "/usr/lib/harmless.py"   # rebinding what a guard might call
    import builtins; builtins.len = lambda x: 0
    for finder in sys.meta_path:                           # and every switch it can reach
        for name in ("armed", "enforce", "guard"):
            try:
                setattr(finder, name, None)
            except Exception:
                pass
    try:
        exec(compile("import gc; gc.get_objects()", "<string>", "exec"))
    except Exception:
        pass
    print("still running after the refusal", flush=True)
''')


def test_a_refusal_ends_the_process_with_its_reason_whatever_was_rebound(tmp_path):
    from metakernelbench.verifier.doorbell import REFUSAL_EXIT, Doorbell

    bell = Doorbell.create(str(tmp_path))
    script = tmp_path / "kernel.py"
    script.write_text(_CHILD)
    done = subprocess.run([sys.executable, str(script), bell.path, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == REFUSAL_EXIT, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "still running" not in done.stdout
    refused = bell.refusal()
    assert refused is not None and "gc.get_objects" in refused[1] and not refused[0]
    bell.close()


def test_an_import_gate_removed_changes_nothing(tmp_path):
    """importlib raises no import event; the module's code still runs through exec, which is refused."""
    from metakernelbench.verifier.doorbell import REFUSAL_EXIT, Doorbell

    bell = Doorbell.create(str(tmp_path))
    script = tmp_path / "kernel.py"
    script.write_text(textwrap.dedent('''
        import importlib, sys
        from metakernelbench.verifier.doorbell import Doorbell
        from metakernelbench.verifier.guard import install_guard
        bell = Doorbell.attach(sys.argv[1])
        arm = install_guard(sys.argv[2], [], "tirx", bell.refusal_reporter())
        arm()
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ImportGate"]
        importlib.import_module("metakernelbench.verifier.outside")
        print("imported", flush=True)
    '''))
    done = subprocess.run([sys.executable, str(script), bell.path, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == REFUSAL_EXIT, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "outside.py" in bell.refusal()[1]
    bell.close()
