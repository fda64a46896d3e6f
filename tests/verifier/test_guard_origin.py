"""Who the guard holds responsible for an event (``verifier.guard``): library code or the submission.

Everything that is not installed library code is the submission's -- its own file, files it writes
and runs, strings it compiles -- and a library's file name cannot be borrowed for foreign code.
"""

from __future__ import annotations

import os
import sysconfig

import torch

from metakernelbench.verifier.guard import Guard


def _guard(tmp_path) -> Guard:
    return Guard(str(tmp_path / "kernel.py"), (), "tirx", scratch=str(tmp_path / "scratch"))


def test_installed_libraries_are_trusted(tmp_path):
    guard = _guard(tmp_path)
    assert guard._trusted(torch.__file__)
    assert guard._trusted(os.path.join(sysconfig.get_paths()["purelib"], "anything", "mod.py"))


def test_the_submission_its_files_and_strings_are_not(tmp_path):
    guard = _guard(tmp_path)
    assert not guard._trusted(str(tmp_path / "kernel.py"))
    assert not guard._trusted(str(tmp_path / "scratch" / "helper.py"))
    assert not guard._trusted("<string>")
    assert not guard._trusted("<input>")


def test_compiling_a_librarys_own_text_is_an_import_not_a_forgery(tmp_path):
    from metakernelbench.verifier import guard as guard_mod

    source = open(guard_mod.__file__, "rb").read()
    assert guard_mod._is_that_file(source, guard_mod.__file__)
    assert not guard_mod._is_that_file(b"import gc\n", guard_mod.__file__)
    assert not guard_mod._is_that_file(object(), guard_mod.__file__)


def test_writes_outside_scratch_are_recognised(tmp_path):
    guard = _guard(tmp_path)
    assert guard._in_scratch(str(tmp_path / "scratch" / "x"))
    assert not guard._in_scratch(os.path.join(sysconfig.get_paths()["purelib"], "evil.pth"))
