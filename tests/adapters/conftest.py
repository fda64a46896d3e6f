"""Fixtures for the task generator: a private problems folder and one build of it.

The tests copy two pilot problems (28: one output; 25: in-place only) into a temporary problems
root, so they do not depend on whatever other problem files are being added meanwhile, and so a
problem can be deleted to test stale-folder removal.
"""

import pytest
from adapters_support import ORACLES, copy_problems

from metakernelbench.adapters.build import build


@pytest.fixture
def workspace(tmp_path):
    """(problems root, tasks out, manifest path) in a fresh temporary folder."""
    return copy_problems(tmp_path / "problems"), tmp_path / "tasks", tmp_path / "dataset.toml"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build of problems 28 and 25 (four tasks), shared by read-only tests."""
    root = tmp_path_factory.mktemp("build")
    problems = copy_problems(root / "problems")
    out, manifest = root / "tasks", root / "dataset.toml"
    build(problems, out, manifest, ORACLES)
    return out, manifest
