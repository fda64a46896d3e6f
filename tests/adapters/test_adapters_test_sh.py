"""The generated tests/test.sh: it gets the final grade from the judge, and always leaves a reward.json.

The script is run for real with bash, its container paths (/logs/verifier, /app, /run/mkb-judge)
moved into a temporary folder, the task's own vendored client on PYTHONPATH, against a judge in
this process whose evaluations are faked (``judge_support``).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from adapters_support import T28

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "judge"))
from judge_support import FakeIsolation, fake_judge  # noqa: E402

from metakernelbench.judge.client import JudgeClient  # noqa: E402


@pytest.fixture
def judge(tmp_path):
    running = fake_judge(tmp_path / "state", FakeIsolation(0.05))
    yield running
    running.stop()


def _run(built, tmp_path, url, token, kernel: str | None = "def solve(*a):\n    pass\n", token_file=False):
    out, _ = built
    task = out / f"{T28}_tirx"
    root = tmp_path / "root"
    script = (task / "tests/test.sh").read_text()
    script = (script.replace("/logs/verifier", f"{root}/logs/verifier")
              .replace("/app/kernel.py", f"{root}/app/kernel.py").replace("/run/mkb-judge", f"{root}/run"))
    (root / "app").mkdir(parents=True)
    (root / "run").mkdir()
    (root / "test.sh").write_text(script)
    if kernel is not None:
        (root / "app/kernel.py").write_text(kernel)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MKB_")}
    env.update(PYTHONPATH=str(task / "tests/client"), MKB_JUDGE_URL=url, MKB_JUDGE_RECONNECT_S="1")
    if token_file:
        (root / "run/final.token").write_text(token + "\n")
    else:
        env["MKB_JUDGE_TOKEN"] = token
    run = subprocess.run(["bash", str(root / "test.sh")], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    logs = root / "logs/verifier"
    grade = json.loads((logs / "grade.json").read_text()) if (logs / "grade.json").exists() else None
    return json.loads((logs / "reward.json").read_text()), grade, run.stdout


def _final_token(judge):
    return JudgeClient(judge.url, judge.admin_token).request("POST", "/v1/tokens", {"scope": "final"})["token"]


@pytest.mark.parametrize("token_file", [False, True])
def test_the_judges_final_grade_becomes_the_reward(built, tmp_path, judge, token_file):
    reward, grade, stdout = _run(built, tmp_path, judge.url, _final_token(judge), token_file=token_file)
    assert reward == {"reward": 2.0, "passed": 1.0, "speedup": 2.0, "kernel_ms": 1.0, "eager_ms": 2.0,
                      "infra_error": 0.0}
    assert grade["status"] == "PASSED" and grade["problem"] == T28
    assert "status: PASSED" in stdout
    final = [s for s in judge.store.submissions() if s.kind == "final"]
    assert len(final) == 1 and final[0].task == f"metakernelbench/{T28}_tirx" and not final[0].charged


def test_a_failed_kernel_scores_zero_without_infra(built, tmp_path, judge):
    reward, grade, _ = _run(built, tmp_path, judge.url, _final_token(judge), kernel="FAIL = 1\n")
    assert reward["reward"] == 0 and reward["passed"] == 0 and reward["infra_error"] == 0
    assert grade["status"] == "INCORRECT"


def test_an_unreachable_judge_is_an_infra_error(built, tmp_path):
    reward, _, _ = _run(built, tmp_path, f"unix:{tmp_path}/nobody.sock", "mkb-final-x")
    assert reward["infra_error"] == 1 and reward["reward"] == 0


def test_a_refused_token_is_an_infra_error(built, tmp_path, judge):
    reward, _, _ = _run(built, tmp_path, judge.url, "mkb-final-forged")
    assert reward["infra_error"] == 1 and reward["reward"] == 0


def test_a_missing_kernel_is_a_failed_attempt_not_an_infra_error(built, tmp_path, judge):
    reward, grade, _ = _run(built, tmp_path, judge.url, _final_token(judge), kernel=None)
    assert reward["infra_error"] == 0 and reward["reward"] == 0
    assert grade["status"] == "COMPILE_ERROR" and grade["passed"] is False
    assert not [s for s in judge.store.submissions() if s.kind == "final"]
