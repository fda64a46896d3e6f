"""End to end on the CPU: Harbor's own ``terminus-2`` agent makes a whole attempt on a real task.

``harbor run -a terminus-2 -m openai/mkb-scripted --ak api_base=<local server>`` on problem 28's TIRx
task in the no-Docker mode: Terminus-2 drives a tmux shell in the sandbox, its model is the scripted
OpenAI-compatible server of ``demo/`` (LiteLLM talks to it as to any provider), which writes the CPU
(llvm) TIRx kernel, checks it against the reference on the CPU, submits it to the judge, writes
SKILL.md from the judge's report and marks the task complete. Asserted: the reward and grade from the
judge's final grade, the collected SKILL.md quoting the report it was written from, the agent's
trajectory and pane log, what the model was shown, and the row ``mkb collect`` makes of the trial.

Needs root (or user namespaces) and ``unshare``, like the other end-to-end test; tmux must be
installed (Terminus-2 would try to install it with the sandbox's package manager, which has no
network here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from metakernelbench.harbor_env import stop_judge, unshare_problem

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from demo.attempt_script import DIFF_RE, step_name  # noqa: E402
from demo.scripted_model import ModelConfig, serve_in_thread  # noqa: E402

BIN = Path(sys.executable).parent
TASK = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"
KERNEL = REPO / "tests" / "fixtures" / "kernels" / "rmsnorm_tirx_llvm.py"
MODEL = "openai/mkb-scripted"
JUDGE_ARGS = "--devices cpu --small --draws 2 --warmup 2 --timed 5 --rechecks 1 --watch site"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 and unshare_problem() is not None,
                       reason=f"the local environment cannot isolate here: {unshare_problem()}"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="Terminus-2 needs tmux in the sandbox"),
]


@pytest.fixture(scope="module")
def attempt(tmp_path_factory):
    root = tmp_path_factory.mktemp("terminus")
    state, log = root / "judge", root / "model.jsonl"
    server = serve_in_thread(ModelConfig(kernels={TASK: KERNEL}), log=log)
    # a placeholder key: LiteLLM's OpenAI client wants one; the local server ignores it.
    # LITELLM_LOCAL_MODEL_COST_MAP: LiteLLM would otherwise fetch its price list from the network.
    env = {**os.environ, "OPENAI_API_KEY": "scripted-local", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    cmd = [str(BIN / "harbor"), "run", "-p", str(REPO / "tasks"), "-i", TASK, "-a", "terminus-2", "-m", MODEL,
           "--ak", f"api_base={server.base_url}", "--ak", "record_terminal_session=false",
           "-e", "metakernelbench.harbor_env:LocalEnvironment",
           "--ek", f"judge_state={state}", "--ek", f"judge_args={JUDGE_ARGS}",
           "-o", str(root / "jobs"), "--job-name", "terminus", "-y"]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=root)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        trials = [p for p in (root / "jobs" / "terminus").iterdir() if p.is_dir()]
        assert len(trials) == 1, [p.name for p in trials]
        exchanges = [json.loads(line) for line in log.read_text().splitlines()]
        yield root / "jobs" / "terminus", trials[0], exchanges
    finally:
        server.shutdown()
        stop_judge(state)


def feedback_report(exchanges: list[dict]) -> str:
    """The terminal output in which the model saw the judge's report of its submission.

    Terminus-2 hands the model what the pane printed since its last look, so a report that takes
    longer than one poll arrives in pieces: everything after the ``submit`` step up to the message
    that shows submit's exit code is the report the model read.
    """
    for e in exchanges:
        messages = e["messages"]
        done = [i for i, m in enumerate(messages) if m["role"] == "user"
                and "[submit exit code 0]" in (m["content"] or "")]
        if not done:
            continue
        started = [i for i, m in enumerate(messages[:done[0]]) if m["role"] == "assistant"
                   and step_name(m["content"] or "") == "submit"]
        assert started, "submit finished before the model asked for it"
        return "\n".join(m["content"] or "" for m in messages[started[-1]:done[0] + 1] if m["role"] == "user")
    raise AssertionError("the model never saw submit finish")


def test_reward_from_the_judges_final_grade(attempt):
    _, trial, _ = attempt
    reward = json.loads((trial / "verifier" / "reward.json").read_text())
    assert reward["passed"] == 1 and reward["reward"] > 0 and reward["infra_error"] == 0
    grade = json.loads((trial / "verifier" / "grade.json").read_text())
    assert grade["status"] == "PASSED" and grade["dsl"] == "tirx"
    result = json.loads((trial / "result.json").read_text())
    assert result["exception_info"] is None
    assert result["agent_info"]["name"] == "terminus-2"
    assert result["verifier_result"]["rewards"]["reward"] == reward["reward"]
    assert (trial / "artifacts" / "app" / "kernel.py").read_text() == KERNEL.read_text()


def test_the_model_drove_the_sandbox_through_terminus(attempt):
    _, trial, exchanges = attempt
    assert not [e for e in exchanges if "error" in e]
    first = exchanges[0]["messages"][0]["content"]
    assert f"task `metakernelbench/{TASK}`" in first and "## The skill file: /app/SKILL.md" in first
    plans = [json.loads(e["reply"])["plan"] for e in exchanges]
    steps = [m[1] for p in plans if (m := re.match(r"\(step ([a-z-]+)\)", p))]
    assert steps == ["look", "write-kernel", "check-kernel", "submit", "write-skill", "finish", "confirm"]
    report = feedback_report(exchanges)
    assert "status: PASSED" in report and "submissions left: 9" in report
    budget = [m["content"] for e in exchanges for m in e["messages"] if "submissions left: 10 of 10" in
              (m["content"] or "")]
    assert budget, "submit --status did not answer in the sandbox's login shell"
    check = [m["content"] for e in exchanges for m in e["messages"] if "[local check exit code 0]" in
             (m["content"] or "")]
    assert check, "the kernel did not run on the CPU in the sandbox"
    pane = (trial / "agent" / "terminus_2.pane").read_text(errors="replace")
    assert "status: PASSED" in pane  # the report went through the tmux pane the agent reads
    trajectory = json.loads((trial / "agent" / "trajectory.json").read_text())
    assert trajectory["agent"]["name"] == "terminus-2" and len(trajectory["steps"]) >= len(exchanges)


def test_skill_written_from_the_report_and_collected(attempt):
    _, trial, exchanges = attempt
    skill = (trial / "artifacts" / "app" / "SKILL.md").read_text()
    speedup = re.search(r"speedup: ([0-9.]+)x", feedback_report(exchanges))[1]
    assert f"graded the submitted kernel PASSED, at {speedup} times the eager reference" in skill
    seen = "".join(m["content"] or "" for e in exchanges for m in e["messages"][1:] if m["role"] == "user")
    diff = re.findall(DIFF_RE, seen)[-1]
    assert f"its largest difference from the reference was {diff}." in skill


def test_mkb_collect_reads_the_trial(attempt, tmp_path):
    job, trial, _ = attempt
    out = tmp_path / "attempts.jsonl"
    done = subprocess.run([str(BIN / "mkb"), "collect", str(job), "-o", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1
    row = rows[0]
    reward = json.loads((trial / "verifier" / "reward.json").read_text())
    assert (row["model"], row["arm"], row["dsl"], row["status"], row["passed"]) == (
        MODEL, "solo", "tirx", "PASSED", True)
    assert row["problem"] == TASK.removesuffix("_tirx") and row["trial"] == trial.name
    assert row["speedup"] == pytest.approx(reward["speedup"])
    assert row["skill_chars"] == len((trial / "artifacts" / "app" / "SKILL.md").read_text())
    assert row["skill_violations"] == {"fenced_code": 0, "inline_code": 0, "shell_command": 0, "api_call": 0}
