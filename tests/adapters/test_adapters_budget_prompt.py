"""The sandbox prompt shows the budget the judge holds, and asks again after every submission."""

import os
import subprocess
import sys
from pathlib import Path

from metakernelbench.adapters.templating import template_text

FAKE_SUBMIT = """#!/bin/sh
echo called >> "{log}"
echo '{answer}'
"""


def _prompt(tmp_path, answer, calls=1):
    """Source the prompt script in bash with a fake `submit` on PATH; evaluate the prompt ``calls`` times."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    fake = bin_dir / "submit"
    fake.write_text(FAKE_SUBMIT.format(log=log, answer=answer))
    fake.chmod(0o755)
    script = tmp_path / "budget.sh"
    script.write_text(template_text("environment/budget.sh"))
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "MKB_BUDGET_CACHE": str(tmp_path / "cache")}
    body = f". {script}\n" + "\n".join(["_mkb_budget; echo"] * calls)
    run = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True, check=True)
    return run.stdout.splitlines(), (log.read_text().count("called") if log.exists() else 0)


def test_the_prompt_shows_minutes_and_submissions_left_and_asks_the_judge_once(tmp_path):
    lines, calls = _prompt(tmp_path, '{"submissions_left": 7, "budget": 10, "minutes_left": 31.5}', calls=3)
    assert lines == ["31 min, 7 of 10 submissions left"] * 3
    assert calls == 1  # later prompts count down from the cached deadline


def test_without_a_deadline_or_a_judge_the_prompt_says_what_it_knows(tmp_path):
    lines, _ = _prompt(tmp_path, '{"submissions_left": 3, "budget": 10, "minutes_left": null}')
    assert lines == ["3 of 10 submissions left"]
    (tmp_path / "cache").unlink()
    lines, _ = _prompt(tmp_path, "not json")
    assert lines == ["budget unknown"] and not (tmp_path / "cache").exists()


def test_submit_clears_the_cached_budget():
    wrapper = template_text("environment/submit")
    assert wrapper.index('rm -f "${MKB_BUDGET_CACHE:-/tmp/.mkb-budget}"') < wrapper.index("exec python")
