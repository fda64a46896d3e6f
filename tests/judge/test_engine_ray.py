"""The judge on a Ray cluster: device actors on two nodes, one judge, one store, one budget.

A local Ray cluster of two nodes (``ray.cluster_utils.Cluster``: two raylets on this machine, as two
hosts would be) each offers one fake device (``mkb_device``, graded on the CPU at the small
workload). The judge finds one actor per node; two clients -- the trials of a study on two hosts --
submit the CPU TIRx kernel of problem 28 with the same job token, so all their submissions belong to
one attempt: exactly ``budget`` of them are graded and charged, the rest are refused uncharged, and
the gradings ran on both nodes. Also: a node with other grader files is refused at start.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from metakernelbench.judge.client import JudgeClient  # noqa: E402
from metakernelbench.judge.engine_ray import (  # noqa: E402
    DEVICE_RESOURCE,
    ActorPlan,
    code_fingerprint,
    plan_actors,
)
from metakernelbench.judge.isolation import GradeSettings  # noqa: E402
from metakernelbench.judge.server import JudgeConfig, RunningJudge  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TASK = "metakernelbench/28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"
KERNEL = (REPO / "tests" / "fixtures" / "kernels" / "rmsnorm_tirx_llvm.py").read_bytes()
SMALL = GradeSettings(small=True, draws=2, warmup=2, timed=5, rechecks=1)


def test_fingerprint_covers_grader_and_problem_files(tmp_path):
    pkg, probs = tmp_path / "metakernelbench", tmp_path / "problems"
    (pkg / "verifier").mkdir(parents=True)
    (probs / "mlp_norm").mkdir(parents=True)
    (pkg / "verifier" / "grader.py").write_text("A = 1\n")
    (probs / "mlp_norm" / "28_x.py").write_text("B = 2\n")
    first = code_fingerprint(pkg, probs)
    assert first == code_fingerprint(pkg, probs)
    (probs / "mlp_norm" / "28_x.py").write_text("B = 3\n")
    assert code_fingerprint(pkg, probs) != first
    (probs / "mlp_norm" / "28_x.py").write_text("B = 2\n")
    (pkg / "verifier" / "grader.py").write_text("A = 2\n")
    assert code_fingerprint(pkg, probs) != first


def test_one_actor_per_device_unit_on_live_nodes_only():
    nodes = [{"NodeID": "b", "Alive": True, "Resources": {DEVICE_RESOURCE: 2.0, "GPU": 2.0}},
             {"NodeID": "a", "Alive": True, "Resources": {DEVICE_RESOURCE: 1.0}},
             {"NodeID": "c", "Alive": False, "Resources": {DEVICE_RESOURCE: 4.0}},
             {"NodeID": "d", "Alive": True, "Resources": {"CPU": 8.0}}]
    plans = plan_actors(nodes, "/w", SMALL)
    assert [(p.node_id, p.index, p.node_devices, p.gpus) for p in plans] == [
        ("a", 0, 1, False), ("b", 0, 2, True), ("b", 1, 2, True)]
    assert all(isinstance(p, ActorPlan) and p.settings == SMALL for p in plans)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {DEVICE_RESOURCE: 1},
                                                      "include_dashboard": False})
    c.add_node(num_cpus=1, resources={DEVICE_RESOURCE: 1})
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.mark.slow
def test_two_hosts_share_one_judge_and_one_budget(cluster, tmp_path):
    judge = RunningJudge(JudgeConfig(state=tmp_path / "state", devices=[], unix=tmp_path / "judge.sock",
                                     settings=SMALL, budget=3, engine="ray", ray_address=cluster.address))
    try:
        admin = JudgeClient(judge.url, judge.admin_token)
        health = admin.health()
        assert health["isolation"] == "ray" and len(health["devices"]) == 2
        assert len({d.split("/")[0] for d in health["devices"]}) == 2  # one actor on each node
        job = admin.request("POST", "/v1/tokens", {"scope": "job", "label": "study"})["token"]
        answers: list[dict] = []
        lock = threading.Lock()

        def host(n: int) -> None:
            client = JudgeClient(judge.url, job, TASK, timeout=600)
            for _ in range(2):
                sub = client.submit(KERNEL)
                done = client.wait(sub["id"], poll_s=0.5, max_wait_s=600) if sub["state"] != "rejected" else sub
                with lock:
                    answers.append(done)

        threads = [threading.Thread(target=host, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
        statuses = sorted(a.get("status") for a in answers)
        assert statuses == ["NOT_EVALUATED", "PASSED", "PASSED", "PASSED"], answers
        graded = [s for s in judge.store.submissions() if s.state == "done"]
        assert len(graded) == 3 and all(s.charged for s in graded)
        assert {s.device for s in graded} == set(health["devices"])  # both nodes graded
        status = JudgeClient(judge.url, job, TASK).request("GET", "/v1/attempt")
        assert status["used"] == 3 and status["submissions_left"] == 0
    finally:
        judge.stop()


@pytest.mark.slow
def test_a_node_with_other_grader_files_is_refused(cluster, tmp_path, monkeypatch):
    import metakernelbench.judge.engine_ray as engine

    monkeypatch.setattr(engine, "code_fingerprint", lambda *a, **k: "not-what-the-actors-have")
    with pytest.raises(SystemExit, match="other grader or problem files"):
        engine.RayIsolation(SMALL, cluster.address)


@pytest.mark.slow
def test_a_lost_device_actor_is_an_uncharged_infra_error_and_claims_no_more(cluster):
    from metakernelbench.judge.engine_ray import RayIsolation
    from metakernelbench.judge.isolation import EvalRequest

    iso = RayIsolation(SMALL, cluster.address)
    device = iso.devices[0]
    ray.kill(iso.actors[device])
    outcome = iso.evaluate(EvalRequest(1, "28_fused_add_rmsnorm_h4096_llama31_8b_bf16", "tirx", KERNEL), device, 0,
                           lambda stage: None)
    assert outcome.result["status"] == "INFRA_ERROR" and not outcome.charged
    assert not iso.available(device) and iso.available(iso.devices[1])
    for handle in iso.actors.values():
        ray.kill(handle)
