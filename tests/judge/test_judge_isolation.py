"""Evaluation isolation: the blame rule for runners that die, stop, hang or tamper, and leftover processes.

The "runner" here is a short script standing in for ``judge.runner`` (the real one is exercised by
the end-to-end test): it reports stages like the runner and then misbehaves the way a submission
running inside it could make it.
"""

import json
import os
import sys
import textwrap
import time

import pytest
from judge_support import PROBLEM, passed

from metakernelbench.judge import isolation as iso_mod
from metakernelbench.judge.cpu_plan import CpuPlan, SlotCpus
from metakernelbench.judge.isolation import (
    DockerIsolation,
    EvalRequest,
    GradeSettings,
    SubprocessIsolation,
)


class ScriptIsolation(SubprocessIsolation):
    """Runs ``script`` instead of the grader (the kernel file is its argument)."""

    def __init__(self, tmp_path, script, **kw):
        super().__init__(tmp_path / "work", GradeSettings(wall_limit_s=kw.pop("wall", 20)), drop_privileges=False,
                         **kw)
        self.script = tmp_path / "fake_runner.py"
        self.script.write_text(textwrap.dedent(script))

    def command(self, req, kernel, device):
        return [sys.executable, str(self.script), str(kernel)]


PRELUDE = """
import json, os, signal, sys, time
def emit(obj):
    print(json.dumps(obj), flush=True)
"""
RESULT = json.dumps({"result": passed()})


def run(tmp_path, body, **kw):
    isolation = ScriptIsolation(tmp_path, PRELUDE + textwrap.dedent(body), **kw)
    stages = []
    out = isolation.evaluate(EvalRequest(7, PROBLEM, "tirx", b"def solve(x):\n    return x\n"), "cpu", 0,
                             stages.append)
    return out, stages, isolation


def test_result_is_read_from_the_report_channel(tmp_path):
    out, stages, _ = run(tmp_path, f"""
        emit({{"stage": "loading"}}); emit({{"stage": "grading"}})
        print(json.dumps({RESULT!r}) if False else {RESULT!r}, flush=True)
    """)
    assert out.result["status"] == "PASSED" and out.charged
    assert stages == ["loading", "grading"]


def test_failure_before_grading_is_infrastructure(tmp_path):
    out, _, _ = run(tmp_path, """
        emit({"stage": "loading"}); emit({"infra": "ImportError: no torch"}); sys.exit(3)
    """)
    assert out.result["status"] == "INFRA_ERROR" and not out.charged
    assert "no torch" in out.result["message"]


def test_a_killed_grader_is_charged(tmp_path):
    out, _, _ = run(tmp_path, """
        emit({"stage": "grading"}); os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert out.result["status"] == "REWARD_HACK" and out.charged and "signal 9" in out.result["message"]


def test_a_stopped_grader_is_charged(tmp_path):
    start = time.monotonic()
    out, _, _ = run(tmp_path, """
        emit({"stage": "grading"}); os.kill(os.getpid(), signal.SIGSTOP)
    """)
    assert out.result["status"] == "REWARD_HACK" and "stopped" in out.result["message"] and out.charged
    assert time.monotonic() - start < 10


def test_a_hanging_grader_times_out(tmp_path):
    out, _, _ = run(tmp_path, """
        emit({"stage": "grading"}); time.sleep(60)
    """, wall=1.0)
    assert out.result["status"] == "TIMEOUT" and out.charged


def test_silent_exit_is_a_runtime_error(tmp_path):
    out, _, _ = run(tmp_path, """
        emit({"stage": "grading"}); sys.exit(0)
    """)
    assert out.result["status"] == "RUNTIME_ERROR" and out.charged


def test_leftover_daemons_are_killed(tmp_path):
    pid_file = tmp_path / "daemon.pid"
    out, _, _ = run(tmp_path, f"""
        emit({{"stage": "grading"}})
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                open({str(pid_file)!r}, "w").write(str(os.getpid()))
                time.sleep(120)
            os._exit(0)
        time.sleep(0.5)
        print({RESULT!r}, flush=True)
    """)
    assert out.result["status"] == "PASSED"
    pid = int(pid_file.read_text())
    for _ in range(50):
        if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the daemon left by the evaluation is still running")


def test_files_written_into_import_roots_are_caught(tmp_path, monkeypatch):
    roots = tmp_path / "site"
    roots.mkdir()
    monkeypatch.setattr(iso_mod, "import_roots", lambda scope: [(roots, True)])
    out, _, isolation = run(tmp_path, f"""
        emit({{"stage": "grading"}})
        open({str(roots / "evil.pth")!r}, "w").write("import os\\n")
        print({RESULT!r}, flush=True)
    """, watch_imports=True)
    assert out.result["status"] == "REWARD_HACK" and out.charged and "evil.pth" in out.result["message"]
    nxt = isolation.evaluate(EvalRequest(8, PROBLEM, "tirx", b"x = 1\n"), "cpu", 0, lambda s: None)
    assert nxt.result["status"] == "INFRA_ERROR" and not nxt.charged and "refuses" in nxt.result["message"]


def test_evaluation_folders_are_removed(tmp_path):
    _, _, isolation = run(tmp_path, f"""
        emit({{"stage": "grading"}})
        open(os.path.join(os.environ["TMPDIR"], "x"), "w").write(os.environ["TMPDIR"])
        open({str(tmp_path / "tmpdir")!r}, "w").write(os.environ["TMPDIR"])
        print({RESULT!r}, flush=True)
    """)
    assert list(isolation.work_root.iterdir()) == []
    tmpdir = (tmp_path / "tmpdir").read_text()
    assert len(tmpdir) < 40 and not os.path.exists(tmpdir)  # short (unix sockets live there) and removed


def test_the_real_runner_reports_infra_for_an_unknown_problem(tmp_path):
    isolation = SubprocessIsolation(tmp_path / "work", GradeSettings(small=True), drop_privileges=False,
                                    watch_imports=False)
    out = isolation.evaluate(EvalRequest(1, "99_nothing", "tirx", b"x = 1\n"), "cpu", 0, lambda s: None)
    assert out.result["status"] == "INFRA_ERROR" and not out.charged and "99_nothing" in out.result["message"]


# ---- Docker isolation, with a stand-in for the Docker SDK --------------------------------------
class FakeContainer:
    def __init__(self, stdout: bytes, code: int = 0, hang: bool = False):
        self.stdout, self.code, self.hang = stdout, code, hang
        self.archives, self.removed, self.killed = [], False, False

    def put_archive(self, path, data):
        self.archives.append((path, data))

    def start(self):
        pass

    def wait(self, timeout):
        if self.hang:
            raise TimeoutError("read timed out")
        return {"StatusCode": self.code}

    def kill(self):
        self.killed = True

    def logs(self, stdout=True, stderr=True, tail="all"):
        return self.stdout if stdout and not stderr else b"grader log"

    def remove(self, force=False):
        self.removed = True


class FakeDocker:
    def __init__(self, container):
        self.container, self.specs = container, []
        self.containers = self

    def create(self, **spec):
        self.specs.append(spec)
        return self.container


def docker_eval(container, device="cuda:1"):
    client = FakeDocker(container)
    isolation = DockerIsolation(client, {"tirx": "mkb/grader-tirx:test"}, GradeSettings(wall_limit_s=5))
    out = isolation.evaluate(EvalRequest(3, PROBLEM, "tirx", b"def solve(x):\n    return x\n"), device, 0,
                             lambda s: None)
    return out, client


def test_docker_evaluation_runs_in_a_fresh_locked_down_container():
    lines = b'{"stage": "loading"}\n{"stage": "grading"}\n' + json.dumps({"result": passed()}).encode() + b"\n"
    out, client = docker_eval(FakeContainer(lines))
    assert out.result["status"] == "PASSED" and out.charged
    spec = client.specs[0]
    assert spec["image"] == "mkb/grader-tirx:test" and spec["network_disabled"] and spec["user"] == "grader"
    assert spec["device_requests"][0]["DeviceIDs"] == ["1"] and "cuda:0" in spec["command"]
    assert client.container.removed and client.container.archives[0][0] == "/work"


def test_docker_blame_rule():
    out, client = docker_eval(FakeContainer(b'{"stage": "grading"}\n', code=137))
    assert out.result["status"] == "REWARD_HACK" and out.charged and client.container.removed
    out, _ = docker_eval(FakeContainer(b'{"stage": "grading"}\n', hang=True))
    assert out.result["status"] == "TIMEOUT" and out.charged
    out, _ = docker_eval(FakeContainer(b'{"stage": "loading"}\n', code=3))
    assert out.result["status"] == "INFRA_ERROR" and not out.charged


def test_docker_daemon_faults_are_not_charged():
    class Broken(FakeDocker):
        def create(self, **spec):
            raise RuntimeError("image not found")

    isolation = DockerIsolation(Broken(None), {"tirx": "x"}, GradeSettings())
    out = isolation.evaluate(EvalRequest(3, PROBLEM, "tirx", b"x=1\n"), "cuda:0", 0, lambda s: None)
    assert out.result["status"] == "INFRA_ERROR" and not out.charged


def test_import_roots_watch_packages_deeply_and_pythonpath_shallowly(tmp_path, monkeypatch):
    shallow = tmp_path / "checkout"
    (shallow / "jobs" / "trial").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", str(shallow))
    roots = dict(iso_mod.import_roots())
    assert roots[shallow.resolve()] is False
    assert any(deep and (root / "metakernelbench").is_dir() or root.name == "site-packages"
               for root, deep in roots.items())
    since = time.time_ns()
    time.sleep(0.01)
    (shallow / "jobs" / "trial" / "result.json").write_text("{}")  # legitimate churn below the top
    assert iso_mod.changed_since([(shallow, False)], since) == []
    (shallow / "numpy.py").write_text("")  # would shadow an installed module
    assert iso_mod.changed_since([(shallow, False)], since) == [str(shallow / "numpy.py")]


def two_slot_plan(first: list[int], second: list[int]) -> CpuPlan:
    slots = [SlotCpus(slot=0, device="cuda:0", cpus=first), SlotCpus(slot=1, device="cuda:1", cpus=second)]
    return CpuPlan(slots=slots, source="even-split", shared=False)


def test_docker_evaluations_get_their_slots_cpuset():
    lines = b'{"stage": "grading"}\n' + json.dumps({"result": passed()}).encode() + b"\n"
    client = FakeDocker(FakeContainer(lines))
    isolation = DockerIsolation(client, {"tirx": "mkb/grader-tirx:test"}, GradeSettings(wall_limit_s=5))
    isolation.cpu_plan = two_slot_plan([0, 1, 8, 9], [2, 3, 10, 11])
    for slot in (1, 0):
        isolation.evaluate(EvalRequest(3, PROBLEM, "tirx", b"x=1\n"), f"cuda:{slot}", slot, lambda s: None)
    assert [spec["cpuset_cpus"] for spec in client.specs] == ["2,3,10,11", "0,1,8,9"]
    assert "cpuset_cpus" not in isolation.container_spec(EvalRequest(3, PROBLEM, "tirx", b""), "cuda:0")


def test_grader_containers_may_read_their_worker_and_nothing_more():
    """Docker's default seccomp profile refuses process_vm_readv (the grader's read of the frozen
    worker's outputs) without CAP_SYS_PTRACE: every CPU grading was an INFRA_ERROR without it."""
    isolation = DockerIsolation(FakeDocker(FakeContainer(b"")), {"tirx": "mkb/grader-tirx:test"}, GradeSettings())
    spec = isolation.container_spec(EvalRequest(3, PROBLEM, "tirx", b""), "cpu")
    assert spec["cap_drop"] == ["ALL"] and spec["cap_add"] == ["SYS_PTRACE"]
    assert spec["security_opt"] == ["no-new-privileges:true"] and spec["user"] != "root"


def test_a_runner_that_cannot_be_pinned_is_not_run_unpinned(tmp_path):
    """A share the kernel refuses (here a CPU that does not exist) is an uncharged infrastructure fault."""
    isolation = ScriptIsolation(tmp_path, PRELUDE + "emit({'stage': 'grading'}); time.sleep(30)\n")
    isolation.cpu_plan = two_slot_plan([4095], [4094])
    started = time.monotonic()
    out = isolation.evaluate(EvalRequest(7, PROBLEM, "tirx", b"x=1\n"), "cuda:0", 0, lambda s: None)
    assert out.result["status"] == "INFRA_ERROR" and not out.charged and "pin" in out.result["message"]
    assert time.monotonic() - started < 20


def test_the_runner_is_ended_once_its_verdict_is_in(tmp_path):
    """The judge does not wait for the runner's interpreter to exit after the result line (torch's teardown)."""
    started = time.monotonic()
    out, _, _ = run(tmp_path, f"""
        emit({{"stage": "grading"}}); print({RESULT!r}, flush=True); time.sleep(30)
    """)
    assert out.result["status"] == "PASSED" and out.charged and time.monotonic() - started < 10


def test_the_runner_gets_pci_order_device_numbering(tmp_path):
    out, _, _ = run(tmp_path, f"""
        emit({{"stage": "grading"}})
        result = json.loads({RESULT!r})["result"]
        emit({{"result": {{**result, "message": os.environ.get("CUDA_DEVICE_ORDER", "unset")}}}})
    """)
    assert out.result["message"] == "PCI_BUS_ID"


def test_the_judges_budgets_reach_the_graders_config():
    """``serve --compile-timeout/--call-timeout`` travel to each evaluation's runner as flags and become
    its ``GradeConfig``; without them the runner keeps ``mkb grade``'s defaults."""
    from metakernelbench.judge.runner import _overrides, parse_args
    from metakernelbench.verifier.launch import GradeConfig

    base = ["--problem", "28", "--dsl", "tirx", "--kernel", "kernel.py"]
    flags = GradeSettings(compile_timeout_s=30, call_timeout_s=7.5).runner_flags()
    config = GradeConfig(**_overrides(parse_args(base + flags)))
    assert (config.compile_timeout_s, config.call_timeout_s) == (30.0, 7.5)
    assert GradeSettings().runner_flags() == []
    assert GradeConfig(**_overrides(parse_args(base))) == GradeConfig()
