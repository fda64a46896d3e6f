"""The README's main job on a CPU-only machine: ``python -m demo.study``, a four-arm study in miniature.

One problem (28), so four Terminus-2 trials: solo TIRx and CuTe DSL, then each DSL given the other's
SKILL.md. Asserted: the four arms' rows in the attempts table with the judge's verdicts on this
machine (TIRx compiled for the CPU passes; CuTe DSL cannot run without a GPU), each transfer attempt's
model shown the source attempt's SKILL.md verbatim, and the report marked as a demonstration.

The solo TIRx trial is also the end-to-end test of one whole Terminus-2 attempt (``harbor run -a
terminus-2 -m openai/mkb-scripted`` on problem 28's TIRx task in the no-Docker mode: Terminus-2 drives
a tmux shell in the sandbox; the scripted OpenAI-compatible model of ``demo/``, reached through LiteLLM
as any provider is, writes the CPU (llvm) TIRx kernel, checks it on the CPU, submits it, writes
SKILL.md from the judge's report and marks the task complete). Asserted on it: the reward and grade
from the judge's final grade, what the model was shown, the agent's trajectory and pane log, the
SKILL.md quoting the report it was written from, and the row ``mkb collect`` makes of the trial. One
study serves both, so the suite runs these Harbor trials once.

Needs root (or user namespaces), ``unshare`` and tmux (Terminus-2 would try to install tmux with the
sandbox's package manager, which has no network here).
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

from metakernelbench.harbor_env import unshare_problem

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from demo.attempt_script import DIFF_RE, NOTES_HEADER, step_name, task_of  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "skill_transfer"))
from annotator_stub import StubModelServer, layer_of, section  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from metakernelbench.cli import app  # noqa: E402
from metakernelbench.skill_transfer.annotate import read_annotations  # noqa: E402

BIN = Path(sys.executable).parent
TASK = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"
KERNEL = REPO / "tests" / "fixtures" / "kernels" / "rmsnorm_tirx_llvm.py"
MODEL = "openai/mkb-scripted"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 and unshare_problem() is not None,
                       reason=f"the local environment cannot isolate here: {unshare_problem()}"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="Terminus-2 needs tmux in the sandbox"),
]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "study"
    done = subprocess.run([sys.executable, "-m", "demo.study", "--out", str(out), "--problems", "28"], cwd=REPO,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out, done.stdout


@pytest.fixture(scope="module")
def solo_tirx(study):
    """The solo TIRx trial of the study: its job folder, its trial folder and the model's exchanges."""
    out, _ = study
    jobs = sorted((out / "jobs").glob("*__solo_tirx"))
    assert len(jobs) == 1, [p.name for p in (out / "jobs").iterdir()]
    trials = [p for p in jobs[0].iterdir() if p.is_dir()]
    assert len(trials) == 1, [p.name for p in trials]
    exchanges = []
    for line in (out / "model.jsonl").read_text().splitlines():
        exchange = json.loads(line)
        first = exchange["messages"][0]["content"]
        if task_of(first)[0] == TASK and NOTES_HEADER not in first:
            exchanges.append(exchange)
    return jobs[0], trials[0], exchanges


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


def test_terminus_reward_from_the_judges_final_grade(solo_tirx):
    _, trial, _ = solo_tirx
    reward = json.loads((trial / "verifier" / "reward.json").read_text())
    assert reward["passed"] == 1 and reward["reward"] > 0 and reward["infra_error"] == 0
    grade = json.loads((trial / "verifier" / "grade.json").read_text())
    assert grade["status"] == "PASSED" and grade["dsl"] == "tirx"
    result = json.loads((trial / "result.json").read_text())
    assert result["exception_info"] is None
    assert result["agent_info"]["name"] == "terminus-2"
    assert result["verifier_result"]["rewards"]["reward"] == reward["reward"]
    assert (trial / "artifacts" / "app" / "kernel.py").read_text() == KERNEL.read_text()


def test_terminus_drove_the_sandbox(solo_tirx):
    _, trial, exchanges = solo_tirx
    assert exchanges and not [e for e in exchanges if "error" in e]
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


def test_terminus_skill_written_from_the_report(solo_tirx):
    _, trial, exchanges = solo_tirx
    skill = (trial / "artifacts" / "app" / "SKILL.md").read_text()
    speedup = re.search(r"speedup: ([0-9.]+)x", feedback_report(exchanges))[1]
    assert f"graded the submitted kernel PASSED, at {speedup} times the eager reference" in skill
    seen = "".join(m["content"] or "" for e in exchanges for m in e["messages"][1:] if m["role"] == "user")
    diff = re.findall(DIFF_RE, seen)[-1]
    assert f"its largest difference from the reference was {diff}." in skill


def test_mkb_collect_reads_the_terminus_trial(solo_tirx, tmp_path):
    job, trial, _ = solo_tirx
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


def test_four_arms_with_the_judges_verdicts(study):
    out, _ = study
    rows = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    arms = {(r["arm"], r["source_dsl"], r["dsl"]): r for r in rows}
    assert len(rows) == 4 and set(arms) == {("solo", None, "tirx"), ("solo", None, "cutedsl"),
                                            ("transfer", "cutedsl", "tirx"), ("transfer", "tirx", "cutedsl")}
    assert all(r["model"] == "openai/mkb-scripted" and r["problem"].startswith("28_") for r in rows)
    for (_, _, dsl), row in arms.items():
        assert row["status"] == ("PASSED" if dsl == "tirx" else "RUNTIME_ERROR"), row
        assert row["skill_chars"] > 0


def test_transfer_attempts_saw_the_source_skill(study):
    out, _ = study
    conversations = {}
    for line in (out / "model.jsonl").read_text().splitlines():
        first = json.loads(line)["messages"][0]["content"]
        conversations.setdefault(task_of(first)[0], set()).add(first)
    skills = {p.parts[-5].split("__")[1]: p.read_text() for p in (out / "jobs").glob("*/*/artifacts/app/SKILL.md")}
    for task, instructions in conversations.items():
        given = [i for i in instructions if NOTES_HEADER in i]
        assert len(instructions) == 2 and len(given) == 1, task  # one solo, one transfer attempt per task
        source = "solo_tirx" if task.endswith("_cutedsl") else "solo_cutedsl"
        assert skills[source] in given[0]


def test_report_marked_as_a_demonstration(study):
    out, stdout = study
    assert "DEMONSTRATION RUN, NOT A MEASUREMENT" in (out / "report" / "index.html").read_text()
    assert "[demo" in stdout and "trial finished" in stdout
    assert stdout.rstrip().endswith(f"Report of this demonstration run (not a measurement): "
                                    f"{out / 'report' / 'index.html'}")


def _first_line(text):
    return next(line for line in text.splitlines() if line.strip()).strip()


def _annotator(messages):
    """A deterministic annotator that quotes what it is shown (the real job folders' skills and
    trajectories), as the schema of each layer asks."""
    layer = layer_of(messages)
    if layer == "labels":
        return 200, json.dumps({"labels": [{"category": "evidence_backed_finding",
                                            "quote": _first_line(section(messages, "SKILL"))}]})
    if layer == "follow":
        return 200, json.dumps({"level": "partial", "evidence": [_first_line(section(messages, "TRAJECTORY"))],
                                "rationale": "stub"})
    if layer == "propagation":
        claim = _first_line(section(messages, "SOURCE SKILL"))
        target = section(messages, "TARGET SKILL")
        return 200, json.dumps({"claims": [{"claim": claim, "verified": False, "support": None,
                                            "reappears": claim if claim in target else None}]})
    return 200, json.dumps({"primary_class": "toolchain_friction",
                            "evidence": [_first_line(section(messages, "TRAJECTORY"))], "rationale": "stub"})


def test_annotate_and_report_on_the_terminus_job_folders(study, tmp_path):
    """``mkb annotate`` + ``mkb report`` over the real Harbor job folders Terminus-2 left (a stub
    annotator model: no network)."""
    out, _ = study
    attempts = tmp_path / "attempts.jsonl"
    shutil.copy(out / "attempts.jsonl", attempts)
    os.environ.setdefault("OPENAI_API_KEY", "stub-local")
    with StubModelServer(_annotator) as server:
        done = CliRunner().invoke(app, ["annotate", str(attempts), str(out / "jobs"), "--model",
                                        "openai/stub-annotator", "--api-base", server.base_url])
        assert done.exit_code == 0, done.output
    records = read_annotations(tmp_path / "attempts.annotations.jsonl")
    layers = sorted({(r.layer, r.direction) for r in records})
    # both transfer attempts left a skill and had a source skill: labels, follow and propagation each
    for layer in ("labels", "follow", "propagation"):
        assert (layer, "cutedsl2tirx") in layers and (layer, "tirx2cutedsl") in layers, layers
    assert all(r.status == "labelled" for r in records), [(r.layer, r.status, r.error) for r in records]
    report = tmp_path / "report"
    done = CliRunner().invoke(app, ["report", str(attempts), "-o", str(report), "--n-boot", "50"])
    assert done.exit_code == 0, done.output
    md = (report / "report.md").read_text()
    assert "Annotator: openai/stub-annotator" in md
    for table in ("annotation_labels.csv", "annotation_follow.csv", "annotation_propagation.csv"):
        assert (report / table).read_text().count("\n") >= 2, table
