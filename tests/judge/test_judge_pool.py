"""The subprocess isolation's pool: one warm runner per device slot, started before its evaluation and
dispatched exactly one.

Most tests stand a short script in for ``runner --warm`` (it reports ready, reads its dispatch from
stdin, then reports like the runner); the last one grades the CPU TIRx kernel of problem 28 through a
judge with the pool on, with the real runner and workers.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from judge_support import FIXTURES, PROBLEM, REPO, TASK, passed

from metakernelbench.judge import isolation as iso_mod
from metakernelbench.judge.client import JudgeClient
from metakernelbench.judge.isolation import EvalRequest, GradeSettings, SubprocessIsolation
from metakernelbench.judge.server import JudgeConfig, RunningJudge
from metakernelbench.verifier import sandbox

GOOD = b"def solve(x):\n    return x\n"
PRELUDE = """
import json, os, sys, time
def emit(obj):
    print(json.dumps(obj), flush=True)
RESULT = json.loads(sys.argv[1])
"""
# stands in for ``runner --warm``: what it could see before its dispatch, then the dispatch itself
WARM = PRELUDE + """
kernel_before = os.path.exists(os.path.join(os.getcwd(), "kernel.py"))
emit({"warm": "ready"})
line = sys.stdin.readline()
if not line:
    sys.exit(0)
job = json.loads(line)
emit({"stage": "loading"})
emit({"stage": "grading"})
facts = {"warm": True, "pid": os.getpid(), "job": job, "kernel_before_dispatch": kernel_before,
         "kernel": open(job["kernel"]).read(), "home": os.environ["HOME"]}
emit({"result": {**RESULT, "message": json.dumps(facts)}})
"""
COLD = PRELUDE + """
emit({"stage": "grading"})
emit({"result": {**RESULT, "message": json.dumps({"warm": False, "pid": os.getpid()})}})
"""


class ScriptPool(SubprocessIsolation):
    """The real subprocess isolation with its pool on, running scripts instead of the grader."""

    def __init__(self, tmp_path: Path, warm: str = WARM, cold: str = COLD, **kw):
        super().__init__(tmp_path / "work", GradeSettings(wall_limit_s=kw.pop("wall", 20)), drop_privileges=False,
                         watch_imports=kw.pop("watch_imports", False), pool=True, **kw)
        self.warm_script, self.cold_script = tmp_path / "warm_runner.py", tmp_path / "cold_runner.py"
        self.warm_script.write_text(textwrap.dedent(warm))
        self.cold_script.write_text(textwrap.dedent(cold))

    def warm_command(self, device):
        return [sys.executable, str(self.warm_script), json.dumps(passed())]

    def command(self, req, kernel, device):
        return [sys.executable, str(self.cold_script), json.dumps(passed())]


def wait_for(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def ready(iso: SubprocessIsolation, slot: int = 0, device: str = "cpu", timeout: float = 30.0):
    """The slot's warm runner, once it says it is ready (``idle`` is what the judge's slot thread calls)."""

    def check() -> bool:
        iso.idle(slot, device)
        warm = iso.warm_runner(slot)
        return warm is not None and warm.ready

    wait_for(check, timeout, "a ready warm runner")
    return iso.warm_runner(slot)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def evaluate(iso, sid: int, source: bytes = GOOD, stages: list | None = None):
    return iso.evaluate(EvalRequest(sid, PROBLEM, "tirx", source), "cpu", 0,
                        (stages if stages is not None else []).append)


def test_each_evaluation_goes_to_a_fresh_warm_runner_that_saw_nothing_of_it_before(tmp_path):
    iso = ScriptPool(tmp_path)
    try:
        first = ready(iso)
        stages: list[str] = []
        out = evaluate(iso, 1, b"# one\n" + GOOD, stages)
        facts = json.loads(out.result["message"])
        assert out.result["status"] == "PASSED" and out.charged and stages == ["loading", "grading"]
        assert facts["warm"] and facts["pid"] == first.proc.pid
        assert not facts["kernel_before_dispatch"] and facts["kernel"] == "# one\n" + GOOD.decode()
        assert facts["job"] == {"problem": PROBLEM, "dsl": "tirx", "kernel": str(first.dirs.kernel)}
        # ended after its one evaluation, with its folders; the next one is already starting
        assert not alive(first.proc.pid) and not first.dirs.folder.exists() and not first.dirs.tmp.exists()
        second = ready(iso)
        assert second.proc.pid != first.proc.pid and second.dirs.marker != first.dirs.marker
        again = json.loads(evaluate(iso, 2).result["message"])
        assert again["pid"] == second.proc.pid and again["home"] != facts["home"]
        assert not again["kernel_before_dispatch"]
    finally:
        iso.shutdown()


def test_a_dead_warm_runner_means_a_cold_start_and_is_replaced(tmp_path):
    iso = ScriptPool(tmp_path)
    try:
        warm = ready(iso)
        os.kill(warm.proc.pid, signal.SIGKILL)
        warm.proc.wait()
        out = evaluate(iso, 1)
        assert out.result["status"] == "PASSED" and json.loads(out.result["message"])["warm"] is False
        assert iso.warm_runner(0) is not None and iso.warm_runner(0).proc.pid != warm.proc.pid
        # one that dies while the slot is idle is replaced too, after a pause
        dead = ready(iso)
        os.kill(dead.proc.pid, signal.SIGKILL)
        dead.proc.wait()
        iso.idle(0, "cpu")
        assert iso.warm_runner(0) is None and not dead.dirs.folder.exists()
        assert ready(iso).proc.pid != dead.proc.pid
    finally:
        iso.shutdown()


def test_a_warm_runner_not_ready_within_its_limit_is_replaced(tmp_path):
    class Slow(ScriptPool):
        warm_limit_s = 0.5

    iso = Slow(tmp_path, warm=PRELUDE + "time.sleep(60)\n")
    try:
        iso.idle(0, "cpu")
        stuck = iso.warm_runner(0)
        assert stuck is not None and not stuck.ready
        time.sleep(0.7)
        iso.idle(0, "cpu")
        assert iso.warm_runner(0) is None and not alive(stuck.proc.pid)
        out = evaluate(iso, 1)  # nothing warm: a cold start
        assert json.loads(out.result["message"])["warm"] is False
    finally:
        iso.shutdown()


def test_a_warm_runner_idle_for_too_long_is_replaced_at_once(tmp_path):
    iso = ScriptPool(tmp_path, pool_max_age_s=1.0)
    try:
        old = ready(iso)
        time.sleep(1.1)
        iso.idle(0, "cpu")
        assert not alive(old.proc.pid) and iso.warm_runner(0) is None
        iso.idle(0, "cpu")  # not a failure: no pause before the next one
        assert iso.warm_runner(0) is not None and iso.warm_runner(0).proc.pid != old.proc.pid
    finally:
        iso.shutdown()


def test_a_warm_runner_failing_before_grading_is_not_charged(tmp_path):
    iso = ScriptPool(tmp_path, warm=PRELUDE + textwrap.dedent("""
        emit({"warm": "ready"}); sys.stdin.readline()
        emit({"stage": "loading"}); emit({"infra": "ImportError: no torch"}); sys.exit(3)
    """))
    try:
        ready(iso)
        out = evaluate(iso, 1)
        assert out.result["status"] == "INFRA_ERROR" and not out.charged and "no torch" in out.result["message"]
    finally:
        iso.shutdown()


def test_files_a_warm_evaluation_writes_into_import_roots_are_caught(tmp_path, monkeypatch):
    roots = tmp_path / "site"
    roots.mkdir()
    monkeypatch.setattr(iso_mod, "import_roots", lambda scope: [(roots, True)])
    writes = WARM.replace('emit({"result"', f'open({str(roots / "evil.pth")!r}, "w").write("x")\nemit({{"result"')
    iso = ScriptPool(tmp_path, warm=writes, watch_imports=True)
    try:
        ready(iso)
        out = evaluate(iso, 1)
        assert out.result["status"] == "REWARD_HACK" and out.charged and "evil.pth" in out.result["message"]
    finally:
        iso.shutdown()


def test_shutdown_ends_the_warm_runners_and_starts_no_more(tmp_path):
    iso = ScriptPool(tmp_path)
    warm = ready(iso)
    iso.shutdown()
    assert not alive(warm.proc.pid) and list(iso.work_root.iterdir()) == []
    iso.idle(0, "cpu")
    assert iso.warm_runner(0) is None and iso.pool_state() == {}


# ---- the real runner and workers ------------------------------------------------------------------
SMALL = GradeSettings(small=True, draws=2, warmup=2, timed=5, rechecks=1)
KERNEL = (FIXTURES / "rmsnorm_tirx_llvm.py").read_bytes()


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (a runner's workers)."""
    found = set()
    for p in iso_mod._pids():
        try:
            if int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.add(p)
        except (OSError, ValueError, IndexError):
            pass
    return found


def _reads_the_problem_natively() -> bytes:
    """The native-read exploit (landlock is what stops it), pointed at this checkout's problem file."""
    source = (REPO / "tests" / "exploits" / "read_problem_native.py").read_text()
    old = "for folder in Path(__file__).resolve().parents:"
    assert old in source
    return source.replace(old, f"for folder in [Path({str(REPO)!r})]:").encode()


@pytest.mark.slow
def test_the_judge_grades_warm_in_fresh_processes_under_the_evaluations_own_limits(tmp_path):
    judge = RunningJudge(JudgeConfig(state=tmp_path / "state", devices=["cpu"], unix=tmp_path / "judge.sock",
                                     isolation="subprocess", settings=SMALL, pool=True, watch="off"))
    iso = judge.isolation
    seen: list[set[int]] = []
    try:
        admin = JudgeClient(judge.url, judge.admin_token, timeout=120)
        answers = []
        for n, source in enumerate((KERNEL, KERNEL, _reads_the_problem_natively())):
            wait_for(lambda: iso.pool_state() == {"0": "ready"}, 300, "the slot's warm runner")
            warm = iso.warm_runner(0)
            processes = {warm.proc.pid} | _children(warm.proc.pid)
            assert len(processes) >= 3  # the runner, a candidate worker per DSL and the reference worker
            seen.append(processes)
            sub = admin.submit(source, kind="final", task=TASK, request_id=f"pool-{n}")
            answers.append(admin.wait(sub["id"], poll_s=0.2, max_wait_s=600))
            assert not any(alive(pid) for pid in processes)  # ended with its evaluation, never reused
        first, second, native = (a["result"] for a in answers)
        assert first["status"] == second["status"] == "PASSED", answers
        for result in (first, second, native):
            assert result["details"]["warm"] == "true" and "warm_fallback" not in result["details"], result
        for details in (first["details"], second["details"]):  # the start-up breakdown: before / after dispatch
            assert "candidate_start_warm_interpreter_and_torch_s" in details and "candidate_start_limits_s" in details
        # the start a warm dispatch waits for is the evaluation's own part, not the interpreters'
        assert second["stages_s"]["start"] < float(second["details"]["warm_ready_s"])
        assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1:])  # fresh processes each time
        # the evaluation's own limits were applied after the dispatch: seccomp, and landlock with the
        # problem's folder unreadable (the native read of the problem file fails inside solve)
        if sys.platform == "linux" and sandbox.landlock_abi():
            assert "landlock=abi" in second["sandbox"] and "reads=limited" in second["sandbox"], second["sandbox"]
            assert native["status"] == "RUNTIME_ERROR", native["message"]
        if os.uname().machine == "x86_64":
            assert "seccomp=on" in second["sandbox"]
        health = admin.health()["isolation_details"]
        assert health["pool"] in ({"0": "ready"}, {"0": "starting"})
    finally:
        last = iso.warm_runner(0)
        judge.stop()
    if last is not None:
        assert not alive(last.proc.pid)
    assert list((tmp_path / "state" / "work").glob("eval-*")) == []


# files of the exploit suite whose verdict does not depend on where the kernel file lies: through a warm
# runner they must get the verdict they get from a grader started for them (tests/exploits/manifest.toml)
WARM_EXPLOITS = ("guard_switch_off", "import_problem_hidden", "patch_grader_deep", "signal_parent", "forge_doorbell",
                 "anon_exec_after_compile")


@pytest.mark.slow
def test_runtime_exploits_get_their_verdicts_through_warm_runners(tmp_path):
    import tomllib

    manifest = {Path(e["file"]).stem: e for e in tomllib.loads(
        (REPO / "tests" / "exploits" / "manifest.toml").read_text())["exploit"]}
    iso = SubprocessIsolation(tmp_path / "work", GradeSettings(small=True, draws=2, warmup=2, timed=5, rechecks=2),
                              drop_privileges=False, watch_imports=False, pool=True, pool_dsls=("tirx",))
    try:
        for n, name in enumerate(WARM_EXPLOITS):
            entry = manifest[name]
            assert (entry["device"], entry["config"], entry["static"]) == ("cpu", "reduced", False)
            ready(iso, timeout=300)
            source = (REPO / "tests" / "exploits" / entry["file"]).read_bytes()
            out = iso.evaluate(EvalRequest(n + 1, entry["problem"], entry["dsl"], source), "cpu", 0, lambda s: None)
            assert out.result["status"] == entry["expected"], (name, out.result["message"])
            assert out.result["details"].get("warm") == "true", (name, out.result["details"])
    finally:
        iso.shutdown()
