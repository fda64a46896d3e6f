"""``metakernelbench.judge.final`` (a task's verifier step): what it leaves when the grade cannot finish."""

from __future__ import annotations

import json

from judge_support import TASK, FakeIsolation, fake_judge

from metakernelbench.judge import final
from metakernelbench.judge.client import JudgeClient


def final_grade(tmp_path, monkeypatch, grading_s: float, *extra: str) -> tuple[dict, dict]:
    """``final.main`` against a fake judge whose evaluation takes ``grading_s``: (reward.json, grade.json)."""
    running = fake_judge(tmp_path / "state", FakeIsolation(grading_s))
    try:
        admin = JudgeClient(running.url, running.admin_token)
        monkeypatch.setenv("MKB_JUDGE_TOKEN", admin.request("POST", "/v1/tokens", {"scope": "final"})["token"])
        kernel = tmp_path / "kernel.py"
        kernel.write_text("def solve(x):\n    return x\n")
        out = tmp_path / "verifier"
        assert final.main(["--task", TASK, "--kernel", str(kernel), "--out", str(out), "--judge", running.url,
                           *extra]) == 0
    finally:
        running.stop()
    return json.loads((out / "reward.json").read_text()), json.loads((out / "grade.json").read_text())


def test_a_grade_past_the_verifiers_wait_names_the_limit(tmp_path, monkeypatch):
    """The judge is still grading when the verifier's --timeout runs out: reward.json is an infra error
    (never scored), and grade.json says which limit was hit and how long it was, not only 'failed'."""
    reward, grade = final_grade(tmp_path, monkeypatch, 3.0, "--timeout", "1")
    assert reward["infra_error"] == 1.0 and reward["reward"] == 0.0
    assert grade["status"] == "INFRA_ERROR"
    assert "after 1 s" in grade["message"] and "--timeout" in grade["message"], grade["message"]


def test_a_finished_grade_is_written_as_the_judge_gave_it(tmp_path, monkeypatch):
    reward, grade = final_grade(tmp_path, monkeypatch, 0.05)
    assert grade["status"] == "PASSED" and reward["infra_error"] == 0.0
