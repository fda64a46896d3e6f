"""The README's main job on a CPU-only machine: ``python -m demo.study``, a four-arm study in miniature.

One problem (28), so four Terminus-2 trials: solo TIRx and CuTe DSL, then each DSL given the other's
SKILL.md. Asserted: the four arms' rows in the attempts table with the judge's verdicts on this
machine (TIRx compiled for the CPU passes; CuTe DSL cannot run without a GPU), each transfer attempt's
model shown the source attempt's SKILL.md verbatim, and the report marked as a demonstration.
Needs what the other end-to-end tests need (root or user namespaces, ``unshare``, tmux).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from metakernelbench.harbor_env import unshare_problem

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from demo.attempt_script import NOTES_HEADER, task_of  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "skill_transfer"))
from annotator_stub import StubModelServer, layer_of, section  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from metakernelbench.cli import app  # noqa: E402
from metakernelbench.skill_transfer.annotate import read_annotations  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 and unshare_problem() is not None,
                       reason=f"the local environment cannot isolate here: {unshare_problem()}"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="Terminus-2 needs tmux in the sandbox"),
]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "study"
    done = subprocess.run([sys.executable, "-m", "demo.study", "--out", str(out), "--problems", "28"], cwd=REPO,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out, done.stdout


def test_four_arms_with_the_judges_verdicts(study):
    out, _ = study
    rows = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    arms = {(r["arm"], r["source_dsl"], r["dsl"]): r for r in rows}
    assert len(rows) == 4 and set(arms) == {("solo", None, "tirx"), ("solo", None, "cutedsl"),
                                            ("transfer", "cutedsl", "tirx"), ("transfer", "tirx", "cutedsl")}
    assert all(r["model"] == "openai/mkb-scripted" and r["problem"].startswith("28_") for r in rows)
    for (_, _, dsl), row in arms.items():
        assert row["status"] == ("PASSED" if dsl == "tirx" else "RUNTIME_ERROR"), row
        assert row["skill_chars"] > 0


def test_transfer_attempts_saw_the_source_skill(study):
    out, _ = study
    conversations = {}
    for line in (out / "model.jsonl").read_text().splitlines():
        first = json.loads(line)["messages"][0]["content"]
        conversations.setdefault(task_of(first)[0], set()).add(first)
    skills = {p.parts[-5].split("__")[1]: p.read_text() for p in (out / "jobs").glob("*/*/artifacts/app/SKILL.md")}
    for task, instructions in conversations.items():
        given = [i for i in instructions if NOTES_HEADER in i]
        assert len(instructions) == 2 and len(given) == 1, task  # one solo, one transfer attempt per task
        source = "solo_tirx" if task.endswith("_cutedsl") else "solo_cutedsl"
        assert skills[source] in given[0]


def test_report_marked_as_a_demonstration(study):
    out, stdout = study
    assert "DEMONSTRATION RUN, NOT A MEASUREMENT" in (out / "report" / "index.html").read_text()
    assert "[demo" in stdout and "trial finished" in stdout
    assert stdout.rstrip().endswith(f"Report of this demonstration run (not a measurement): "
                                    f"{out / 'report' / 'index.html'}")


def _first_line(text):
    return next(line for line in text.splitlines() if line.strip()).strip()


def _annotator(messages):
    """A deterministic annotator that quotes what it is shown (the real job folders' skills and
    trajectories), as the schema of each layer asks."""
    layer = layer_of(messages)
    if layer == "labels":
        return 200, json.dumps({"labels": [{"category": "evidence_backed_finding",
                                            "quote": _first_line(section(messages, "SKILL"))}]})
    if layer == "follow":
        return 200, json.dumps({"level": "partial", "evidence": [_first_line(section(messages, "TRAJECTORY"))],
                                "rationale": "stub"})
    if layer == "propagation":
        claim = _first_line(section(messages, "SOURCE SKILL"))
        target = section(messages, "TARGET SKILL")
        return 200, json.dumps({"claims": [{"claim": claim, "verified": False, "support": None,
                                            "reappears": claim if claim in target else None}]})
    return 200, json.dumps({"primary_class": "toolchain_friction",
                            "evidence": [_first_line(section(messages, "TRAJECTORY"))], "rationale": "stub"})


def test_annotate_and_report_on_the_terminus_job_folders(study, tmp_path):
    """``mkb annotate`` + ``mkb report`` over the real Harbor job folders Terminus-2 left (a stub
    annotator model: no network)."""
    out, _ = study
    attempts = tmp_path / "attempts.jsonl"
    shutil.copy(out / "attempts.jsonl", attempts)
    os.environ.setdefault("OPENAI_API_KEY", "stub-local")
    with StubModelServer(_annotator) as server:
        done = CliRunner().invoke(app, ["annotate", str(attempts), str(out / "jobs"), "--model",
                                        "openai/stub-annotator", "--api-base", server.base_url])
        assert done.exit_code == 0, done.output
    records = read_annotations(tmp_path / "attempts.annotations.jsonl")
    layers = sorted({(r.layer, r.direction) for r in records})
    # both transfer attempts left a skill and had a source skill: labels, follow and propagation each
    for layer in ("labels", "follow", "propagation"):
        assert (layer, "cutedsl2tirx") in layers and (layer, "tirx2cutedsl") in layers, layers
    assert all(r.status == "labelled" for r in records), [(r.layer, r.status, r.error) for r in records]
    report = tmp_path / "report"
    done = CliRunner().invoke(app, ["report", str(attempts), "-o", str(report), "--n-boot", "50"])
    assert done.exit_code == 0, done.output
    md = (report / "report.md").read_text()
    assert "Annotator: openai/stub-annotator" in md
    for table in ("annotation_labels.csv", "annotation_follow.csv", "annotation_propagation.csv"):
        assert (report / table).read_text().count("\n") >= 2, table
