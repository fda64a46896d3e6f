"""A miniature transfer study, end to end, on a machine without a GPU or a model provider.

What a real study does, with the two stand-ins that this machine needs:

1. ``mkb arms`` writes the four arms' Harbor job configs for a few problems (Harbor's ``terminus-2``
   agent, the no-Docker ``LocalEnvironment``, a judge grading on the CPU at the small workloads);
2. ``harbor run -c`` runs the two solo arms; the model is the scripted one of ``scripted_model``
   (an OpenAI-compatible server on 127.0.0.1 that writes a prepared kernel, checks it, submits it and
   writes SKILL.md from the judge's report), reached by LiteLLM as any provider would be;
3. ``mkb arms`` again attaches each solo attempt's SKILL.md to the paired task in the other DSL, and
   ``harbor run -c`` runs those transfer attempts;
4. ``mkb collect``, ``mkb compare`` and ``mkb report`` turn the job folders into the attempts table,
   the paired comparison and the HTML report, which is marked as a demonstration.

On a machine without a GPU the TIRx kernels are the CPU (llvm) ones of ``tests/fixtures/kernels``;
the CuTe DSL kernels are the GPU oracles, which cannot run without an NVIDIA GPU, so every CuTe DSL
attempt there is graded RUNTIME_ERROR by the judge: that is what the grader says on that machine, and
the report shows it. With ``--gpu`` (a GPU host) the scripted model writes the oracle kernels of both
DSLs and the judge grades them on the GPU at the graded workloads with the default counts. Either
way the numbers exercise the pipeline; they measure nothing about a model.

    python -m demo.study [--out results/local/demo] [--problems 28,25] [--parallel N] [--gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from metakernelbench.harbor_env import stop_judge, unshare_problem
from metakernelbench.problems import find_problem, oracle_file

from .scripted_model import ModelConfig, serve_in_thread

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODEL = "openai/mkb-scripted"
LOCAL_ENV = "metakernelbench.harbor_env:LocalEnvironment"
# the judge grades on the CPU at the small workloads with fewer draws and rechecks (minutes, not hours),
# and 1000 timed calls after 50 warmup: a small-workload call takes some 40 us, so 100 calls span a few
# milliseconds: one burst of another process's work can hold most of them, while among 1000 such a
# burst stays a minority and the median holds. Each timed call has the eager reference's call beside it
# (--interleave-eager): two cores' speed moves up to 2x between minutes, which moves one kernel's time
# between its solo and transfer gradings as much, while its time over the eager call's holds within a
# few per cent (results/cpu/host-drift.json); the comparison then divides speedups (compare._times)
JUDGE_ARGS = "--devices cpu --small --draws 2 --warmup 50 --timed 1000 --rechecks 1 --watch site --interleave-eager"
# on a GPU host: the graded workloads and the grader's default counts, on the first GPU
GPU_JUDGE_ARGS = "--devices cuda:0 --watch site"
CPU_KERNELS = {"28": "rmsnorm_tirx_llvm.py", "25": "blockcopy_tirx_llvm.py"}
MARKER = ".mkb-demo-study"  # only a folder holding this file is cleared before a new run
GPU_BANNER = ("DEMONSTRATION RUN, NOT A MEASUREMENT: a scripted model replayed this repository's oracle "
              "kernels; the judge graded them on the GPU at the graded workloads. The speedups are the "
              "oracles', not any model's; the transfer figures compare replays of the same kernels.")
BANNER = ("DEMONSTRATION RUN, NOT A MEASUREMENT: a scripted model replayed prepared kernels on a machine "
          "without a GPU (TIRx compiled for the CPU; CuTe DSL cannot run there), timed at small workloads "
          "on two CPU cores, one trial at a time. The numbers show the pipeline working, nothing "
          "about any model or kernel.")


class StudyConfig(BaseModel):
    """Where the study writes and what it covers."""

    model_config = ConfigDict(extra="forbid")

    out: Path
    problems: list[str]
    tasks_dir: Path = REPO / "tasks"
    oracles_dir: Path = REPO / "oracles"
    gpu: bool = False  # grade on the GPU with the oracles of both DSLs
    # Trials at once, within a job and across jobs: on the CPU one, since the judge times kernels on
    # the cores the trials share (a second trial's agent beside a grading slows the kernel it times);
    # on a GPU host the kernels run on the GPU and a few trials may overlap.
    parallel: int = 1

    @property
    def judge_args(self) -> str:
        return GPU_JUDGE_ARGS if self.gpu else JUDGE_ARGS

    @property
    def banner(self) -> str:
        return GPU_BANNER if self.gpu else BANNER

    @property
    def jobs(self) -> Path:
        return self.out / "jobs"

    @property
    def runs(self) -> Path:
        return self.out / "runs"


class Progress:
    """Timestamped progress lines on stdout."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, text: str) -> None:
        print(f"[demo {time.monotonic() - self.started:4.0f} s] {text}", flush=True)


def kernel_table(config: StudyConfig) -> dict[str, Path]:
    """The kernel the scripted model writes for each task of the study."""
    table: dict[str, Path] = {}
    for problem in config.problems:
        if not config.gpu and problem not in CPU_KERNELS:
            raise SystemExit(f"problem {problem}: no CPU kernel is prepared (choose from {sorted(CPU_KERNELS)})")
        for dsl in ("tirx", "cutedsl"):
            tasks = sorted(config.tasks_dir.glob(f"{problem}_*_{dsl}"))
            if len(tasks) != 1:
                raise SystemExit(f"problem {problem}: expected one {dsl} task under {config.tasks_dir}, "
                                 f"found {len(tasks)}")
            task = tasks[0].name
            oracle = oracle_file(find_problem(problem), dsl, config.oracles_dir)
            if dsl == "tirx" and not config.gpu:
                table[task] = REPO / "tests" / "fixtures" / "kernels" / CPU_KERNELS[problem]
            elif not oracle.is_file():
                raise SystemExit(f"problem {problem}: no {dsl} oracle under oracles/ for the scripted model to write")
            else:
                table[task] = oracle
    return table


def preflight() -> None:
    """Stop early, with the reason, where the no-Docker sandbox or Terminus-2 cannot run."""
    if shutil.which("tmux") is None:
        raise SystemExit("the demonstration needs tmux (Terminus-2 runs its shell in tmux): install the tmux package")
    why = unshare_problem()
    if why is not None:
        raise SystemExit(f"the no-Docker sandbox cannot isolate trials here: {why}")


def fresh_folder(out: Path) -> None:
    if out.exists():
        if not (out / MARKER).is_file():
            raise SystemExit(f"{out} exists and was not made by this script; choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("made by demo/study.py; cleared by its next run\n")


def base_config(config: StudyConfig, api_base: str) -> Path:
    """The job settings every arm shares: agent, model endpoint, environment, judge."""
    data = {
        "n_concurrent_trials": config.parallel,
        "agents": [{"name": "terminus-2",
                    "kwargs": {"api_base": api_base, "record_terminal_session": False}}],
        "environment": {"import_path": LOCAL_ENV,
                        "kwargs": {"judge_state": str(config.out / "judge"), "judge_args": config.judge_args}},
    }
    path = config.out / "base.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(cmd: list[str], log: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run one of the product's commands; its output (or the log's tail) is shown when it fails."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if log is not None:
        log.write_text(done.stdout + done.stderr)
    if done.returncode:
        sys.stdout.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}")
    return done.stdout


def arms(config: StudyConfig, base: Path) -> dict:
    run([str(BIN / "mkb"), "arms", "--model", MODEL, "--tasks-dir", str(config.tasks_dir), "--jobs-dir",
         str(config.jobs), "--out", str(config.runs), "--problems", ",".join(config.problems),
         "--base-config", str(base)])
    return json.loads((config.runs / "arms.json").read_text())


def harbor_jobs(configs: list[str], config: StudyConfig, say: Progress, parallel: int) -> None:
    """``harbor run -c`` for each config, ``parallel`` at a time, with a line for every trial that finishes.

    Few at a time (``StudyConfig.parallel``): the trials share the machine's cores with the judge, which
    times the kernels.
    """
    # LiteLLM's OpenAI client wants a key (the local server ignores it) and would otherwise download
    # its price list at import.
    env = {**os.environ, "OPENAI_API_KEY": "scripted-local", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    logs = config.out / "logs"
    logs.mkdir(exist_ok=True)
    reported = {r.parent for r in config.jobs.glob("*/*/result.json") if _finished(r)}  # earlier phases'
    waiting, running, failed = list(configs), [], []
    while waiting or running:
        while waiting and len(running) < parallel:
            path = waiting.pop(0)
            log = logs / f"{Path(path).parent.name}-{Path(path).stem}.log"
            say(f"harbor run -c {Path(path).relative_to(config.out)}   (log: {log.relative_to(config.out)})")
            with open(log, "w") as fh:
                running.append((path, log, subprocess.Popen([str(BIN / "harbor"), "run", "-c", path, "-y"],
                                                             cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT)))
        time.sleep(2)
        for result in sorted(config.jobs.glob("*/*/result.json")):
            if result.parent not in reported and _finished(result):
                reported.add(result.parent)
                say(f"  trial finished: {trial_line(result)}")
        failed += [(path, log) for path, log, proc in running if proc.poll()]
        running = [job for job in running if job[2].poll() is None]
    for _, log in failed:
        sys.stdout.write(log.read_text()[-3000:])
    if failed:
        raise SystemExit(f"harbor run failed for {[path for path, _ in failed]}")


def _finished(result: Path) -> bool:
    try:
        return bool(json.loads(result.read_text()).get("finished_at"))
    except ValueError:  # being written
        return False


def trial_line(result: Path) -> str:
    data = json.loads(result.read_text())
    rewards = (data.get("verifier_result") or {}).get("rewards") or {}
    grade = result.parent / "verifier" / "grade.json"
    status = json.loads(grade.read_text())["status"] if grade.is_file() else "no grade"
    error = data.get("exception_info")
    return (f"{result.parent.parent.name} / {data['task_name'].split('/')[-1]}: {status}, "
            f"reward {rewards.get('reward', 0):.3g}" + (f" (exception: {error['exception_type']})" if error else ""))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO / "results" / "local" / "demo")
    p.add_argument("--problems", default="28,25", help=f"comma-separated, from {sorted(CPU_KERNELS)}")
    p.add_argument("--parallel", type=int, default=None,
                   help="trials at once, within a job and across jobs (default: 1 on the CPU, 2 with --gpu)")
    p.add_argument("--gpu", action="store_true", help="grade the oracles of both DSLs on the GPU")
    args = p.parse_args(argv)
    config = StudyConfig(out=args.out.resolve(), problems=[x.strip() for x in args.problems.split(",") if x],
                         gpu=args.gpu, parallel=args.parallel or (2 if args.gpu else 1))
    preflight()
    say = Progress()
    fresh_folder(config.out)
    kernels = kernel_table(config)
    server = serve_in_thread(ModelConfig(kernels=kernels), log=config.out / "model.jsonl")
    try:
        say(f"scripted model ({MODEL}) listening at {server.base_url}; {len(kernels)} tasks: "
            + ", ".join(sorted(kernels)))
        base = base_config(config, server.base_url)
        say("mkb arms: the four arms' job configs")
        manifest = arms(config, base)
        say("solo arms (Terminus-2 attempts on each task in each DSL)")
        harbor_jobs(list(manifest["solo_configs"].values()), config, say, config.parallel)
        say("mkb arms again: each solo SKILL.md attached to the paired task in the other DSL")
        manifest = arms(config, base)
        ready = [e["config"] for e in manifest["entries"] if e["state"] == "ready"]
        other = [f"{e['arm']} {e['problem']}: {e['state']} ({e['reason']})" for e in manifest["entries"]
                 if not e["arm"].startswith("solo") and e["state"] != "ready"]
        for line in other:
            say(f"  {line}")
        say(f"transfer arms ({len(ready)} one-task jobs)")
        harbor_jobs(ready, config, say, config.parallel)
    finally:
        server.shutdown()
        stop_judge(config.out / "judge")
    attempts = config.out / "attempts.jsonl"
    say("mkb collect")
    run([str(BIN / "mkb"), "collect", *map(str, sorted(config.jobs.iterdir())), "-o", str(attempts)])
    say("mkb skill-check (the skills are prose)")
    print(run([str(BIN / "mkb"), "skill-check", str(config.jobs)]).rstrip().splitlines()[-1])
    say("mkb compare")
    print(run([str(BIN / "mkb"), "compare", str(attempts), "--n-boot", "500"]).rstrip())
    say("mkb report")
    run([str(BIN / "mkb"), "report", str(attempts), "-o", str(config.out / "report"), "--n-boot", "500",
         "--note", config.banner])
    say(f"attempts table: {attempts}; job folders: {config.jobs}")
    say(f"done. Report of this demonstration run (not a measurement): {config.out / 'report' / 'index.html'}")


if __name__ == "__main__":
    main()
