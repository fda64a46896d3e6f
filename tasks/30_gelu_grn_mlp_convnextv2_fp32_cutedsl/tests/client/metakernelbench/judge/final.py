"""The final grade, run by a task's ``tests/test.sh`` in Harbor's verifier phase (standard library only).

It sends the ``/app/kernel.py`` collected from the attempt to the judge as a ``final`` submission
(priority over feedback, never charged, no budget) with a token the sandbox never saw, waits, and
writes Harbor's ``reward.json`` and our ``grade.json`` into ``/logs/verifier``. Whatever happens, a
``reward.json`` is left: one the judge could not produce says ``infra_error = 1`` and is never
scored as a result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .client import JudgeClient, JudgeError

__all__ = ["INFRA", "NOTHING", "main"]

INFRA = {"reward": 0.0, "passed": 0.0, "speedup": 0.0, "kernel_ms": 0.0, "eager_ms": 0.0, "infra_error": 1.0}
NOTHING = {**INFRA, "infra_error": 0.0}


def _write(out: Path, reward: dict, grade: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "grade.json").write_text(json.dumps(grade, indent=2) + "\n")
    (out / "reward.json").write_text(json.dumps(reward, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="metakernelbench.judge.final", description=__doc__)
    p.add_argument("--task", required=True)
    p.add_argument("--kernel", default="/app/kernel.py")
    p.add_argument("--out", default="/logs/verifier")
    p.add_argument("--judge", default=None, help="judge URL (default: $MKB_JUDGE_URL)")
    p.add_argument("--token-file", default=None, help="read the final-grade token here if $MKB_JUDGE_TOKEN is unset")
    p.add_argument("--attempt-key", default=None, help="link the grade to this attempt (no-Docker mode)")
    p.add_argument("--timeout", type=float, default=780.0, help="seconds to wait for the judge, queue included")
    args = p.parse_args(argv)
    out = Path(args.out)
    problem, _, dsl = args.task.split("/")[-1].rpartition("_")

    def infra(message: str) -> None:
        _write(out, INFRA, {"status": "INFRA_ERROR", "passed": False, "problem": problem, "dsl": dsl,
                            "message": message})

    infra("the final grade did not complete")
    kernel = Path(args.kernel)
    if not kernel.is_file():
        _write(out, NOTHING, {"status": "COMPILE_ERROR", "passed": False, "problem": problem, "dsl": dsl,
                              "message": f"no {kernel} was collected from the attempt"})
        print(f"no {kernel}: the attempt left no kernel (reward 0)")
        return 0
    token = os.environ.get("MKB_JUDGE_TOKEN")
    if not token and args.token_file and Path(args.token_file).is_file():
        token = Path(args.token_file).read_text().strip()
    url = args.judge or os.environ.get("MKB_JUDGE_URL") or "http://mkb-judge:8765"
    client = JudgeClient(url, token, args.task)
    try:
        # a judge that is restarting is waited for (2 minutes by default) before giving up
        reconnect = float(os.environ.get("MKB_JUDGE_RECONNECT_S", "120"))
        answer = client.submit(kernel.read_bytes(), kind="final", task=args.task,
                               attempt_key=args.attempt_key or None, reconnect_s=reconnect)
        if answer.get("state") != "done":
            # a final grade takes seconds: a short poll keeps the verifier's wall time that of the grading
            # (a GET of one row from the judge on the same host is cheap)
            answer = client.wait(answer["id"], reconnect_s=args.timeout, max_wait_s=args.timeout, poll_s=0.5)
    except (JudgeError, TimeoutError) as exc:
        # the grade.json says why (the limit that was hit, or the judge's refusal), not only that it failed
        limit = f" (this verifier waits at most {args.timeout:g} s: --timeout)" if isinstance(exc, TimeoutError) else ""
        infra(f"the final grade did not complete: {exc}{limit}")
        print(f"final grade failed: {exc}{limit} (recorded as an infrastructure error)")
        return 0
    grade = answer.get("result") or {}
    reward = answer.get("reward") or INFRA
    _write(out, reward, grade)
    print(answer.get("report", ""))
    print(f"reward: {json.dumps(reward)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
