"""The project's ``MKB_*`` settings are read when they are used, never while a module is imported.

A value read at import is frozen for the life of the process: a test, a benchmark or a caller that
sets the variable after importing the package would silently get the old one. The rule is checked
over the source (every statement that runs at import), and its two moved settings are shown to
follow the environment after the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

from metakernelbench.judge.state import default_state_dir
from metakernelbench.problems import REPO_ROOT, problems_dir

PACKAGE = REPO_ROOT / "metakernelbench"


def _walk_now(node: ast.AST):
    """``ast.walk`` without the bodies of lambdas (they run when called, not where they stand)."""
    pending = [node]
    while pending:
        current = pending.pop()
        yield current
        pending += [child for child in ast.iter_child_nodes(current)
                    if not (isinstance(current, ast.Lambda) and child is current.body)]


def _reads_environment(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv")
               and isinstance(n.value, ast.Name) and n.value.id == "os" for n in _walk_now(node))


def _names_a_setting(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("MKB_")
               for n in _walk_now(node))


def _import_time_nodes(tree: ast.Module):
    """The simple statements and the expressions Python runs while importing the module: everything
    but function bodies (their defaults and decorators do run) and the ``__main__`` block."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            pending += node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d]
        elif (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
              and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
            continue
        elif isinstance(node, ast.expr) or (isinstance(node, ast.stmt) and not _is_compound(node)):
            yield node
        else:  # a class, if, try, with or loop: its own expressions and its statements
            pending += list(ast.iter_child_nodes(node))


def _is_compound(node: ast.stmt) -> bool:
    return isinstance(node, (ast.ClassDef, ast.If, ast.Try, ast.With, ast.For, ast.While, ast.Match))


def import_time_setting_reads(source: str) -> list[int]:
    """Lines where a module reads an ``MKB_*`` environment variable at import."""
    return sorted(node.lineno for node in _import_time_nodes(ast.parse(source))
                  if _reads_environment(node) and _names_a_setting(node))


def test_the_rule_sees_a_read_at_import_and_not_one_inside_a_function():
    assert import_time_setting_reads('import os\nX = os.environ.get("MKB_X", "1")\n') == [2]
    assert import_time_setting_reads('import os\nclass C:\n    x = os.getenv("MKB_X")\n') == [3]
    assert import_time_setting_reads('import os\ndef f(x=os.environ["MKB_X"]):\n    pass\n') == [2]
    assert import_time_setting_reads('import os\ndef f():\n    return os.environ.get("MKB_X")\n') == []
    assert import_time_setting_reads('import os\nos.environ.setdefault("OTHER", "1")\n') == []
    assert import_time_setting_reads('import os\nif os.environ.get("MKB_X"):\n    pass\n') == [2]
    assert import_time_setting_reads('import os\nX = lambda: os.environ["MKB_X"]\n') == []
    assert import_time_setting_reads('import os\nif __name__ == "__main__":\n    os.getenv("MKB_X")\n') == []


def test_no_module_reads_a_setting_at_import():
    found = {str(path.relative_to(REPO_ROOT)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := import_time_setting_reads(path.read_text()))}
    assert found == {}


def test_the_problems_tree_and_the_judge_state_follow_the_environment_after_import(monkeypatch, tmp_path):
    monkeypatch.delenv("MKB_PROBLEMS_DIR", raising=False)
    monkeypatch.delenv("MKB_JUDGE_STATE", raising=False)
    assert problems_dir() == REPO_ROOT / "problems"
    assert default_state_dir() == Path.home() / ".cache" / "metakernelbench" / "judge"
    monkeypatch.setenv("MKB_PROBLEMS_DIR", str(tmp_path / "problems"))
    monkeypatch.setenv("MKB_JUDGE_STATE", str(tmp_path / "state"))
    assert problems_dir() == tmp_path / "problems"
    assert default_state_dir() == tmp_path / "state"
