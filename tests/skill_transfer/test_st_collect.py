"""``collect`` on synthetic Harbor job folders written with Harbor's own models."""

import json
from pathlib import Path

import pytest
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.trial.artifact_manifest import ArtifactManifestEntry
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import TrialResult
from st_synthetic import FakeAttempt, write_job
from typer.testing import CliRunner

from metakernelbench.cli import app
from metakernelbench.skill_transfer.collect import collect
from metakernelbench.skill_transfer.skill import render_attachment
from metakernelbench.verifier.result import GradeResult

MODEL = "acme/coder-7"
RMS = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16"  # a real problem file: family from its folder
SKILL = "Fusing the residual add into the norm saved a full read of the hidden state.\n"
LEAKY = "Call `cute.make_layout((8, 128))` first.\n```python\nx = 1\n```\n$ python bench.py --n 3\n"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("jobs")
    write_job(root / "solo_cutedsl", MODEL, [
        FakeAttempt(RMS, "cutedsl", "PASSED", kernel_ms=2.0, eager_ms=8.0, skill=SKILL),
        FakeAttempt("45_fake_moe", "cutedsl", "INCORRECT", kernel_ms=None, skill=None),
        FakeAttempt("60_fake_quant", "cutedsl", "PASSED", kernel_ms=1.0, eager_ms=3.0, grade_json=False),
        FakeAttempt("61_fake_quant", "cutedsl", exception="EnvironmentStartTimeoutError", rewards=False),
        FakeAttempt("62_fake_la", "cutedsl", "INCORRECT", kernel_ms=None, exception="AgentTimeoutError"),
        FakeAttempt("63_fake_la", "cutedsl", "PASSED", exception="ApiConnectionError"),
        FakeAttempt("64_fake_la", "cutedsl", finished=False),
        FakeAttempt("65_fake_la", "cutedsl", "INCORRECT", kernel_ms=None, skill="  \n\n"),
        FakeAttempt("66_fake_la", "cutedsl", rewards=False),
        FakeAttempt("67_fake_la", "cutedsl", "COMPILE_ERROR", kernel_ms=None, skill=LEAKY),
        FakeAttempt("68_fake_la", "cutedsl", "INCORRECT", kernel_ms=None, grade_json=False),
    ])
    write_job(root / "solo_tirx", MODEL, [
        FakeAttempt(RMS, "tirx", "TIMEOUT", kernel_ms=None, skill="TIRx notes.\n"),
    ])
    attachment = root.parent / "runs" / "skills" / "cutedsl2tirx" / f"{RMS}_tirx.md"
    attachment.parent.mkdir(parents=True)
    attachment.write_text(render_attachment(SKILL))
    write_job(root / "c2t_rms", MODEL, [FakeAttempt(RMS, "tirx", "PASSED", kernel_ms=0.5, eager_ms=8.0,
                                                    details={"eager_baseline": "interleaved"})],
              extra_instruction_paths={f"{RMS}_tirx": attachment})
    return root


@pytest.fixture(scope="module")
def rows(jobs):
    warnings = []
    found, stats = collect([jobs], warn=warnings.append)
    assert warnings == []
    return {(r.problem, r.dsl, r.arm): r for r in found}, stats


def test_layout_is_harbors(jobs):
    """Every file parses with the Harbor model Harbor itself reads it with."""
    for job in jobs.iterdir():
        JobConfig.model_validate_json((job / "config.json").read_text())
        JobResult.model_validate_json((job / "result.json").read_text())
        for trial in (p for p in job.iterdir() if p.is_dir()):
            paths = TrialPaths(trial)
            TrialConfig.model_validate_json(paths.config_path.read_text())
            result = TrialResult.model_validate_json(paths.result_path.read_text())
            assert result.config.trials_dir == job
            for entry in json.loads(paths.artifacts_manifest_path.read_text()):
                ArtifactManifestEntry.model_validate(entry)
            if (paths.verifier_dir / "grade.json").exists():
                GradeResult.model_validate_json((paths.verifier_dir / "grade.json").read_text())
            assert paths.reward_json_path.exists() == (result.verifier_result is not None)


def test_solo_pass(rows):
    r = rows[0][(RMS, "cutedsl", "solo")]
    assert (r.model, r.family, r.source_dsl, r.passed, r.status) == (MODEL, "mlp_norm", None, True, "PASSED")
    assert (r.runtime_ms, r.speedup, r.skill_chars) == (2.0, 4.0, len(SKILL))
    assert r.skill_violations == {"fenced_code": 0, "inline_code": 0, "shell_command": 0, "api_call": 0}
    assert r.job == "solo_cutedsl" and r.trial.startswith(RMS[:32].rstrip("_"))


def test_transfer_row(rows):
    r = rows[0][(RMS, "tirx", "transfer")]
    assert (r.arm, r.source_dsl, r.passed, r.runtime_ms, r.speedup) == ("transfer", "cutedsl", True, 0.5, 16.0)
    assert r.skill_chars == len(SKILL)  # the skill it was given
    assert r.eager_interleaved  # its grade timed the eager reference beside the kernel
    assert not rows[0][(RMS, "cutedsl", "solo")].eager_interleaved  # a cached baseline (no such detail)
    failed = rows[0][(RMS, "tirx", "solo")]
    assert (failed.passed, failed.runtime_ms, failed.speedup, failed.status) == (False, None, None, "TIMEOUT")


def test_family_from_id_range_when_no_problem_file(rows):
    assert rows[0][("45_fake_moe", "cutedsl", "solo")].family == "moe"
    assert rows[0][("60_fake_quant", "cutedsl", "solo")].family == "quantization"
    assert rows[0][("62_fake_la", "cutedsl", "solo")].family == "linear_attention"


def test_missing_and_blank_skills_are_skipped_treatments(rows):
    for problem in ("45_fake_moe", "65_fake_la"):
        source = rows[0][(problem, "cutedsl", "solo")]
        assert source.skill_chars == 0 and source.skill_violations is None
        skipped = rows[0][(problem, "tirx", "transfer")]
        assert (skipped.status, skipped.passed, skipped.source_dsl, skipped.skill_chars) == (
            "skipped", False, "cutedsl", 0)
        assert skipped.runtime_ms is None
    # A solo attempt that left a skill gets no skipped row; its transfer is simply not run yet.
    assert ("60_fake_quant", "tirx", "transfer") not in rows[0]
    # RMS has a real transfer trial, and the TIRx source left a skill: nothing skipped.
    assert rows[0][(RMS, "cutedsl", "solo")].skill_chars > 0
    assert rows[1].skipped_treatments == 2


def test_rewards_only_fallback(rows):
    r = rows[0][("60_fake_quant", "cutedsl", "solo")]
    assert (r.status, r.passed, r.runtime_ms, r.speedup) == ("PASSED", True, 1.0, 3.0)
    assert "reward" in r.note
    f = rows[0][("68_fake_la", "cutedsl", "solo")]
    assert (f.status, f.passed, f.runtime_ms) == ("FAILED", False, None)


def test_infrastructure_errors(rows):
    by_status = {p: rows[0][(p, "cutedsl", "solo")] for p in ("61_fake_quant", "63_fake_la", "66_fake_la")}
    for problem, r in by_status.items():
        assert (r.status, r.passed, r.runtime_ms) == ("INFRA_ERROR", False, None), problem
    assert "EnvironmentStartTimeoutError" in by_status["61_fake_quant"].note
    assert "ApiConnectionError" in by_status["63_fake_la"].note  # a reward exists but is not valid
    assert "no grade" in by_status["66_fake_la"].note
    # An agent that ran out of its budget is the agent's own result, not infrastructure.
    assert rows[0][("62_fake_la", "cutedsl", "solo")].status == "INCORRECT"
    # Infrastructure failures are never turned into skipped treatments.
    assert ("61_fake_quant", "tirx", "transfer") not in rows[0]
    assert rows[1].infra_errors == 3


def test_running_trials_are_left_out(rows):
    assert ("64_fake_la", "cutedsl", "solo") not in rows[0]
    assert rows[1].unfinished == 1


def test_hygiene_counts(rows):
    counts = rows[0][("67_fake_la", "cutedsl", "solo")].skill_violations
    assert counts == {"fenced_code": 1, "inline_code": 1, "shell_command": 1, "api_call": 1}


def test_unrecognised_extra_instructions_are_reported(tmp_path):
    other = tmp_path / "notes.md"
    other.write_text("hello")
    write_job(tmp_path / "jobs" / "odd", MODEL, [FakeAttempt(RMS, "tirx")],
              extra_instruction_paths={f"{RMS}_tirx": other})
    warnings = []
    found, stats = collect([tmp_path / "jobs"], warn=warnings.append)
    assert found == [] and len(stats.unreadable) == 1
    assert "cannot tell its arm" in warnings[0]


def test_cli_collect(jobs, tmp_path):
    out = CliRunner().invoke(app, ["collect", str(jobs / "solo_cutedsl"), str(jobs / "solo_tirx"),
                                   str(jobs / "c2t_rms")])
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 14  # 10 finished solo CuTe + 1 solo TIRx + 1 transfer + 2 skipped
    required = {"model", "problem", "family", "dsl", "arm", "source_dsl", "passed", "runtime_ms", "speedup",
                "skill_chars", "status"}
    assert all(required <= set(line) for line in lines)
    assert "attempts" in out.stderr
    missing = CliRunner().invoke(app, ["collect", str(tmp_path / "nope")])
    assert missing.exit_code == 2
