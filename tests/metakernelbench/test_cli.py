"""The ``mkb`` command: grading works with Harbor absent (only the skill-transfer study needs it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HIDE_HARBOR = textwrap.dedent("""
    import sys
    class HideHarbor:
        def find_spec(self, name, path=None, target=None):
            if name == "harbor" or name.startswith("harbor."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, HideHarbor())
    sys.argv = ["mkb", *sys.argv[1:]]
    from metakernelbench.cli import main
    main()
""")


def _mkb_without_harbor(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDE_HARBOR, *args], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)


def test_help_lists_grade_without_harbor(tmp_path):
    done = _mkb_without_harbor("--help", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "grade" in done.stdout


def test_grade_runs_without_harbor(tmp_path):
    kernel = REPO / "tests" / "exploits" / "control_honest_28.py"
    done = _mkb_without_harbor("grade", "28", str(kernel), "--dsl", "tirx", "--device", "cpu", "--small",
                               "--reward-dir", str(tmp_path / "out"), tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    grade = json.loads((tmp_path / "out" / "grade.json").read_text())
    assert grade["status"] == "PASSED" and grade["stages_s"]["timing"] > 0
