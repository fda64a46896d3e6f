"""Quote matching (what counts as verbatim) and the bounded text of an ATIF trajectory."""

import json

from metakernelbench.skill_transfer.quotes import missing_quotes, quote_found
from metakernelbench.skill_transfer.trajectory import clip, read_trajectory

SOURCE = "Keeping the reduction in fp32 was necessary;\n  bf16 accumulation failed the “anchor” check."


def test_quotes_forgive_whitespace_case_quotes_and_ellipses():
    assert quote_found("bf16 accumulation FAILED the \"anchor\" check", SOURCE)
    assert quote_found("Keeping the reduction ... the “anchor” check", SOURCE)
    assert not quote_found("the anchor check ... Keeping the reduction", SOURCE)  # fragments out of order
    assert not quote_found("fp16 accumulation failed", SOURCE)
    assert not quote_found(" ... ", SOURCE)
    assert missing_quotes(["fp32", "tf32"], SOURCE, "skill") == ["quote not found in the skill: 'tf32'"]


def test_trajectory_text(tmp_path):
    steps = [
        {"step_id": 1, "source": "user", "message": "Write a kernel."},
        {"step_id": 2, "source": "agent", "message": [{"type": "text", "text": "Following the notes."}],
         "tool_calls": [{"tool_call_id": "a", "function_name": "bash", "arguments": {"cmd": "submit"}}],
         "observation": {"results": [{"content": "status PASSED " + "x" * 5000}]}},
    ]
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "trajectory.json").write_text(json.dumps({"steps": steps}))
    text = read_trajectory(tmp_path, max_chars=10_000, max_output_chars=200)
    assert "[step 1] user:\nWrite a kernel." in text and "Following the notes." in text
    assert '(tool call bash) {"cmd": "submit"}' in text and "characters left out" in text
    assert len(read_trajectory(tmp_path, max_chars=300)) <= 300
    (tmp_path / "agent" / "trajectory.json").write_text("{not json")
    assert read_trajectory(tmp_path) == "" and read_trajectory(tmp_path / "nowhere") == ""


def test_clip_keeps_head_and_tail():
    out = clip("a" * 50 + "b" * 50, 80)
    assert out.startswith("a" * 10) and out.endswith("b" * 10) and len(out) <= 80
