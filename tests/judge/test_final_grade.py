"""``metakernelbench.judge.final`` (a task's verifier step): what it leaves when the grade cannot finish."""

from __future__ import annotations

import json

from judge_support import TASK, FakeIsolation, fake_judge

from metakernelbench.judge import final
from metakernelbench.judge.client import JudgeClient


def test_a_grade_past_the_verifiers_wait_names_the_limit(tmp_path, monkeypatch):
    """The judge is still grading when the verifier's --timeout runs out: reward.json is an infra error
    (never scored), and grade.json says which limit was hit and how long it was, not only 'failed'."""
    running = fake_judge(tmp_path / "state", FakeIsolation(3.0))
    try:
        admin = JudgeClient(running.url, running.admin_token)
        token = admin.request("POST", "/v1/tokens", {"scope": "final"})["token"]
        kernel = tmp_path / "kernel.py"
        kernel.write_text("def solve(x):\n    return x\n")
        monkeypatch.setenv("MKB_JUDGE_TOKEN", token)
        out = tmp_path / "verifier"
        assert final.main(["--task", TASK, "--kernel", str(kernel), "--out", str(out), "--judge", running.url,
                           "--timeout", "1"]) == 0
    finally:
        running.stop()
    reward = json.loads((out / "reward.json").read_text())
    grade = json.loads((out / "grade.json").read_text())
    assert reward["infra_error"] == 1.0 and reward["reward"] == 0.0
    assert grade["status"] == "INFRA_ERROR"
    assert "after 1 s" in grade["message"] and "--timeout" in grade["message"], grade["message"]


def test_a_finished_grade_is_written_as_the_judge_gave_it(tmp_path, monkeypatch):
    running = fake_judge(tmp_path / "state", FakeIsolation(0.05))
    try:
        admin = JudgeClient(running.url, running.admin_token)
        monkeypatch.setenv("MKB_JUDGE_TOKEN", admin.request("POST", "/v1/tokens", {"scope": "final"})["token"])
        kernel = tmp_path / "kernel.py"
        kernel.write_text("def solve(x):\n    return x\n")
        out = tmp_path / "verifier"
        final.main(["--task", TASK, "--kernel", str(kernel), "--out", str(out), "--judge", running.url])
    finally:
        running.stop()
    grade = json.loads((out / "grade.json").read_text())
    assert grade["status"] == "PASSED" and json.loads((out / "reward.json").read_text())["infra_error"] == 0.0
