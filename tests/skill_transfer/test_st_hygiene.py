"""The prose-only rule for skills: each kind of violation is found, prose is left alone."""

from typer.testing import CliRunner

from metakernelbench.cli import app
from metakernelbench.skill_transfer.hygiene import check_skill

CLEAN = """# Findings

- Splitting the reduction across warps helped (about 1.4x) once rows exceeded 4096.
- The softmax(x) normalisation had to stay in fp32; exp(x - max) avoided overflow.
- I tried to submit after every small change, which wasted feedback rounds.
- Open question: whether cute layouts with swizzling pay off for the 5-head case.
- A cat-and-mouse with the bypass test taught me that every output must come from a kernel.
"""


def kinds(text):
    return [v.kind for v in check_skill(text).violations]


def test_prose_is_clean():
    report = check_skill(CLEAN)
    assert report.clean, report.violations
    assert report.counts == {"fenced_code": 0, "inline_code": 0, "shell_command": 0, "api_call": 0}
    assert report.chars == len(CLEAN)


def test_fenced_block_counts_once_and_hides_its_contents():
    text = "Intro.\n```python\nimport torch\nx = cute.make_layout((4, 8))\n```\nAfter.\n~~~\nls -la /app\n~~~\n"
    report = check_skill(text)
    assert kinds(text) == ["fenced_code", "fenced_code"]
    assert [v.line for v in report.violations] == [2, 7]


def test_unclosed_fence_runs_to_the_end():
    assert kinds("```\npip install foo\nmore\n") == ["fenced_code"]


def test_inline_code_and_what_it_contains():
    assert kinds("Use `tile_m = 128` for the M tile.") == ["inline_code"]
    assert kinds("Call `T.alloc_buffer((128,), 'float32')` early.") == ["inline_code", "api_call"]
    assert kinds("Run `python bench.py --iters 5` to check.") == ["inline_code", "shell_command"]


def test_shell_commands():
    assert kinds("$ nvidia-smi") == ["shell_command"]
    assert kinds("- python3 -m pytest tests") == ["shell_command"]
    assert kinds("pip install cupy") == ["shell_command"]
    assert kinds("CUDA_VISIBLE_DEVICES=0 python run.py") == ["shell_command"]
    assert kinds("cat is not a command here, nor is python a snake") == []


def test_api_calls():
    assert kinds("Then cute.make_layout((4, 8), stride=(8, 1)) gives the tile.") == ["api_call"]
    assert kinds("make_inputs(device, generator) draws fresh inputs.") == ["api_call"]
    assert kinds("@cute.kernel") == ["api_call"]
    assert kinds("from tvm.script import tirx as T") == ["api_call"]
    assert kinds("import torch") == ["api_call"]
    assert kinds("The rmsnorm(x) of the residual matters.") == []  # math notation, not an API call


def test_cli_skill_check(tmp_path):
    clean = tmp_path / "a" / "SKILL.md"
    dirty = tmp_path / "b" / "SKILL.md"
    clean.parent.mkdir()
    dirty.parent.mkdir()
    clean.write_text(CLEAN)
    dirty.write_text("Use `x`.\n")
    runner = CliRunner()
    out = runner.invoke(app, ["skill-check", str(clean)])
    assert out.exit_code == 0 and "clean" in out.stdout
    out = runner.invoke(app, ["skill-check", str(tmp_path)])
    assert out.exit_code == 1
    assert "1 of 2 skills" in out.stdout and "inline_code" in out.stdout
