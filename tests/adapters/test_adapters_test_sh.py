"""The generated tests/test.sh: Harbor always finds a reward.json, and a broken grader is an infra error.

The script is run for real with bash, its container paths (/logs/verifier, /app, /tests) moved
into a temporary folder and a fake ``mkb`` on PATH that behaves as each case needs.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from adapters_support import T28

FAKE_MKB = """#!/usr/bin/env bash
echo "$@" > "{root}/mkb-args"
{body}
"""


def _run(built, tmp_path, body, kernel=True):
    out, _ = built
    task = out / f"{T28}_tirx"
    root = tmp_path
    script = (task / "tests/test.sh").read_text()
    script = (script.replace("/logs/verifier", f"{root}/logs/verifier")
              .replace("/app/kernel.py", f"{root}/app/kernel.py")
              .replace("/tests/", f"{root}/tests/"))
    (root / "test.sh").write_text(script)
    (root / "app").mkdir()
    if kernel:
        (root / "app/kernel.py").write_text("def solve(*a):\n    pass\n")
    bindir = root / "bin"
    bindir.mkdir()
    (bindir / "mkb").write_text(FAKE_MKB.format(root=root, body=body))
    (bindir / "mkb").chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    run = subprocess.run(["bash", str(root / "test.sh")], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    logs = root / "logs/verifier"
    grade = json.loads((logs / "grade.json").read_text()) if (logs / "grade.json").exists() else None
    return json.loads((logs / "reward.json").read_text()), grade, root


def test_grader_reward_is_kept_and_called_with_the_contract_arguments(built, tmp_path):
    reward = {"reward": 2.5, "passed": 1, "speedup": 2.5, "kernel_ms": 1.0, "eager_ms": 2.5,
              "infra_error": 0}
    body = f"echo '{json.dumps(reward)}' > \"${{@: -1}}\"/reward.json"
    got, _, root = _run(built, tmp_path, body)
    assert got == reward
    args = (root / "mkb-args").read_text().split()
    assert args == ["grade", f"{root}/tests/problems/mlp_norm/{T28}.py", f"{root}/app/kernel.py",
                    "--dsl", "tirx", "--reward-dir", f"{root}/logs/verifier"]


@pytest.mark.parametrize("body", [
    "exit 3",  # the grader crashes before writing anything
    "echo '{\"reward\": NaN}' > \"${@: -1}\"/reward.json; exit 0",  # not finite
    "echo 'not json' > \"${@: -1}\"/reward.json",
    "echo '{\"passed\": 1}' > \"${@: -1}\"/reward.json",  # no reward key
])
def test_a_grader_that_cannot_grade_is_an_infra_error(built, tmp_path, body):
    got, _, _ = _run(built, tmp_path, body)
    assert got["infra_error"] == 1 and got["reward"] == 0 and got["passed"] == 0


def test_a_missing_kernel_is_a_failed_attempt_not_an_infra_error(built, tmp_path):
    got, grade, root = _run(built, tmp_path, "exit 0", kernel=False)
    assert got["infra_error"] == 0 and got["reward"] == 0
    assert grade["status"] == "COMPILE_ERROR" and grade["passed"] is False
    assert not (root / "mkb-args").exists()
