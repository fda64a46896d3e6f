"""``import_watch``: what counts as a change to the folders Python imports from, and what is churn."""

from __future__ import annotations

import importlib.util
import marshal
import os
import py_compile
import subprocess
import sys
import time
from pathlib import Path

from metakernelbench.judge.import_watch import changed_since, listings


def package(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "site"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text("VALUE = 'honest'\n")
    (root / "pkg" / "other.py").write_text("")
    return root, root / "pkg" / "mod.py"


def since() -> int:
    now = time.time_ns()
    time.sleep(0.01)
    return now


def forged_cache(source: Path, code_text: str) -> Path:
    """A timestamp cache file the loader accepts for ``source`` (its mtime and size) holding other code."""
    st = source.stat()
    pyc = Path(importlib.util.cache_from_source(str(source)))
    pyc.parent.mkdir(exist_ok=True)
    header = (importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
              + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"))
    pyc.write_bytes(header + marshal.dumps(compile(code_text, str(source), "exec")))
    return pyc


def test_a_cache_folder_another_process_creates_is_churn_not_a_change(tmp_path):
    root, mod = package(tmp_path)
    before = listings([(root, True)])
    start = since()
    py_compile.compile(str(mod))  # what any process's first import of pkg.mod does
    assert changed_since([(root, True)], start, before=before) == []
    # without the listing, the folder's new change time alone counted (the judge tainted itself)
    assert changed_since([(root, True)], start) == [str(root / "pkg")]


def test_a_deleted_module_is_a_change(tmp_path):
    root, _ = package(tmp_path)
    before = listings([(root, True)])
    start = since()
    (root / "pkg" / "other.py").unlink()
    assert changed_since([(root, True)], start, before=before) == [str(root / "pkg")]


def test_a_file_deleted_at_the_top_of_a_root_is_a_change(tmp_path):
    root, _ = package(tmp_path)
    (root / "x.pth").write_text("")
    before = listings([(root, True)])
    start = since()
    (root / "x.pth").unlink()
    assert changed_since([(root, True)], start, before=before) == [str(root)]


def test_a_cache_file_the_loader_would_run_in_place_of_its_source_is_caught(tmp_path):
    root, mod = package(tmp_path)
    py_compile.compile(str(mod))
    before = listings([(root, True)])
    start = since()
    pyc = forged_cache(mod, "VALUE = 'forged'\n")
    ran = subprocess.run([sys.executable, "-c", "import pkg.mod; print(pkg.mod.VALUE)"], cwd=root,
                         capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "forged"  # the exploit is real: the source was never read
    assert changed_since([(root, True)], start, before=before) == [str(pyc)]


def test_an_unchecked_hash_cache_file_is_caught(tmp_path):
    root, mod = package(tmp_path)
    before = listings([(root, True)])
    start = since()
    pyc = Path(importlib.util.cache_from_source(str(mod)))
    pyc.parent.mkdir()
    header = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + bytes(8)  # hash-based, unchecked
    pyc.write_bytes(header + marshal.dumps(compile("VALUE = 'forged'\n", str(mod), "exec")))
    assert changed_since([(root, True)], start, before=before) == [str(pyc)]


def test_cache_files_the_loader_would_not_run_are_not_changes(tmp_path):
    root, mod = package(tmp_path)
    before = listings([(root, True)])
    start = since()
    stale = forged_cache(mod, "VALUE = 'forged'\n")
    mod.write_text("VALUE = 'honest, edited'\n")  # the cache's timestamp no longer matches: recompiled
    os.utime(mod, (time.time() + 5, time.time() + 5))
    other_tag = stale.with_name("mod.cpython-201.pyc")
    other_tag.write_bytes(stale.read_bytes())
    temporary = stale.with_name(stale.name + ".1234")
    temporary.write_bytes(stale.read_bytes())
    assert changed_since([(root, True)], start, before=before) == [str(mod)]  # only the edited source


def test_a_package_created_at_the_top_of_pythonpath_is_a_change_a_plain_folder_is_not(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "jobs").mkdir(parents=True)
    start = since()
    (checkout / "jobs" / "trial").mkdir()  # legitimate churn
    (checkout / "results").mkdir()
    assert changed_since([(checkout, False)], start) == []
    (checkout / "numpy").mkdir()
    (checkout / "numpy" / "__init__.py").write_text("")  # would shadow the installed numpy
    assert changed_since([(checkout, False)], start) == [str(checkout / "numpy")]
