"""Helpers for the judge tests: a fake isolation backend that records when each evaluation ran."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from metakernelbench.judge.isolation import EvalOutcome, EvalRequest, GradeSettings
from metakernelbench.judge.server import JudgeConfig, RunningJudge
from metakernelbench.verifier.result import GradeResult, Status, failure

TASK = "metakernelbench/28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"
PROBLEM = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16"
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "kernels"


def passed(problem: str = PROBLEM, dsl: str = "tirx", ms: float = 1.0) -> dict:
    return GradeResult(status=Status.PASSED, passed=True, problem=problem, dsl=dsl, message="ok", kernel_ms=ms,
                       eager_ms=2.0, speedup=2.0 / ms, score_speedup=2.0 / ms).model_dump(mode="json")


class FakeIsolation:
    """Sleeps ``seconds`` per evaluation; the kernel source picks the verdict (b"INFRA", b"FAIL", else PASSED)."""

    name = "fake"
    cpu_plan = None

    def __init__(self, seconds: float = 0.3):
        self.seconds = seconds
        self.intervals: list[tuple[float, float, int]] = []
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0

    def evaluate(self, req: EvalRequest, device: str, slot: int, on_stage) -> EvalOutcome:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        start = time.time()
        on_stage("grading")
        time.sleep(self.seconds)
        with self.lock:
            self.active -= 1
            self.intervals.append((start, time.time(), req.submission_id))
        if b"INFRA" in req.source:
            res = failure(Status.INFRA_ERROR, req.problem, req.dsl, "fake infrastructure fault")
            return EvalOutcome(res.model_dump(mode="json"), charged=False)
        if b"FAIL" in req.source:
            res = failure(Status.INCORRECT, req.problem, req.dsl, "fake mismatch")
            return EvalOutcome(res.model_dump(mode="json"), charged=True)
        return EvalOutcome(passed(req.problem, req.dsl), charged=True)

    def device_slots(self, configured: list[str]) -> list[str]:
        return list(configured)

    def available(self, device: str) -> bool:
        return True

    def idle(self, slot: int, device: str) -> None:
        pass

    def describe(self) -> dict:
        return {}

    def shutdown(self) -> list[int]:
        return []


def fake_judge(state: Path, isolation: FakeIsolation, devices=("cpu",), budget: int = 10) -> RunningJudge:
    """A judge in this process whose evaluations are ``isolation``'s (no grader, no torch work)."""
    import metakernelbench.judge.server as server

    original = server.make_isolation
    server.make_isolation = lambda config: isolation
    try:
        return RunningJudge(JudgeConfig(state=state, devices=list(devices), unix=state.parent / "judge.sock",
                                        settings=GradeSettings(), budget=budget))
    finally:
        server.make_isolation = original
