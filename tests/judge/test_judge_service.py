"""The judge's API with a fake evaluator: budget, charging, tokens, queue order and persistence."""

import threading
import time

import pytest
from judge_support import PROBLEM, TASK, FakeIsolation, fake_judge

from metakernelbench.judge import service
from metakernelbench.judge.client import JudgeClient, JudgeError, JudgeUnavailable, progress_line
from metakernelbench.judge.store import Store
from metakernelbench.verifier import rules

GOOD = b"def solve(x):\n    return x\n"


@pytest.fixture
def judge(tmp_path):
    iso = FakeIsolation(0.05)
    running = fake_judge(tmp_path / "state", iso, budget=3)
    yield running, iso
    running.stop()


def attempt_client(running, key="trial-1", task=TASK, minutes=40):
    admin = JudgeClient(running.url, running.admin_token)
    answer = admin.register(key, task, minutes)
    return JudgeClient(running.url, answer["token"]), answer


def test_limit_matches_the_grader():
    assert service.MAX_KERNEL_BYTES == rules.MAX_KERNEL_BYTES


def test_budget_charging_and_refusals_that_cost_nothing(judge):
    running, _ = judge
    client, answer = attempt_client(running)
    assert answer["submissions_left"] == 3
    done = client.wait(client.submit(GOOD)["id"], poll_s=0.05)
    assert done["status"] == "PASSED" and done["charged"] and done["submissions_left"] == 2
    assert "submissions left: 2" in done["report"] and "speedup" in done["report"]
    # parse error, empty file, oversized file: refused at once, never charged
    for bad, why in ((b"def solve(:\n", "does not parse"), (b"  \n", "empty"),
                     (b"#" * (service.MAX_KERNEL_BYTES + 1), "over the")):
        refused = client.submit(bad)
        assert refused["state"] == "rejected" and not refused["charged"] and why in refused["message"]
        assert "not charged" in refused["report"] and refused["submissions_left"] == 2
    # an infrastructure fault is evaluated but not charged
    infra = client.wait(client.submit(b"INFRA = 1\n")["id"], poll_s=0.05)
    assert infra["status"] == "INFRA_ERROR" and not infra["charged"] and infra["submissions_left"] == 2
    failed = client.wait(client.submit(b"FAIL = 1\n")["id"], poll_s=0.05)
    assert failed["status"] == "INCORRECT" and failed["charged"] and failed["submissions_left"] == 1
    client.wait(client.submit(GOOD)["id"], poll_s=0.05)
    over = client.submit(GOOD)
    assert over["state"] == "rejected" and "no submissions left" in over["message"]
    assert client.attempt()["submissions_left"] == 0


def test_registering_again_keeps_the_attempt(judge):
    running, _ = judge
    client, _ = attempt_client(running)
    client.wait(client.submit(GOOD)["id"], poll_s=0.05)
    again, answer = attempt_client(running)  # e.g. a relay container that restarted
    assert answer["used"] == 1 and again.attempt()["submissions_left"] == 2
    with pytest.raises(JudgeError) as err:
        attempt_client(running, task="metakernelbench/28_fused_add_rmsnorm_h4096_llama31_8b_bf16_cutedsl")
    assert err.value.status == 409


def test_request_ids_make_resubmission_idempotent(judge):
    running, _ = judge
    client, _ = attempt_client(running)
    first = client.submit(GOOD, request_id="abc")
    again = client.submit(GOOD, request_id="abc")
    assert first["id"] == again["id"]
    client.wait(first["id"], poll_s=0.05)
    assert client.attempt()["used"] == 1


def test_tokens_and_scopes(judge):
    running, _ = judge
    client, _ = attempt_client(running)
    with pytest.raises(JudgeError) as err:
        JudgeClient(running.url, "mkb-attempt-forged").submit(GOOD)
    assert err.value.status == 403
    with pytest.raises(JudgeError):  # a sandbox token cannot ask for a final grade or register attempts
        client.submit(GOOD, kind="final", task=TASK)
    with pytest.raises(JudgeError):
        client.register("another", TASK)
    other, _ = attempt_client(running, key="trial-2")
    mine = client.submit(GOOD)
    with pytest.raises(JudgeError) as err:  # another attempt's submission is invisible
        other.get(mine["id"])
    assert err.value.status == 404
    admin = JudgeClient(running.url, running.admin_token)
    final_token = admin.request("POST", "/v1/tokens", {"scope": "final"})["token"]
    final = JudgeClient(running.url, final_token)
    graded = final.wait(final.submit(GOOD, kind="final", task=TASK)["id"], poll_s=0.05)
    assert graded["reward"]["passed"] == 1.0 and graded["reward"]["reward"] == pytest.approx(2.0)
    with pytest.raises(JudgeError):
        final.submit(GOOD)  # a final token has no feedback budget
    with pytest.raises(JudgeError):
        admin.register("bad", "metakernelbench/99_no_such_problem_tirx")


def test_job_tokens_give_one_budget_per_task(judge):
    running, _ = judge
    admin = JudgeClient(running.url, running.admin_token)
    token = admin.request("POST", "/v1/tokens", {"scope": "job", "label": "solo"})["token"]
    job = JudgeClient(running.url, token, TASK)
    for _ in range(3):
        job.wait(job.submit(GOOD)["id"], poll_s=0.05)
    assert job.submit(GOOD)["state"] == "rejected"
    other_task = JudgeClient(running.url, token, "metakernelbench/28_fused_add_rmsnorm_h4096_llama31_8b_bf16_cutedsl")
    assert other_task.attempt()["submissions_left"] == 3


def test_time_is_up_refuses_without_charge(judge):
    running, _ = judge
    client, _ = attempt_client(running, minutes=1e-6)
    time.sleep(0.01)
    refused = client.submit(GOOD)
    assert refused["state"] == "rejected" and "time is up" in refused["message"]


def test_one_evaluation_per_device_and_progress_for_waiting_clients(tmp_path):
    iso = FakeIsolation(0.4)
    running = fake_judge(tmp_path / "state", iso)
    try:
        clients = [attempt_client(running, key=f"t{i}")[0] for i in range(3)]
        seen: list[str] = []
        answers = [c.submit(GOOD) for c in clients]
        results = []

        def wait(c, a):
            results.append(c.wait(a["id"], poll_s=0.05, on_progress=lambda i: seen.append(progress_line(i))))

        threads = [threading.Thread(target=wait, args=pair) for pair in zip(clients, answers, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(results) == 3 and all(r["status"] == "PASSED" for r in results)
        assert iso.max_active == 1
        spans = sorted(iso.intervals)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
        assert any(line.startswith("queued: 1 evaluation(s) ahead") for line in seen)
        assert any(line.startswith("evaluating on cpu") for line in seen)
    finally:
        running.stop()


def test_two_devices_run_in_parallel(tmp_path):
    iso = FakeIsolation(0.5)
    running = fake_judge(tmp_path / "state", iso, devices=("cpu", "cpu:1"))
    try:
        clients = [attempt_client(running, key=f"t{i}")[0] for i in range(2)]
        ids = [c.submit(GOOD)["id"] for c in clients]
        for c, sid in zip(clients, ids, strict=True):
            c.wait(sid, poll_s=0.05)
        assert iso.max_active == 2
    finally:
        running.stop()


def test_final_grades_go_before_feedback(tmp_path):
    iso = FakeIsolation(0.3)
    running = fake_judge(tmp_path / "state", iso)
    try:
        client, _ = attempt_client(running)
        admin = JudgeClient(running.url, running.admin_token)
        first = client.submit(GOOD)  # starts at once
        time.sleep(0.1)
        queued = client.submit(GOOD)
        final = admin.submit(GOOD, kind="final", task=TASK)
        admin.wait(final["id"], poll_s=0.05)
        client.wait(queued["id"], poll_s=0.05)
        order = [sid for _, _, sid in sorted(iso.intervals)]
        assert order == [first["id"], final["id"], queued["id"]]
    finally:
        running.stop()


def test_restart_loses_nothing(tmp_path):
    """A judge stopped mid-evaluation: the budget and results survive, the evaluation runs again."""
    state = tmp_path / "state"
    iso = FakeIsolation(1.5)
    running = fake_judge(state, iso)
    client, answer = attempt_client(running)
    done = client.wait(client.submit(GOOD)["id"], poll_s=0.05)
    pending = client.submit(GOOD)
    deadline = time.time() + 5
    while client.get(pending["id"])["state"] != "running" and time.time() < deadline:
        time.sleep(0.05)
    running.stop(crash=True)  # the slot thread is abandoned mid-evaluation, as in a crash
    with pytest.raises(JudgeUnavailable):
        client.get(pending["id"])
    store = Store(state / "judge.db")
    assert store.submission(pending["id"]).state == "running"
    store.close()
    iso2 = FakeIsolation(0.05)
    again = fake_judge(state, iso2)
    try:
        client = JudgeClient(again.url, answer["token"])
        finished = client.wait(pending["id"], poll_s=0.05)
        assert finished["status"] == "PASSED" and finished["submissions_left"] == 8
        assert client.get(done["id"])["report"] == done["report"].replace("submissions left: 9",
                                                                            "submissions left: 8")
        assert [sid for _, _, sid in iso2.intervals] == [pending["id"]]
        assert again.store.submission(pending["id"]).tries == 2
    finally:
        again.stop()


def test_health_needs_no_token(judge):
    running, _ = judge
    info = JudgeClient(running.url).health()
    assert info["ok"] and info["devices"] == ["cpu"] and info["isolation"] == "fake"
    assert PROBLEM in running.judge.problems
