"""``problem_kit.captured``: a problem's captured values, and the errors that name the file."""

from __future__ import annotations

import ast
import json

import pytest

from metakernelbench.problem_kit import CAPTURED_FIELDS, captured, captured_path
from metakernelbench.problems import load_problem, problem_paths, source_digest

ENTRY = {"source": "a trace", "record": "r1", "license": "Apache-2.0", "attribution": "captured by someone",
         "values": {"kv_indptr": [0, 3, 7]}}


def test_the_sidecar_sits_beside_the_problem_file(tmp_path):
    assert captured_path(tmp_path / "01_x.py") == tmp_path / "01_x.captured.json"
    assert captured_path(tmp_path / "problem.py") == tmp_path / "problem.captured.json"


def test_values_are_read(tmp_path):
    captured_path(tmp_path / "01_x.py").write_text(json.dumps(ENTRY))
    assert captured(tmp_path / "01_x.py") == {"kv_indptr": [0, 3, 7]}


def test_a_missing_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="01_x.captured.json"):
        captured(tmp_path / "01_x.py")


@pytest.mark.parametrize("field", CAPTURED_FIELDS)
def test_every_field_is_required(tmp_path, field):
    entry = {k: v for k, v in ENTRY.items() if k != field}
    captured_path(tmp_path / "01_x.py").write_text(json.dumps(entry))
    with pytest.raises(ValueError, match=field):
        captured(tmp_path / "01_x.py")


def test_malformed_json_is_an_error(tmp_path):
    captured_path(tmp_path / "01_x.py").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        captured(tmp_path / "01_x.py")


def test_the_problem_digest_covers_the_captured_values(tmp_path):
    problem = tmp_path / "01_x.py"
    problem.write_text("x = 1\n")
    alone = source_digest(problem)
    captured_path(problem).write_text(json.dumps(ENTRY))
    with_values = source_digest(problem)
    captured_path(problem).write_text(json.dumps({**ENTRY, "values": {"kv_indptr": [0, 3, 8]}}))
    assert len({alone, with_values, source_digest(problem)}) == 3


def test_every_repository_sidecar_is_complete_and_used_by_its_problem():
    for path in problem_paths():
        sidecar = captured_path(path)
        if not sidecar.exists():
            continue
        entry = json.loads(sidecar.read_text())
        assert set(CAPTURED_FIELDS) <= set(entry), sidecar.name
        assert entry["license"] and entry["attribution"] and entry["source"], sidecar.name
        source = path.read_text()
        assert "captured(__file__)" in source, f"{path.name} has captured values it never reads"
        assert load_problem(path).captured_file == sidecar


def _calls_outside_functions(tree: ast.AST, name: str) -> list[int]:
    """Lines where ``name(...)`` runs at import time (not inside a function body)."""
    lines = []

    def walk(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == name
                    and not inside):
                lines.append(child.lineno)
            walk(child, nested)

    walk(tree, False)
    return lines


def test_problems_read_captured_values_only_when_drawing_inputs():
    """The negative controls embed a problem's source in another file, so import must not need the sidecar."""
    for path in problem_paths():
        at_import = _calls_outside_functions(ast.parse(path.read_text()), "captured")
        assert not at_import, f"{path.name}: captured() at import time, line(s) {at_import}"


def test_the_import_time_check_can_fail():
    assert _calls_outside_functions(ast.parse("V = captured(__file__)\ndef f():\n    captured(1)\n"),
                                    "captured") == [1]
