"""The scripted model's conversation logic: the step it plays is read from the history alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from demo.attempt_script import (  # noqa: E402
    CONFIRM,
    MAX_POLLS,
    NOTES_HEADER,
    AttemptContext,
    heredoc,
    next_reply,
    skill_text,
    task_of,
)

TASK = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"
INSTRUCTION = (REPO / "tasks" / TASK / "instruction.md").read_text()
KERNELS = {TASK: REPO / "tests" / "fixtures" / "kernels" / "rmsnorm_tirx_llvm.py"}
REPORT = "status: PASSED\nspeedup: 2.500x (scored 2.500x, cap 100x)\nsubmissions left: 9\n[submit exit code 0]\n"


def play(outputs: list[str], instruction: str = INSTRUCTION) -> list[dict]:
    """Run the conversation: each reply is answered with the next terminal output."""
    messages = [{"role": "user", "content": instruction}]
    replies = []
    for output in outputs:
        reply = next_reply(messages, KERNELS)
        replies.append(json.loads(reply))
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": output}]
    return replies


def plan_names(replies: list[dict]) -> list[str]:
    return [r["plan"].split(")")[0].removeprefix("(step ").removeprefix("(") for r in replies]


def test_task_named_by_a_real_instruction():
    assert task_of(INSTRUCTION) == (TASK, "tirx")
    assert task_of("write a kernel") is None


def test_the_attempt_in_order_with_waits_until_each_command_finishes():
    outputs = ["ls output", "kernel written", "still compiling", "[local check exit code 0]",
               "evaluating", REPORT, "skill written", CONFIRM]
    replies = play(outputs)
    assert plan_names(replies) == ["look", "write-kernel", "check-kernel", "waiting for check-kernel to finish",
                                   "submit", "waiting for submit to finish", "write-skill", "finish"]
    kernel = replies[1]["commands"][0]["keystrokes"]
    assert kernel.startswith("cat > /app/kernel.py <<'MKB_EOF'\n") and KERNELS[TASK].read_text() in kernel
    assert replies[3]["commands"] == [{"keystrokes": "", "duration": 3.0}]  # a poll waits, typing nothing
    skill = replies[6]["commands"][0]["keystrokes"]
    assert "graded the submitted kernel PASSED, at 2.500 times the eager reference" in skill
    assert replies[-1]["task_complete"] is True and replies[-1]["commands"] == []
    # Terminus-2 asks for confirmation: the model confirms
    confirm = json.loads(next_reply([{"role": "user", "content": INSTRUCTION},
                                     {"role": "assistant", "content": json.dumps(replies[-1])},
                                     {"role": "user", "content": CONFIRM}], KERNELS))
    assert confirm["task_complete"] is True


def test_a_marker_typed_as_part_of_the_command_does_not_end_the_wait():
    typed = 'submit; echo "[submit exit code $?]"'
    replies = play(["ls", "written", "[local check exit code 0]", typed, typed])
    assert plan_names(replies)[-1] == "waiting for submit to finish"


def test_the_script_moves_on_when_the_polls_run_out():
    outputs = ["ls", "written", "[local check exit code 0]"] + ["evaluating"] * (MAX_POLLS + 2)
    names = plan_names(play(outputs))
    assert names.count("waiting for submit to finish") == MAX_POLLS and names[-1] == "write-skill"


def test_notes_from_the_other_dsl_are_noticed():
    with_notes = INSTRUCTION + "\n\n" + NOTES_HEADER + "\n\nsome notes\n"
    first = play(["ls"], with_notes)[0]
    assert "notes from an attempt in the other DSL" in first["analysis"]
    assert "notes" not in play(["ls"])[0]["analysis"]


def test_evidence_in_the_skill_file():
    base = dict(task=TASK, dsl="tirx", kernel="", notes_given=False)
    failed = skill_text(AttemptContext(**base, terminal="[local check exit code 1]\nstatus: RUNTIME_ERROR\n"))
    assert "graded the submitted kernel RUNTIME_ERROR." in failed and "did not complete" in failed
    typed_only = skill_text(AttemptContext(**base, terminal=(
        'print(f"largest difference from the reference on the small workload: {worst:.3g}")\n'
        "[local check exit code 1]\n")))
    assert "did not complete" in typed_only  # the typed format string is no evidence
    silent = skill_text(AttemptContext(**base, terminal=""))
    assert "report never arrived" in silent and "not checked on the CPU" in silent


def test_refusals():
    with pytest.raises(ValueError, match="no kernel is prepared"):
        next_reply([{"role": "user", "content": INSTRUCTION}], {})
    with pytest.raises(ValueError, match="names no MetaKernelBench task"):
        next_reply([{"role": "user", "content": "hello"}], KERNELS)
    with pytest.raises(ValueError, match="delimiter"):
        heredoc("/app/x", "a\nMKB_EOF\nb\n")
