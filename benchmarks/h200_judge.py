"""The judge on a GPU host: two concurrent sandbox clients and one final grade, timed.

Run from the repository root on an H200 host (see ``h200_env.sh``; the judge does not need Harbor,
so a host set up from scripts/offline-bundle.sh, which leaves it out, runs this too):

    source benchmarks/h200_env.sh && python3 -m benchmarks.h200_judge --out judge.json

It starts a judge locally (``python -m metakernelbench.judge serve``, subprocess
isolation, one device), registers two attempts the way the no-Docker Harbor environment does, and
runs the sandbox's own ``submit`` command for both at once: the TIRx pilot oracle of problem 28 on
the TIRx task and the CuTe DSL one on the CuTe DSL task. Then the verifier's final-grade client
grades the TIRx oracle again. It records, per submission, the time spent queued and grading as the
judge saw it and as the client saw it, the status and speedup, whether it was dispatched to a warm
runner and its stage breakdown, whether any two evaluations overlapped (they must not), and the
command, commit, device and date. ``--judge-args '--pool off'`` measures the judge without its pool
of warm runners; ``benchmarks/judge_pool.py`` compares the two, interleaved.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from metakernelbench.judge.client import JudgeClient
from metakernelbench.judge.store import Store

REPO = Path(__file__).resolve().parents[1]

PROBLEM = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16"
ORACLES = {dsl: REPO / "oracles" / "mlp_norm" / f"{PROBLEM}_{dsl}.py" for dsl in ("tirx", "cutedsl")}


def git_commit() -> str:
    """The commit measured: ``MKB_COMMIT`` when set (a copied tree's git metadata can be older than its
    files, so whoever sends the tree names its commit), else the checkout's HEAD."""
    if os.environ.get("MKB_COMMIT"):
        return os.environ["MKB_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def device_name(device: str) -> str:
    code = f"import torch; print(torch.cuda.get_device_name(torch.device({device!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or f"unknown ({done.stderr.strip()[-200:]})"


def start_judge(state: Path, device: str, extra: list[str]) -> tuple[subprocess.Popen, str]:
    sock = state.parent / "judge.sock"
    cmd = [sys.executable, "-m", "metakernelbench.judge", "serve", "--state", str(state), "--unix", str(sock),
           "--devices", device, "--isolation", "subprocess", *extra]
    log = open(state.parent / "judge.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    url = f"unix:{sock}"
    for _ in range(600):
        try:
            JudgeClient(url, timeout=5).health()
            return proc, url
        except Exception:  # noqa: BLE001 - not up yet
            if proc.poll() is not None:
                raise SystemExit(f"the judge exited: {(state.parent / 'judge.log').read_text()[-3000:]}") from None
            time.sleep(0.2)
    raise SystemExit("the judge did not come up in 120 s")


def sandbox_submit(url: str, token: str, task: str, kernel: Path, out: dict) -> None:
    """Exactly what `submit` does in a sandbox: the same module, configured by the same variables."""
    env = {**os.environ, "MKB_JUDGE_URL": url, "MKB_JUDGE_TOKEN": token, "MKB_TASK": task}
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "metakernelbench.judge.submit", str(kernel), "--json"],
                          env=env, capture_output=True, text=True, timeout=3600)
    out.update(client_wall_s=time.time() - started, exit_code=done.returncode, stderr_tail=done.stderr[-2000:])
    lines = done.stdout.strip()
    start = lines.find("{\n")
    out["answer"] = json.loads(lines[start:]) if start >= 0 else {"raw": lines[-2000:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--judge-args", default="", help="extra `serve` arguments (e.g. '--timed 20' for a quick run)")
    args = p.parse_args(argv)
    command = "python3 -m benchmarks.h200_judge " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    work = Path(tempfile.mkdtemp(prefix="mkb-h200-judge-"))
    work.chmod(0o711)  # the judge drops each evaluation to its own uid: it must traverse to its folder
    state = work / "state"
    proc, url = start_judge(state, args.device, shlex.split(args.judge_args))
    record: dict = {"command": command, "commit": git_commit(), "date": dt.datetime.now(dt.UTC).isoformat(),
                    "device": device_name(args.device), "judge_args": args.judge_args}
    try:
        admin = JudgeClient(url, (state / "admin.token").read_text().strip())
        record["health_at_start"] = admin.health()
        runs: dict[str, dict] = {}
        threads = []
        for dsl, kernel in ORACLES.items():
            task = f"metakernelbench/{PROBLEM}_{dsl}"
            token = admin.register(f"h200-{dsl}", task, minutes=40)["token"]
            runs[dsl] = {"task": task, "kernel": str(kernel.relative_to(REPO))}
            threads.append(threading.Thread(target=sandbox_submit, args=(url, token, task, kernel, runs[dsl])))
        for t in threads:
            t.start()
            time.sleep(0.5)  # TIRx first, then CuTe DSL queues behind it
        for t in threads:
            t.join()
        final_token = admin.request("POST", "/v1/tokens", {"scope": "final", "label": "h200"})["token"]
        final_out = work / "final"
        env = {**os.environ, "MKB_JUDGE_URL": url, "MKB_JUDGE_TOKEN": final_token}
        started = time.time()
        done = subprocess.run([sys.executable, "-m", "metakernelbench.judge.final", "--task",
                               f"metakernelbench/{PROBLEM}_tirx", "--kernel", str(ORACLES["tirx"]), "--out",
                               str(final_out), "--timeout", "3000"], env=env, capture_output=True, text=True)
        record["final"] = {"client_wall_s": time.time() - started, "exit_code": done.returncode,
                           "reward": json.loads((final_out / "reward.json").read_text()),
                           "stdout_tail": done.stdout[-3000:]}
        store = Store(state / "judge.db")
        subs = {s.id: s for s in store.submissions()}
        for run in runs.values():
            answer = run.get("answer", {})
            sub = subs.get(answer.get("id"))
            result = answer.get("result") or {}
            run.update(status=answer.get("status"), queue_wait_s=answer.get("queue_wait_s"),
                       grading_s=answer.get("wall_s"), speedup=result.get("speedup"),
                       kernel_ms=result.get("kernel_ms"), eager_ms=result.get("eager_ms"),
                       grade_wall_s=result.get("grade_wall_s"), stages_s=result.get("stages_s"),
                       warm=(result.get("details") or {}).get("warm"), report=answer.get("report"),
                       submissions_left=answer.get("submissions_left"), charged=sub.charged if sub else None)
            run.pop("answer", None)
        final_sub = [s for s in subs.values() if s.kind == "final"]
        if final_sub:
            f = final_sub[-1]
            record["final"].update(status=f.status, queue_wait_s=(f.started_at or 0) - f.queued_at,
                                   grading_s=(f.finished_at or 0) - (f.started_at or 0),
                                   warm=((f.result or {}).get("details") or {}).get("warm"),
                                   stages_s=(f.result or {}).get("stages_s"))
        spans = sorted((e["started_at"], e["finished_at"], e["submission_id"]) for e in store.evaluations())
        record["evaluations"] = [{"submission": s, "started_at": a, "finished_at": b, "seconds": b - a}
                                 for a, b, s in spans]
        record["overlapping_evaluations"] = sum(1 for x, y in zip(spans, spans[1:], strict=False) if x[1] > y[0])
        record["submissions"] = runs
        record["isolation"] = record["health_at_start"].get("isolation")
        store.close()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        record["judge_log_tail"] = (work / "judge.log").read_text(errors="replace")[-3000:]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("device", "overlapping_evaluations")}, indent=2))
    for dsl, run in record.get("submissions", {}).items():
        print(f"{dsl}: {run.get('status')} queue {run.get('queue_wait_s')} s, grading {run.get('grading_s')} s, "
              f"warm {run.get('warm')}, speedup {run.get('speedup')}")
    print(f"final: {record.get('final', {}).get('status')} reward {record.get('final', {}).get('reward')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
