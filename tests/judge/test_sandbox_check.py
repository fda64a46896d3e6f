"""The sandbox's ``check``: the judge's static rules and an import of the file, with no GPU and no charge."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from metakernelbench.judge import check
from metakernelbench.problems import find_problem

REPO = Path(__file__).resolve().parents[2]
GOOD_TIRX = REPO / "oracles" / "mlp_norm" / "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx.py"
PROBLEM = str(find_problem("28").spec.path)


def run(tmp_path: Path, source: str | None, capsys, dsl: str = "tirx", name: str = "kernel.py") -> tuple[int, str]:
    kernel = tmp_path / name
    if source is not None:
        kernel.write_text(source)
    code = check.main([str(kernel), "--dsl", dsl, "--problem", PROBLEM])
    return code, capsys.readouterr().out


def test_an_oracle_passes_both_checks(tmp_path, capsys):
    shutil.copy(GOOD_TIRX, tmp_path / "kernel.py")
    code, out = run(tmp_path, None, capsys)
    assert code == 0, out
    assert "static rules: passed" in out and "import: passed" in out


def test_a_forbidden_import_is_refused_before_anything_runs(tmp_path, capsys):
    marker = tmp_path / "ran"
    code, out = run(tmp_path, f"import triton\nopen({str(marker)!r}, 'w')\ndef solve(*a):\n    pass\n", capsys)
    assert code == 1
    assert "static rules:" in out and "triton" in out
    assert not marker.exists()


def test_a_syntax_error_is_named(tmp_path, capsys):
    code, out = run(tmp_path, "def solve(:\n", capsys)
    assert code == 1 and "syntax" in out


def test_a_file_without_solve_is_refused_by_the_rules(tmp_path, capsys):
    code, out = run(tmp_path, "import tvm\nX = 1\n", capsys)
    assert code == 1 and "missing solve" in out


def test_a_solve_that_is_not_callable_once_imported_fails_the_import_check(tmp_path, capsys):
    code, out = run(tmp_path, "import tvm\ndef solve(*a):\n    pass\nsolve = 5\n", capsys)
    assert code == 1 and "no callable solve" in out


def test_a_solve_that_cannot_take_the_inputs_fails(tmp_path, capsys):
    code, out = run(tmp_path, "import tvm\ndef solve(a):\n    return a\n", capsys)
    assert code == 1 and "cannot take the 3 inputs" in out


def test_an_error_at_import_time_is_reported(tmp_path, capsys):
    code, out = run(tmp_path, "import tvm\nraise RuntimeError('boom at import')\ndef solve(*a):\n    pass\n", capsys)
    assert code == 1 and "boom at import" in out


def test_a_missing_file_is_one_line(tmp_path, capsys):
    code, out = run(tmp_path, None, capsys, name="absent.py")
    assert code == 1 and out.startswith("check: cannot read")


@pytest.mark.parametrize("size", [check.MAX_KERNEL_BYTES + 1])
def test_an_oversized_file_is_refused(tmp_path, capsys, size):
    code, out = run(tmp_path, "#" * size, capsys)
    assert code == 1 and "limit" in out
