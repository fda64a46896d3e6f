"""End to end on the CPU: a plain ``harbor run`` of two real tasks in the no-Docker mode.

``harbor run -p tasks -i 28_..._tirx -i 25_..._tirx -n 2 -a scripted_agent:ScriptedAgent
-e metakernelbench.harbor_env:LocalEnvironment``, with a judge that grades the TIRx
``llvm`` fixtures on the CPU at the small workloads (fewer timed calls, to keep it to minutes). The
two trials run at once and share the judge. Asserted: the reports (status, mismatch and allowance,
speedup, submissions and minutes left), that a parse error and a missing file are not charged, the
judge restart in the middle of trial 28 losing nothing, the 10-submission limit, SKILL.md and
kernel.py collected, reward.json written from the judge's final grade, and that no two evaluations
ever overlapped in time.

Needs root (or user namespaces) and ``unshare``: the local environment isolates each trial in a
mount namespace; elsewhere the test is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metakernelbench.harbor_env import stop_judge, unshare_problem
from metakernelbench.judge.store import Store

REPO = Path(__file__).resolve().parents[2]
HARBOR = Path(sys.executable).with_name("harbor")
T28 = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"
T25 = "25_batched_kv_cache_block_copy_remap_uint8_tirx"
# --watch site: the checkout itself may be edited by its developers while the test runs
JUDGE_ARGS = "--devices cpu --small --draws 2 --warmup 2 --timed 5 --rechecks 1 --watch site"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 and unshare_problem() is not None,
                       reason=f"the local environment cannot isolate here: {unshare_problem()}"),
]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    state = root / "judge"
    env = {**os.environ, "PYTHONPATH": f"{Path(__file__).parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "MKB_E2E_JUDGE_STATE": str(state), "MKB_E2E_JUDGE_ARGS": JUDGE_ARGS}
    cmd = [str(HARBOR), "run", "-p", str(REPO / "tasks"), "-i", T28, "-i", T25, "-n", "2",
           "-a", "scripted_agent:ScriptedAgent",
           "-e", "metakernelbench.harbor_env:LocalEnvironment",
           "--ek", f"judge_state={state}", "--ek", f"judge_args={JUDGE_ARGS}",
           "-o", str(root / "jobs"), "--job-name", "e2e", "-y"]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200, cwd=root)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        store = Store(state / "judge.db")
        yield root / "jobs" / "e2e", store, done
        store.close()
    finally:
        stop_judge(state)


def trial(job_dir: Path, task: str) -> Path:
    found = [p for p in job_dir.iterdir() if p.is_dir() and p.name.startswith(task[:32])]
    assert len(found) == 1, [p.name for p in job_dir.iterdir()]
    return found[0]


def steps(trial_dir: Path) -> dict[str, dict]:
    return {s["label"]: s for s in json.loads((trial_dir / "agent" / "script.json").read_text())}


def test_feedback_reports_and_the_budget(job):
    job_dir, _, _ = job
    s = steps(trial(job_dir, T28))
    assert "has-submit" in s["instruction-files"]["stdout"] and "tirx-api" in s["instruction-files"]["stdout"]
    assert s["no-kernel"]["rc"] == 2 and "not charged" in s["no-kernel"]["stdout"]
    wrong = s["wrong"]["stdout"]
    assert s["wrong"]["rc"] == 0 and "status: INCORRECT" in wrong
    assert "first mismatch: output 'output'" in wrong and "x the allowance" in wrong
    assert "submissions left: 9" in wrong and "minutes left: " in wrong
    assert s["parse-error-local"]["rc"] == 2 and "does not parse" in s["parse-error-local"]["stdout"]
    direct = json.loads(s["parse-error-judge"]["stdout"])
    assert direct["state"] == "rejected" and not direct["charged"] and direct["submissions_left"] == 9
    assert s["judge-restart"]["stopped"]
    assert "submissions left: 9 of 10" in s["status-after-restart"]["stdout"]
    right = s["right"]["stdout"]
    assert "status: PASSED" in right and "speedup: " in right and "submissions left: 8" in right
    for i in range(8):
        assert "status: RULE_VIOLATION" in s[f"rule-{i}"]["stdout"]
        assert f"submissions left: {7 - i}" in s[f"rule-{i}"]["stdout"]
    over = s["over-budget"]
    assert over["rc"] == 2 and "no submissions left" in over["stdout"] and "not charged" in over["stdout"]


def test_budget_in_the_judges_records(job):
    _, store, _ = job
    attempt = store.attempt_by_key(trial(job[0], T28).name)
    subs = store.submissions(attempt.id)
    feedback = [x for x in subs if x.kind == "feedback"]
    assert sum(x.charged for x in feedback) == 10
    refused = [x for x in feedback if x.state == "rejected"]
    assert [x.message for x in refused][0].startswith("the kernel file does not parse")
    assert "no submissions left" in refused[-1].message and not any(x.charged for x in refused)
    final = [x for x in store.submissions() if x.kind == "final"]
    assert len(final) == 2 and all(x.status == "PASSED" for x in final)
    assert {x.attempt_id for x in final} == {attempt.id, store.attempt_by_key(trial(job[0], T25).name).id}


def test_final_grade_reward_and_artifacts(job):
    job_dir, _, _ = job
    for task in (T28, T25):
        t = trial(job_dir, task)
        reward = json.loads((t / "verifier" / "reward.json").read_text())
        assert reward["passed"] == 1 and reward["reward"] > 0 and reward["infra_error"] == 0
        grade = json.loads((t / "verifier" / "grade.json").read_text())
        assert grade["status"] == "PASSED" and grade["dsl"] == "tirx"
        result = json.loads((t / "result.json").read_text())
        assert result["verifier_result"]["rewards"]["passed"] == 1
        assert (t / "artifacts" / "app" / "SKILL.md").read_text().startswith("# Skill")
        assert "def solve" in (t / "artifacts" / "app" / "kernel.py").read_text()


def test_two_attempts_never_time_concurrently(job):
    _, store, _ = job
    evaluations = store.evaluations()
    spans = sorted((e["started_at"], e["finished_at"]) for e in evaluations if e["outcome"] != "interrupted")
    # 28: wrong, right, 8 rule violations; 25: right; two final grades (an evaluation that the judge
    # restart interrupted ran again and appears once more, marked interrupted)
    assert len(spans) == 13 and all(e["finished_at"] for e in evaluations)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    # the two trials really competed: some submission was queued while another one was being evaluated
    subs = [x for x in store.submissions() if x.started_at]
    assert any(o.attempt_id != x.attempt_id and o.started_at < x.queued_at < o.finished_at
               for x in subs for o in subs)
