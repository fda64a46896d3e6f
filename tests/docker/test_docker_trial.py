"""Opt-in (``MKB_DOCKER_E2E=1``): the Docker mode of docs/running.md §1 end to end, on the CPU.

Builds the judge and TIRx grader images from this checkout on the base image ``MKB_BASE_IMAGE``
(default ``metakernelbench/debian-base:trixie``, made by ``images/debian-base.sh``), starts the judge
with ``images/judge-compose.yaml`` (Docker isolation; grading on the CPU at the small workload, fewer
timed calls), and runs one plain ``harbor run -e docker`` trial of problem 28 (TIRx) with a scripted
agent: Harbor builds the sandbox and verifier images and starts the sandbox beside its judge relay.
Asserted: the sandbox reaches the relay and neither the judge nor the internet and holds no token;
``submit`` reports INCORRECT then PASSED through the relay with the budget counted down; the final
grade in the separate verifier container is PASSED with a positive reward; every evaluation ran in
its own grader container (Docker events) and none is left.

Harbor 0.25 enforces a task's ``no-network`` with an egress-control sidecar built from Docker Hub
images, and enables it only after a probe container (also from Docker Hub) ran. Where no registry
is reachable, Harbor rejects ``no-network`` tasks, so the trial runs a copy of the task whose only
change is ``network_mode = "public"`` in task.toml. The sandbox's isolation does not come from that
setting (the task's compose file puts it on an internal network whose only other member is the
relay; Harbor routes only services without their own networks through its sidecar), and the test
checks it from inside the sandbox either way. The variant that ran is printed.

Needs Docker with Compose v2 and no judge of the Docker mode on this host (the test uses the fixed
network and volume names of images/judge-compose.yaml, and removes them at the end).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HARBOR = Path(sys.executable).with_name("harbor")
TASK = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"
BASE = os.environ.get("MKB_BASE_IMAGE", "metakernelbench/debian-base:trixie")
JUDGE = "metakernelbench/judge:0.1.0"
GRADER = "metakernelbench/grader-tirx:0.1.0"
JUDGE_CPU = ["serve", "--listen", "0.0.0.0:8765", "--state", "/var/lib/mkb-judge", "--secrets-dir", "/run/mkb-judge",
             "--isolation", "docker", "--problems-root", "/opt/mkb/problems", "--devices", "cpu",
             "--small", "--draws", "2", "--warmup", "2", "--timed", "5", "--rechecks", "1", "--wall-limit", "900"]
ROLE = "metakernelbench.role=evaluation"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("MKB_DOCKER_E2E") != "1",
                       reason="opt-in: MKB_DOCKER_E2E=1 (Docker, Compose v2 and a base image; docs/running.md)"),
]


def run(cmd: list[str], timeout: float = 600, env: dict | None = None, check: bool = True,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if check:
        assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def compose_build(root: Path, service: str, dockerfile: str, image: str) -> float:
    """Build one image with Compose (BuildKit, as Harbor builds the sandbox, so they share layers)."""
    spec = {"name": "mkb-images", "services": {service: {
        "image": image, "build": {"context": str(REPO), "dockerfile": dockerfile, "args": {"BASE_IMAGE": BASE}}}}}
    path = root / f"build-{service}.json"
    path.write_text(json.dumps(spec))
    t0 = time.monotonic()
    run(["docker", "compose", "-f", str(path), "build", service], timeout=3600)
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def trial(tmp_path_factory):
    root = tmp_path_factory.mktemp("docker-e2e")
    run(["docker", "info"], timeout=30)
    assert "v2." in run(["docker", "compose", "version"]).stdout, "Harbor's docker environment needs Compose v2"
    assert run(["docker", "image", "inspect", BASE], check=False).returncode == 0, \
        f"no base image {BASE}: build it with images/debian-base.sh or set MKB_BASE_IMAGE"
    if run(["docker", "volume", "inspect", "mkb-judge-state"], check=False).returncode == 0:
        pytest.fail("a judge of the Docker mode already has state on this host (volume mkb-judge-state); "
                    "the test would replace it")
    builds = {"judge": compose_build(root, "judge", "images/judge.Dockerfile", JUDGE),
              "grader-tirx": compose_build(root, "grader-tirx", "images/grader-tirx.Dockerfile", GRADER)}

    override = root / "judge-cpu.json"
    override.write_text(json.dumps({"services": {"judge": {"command": JUDGE_CPU}}}))
    compose = ["docker", "compose", "-f", str(REPO / "images" / "judge-compose.yaml"), "-f", str(override)]
    # the sandbox image's official DSL pages come from GitHub, which a registry-less host cannot reach
    env = {**os.environ, "MKB_BASE_IMAGE": BASE, "MKB_JUDGE_PUBLISH": "127.0.0.1:",
           "MKB_OFFICIAL_DOCS": os.environ.get("MKB_OFFICIAL_DOCS", "skip")}
    events = subprocess.Popen(["docker", "events", "--filter", f"label={ROLE}", "--filter", "type=container",
                               "--format", "{{.Action}} {{index .Actor.Attributes \"metakernelbench.submission\"}}"],
                              stdout=subprocess.PIPE, text=True)
    try:
        run([*compose, "up", "-d", "--no-build"], env=env, timeout=300)
        port = run([*compose, "port", "judge", "8765"], env=env).stdout.strip().rsplit(":", 1)[1]
        health = None
        for _ in range(60):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health", timeout=5) as r:
                    health = json.loads(r.read())
                break
            except OSError:
                time.sleep(2)
        assert health and health["isolation"] == "docker", health

        task_dir = REPO / "tasks" / TASK
        from harbor.environments.docker.docker import DockerEnvironment

        egress = DockerEnvironment._egress_control_kernel_support()
        if not egress:  # see the module docstring
            task_dir = root / "tasks" / TASK
            shutil.copytree(REPO / "tasks" / TASK, task_dir)
            toml = task_dir / "task.toml"
            text = toml.read_text()
            assert text.count('network_mode = "no-network"') == 2
            toml.write_text(text.replace('network_mode = "no-network"', 'network_mode = "public"'))
        hrun = {**env, "PYTHONPATH": f"{Path(__file__).parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        t0 = time.monotonic()
        done = run([str(HARBOR), "run", "-p", str(task_dir), "-a", "docker_agent:DockerAgent", "-e", "docker",
                    "-o", str(root / "jobs"), "--job-name", "docker-e2e", "-y"], env=hrun, timeout=3600,
                   check=False, cwd=root)
        wall = time.monotonic() - t0
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        health_after = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health", timeout=5).read())
        judge_log = run([*compose, "logs", "--no-color", "judge"], env=env, check=False).stdout
    finally:
        run([*compose, "down", "-v", "--remove-orphans"], env=env, check=False, timeout=300)
        events.terminate()
    job = root / "jobs" / "docker-e2e"
    found = [p for p in job.iterdir() if p.is_dir()]
    assert len(found) == 1, [p.name for p in job.iterdir()]
    info = {"variant": "task as generated" if egress else 'copy with network_mode = "public" (no egress sidecar)',
            "builds_s": {k: round(v) for k, v in builds.items()}, "harbor_run_s": round(wall)}
    return {"trial": found[0], "job": job, "events": events.stdout.read().split("\n"), "info": info,
            "health": health_after, "judge_log": judge_log}


def steps(t: Path) -> dict[str, dict]:
    return {s["label"]: s for s in json.loads((t / "agent" / "script.json").read_text())}


def test_sandbox_reaches_only_the_relay(trial):
    s = steps(trial["trial"])
    assert "has-submit" in s["instruction-files"]["stdout"] and "tirx-api" in s["instruction-files"]["stdout"]
    assert s["reach-relay"]["stdout"].startswith("reached"), s["reach-relay"]
    for label in ("reach-judge", "reach-internet", "reach-internet-ip"):
        assert s[label]["stdout"].startswith("refused"), s[label]
    secrets = s["secrets"]["stdout"]
    assert "No such file or directory" in secrets and "token=[]" in secrets and secrets.rstrip().endswith("0")


def test_feedback_through_the_relay(trial):
    s = steps(trial["trial"])
    wrong, right = s["wrong"]["stdout"], s["right"]["stdout"]
    # the reports in full, and the judge's log (an INFRA_ERROR's cause is there, not in the report)
    log = trial["judge_log"][-4000:]
    assert s["wrong"]["rc"] == 0 and "status: INCORRECT" in wrong and "submissions left: 9" in wrong, wrong + log
    assert s["right"]["rc"] == 0 and "status: PASSED" in right and "submissions left: 8" in right, right + log


def test_final_grade_and_reward(trial):
    t = trial["trial"]
    result = json.loads((t / "result.json").read_text())
    assert result.get("exception_info") is None, result.get("exception_info")
    reward = json.loads((t / "verifier" / "reward.json").read_text())
    assert reward["passed"] == 1 and reward["reward"] > 0 and reward["infra_error"] == 0, reward
    grade = json.loads((t / "verifier" / "grade.json").read_text())
    assert grade["status"] == "PASSED" and grade["dsl"] == "tirx"
    assert result["verifier_result"]["rewards"]["passed"] == 1
    assert (t / "artifacts" / "app" / "SKILL.md").read_text().startswith("# Skill")
    assert "def solve" in (t / "artifacts" / "app" / "kernel.py").read_text()
    print(json.dumps({**trial["info"], "reward": reward, "status": grade["status"],
                      "started_at": result.get("started_at"), "finished_at": result.get("finished_at")}))


def test_each_evaluation_in_its_own_container(trial):
    created = [e.split()[1] for e in trial["events"] if e.startswith("create ")]
    destroyed = [e.split()[1] for e in trial["events"] if e.startswith("destroy ")]
    # the wrong and the right feedback submissions and the final grade, each in a fresh container
    assert len(created) == 3 and len(set(created)) == 3, trial["events"]
    assert sorted(destroyed) == sorted(created), trial["events"]
    assert trial["health"]["queue"], trial["health"]
    left = run(["docker", "ps", "-a", "-q", "--filter", f"label={ROLE}"]).stdout.strip()
    assert not left, left
