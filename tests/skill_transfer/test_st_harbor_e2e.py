"""Opt-in: the whole loop through a real ``harbor run`` (Harbor 0.25, oracle agent, no Docker).

``mkb arms`` -> ``harbor run -c`` (solo arms) -> ``mkb arms`` -> ``harbor run -c`` (transfers) ->
``mkb collect`` -> comparison, on two toy problems whose ``solve.sh`` writes a skill and whose
``test.sh`` writes a grade. It also checks that the synthetic job folders used by the other tests
have the same files as the folders Harbor really writes.

Needs root and ``unshare`` (see ``harbor_hostenv``) and creates empty mount points ``/app``,
``/tests``, ``/solution`` and ``/logs/...`` when missing (removed again afterwards). Run with
``MKB_HARBOR_E2E=1 .venv/bin/python -m pytest tests/skill_transfer/test_st_harbor_e2e.py``.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harbor.models.trial.result import TrialResult
from st_synthetic import FakeAttempt, write_job, write_task
from typer.testing import CliRunner

from metakernelbench.cli import app
from metakernelbench.skill_transfer.collect import collect
from metakernelbench.skill_transfer.compare import compare

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("MKB_HARBOR_E2E") != "1" or os.geteuid() != 0 or shutil.which("unshare") is None,
        reason="opt-in (MKB_HARBOR_E2E=1), needs root and unshare",
    ),
]

MODEL = "test/oracle-model"
ATTN = "02_gqa_paged_decode_h5_kv1_d128_ps1_bf16"
MOE = "45_fake_moe"
HARBOR = Path(sys.executable).with_name("harbor")


def grade(problem, dsl, ms):
    if ms is None:
        return {"status": "INCORRECT", "passed": False, "problem": problem, "dsl": dsl, "eager_ms": 6.0}
    return {"status": "PASSED", "passed": True, "problem": problem, "dsl": dsl, "kernel_ms": ms,
            "eager_ms": 6.0, "speedup": 6.0 / ms, "score_speedup": 6.0 / ms}


def make_task(state: Path, problem: str, dsl: str, first_ms, later_ms, skill):
    """A task whose oracle leaves ``skill`` and whose grader returns first_ms, then later_ms."""
    task = write_task(Path("tasks"), f"{problem}_{dsl}", timeout_sec=60)
    solve = "#!/bin/bash\necho 'def solve(*x): pass' > /app/kernel.py\n"
    if skill:
        solve += f"cat > /app/SKILL.md <<'EOF'\n{skill}EOF\n"
    (task / "solution" / "solve.sh").write_text(solve)
    flag = state / f"{problem}_{dsl}.graded"
    first, later = json.dumps(grade(problem, dsl, first_ms)), json.dumps(grade(problem, dsl, later_ms))
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        f"if [ -f {flag} ]; then G='{later}'; else G='{first}'; touch {flag}; fi\n"
        'echo "$G" > /logs/verifier/grade.json\n'
        "P=$(echo \"$G\" | grep -c '\"passed\": true')\n"
        'echo "{\\"reward\\": $P, \\"passed\\": $P}" > /logs/verifier/reward.json\n'
    )


def harbor_run(config: str):
    env = {**os.environ, "PYTHONPATH": f"{Path(__file__).parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([str(HARBOR), "run", "-c", config, "-y"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def arms():
    out = CliRunner().invoke(app, ["arms", "--model", MODEL, "--agent", "oracle", "--env",
                                   "harbor_hostenv:HostEnv", "--out", "runs"])
    assert out.exit_code == 0, out.output
    return json.loads(Path("runs/arms.json").read_text())


def files_of(trial: Path) -> set[str]:
    return {str(p.relative_to(trial)) for p in trial.rglob("*")
            if not str(p.relative_to(trial)).startswith(("agent/", ".root")) and p.name != "lock.json"}


@pytest.fixture
def mount_points():
    from harbor_hostenv import MOUNT_POINTS  # imported here: Harbor's environment stack is slow to load

    created = [Path(p) for p in MOUNT_POINTS if not Path(p).exists()]
    for path in created:
        path.mkdir(parents=True)
    yield
    for path in reversed(created):
        path.rmdir()
    if Path("/logs").exists() and not any(Path("/logs").iterdir()):
        Path("/logs").rmdir()


def test_real_harbor_round_trip(tmp_path, monkeypatch, mount_points):
    monkeypatch.chdir(tmp_path)
    sys.path.insert(0, str(Path(__file__).parent))
    state = tmp_path / "state"
    state.mkdir()
    make_task(state, ATTN, "cutedsl", 2.0, 2.0, "Split-KV paid off above 2048 tokens.\n")
    make_task(state, ATTN, "tirx", None, 1.5, "Staging K tiles in shared memory did not help.\n")
    make_task(state, MOE, "cutedsl", None, None, None)  # leaves no skill: a skipped treatment
    make_task(state, MOE, "tirx", 4.0, 4.0, "Sorting tokens by expert first halved the time.\n")

    plan = arms()
    assert {e["state"] for e in plan["entries"] if e["arm"].startswith("solo")} == {"planned"}
    for config in plan["solo_configs"].values():
        harbor_run(config)
    plan = arms()
    ready = [e for e in plan["entries"] if e["state"] == "ready"]
    assert {(e["arm"], e["problem"]) for e in ready} == {("cutedsl2tirx", ATTN), ("tirx2cutedsl", ATTN),
                                                         ("tirx2cutedsl", MOE)}
    for entry in ready:
        harbor_run(entry["config"])
    harbor_run(plan["solo_configs"]["cutedsl"])  # resuming a finished job runs nothing new
    plan = arms()
    assert sorted(e["state"] for e in plan["entries"] if not e["arm"].startswith("solo")) == [
        "done", "done", "done", "skipped"]

    trials = [t for t in Path("jobs").glob("*/*") if (t / "result.json").exists()]
    assert len(trials) == 7
    for trial in trials:
        result = TrialResult.model_validate_json((trial / "result.json").read_text())
        assert result.exception_info is None and result.config.agent.model_name == MODEL

    rows, stats = collect([Path("jobs")])
    assert (stats.trials, stats.unfinished, stats.infra_errors, stats.skipped_treatments) == (7, 0, 0, 1)
    by_key = {(r.problem, r.dsl, r.arm): r for r in rows}
    rescue = by_key[(ATTN, "tirx", "transfer")]
    assert (rescue.source_dsl, rescue.passed, rescue.runtime_ms) == ("cutedsl", True, 1.5)
    assert rescue.skill_chars == len("Split-KV paid off above 2048 tokens.\n")
    assert by_key[(MOE, "tirx", "transfer")].status == "skipped"
    comps = {(c.problem, c.direction): (c.r, c.outcome) for c in compare(rows, n_boot=50).comparisons}
    assert comps == {(ATTN, "cutedsl2tirx"): (4.0, "rescue"), (ATTN, "tirx2cutedsl"): (1.0, "both_pass"),
                     (MOE, "cutedsl2tirx"): (1.0, "skipped"), (MOE, "tirx2cutedsl"): (1.0, "joint_fail")}

    # The synthetic folders the other tests use hold the same files as the real ones.
    (real,) = [t for t in trials if t.parent.name.endswith("solo_tirx") and t.name.startswith("45")]
    (fake,) = write_job(tmp_path / "fake" / "job", MODEL, [FakeAttempt(MOE, "tirx", kernel_ms=4.0)])
    assert files_of(real) == files_of(fake)
