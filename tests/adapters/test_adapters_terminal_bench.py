"""The Terminal-Bench export keeps the speedup and names the project's authors without inventing an address."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from adapters_support import ORACLES, T28, copy_problems

from metakernelbench.adapters import config
from metakernelbench.adapters.terminal_bench import build_terminal_bench
from metakernelbench.problems import REPO_ROOT

TB_PYTHON = REPO_ROOT / ".venv-tb" / "bin" / "python"
TB_PARSE = """
import sys
from terminal_bench.parsers.pytest_parser import PytestParser
print({k: v.value for k, v in PytestParser().parse(sys.stdin.read()).items()})
"""


@pytest.fixture(scope="module")
def tb_task(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tb")
    build_terminal_bench(copy_problems(root / "problems", ids=("28",)), root / "tb", ORACLES)
    return root / "tb" / f"{T28}_tirx"


def _summary(task: Path, tmp_path: Path, reward: dict | None, grade: dict | None) -> str:
    files = []
    for name, value in (("reward.json", reward), ("grade.json", grade)):
        path = tmp_path / name
        if value is not None:
            path.write_text(json.dumps(value))
        files.append(str(path))
    run = subprocess.run([sys.executable, str(task / "tests" / "summary.py"), *files], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _reward(passed: bool, speedup: float, infra: bool = False) -> dict:
    return {"reward": speedup if passed else 0.0, "passed": float(passed), "speedup": speedup if passed else 0.0,
            "kernel_ms": 0.5, "eager_ms": 0.5 * speedup, "infra_error": float(infra)}


def test_task_yaml_names_the_project_and_invents_no_email(tb_task):
    data = yaml.safe_load((tb_task / "task.yaml").read_text())
    assert data["author_name"] == ", ".join(a["name"] for a in config.AUTHORS)
    assert "author_email" not in data  # the project publishes none; Terminal-Bench's model allows leaving it out
    assert "unknown" not in (tb_task / "task.yaml").read_text().split("instruction:")[0]


@pytest.mark.parametrize(("reward", "grade", "line"), [
    (_reward(True, 2.4137), {"status": "PASSED"}, "PASSED tests/test_kernel.py::test_final_grade[speedup=2.414]"),
    (_reward(True, 100.0), {"status": "PASSED"}, "PASSED tests/test_kernel.py::test_final_grade[speedup=100]"),
    (_reward(False, 3.0), {"status": "INCORRECT"}, "FAILED tests/test_kernel.py::test_final_grade[status=INCORRECT]"),
    (_reward(False, 0.0, infra=True), {"status": "INFRA_ERROR"}, "ERROR tests/test_kernel.py::test_judge_available"),
    (None, None, "ERROR tests/test_kernel.py::test_judge_available"),
])
def test_summary_carries_the_speedup(tb_task, tmp_path, reward, grade, line):
    out = _summary(tb_task, tmp_path, reward, grade)
    summary = out.split("short test summary info")[1]
    assert [s for s in summary.splitlines() if s.strip() and not s.lstrip().startswith("=")] == [line]
    if reward is not None:
        assert json.loads(out.splitlines()[0].removeprefix("metakernelbench reward: ")) == reward


@pytest.mark.skipif(not TB_PYTHON.is_file(), reason="terminal-bench is installed into .venv-tb by setup-dev.sh")
def test_terminal_bench_parser_keeps_the_speedup(tb_task, tmp_path):
    """Terminal-Bench's own parser: the speedup survives into parser_results, and a pass resolves the trial."""
    cases = {(True, 2.5): {"test_final_grade[speedup=2.5]": "passed"},
             (False, 0.0): {"test_final_grade[status=INCORRECT]": "failed"}}
    for (passed, speedup), expected in cases.items():
        pane = "$ bash /tests/run-tests.sh\n" + _summary(
            tb_task, tmp_path, _reward(passed, speedup), {"status": "PASSED" if passed else "INCORRECT"})
        run = subprocess.run([str(TB_PYTHON), "-c", TB_PARSE], input=pane, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.strip() == repr(expected)


@pytest.mark.skipif(Path("/app/kernel.py").exists(), reason="this host has an /app/kernel.py")
def test_run_tests_leaves_the_grade_in_the_session_logs(tb_task, tmp_path):
    """run-tests.sh as Terminal-Bench runs it, on an attempt that left no kernel (no judge needed)."""
    logs = tmp_path / "sessions"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "T_BENCH_CONTAINER_LOGS_PATH": str(logs), "TEST_DIR": str(tb_task / "tests"),
           "MKB_JUDGE_URL": "http://127.0.0.1:9"}
    run = subprocess.run(["bash", str(tb_task / "run-tests.sh")], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    grade = json.loads((logs / "mkb-final" / "grade.json").read_text())
    reward = json.loads((logs / "mkb-final" / "reward.json").read_text())
    assert grade["status"] == "COMPILE_ERROR" and reward["passed"] == 0.0 and reward["infra_error"] == 0.0
    assert "FAILED tests/test_kernel.py::test_final_grade[status=COMPILE_ERROR]" in run.stdout
