"""The judge on several devices at once (fake devices, CPU only): each slot on its own cores, each slot's
work independent of the others', charging and restart safety as with one device."""

import json
import os
import sys
import textwrap
import threading
import time

import pytest
from fake_sysfs import write_host
from judge_support import PROBLEM, TASK, FakeIsolation, fake_judge, passed

from metakernelbench.judge.client import JudgeClient
from metakernelbench.judge.cpu_plan import host_plan, plan_cpus, read_topology
from metakernelbench.judge.isolation import EvalOutcome, GradeSettings, SubprocessIsolation
from metakernelbench.judge.queue import Scheduler
from metakernelbench.judge.store import FEEDBACK, FINAL, Store

GOOD = b"def solve(x):\n    return x\n"
DEVICES = ["cuda:0", "cuda:1"]

# stands in for the grader: meets the other evaluation (both must be running at once), then reports
# its own CPUs and those of a process it starts (the grader's workers inherit the runner's CPUs)
RUNNER = """
import json, os, subprocess, sys, time
barrier, me = sys.argv[1], sys.argv[2]
print(json.dumps({"stage": "grading"}), flush=True)
open(os.path.join(barrier, me), "w").close()
deadline = time.time() + 20
while len(os.listdir(barrier)) < 2 and time.time() < deadline:
    time.sleep(0.02)
together = len(os.listdir(barrier)) >= 2
time.sleep(0.2)
child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                       capture_output=True, text=True).stdout
facts = {"cpus": sorted(os.sched_getaffinity(0)), "child": json.loads(child), "together": together}
print(json.dumps({"result": {**json.loads(sys.argv[3]), "message": json.dumps(facts)}}), flush=True)
"""


class AffinityRunner(SubprocessIsolation):
    """The real subprocess isolation (pinning included), running ``RUNNER`` instead of the grader."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path / "work", GradeSettings(wall_limit_s=60), drop_privileges=False,
                         watch_imports=False)
        self.script = tmp_path / "runner.py"
        self.script.write_text(textwrap.dedent(RUNNER))
        self.barrier = tmp_path / "barrier"
        self.barrier.mkdir()

    def command(self, req, kernel, device):
        return [sys.executable, str(self.script), str(self.barrier), str(req.submission_id), json.dumps(passed())]


def queue(store: Store, n: int, kind: str = FEEDBACK, budget: int = 10) -> list[int]:
    ids = []
    for k in range(n):
        attempt, _ = store.register(f"attempt-{kind}-{k}", TASK, PROBLEM, "tirx", budget, None)
        sub, _ = store.enqueue(attempt, kind, TASK, PROBLEM, "tirx", GOOD if k else b"FIRST" + GOOD, None,
                               budget_check=kind == FEEDBACK)
        ids.append(sub.id)
    return ids


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def test_concurrent_evaluations_on_two_devices_never_share_a_core(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to give two device slots one each")
    # this host's CPUs, described as one core each: the real plan code splits them between the devices
    root = write_host(tmp_path / "sys", [[c] for c in cpus])
    plan = plan_cpus(DEVICES, read_topology(set(cpus), root))
    assert not plan.shared
    isolation = AffinityRunner(tmp_path)
    isolation.cpu_plan = plan
    store = Store(tmp_path / "judge.db")
    ids = queue(store, 4)
    scheduler = Scheduler(store, isolation, DEVICES)
    scheduler.start()
    try:
        wait_for(lambda: all(store.submission(i).state == "done" for i in ids), 120)
    finally:
        scheduler.stop()
    seen: dict[str, set[int]] = {}
    for sid in ids:
        sub = store.submission(sid)
        assert sub.status == "PASSED", sub.message
        facts = json.loads(sub.message)
        share = plan.cpus_for(DEVICES.index(sub.device))
        assert set(facts["cpus"]) == share and set(facts["child"]) == share
        seen.setdefault(sub.device, set()).update(facts["cpus"])
    assert set(seen) == set(DEVICES), "both devices graded"
    assert not seen["cuda:0"] & seen["cuda:1"]
    first_two = [json.loads(store.submission(i).message)["together"] for i in ids[:2]]
    assert all(first_two), "the first two evaluations ran at the same time"
    store.close()


class StuckFirst(FakeIsolation):
    """The first evaluation (source ``FIRST...``) hangs until released; ``BUG`` raises inside the judge."""

    def __init__(self):
        super().__init__(0.05)
        self.release = threading.Event()
        self.devices: dict[int, str] = {}
        self.per_device: dict[str, list[tuple[float, float]]] = {}

    def evaluate(self, req, device, slot, on_stage) -> EvalOutcome:
        self.devices[req.submission_id] = device
        start = time.time()
        try:
            if req.source.startswith(b"FIRST"):
                assert self.release.wait(30)
            if b"BUG" in req.source:
                raise RuntimeError("a judge bug")
            return super().evaluate(req, device, slot, on_stage)
        finally:
            with self.lock:
                self.per_device.setdefault(device, []).append((start, time.time()))


def test_a_stuck_device_does_not_hold_up_the_other_and_a_fault_stays_on_its_slot(tmp_path):
    store = Store(tmp_path / "judge.db")
    iso = StuckFirst()
    stuck = queue(store, 1)[0]
    scheduler = Scheduler(store, iso, DEVICES)
    scheduler.start()
    try:
        wait_for(lambda: store.submission(stuck).state == "running")
        attempt, _ = store.register("more", TASK, PROBLEM, "tirx", 10, None)
        rest = [store.enqueue(attempt, FEEDBACK, TASK, PROBLEM, "tirx", src, None, True)[0].id
                for src in (GOOD, b"BUG" + GOOD, GOOD, GOOD)]
        scheduler.wake()
        wait_for(lambda: all(store.submission(i).state == "done" for i in rest))
        assert store.submission(stuck).state == "running"  # still stuck while the other device did all four
        other = ({"cuda:0", "cuda:1"} - {iso.devices[stuck]}).pop()
        assert {iso.devices[i] for i in rest} == {other}
        bug = store.submission(rest[1])
        assert bug.status == "INFRA_ERROR" and not bug.charged
        assert [store.submission(i).status for i in rest[2:]] == ["PASSED", "PASSED"]
        assert store.used(attempt.id) == 3  # the judge's fault cost nothing
        iso.release.set()
        wait_for(lambda: store.submission(stuck).state == "done")
        assert store.submission(stuck).device == iso.devices[stuck]
    finally:
        iso.release.set()
        scheduler.stop()
    for spans in iso.per_device.values():  # one evaluation per device at a time
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    store.close()


def crash_when_both_running(running, ids) -> None:
    wait_for(lambda: sum(running.store.submission(i).state == "running" for i in ids) == 2)
    running.stop(crash=True)


def test_restart_with_two_devices_regrades_once_then_charges_a_second_interruption(tmp_path):
    """Both devices busy when the judge dies: both evaluations run again; dying again on the same two
    submissions makes them tampering, charged for feedback and never for a final grade."""
    state = tmp_path / "state"
    running = fake_judge(state, FakeIsolation(30.0), devices=DEVICES)
    store = running.store
    feedback = queue(store, 1)[0]
    final = queue(store, 1, kind=FINAL)[0]
    attempt_id = store.submission(feedback).attempt_id
    running.scheduler.wake()
    ids = [feedback, final]
    crash_when_both_running(running, ids)

    running = fake_judge(state, FakeIsolation(30.0), devices=DEVICES)
    crash_when_both_running(running, ids)  # claimed again on both devices, then the judge dies again
    check = Store(state / "judge.db")
    assert {check.submission(i).tries for i in ids} == {2}
    interrupted = [e for e in check.evaluations() if e["outcome"] == "interrupted"]
    assert len(interrupted) == 2 and {e["device"] for e in interrupted} == set(DEVICES)
    check.close()

    iso = FakeIsolation(0.05)
    running = fake_judge(state, iso, devices=DEVICES)
    try:
        wait_for(lambda: all(running.store.submission(i).state == "done" for i in ids))
        fb, fin = (running.store.submission(i) for i in ids)
        assert fb.status == fin.status == "REWARD_HACK" and iso.intervals == []
        assert fb.charged and not fin.charged and running.store.used(attempt_id) == 1
        assert len([e for e in running.store.evaluations() if e["outcome"] == "interrupted"]) == 4
    finally:
        running.stop()


def test_restart_with_two_devices_grades_each_interrupted_submission_once(tmp_path):
    state = tmp_path / "state"
    running = fake_judge(state, FakeIsolation(30.0), devices=DEVICES)
    ids = queue(running.store, 2)
    running.scheduler.wake()
    crash_when_both_running(running, ids)
    iso = FakeIsolation(0.2)
    running = fake_judge(state, iso, devices=DEVICES)
    try:
        wait_for(lambda: all(running.store.submission(i).state == "done" for i in ids))
        assert sorted(sid for _, _, sid in iso.intervals) == sorted(ids)  # each graded once, not twice
        assert iso.max_active == 2  # on both devices again
        for sid in ids:
            sub = running.store.submission(sid)
            assert sub.status == "PASSED" and sub.charged and sub.tries == 2
            assert running.store.used(sub.attempt_id) == 1
    finally:
        running.stop()


class PlannedFake(FakeIsolation):
    cpu_plan = None  # the judge sets it, as for the real isolations


def test_the_judge_plans_cpus_for_its_devices_and_shows_them(tmp_path):
    iso = PlannedFake(0.05)
    running = fake_judge(tmp_path / "state", iso, devices=DEVICES)
    try:
        assert iso.cpu_plan == host_plan(DEVICES)
        health = JudgeClient(running.url, running.admin_token).health()
        assert [s["device"] for s in health["cpu_plan"]["slots"]] == DEVICES
        assert health["cpu_plan"]["source"] == iso.cpu_plan.source
    finally:
        running.stop()
