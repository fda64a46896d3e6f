"""``mkb arms``: configs Harbor accepts, resumable planning, skipped treatments, equality checks."""

import json
from pathlib import Path

import pytest
import yaml
from harbor.models.job.config import JobConfig
from harbor.models.trial.config import AgentConfig
from st_synthetic import FakeAttempt, write_job, write_task
from typer.testing import CliRunner

from metakernelbench.cli import app
from metakernelbench.skill_transfer.arms import ArmsError, ArmsOptions, plan_arms
from metakernelbench.skill_transfer.skill import HEADER, skill_from_attachment

MODEL = "acme/coder-7"
RMS = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16"
PROBLEMS = (RMS, "45_fake_moe", "60_fake_quant")
SKILL = "# Findings\n\n- Fusing the residual add into the norm saved one read of the hidden state.\n"


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """A working folder with six tasks; paths in configs are relative to it, as in real use."""
    monkeypatch.chdir(tmp_path)
    for problem in PROBLEMS:
        for dsl in ("cutedsl", "tirx"):
            write_task(Path("tasks"), f"{problem}_{dsl}")
    return tmp_path


def opts(**kw) -> ArmsOptions:
    return ArmsOptions(model=MODEL, agent="terminus-2", agent_kwargs={"max_turns": 200}, env="docker", **kw)


def load(path) -> JobConfig:
    return JobConfig.model_validate(yaml.safe_load(Path(path).read_text()), extra="forbid")


def run_solo(job: JobConfig, attempts, trial_agent=None):
    """Fake `harbor run -c` of a solo config: Harbor records the config, then the trials."""
    write_job(Path("jobs") / job.job_name, MODEL, attempts, Path("tasks"), job_config=job,
              trial_agent=trial_agent)


def test_first_run_writes_the_solo_arms(work):
    manifest = plan_arms(opts())
    for dsl in ("cutedsl", "tirx"):
        job = load(work / "runs" / "acme-coder-7" / f"solo_{dsl}.yaml")
        assert job.job_name == f"acme-coder-7__solo_{dsl}"
        assert [t.path.name for t in job.tasks] == [f"{p}_{dsl}" for p in sorted(PROBLEMS)]
        (agent,) = job.agents
        assert (agent.name, agent.model_name, agent.kwargs) == ("terminus-2", MODEL, {"max_turns": 200})
        assert "/app/SKILL.md" in job.artifacts and job.extra_instruction_paths == []
    assert manifest.count("solo_cutedsl", "planned") == 3
    assert manifest.count("cutedsl2tirx", "waiting") == 3
    assert json.loads((work / "runs" / "acme-coder-7" / "arms.json").read_text())["model"] == MODEL


def test_transfer_arms_follow_finished_solo_attempts(work):
    plan_arms(opts())
    out = Path("runs/acme-coder-7")
    run_solo(load(out / "solo_cutedsl.yaml"), [
        FakeAttempt(RMS, "cutedsl", "PASSED", kernel_ms=1.0, skill=SKILL),
        FakeAttempt("45_fake_moe", "cutedsl", "INCORRECT", kernel_ms=None, skill=None),
        FakeAttempt("60_fake_quant", "cutedsl", exception="EnvironmentStartTimeoutError", rewards=False),
    ])
    run_solo(load(out / "solo_tirx.yaml"), [FakeAttempt(RMS, "tirx", "INCORRECT", kernel_ms=None,
                                                        skill="TIRx notes.\n")])
    manifest = plan_arms(opts())
    states = {(e.arm, e.problem): e.state for e in manifest.entries}
    assert states[("solo_cutedsl", RMS)] == "done" and states[("solo_tirx", "45_fake_moe")] == "planned"
    assert states[("cutedsl2tirx", RMS)] == "ready"
    assert states[("cutedsl2tirx", "45_fake_moe")] == "skipped"  # the source left no skill
    assert states[("cutedsl2tirx", "60_fake_quant")] == "waiting"  # the source hit an infra error
    assert states[("tirx2cutedsl", RMS)] == "ready"
    assert states[("tirx2cutedsl", "45_fake_moe")] == "waiting"  # the source has not run

    (entry,) = [e for e in manifest.entries if (e.arm, e.problem) == ("cutedsl2tirx", RMS)]
    transfer = load(entry.config)
    solo = load(out / "solo_tirx.yaml")
    assert transfer.job_name == f"acme-coder-7__cutedsl2tirx__{RMS}"
    assert [t.path.name for t in transfer.tasks] == [f"{RMS}_tirx"]
    assert transfer.extra_instruction_paths == [Path(entry.attachment)]
    assert Path(entry.attachment).parent.name == "cutedsl2tirx"
    for field in ("agents", "environment", "verifier", "artifacts", "timeout_multiplier", "n_attempts"):
        assert getattr(transfer, field) == getattr(solo, field), field
    text = Path(entry.attachment).read_text()
    assert skill_from_attachment(text) == SKILL  # verbatim
    assert text == HEADER + SKILL  # a neutral heading and the skill, nothing else
    assert not any(word in HEADER.lower() for word in ("cute", "tirx", "dsl", "pass", "fail"))
    assert entry.skill_chars == len(SKILL)
    assert (out / "transfer_commands.txt").exists() is False  # the CLI writes it, not the planner


def test_rerun_is_idempotent_and_sees_finished_transfers(work):
    plan_arms(opts())
    out = Path("runs/acme-coder-7")
    run_solo(load(out / "solo_cutedsl.yaml"), [FakeAttempt(RMS, "cutedsl", skill=SKILL)])
    plan_arms(opts())
    files = {p: p.read_text() for p in out.rglob("*") if p.is_file() and p.name != "arms.json"}
    manifest = plan_arms(opts())
    assert {p: p.read_text() for p in files} == files
    (entry,) = [e for e in manifest.entries if (e.arm, e.problem) == ("cutedsl2tirx", RMS)]
    transfer = load(entry.config)
    write_job(Path("jobs") / transfer.job_name, MODEL, [FakeAttempt(RMS, "tirx")], Path("tasks"),
              job_config=transfer)
    manifest = plan_arms(opts())
    (entry,) = [e for e in manifest.entries if (e.arm, e.problem) == ("cutedsl2tirx", RMS)]
    assert entry.state == "done"


def test_changed_options_after_a_solo_job_started_are_refused(work):
    plan_arms(opts())
    run_solo(load(Path("runs/acme-coder-7/solo_cutedsl.yaml")), [FakeAttempt(RMS, "cutedsl", skill=SKILL)])
    with pytest.raises(ArmsError, match="already ran with a different config"):
        plan_arms(ArmsOptions(model=MODEL, agent="terminus-2", agent_kwargs={"max_turns": 50}, env="docker"))


def test_a_trial_that_ran_with_other_agent_settings_is_refused(work):
    plan_arms(opts())
    out = Path("runs/acme-coder-7")
    run_solo(load(out / "solo_cutedsl.yaml"), [FakeAttempt(RMS, "cutedsl", skill=SKILL)])
    other = AgentConfig(name="terminus-2", model_name=MODEL, kwargs={"max_turns": 200, "temperature": 1.0})
    run_solo(load(out / "solo_tirx.yaml"), [FakeAttempt(RMS, "tirx", skill=SKILL)], trial_agent=other)
    with pytest.raises(ArmsError, match=r"target solo trial .* different \['agent'\]"):
        plan_arms(opts())


def test_unequal_task_budgets_are_refused(work):
    write_task(Path("tasks"), f"{RMS}_tirx", timeout_sec=1200.0)
    with pytest.raises(ArmsError, match="different budgets"):
        plan_arms(opts())


def test_problem_selection_and_missing_variants(work):
    manifest = plan_arms(opts(problems=["28"]))
    assert {e.problem for e in manifest.entries} == {RMS}
    with pytest.raises(ArmsError, match="no tasks"):
        plan_arms(opts(problems=["99"]))
    write_task(Path("tasks"), "50_lonely_moe_cutedsl")
    with pytest.raises(ArmsError, match="only one DSL variant"):
        plan_arms(opts())


def test_base_config_is_respected(work):
    base = Path("base.yaml")
    base.write_text(yaml.safe_dump({"environment": {"type": "modal", "override_gpus": 0},
                                    "agents": [{"name": "claude-code", "kwargs": {"max_turns": 10}}],
                                    "n_attempts": 1, "timeout_multiplier": 2.0}))
    plan_arms(ArmsOptions(model=MODEL, base_config=base))
    job = load("runs/acme-coder-7/solo_tirx.yaml")
    assert job.environment.type == "modal" and job.environment.override_gpus == 0
    assert job.agents[0].name == "claude-code" and job.agents[0].model_name == MODEL
    assert job.timeout_multiplier == 2.0


def test_cli_arms(work):
    runner = CliRunner()
    out = runner.invoke(app, ["arms", "--model", MODEL, "--ak", "max_turns=200", "--agent", "terminus-2"])
    assert out.exit_code == 0, out.output
    assert "harbor run -c runs/acme-coder-7/solo_cutedsl.yaml" in out.stdout
    run_solo(load("runs/acme-coder-7/solo_cutedsl.yaml"), [FakeAttempt(RMS, "cutedsl", skill=SKILL)])
    out = runner.invoke(app, ["arms", "--model", MODEL, "--ak", "max_turns=200", "--agent", "terminus-2"])
    assert out.exit_code == 0, out.output
    commands = Path("runs/acme-coder-7/transfer_commands.txt").read_text().splitlines()
    assert commands == [f"harbor run -c runs/acme-coder-7/cutedsl2tirx/{RMS}_tirx.yaml"]
    bad = runner.invoke(app, ["arms", "--model", MODEL, "--tasks-dir", "nowhere"])
    assert bad.exit_code == 2 and "does not exist" in bad.stderr
