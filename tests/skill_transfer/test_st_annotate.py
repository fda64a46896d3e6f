"""``mkb annotate`` then ``mkb report`` over synthetic Harbor job folders, against a local stub model.

One model, two problems (28 mlp_norm, 45 moe):

    solo CuTe:  28 PASSED 1 ms, skill S28C;  45 PASSED 1 ms, skill S45C
    solo TIRx:  28 PASSED 1 ms, skill S28T;  45 INCORRECT, no skill
    CuTe->TIRx: 28 PASSED 0.5 ms (r = 2, helped), follows the notes, skill repeats S28C's claim
                45 PASSED 1 ms (rescue, r = 4), follows the notes, its own skill
    TIRx->CuTe: 28 INCORRECT (break, r = 1/4, harmed), goes its own way, skill T28;
                45 skipped (its source left no skill): nothing to annotate

The stub plays a deterministic annotator that quotes the material it is shown, and answers the
labels of S45C with prose that is never JSON (so that item ends unlabelled after its tries).
"""

import csv
import json
import os

import pytest
from annotator_stub import StubModelServer, layer_of, section
from st_synthetic import FakeAttempt, write_job
from typer.testing import CliRunner

from metakernelbench.cli import app
from metakernelbench.skill_transfer.annotate import read_annotations
from metakernelbench.skill_transfer.arms import model_slug, solo_job_name, transfer_job_name
from metakernelbench.skill_transfer.skill import render_attachment

MODEL = "synthetic/model-a"
P28, P45 = "28_synthetic_norm", "45_synthetic_moe"
S28C = "Fusing the residual add saved one pass over the output: 0.52 ms to 0.36 ms.\n"
S45C = "Routing in one kernel was slower than eager; 0.9 ms against 0.7 ms.\n"
S28T = "A one-warp row layout left most of the SM idle.\n"


def steps(*agent_lines):
    return [{"step_id": 1, "source": "user", "message": "Write the kernel."}] + [
        {"step_id": i + 2, "source": "agent", "message": line} for i, line in enumerate(agent_lines)]


def first_line(text):
    return next(line for line in text.splitlines() if line.strip()).strip()


def annotator_reply(messages):
    layer = layer_of(messages)
    if layer == "labels":
        skill = section(messages, "SKILL")
        if "Routing" in skill:
            return 200, "This skill mostly reports a finding."
        return 200, json.dumps({"labels": [{"category": "evidence_backed_finding", "quote": first_line(skill)}]})
    if layer == "follow":
        trajectory = section(messages, "TRAJECTORY")
        if "following the notes" in trajectory:
            return 200, json.dumps({"level": "full", "evidence": ["following the notes"], "rationale": "says so"})
        return 200, json.dumps({"level": "none", "evidence": [], "rationale": "own approach"})
    if layer == "propagation":
        source, target = section(messages, "SOURCE SKILL"), section(messages, "TARGET SKILL")
        claim = first_line(source)
        return 200, json.dumps({"claims": [{"claim": claim, "verified": False, "support": None,
                                            "reappears": claim if claim in target else None}]})
    trajectory = section(messages, "TRAJECTORY")
    cited = next((line for line in trajectory.splitlines() if "error" in line), first_line(trajectory))
    return 200, json.dumps({"primary_class": "toolchain_friction", "evidence": [cited],
                            "rationale": "compile errors"})


@pytest.fixture()
def study(tmp_path):
    slug = model_slug(MODEL)
    jobs, tasks = tmp_path / "jobs", tmp_path / "tasks"
    solo_steps = steps("Submitting the kernel.")
    write_job(jobs / solo_job_name(slug, "cutedsl"), MODEL, [
        FakeAttempt(P28, "cutedsl", skill=S28C, trajectory=solo_steps),
        FakeAttempt(P45, "cutedsl", skill=S45C, trajectory=solo_steps)], tasks)
    write_job(jobs / solo_job_name(slug, "tirx"), MODEL, [
        FakeAttempt(P28, "tirx", skill=S28T, trajectory=solo_steps),
        FakeAttempt(P45, "tirx", status="INCORRECT", kernel_ms=None, skill=None, trajectory=solo_steps)], tasks)
    transfers = [
        ("cutedsl2tirx", FakeAttempt(P28, "tirx", kernel_ms=0.5, skill=S28C + "A second note.\n",
                                     trajectory=steps("I am following the notes from before."))),
        ("cutedsl2tirx", FakeAttempt(P45, "tirx", skill="Routing stayed in eager PyTorch.\n",
                                     trajectory=steps("Again following the notes."))),
        ("tirx2cutedsl", FakeAttempt(P28, "cutedsl", status="INCORRECT", kernel_ms=None, skill="T28 note.\n",
                                     trajectory=steps("Compile error: unsupported layout.", "Giving up."))),
    ]
    sources = {(P28, "cutedsl"): S28C, (P45, "cutedsl"): S45C, (P28, "tirx"): S28T}
    for direction, attempt in transfers:
        source_dsl = direction.split("2")[0]
        attachment = tmp_path / "runs" / slug / "skills" / direction / f"{attempt.task}.md"
        attachment.parent.mkdir(parents=True, exist_ok=True)
        attachment.write_text(render_attachment(sources[(attempt.problem, source_dsl)]))
        write_job(jobs / transfer_job_name(slug, direction, attempt.problem), MODEL, [attempt], tasks,
                  extra_instruction_paths={attempt.task: attachment})
    attempts = tmp_path / "attempts.jsonl"
    result = CliRunner().invoke(app, ["collect", str(jobs), "-o", str(attempts)])
    assert result.exit_code == 0, result.output
    return tmp_path, jobs, attempts


def annotate(server, attempts, jobs, *extra):
    os.environ.setdefault("OPENAI_API_KEY", "stub-local")
    return CliRunner().invoke(app, ["annotate", str(attempts), str(jobs), "--model", "openai/stub-annotator",
                                    "--api-base", server.base_url, *extra])


def test_annotate_then_report(study):
    root, jobs, attempts = study
    with StubModelServer(annotator_reply) as server:
        result = annotate(server, attempts, jobs)
        assert result.exit_code == 0, result.output
        first_run = len(server.requests)
        records = read_annotations(root / "attempts.annotations.jsonl")
        rerun = annotate(server, attempts, jobs)
        assert rerun.exit_code == 0, rerun.output
        # only the unlabelled item is asked again (3 tries); every valid answer came from the cache
        assert len(server.requests) - first_run == 3
        assert all("Routing in one kernel" in r[1]["content"] for r in server.requests[first_run:])
    by_item = {(r.layer, r.problem[:2], r.direction): r for r in records}
    assert sorted(by_item) == sorted([
        ("labels", "28", "cutedsl2tirx"), ("labels", "45", "cutedsl2tirx"), ("labels", "28", "tirx2cutedsl"),
        ("follow", "28", "cutedsl2tirx"), ("follow", "45", "cutedsl2tirx"), ("follow", "28", "tirx2cutedsl"),
        ("propagation", "28", "cutedsl2tirx"), ("propagation", "45", "cutedsl2tirx"),
        ("propagation", "28", "tirx2cutedsl"), ("failure", "28", "tirx2cutedsl")])
    assert all(r.annotator == "openai/stub-annotator" and r.rubric_version == "1.0" for r in records)
    bad = by_item[("labels", "45", "cutedsl2tirx")]
    assert (bad.status, bad.answer, bad.tries) == ("unlabelled", None, 3) and "no JSON object" in bad.error
    assert by_item[("follow", "28", "cutedsl2tirx")].answer.level == "full"
    assert by_item[("follow", "28", "tirx2cutedsl")].answer.level == "none"
    assert by_item[("follow", "28", "tirx2cutedsl")].r == 0.25
    assert by_item[("propagation", "28", "cutedsl2tirx")].answer.propagated
    assert not by_item[("propagation", "45", "cutedsl2tirx")].answer.propagated
    assert by_item[("failure", "28", "tirx2cutedsl")].answer.evidence == ["Compile error: unsupported layout."]

    out = root / "report"
    result = CliRunner().invoke(app, ["report", str(attempts), "-o", str(out), "--n-boot", "50"])
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    assert "Annotator: openai/stub-annotator, rubric 1.0, pass 1." in md
    with open(out / "annotation_follow.csv") as fh:
        follow = {(r["direction"], r["outcome"]): r for r in csv.DictReader(fh)}
    assert follow[("cutedsl2tirx", "helped")]["full"] == "2" and follow[("tirx2cutedsl", "harmed")]["none"] == "1"
    with open(out / "annotation_labels.csv") as fh:
        labels = {(r["direction"], r["category"]): r for r in csv.DictReader(fh)}
    # cutedsl2tirx: S28C labelled, S45C unlabelled -> 1 skill of 1
    assert labels[("cutedsl2tirx", "evidence_backed_finding")]["skills"] == "1"
    with open(out / "annotation_propagation.csv") as fh:
        prop = {r["direction"]: r for r in csv.DictReader(fh)}
    assert prop["cutedsl2tirx"]["propagating"] == "1" and prop["cutedsl2tirx"]["with unverified"] == "2"
    assert "Agreement" not in md


def test_second_pass_and_agreement(study):
    root, jobs, attempts = study
    second = root / "second.jsonl"
    with StubModelServer(annotator_reply) as server:
        assert annotate(server, attempts, jobs).exit_code == 0
        before = len(server.requests)
        result = annotate(server, attempts, jobs, "--pass", "2", "-o", str(second))
        assert result.exit_code == 0, result.output
        assert len(server.requests) > before  # a second pass does not reuse the first pass's answers
    out = root / "report"
    result = CliRunner().invoke(app, ["report", str(attempts), "-o", str(out), "--n-boot", "50",
                                      "--agreement", str(second)])
    assert result.exit_code == 0, result.output
    with open(out / "annotation_agreement.csv") as fh:
        rows = {r["layer"]: r for r in csv.DictReader(fh)}
    # the stub is deterministic: both passes agree everywhere (labels: 2 skills x 11 decisions)
    assert rows["labels"]["items"] == "2" and rows["labels"]["observed"] == "100.0%"
    assert rows["follow"]["kappa"] == "+1.000"


def test_bad_input_gets_one_line_errors(study, tmp_path):
    root, jobs, attempts = study
    runner = CliRunner()
    out = runner.invoke(app, ["annotate", str(attempts), str(jobs), "--model", "openai/x", "--layers", "labels,vibes"])
    assert out.exit_code == 2 and "unknown layer(s) vibes" in out.output
    out = runner.invoke(app, ["annotate", str(attempts), str(tmp_path / "nope"), "--model", "openai/x"])
    assert out.exit_code == 2 and "no such folder" in out.output
    out = runner.invoke(app, ["report", str(attempts), "-o", str(tmp_path / "r"), "--agreement", str(attempts)])
    assert out.exit_code == 2 and "--agreement needs" in out.output
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"layer": "labels"}\n')
    out = runner.invoke(app, ["report", str(attempts), "-o", str(tmp_path / "r"), "--annotations", str(broken)])
    assert out.exit_code == 2 and "broken.jsonl:1: not an annotation record" in out.output
