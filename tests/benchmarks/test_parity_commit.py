"""The parity record names the original's commit truly, whether the original is a checkout or a copy.

A copy of the original's files inside another repository (how a GPU host without network gets it)
must not be recorded under that repository's HEAD.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from benchmarks.h200_parity import REPO, _original_commit


def test_a_copy_inside_another_checkout_is_not_named_by_that_checkouts_head(tmp_path):
    copy = Path(tempfile.mkdtemp(prefix=".pytest-parity-", dir=REPO))  # a folder of this checkout, not its top
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
        named = _original_commit(copy, None)
        assert named != head
        assert named in (REPO / "problems" / "catalog.toml").read_text()
        assert _original_commit(copy, "1234abc") == "1234abc"
    finally:
        copy.rmdir()


def test_a_checkout_of_its_own_is_named_by_its_head(tmp_path):
    repo = tmp_path / "original"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "README.md").write_text("x\n")
    subprocess.run([*git, "add", "README.md"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=repo).stdout.strip()
    assert _original_commit(repo, "ignored") == head
