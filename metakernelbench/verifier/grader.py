"""The trusted side of one evaluation: draws, reference, anchor, timing loop, rechecks, bypass test.

Order of one grade (design.md §4):
1. static rules on the source (no code of it runs before this passes);
2. the candidate process imports the file; 5 correctness draws, each compared against the
   reference and the float64 anchor computed here, plus an input-mutation check;
3. the eager reference's baseline (cached per problem, workload, device and software, 100 samples)
   drift-checked by a short loop of the trusted reference worker; the candidate timed (10 warmup +
   50 timed, fresh draws). With ``GradeConfig.interleave_eager`` the reference is instead timed call
   by call beside the candidate, in one loop. Every call is timed by the grader's own clock between a GO and a DONE
   signal in shared memory (``doorbell``), so the time is the call's, not a pipe round trip's;
4. 3 of the 50 timed calls, drawn secretly here before timing (never sent), rechecked;
5. the DSL share: one profiled call, every device kernel listed; DSL kernels must take at least half
   of its time; then the bypass test: each DSL launch site suppressed in turn on a fresh draw; valid
   outputs mean that kernel did not matter, and the submission is rejected;
6. the physical floor: a median below the problem's speed-of-light time is rejected.

Seeds come from ``SystemRandom``; the candidate holds the grader's input buffers, which the grader
fills with a draw only after the worker rang READY (``stage``), and replies through ``wire`` (never
unpickled here). The grader takes its own copy of the outputs at DONE on calls the candidate cannot
predict (``evaluation.Evaluation.call``); a refusal of the audit hook ends the worker and is read
from the shared page (``guard``, ``doorbell``).
The candidate's worker runs under OS limits (``sandbox``) and writes only in a per-evaluation scratch
folder, removed afterwards; no other process may hold the GPU while timing (``gpu_procs``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import torch

from metakernelbench.problems import Problem

from . import checks, provenance, timing
from .cpu_list import cpu_list_text
from .evaluation import Evaluation
from .launch import GradeConfig, Verdict, Workers, start_workers
from .result import Findings, GradeResult, Status, Timing
from .rules import StaticCheck, check_kernel_file
from .score import score
from .timing import Stages

__all__ = ["GradeConfig", "Status", "Verdict", "grade"]  # the first three: the contract's, imported from here too


def _device_of(device: str | None) -> torch.device:
    """The device to grade on, resolved without initialising CUDA in the grader (that can wait until
    the workers are starting)."""
    chosen = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if chosen.type == "cuda" and chosen.index is None:
        chosen = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_initialized() else 0)
    return chosen


def _stamped(progress: Callable[[str], None] | None, started: float) -> Callable[[str], None] | None:
    """``progress`` with each line prefixed by the seconds since the grading started."""
    if progress is None:
        return None
    return lambda line: progress(f"[{time.perf_counter() - started:6.1f} s] {line}")


def grade(problem: Problem, kernel_path: str | Path, dsl: str, device: str | None = None,
          config: GradeConfig = GradeConfig(), protected_paths: list[str] | None = None,
          workers: Workers | None = None, progress: Callable[[str], None] | None = None,
          checked: StaticCheck | None = None) -> GradeResult:
    """Grade one kernel file; never raises for anything the kernel does.

    ``workers``: the evaluation's workers, already started by ``launch.start_workers`` (or made its
    own by ``WarmWorkers.assign``) for this kernel, problem and device (the judge's runner starts them
    before importing torch itself); otherwise they are started here once the static rules pass. Either
    way this grade owns them from here on and ends them when it ends, whichever way it ends.
    ``checked``: the static stage this kernel file already passed (``rules.check_source``: the judge's
    runner checks it before starting the workers), so it is not read and parsed again here; a check
    that refused, or was of another file or DSL, is not taken (the file is checked here).
    ``progress``: called with one line as each stage begins (the stage, the seconds since the start,
    the limit that applies), never inside a timed call.
    """
    started = time.perf_counter()
    say = _stamped(progress, started)
    stages = Stages()
    kernel_path = Path(kernel_path).resolve()
    name = problem.spec.name
    _no_reduced_precision()
    with ExitStack() as owned:
        if workers is not None:
            owned.enter_context(workers)  # (a caller starts workers only after the static checks pass)
        if checked is None or not checked.passed or (checked.kernel, checked.dsl) != (kernel_path, dsl):
            checked = check_kernel_file(name, dsl, kernel_path, started)
        if checked.refusal is not None:
            return checked.refusal
        stages.mark("static")
        chosen = _device_of(device)
        problem_file = problem.spec.path.resolve()
        if workers is not None and workers.key != (str(kernel_path), dsl, str(problem_file), str(chosen)):
            workers.end()  # started for another kernel, problem or device: start afresh
            workers = None
        if workers is None:
            workers = owned.enter_context(start_workers(kernel_path, dsl, problem_file, len(problem.spec.outputs),
                                                        str(chosen), config, protected_paths))
        ev = Evaluation(problem, kernel_path, dsl, chosen, config, workers, progress=say)
        found = Findings(stages_s=stages.seconds, details={})
        try:
            result = _stages(ev, stages, found)
        except Verdict as verdict:
            found.take(verdict.fields)
            result = found.failed(verdict.status, name, dsl, verdict.message)
        except Exception as exc:  # noqa: BLE001 - a fault of the grader itself
            result = found.failed(Status.INFRA_ERROR, name, dsl, f"grader fault: {type(exc).__name__}: {exc}")
    # the workers have ended here: both (a relaunched candidate too), the scratch folder, the CPUs
    result.grade_wall_s = time.perf_counter() - started
    return result


def _no_reduced_precision() -> None:
    """The grader's own reference and anchor math in full precision (no TF32, no reduced reductions)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False


def _stages(ev: Evaluation, stages: Stages, found: Findings) -> GradeResult:
    """The pipeline after the static rules: start, correctness, eager, timing, rechecks, audit, bypass,
    score; each stage raises ``Verdict`` to end the grade, its wall time goes to ``stages`` and what it
    establishes to ``found``."""
    config, plan, details = ev.config, ev.workers.plan, found.details
    ev.candidate.release()  # the static rules passed: the candidate may import the kernel now
    if plan:
        details["cores"] = f"grader {sorted(plan[0])}, workers {cpu_list_text(plan[1])}"
    ev.say(f"starting the candidate worker (start limit {config.start_timeout_s:g} s)")
    ready = ev.await_candidate()
    found.device, found.sandbox = ready.device, ready.sandbox
    stages.mark("start")
    details["candidate_import_s"] = f"{ready.import_s:.3f}"
    details["kernel_load_s"] = f"{ev.kernel_load_s:.3f}"  # the same import, on the grader's clock
    details.update({f"candidate_start_{k}_s": f"{v:.3f}" for k, v in ready.startup_s.items()})
    first_limit, _ = ev.call_limit(True)
    ev.say(f"correctness: {config.correctness_draws} draws (the first call may compile: up to {first_limit:.0f} s; "
           f"then {config.call_timeout_s:g} s a call)")
    checks.correctness(ev, stages)
    stages.mark("correctness")
    details["memory_plan"] = ev.memory.describe()  # the sizes are known now: the rest of the grade follows it
    seeds = [ev.seed() for _ in range(config.warmup + config.timed)]
    recheck_at = ev.rng.sample(range(config.warmup, config.warmup + config.timed), config.rechecks)
    ev.await_reference()
    others = ev.gpu_is_ours() if config.exclusive_gpu else []
    if others:
        raise Verdict(Status.INFRA_ERROR, f"other processes hold the GPU ({others}): not timed")
    if config.interleave_eager:
        ev.say(f"timing: {config.warmup} warmup and {config.timed} timed calls, each beside a call of the eager "
               "reference")
        kernel_loop, keep, retimed, eager = timing.time_interleaved(ev, seeds, recheck_at)
    else:
        ev.say("eager reference: its baseline and a drift check")
        eager = timing.eager_baseline(ev, ready.device)
        stages.mark("eager")
        ev.say(f"timing: {config.warmup} warmup and {config.timed} timed calls")
        kernel_loop, keep, retimed = timing.time_candidate(ev, seeds, recheck_at)
    if retimed:
        details["retimed"] = retimed
    stages.mark("timing")
    kernel, charges = timing.kernel_timing(kernel_loop, eager)
    timing.check_signal_gaps(kernel_loop, Timing.from_samples(kernel_loop.spans_ms), bool(plan), eager.ref_gap_us)
    sig_med, sig_min, sig_max = kernel_loop.signal_overhead_us()
    details.update(eager_baseline=eager.source, eager_baseline_samples=str(len(eager.base.samples_ms)),
                   eager_remeasured=str(eager.remeasured), signal_overhead_us_median=f"{sig_med:.2f}",
                   signal_overhead_us_max=f"{sig_max:.2f}", signal_overhead_us_min=f"{sig_min:.2f}",
                   host_launch_us_median=f"{1e3 * timing.median(kernel_loop.returned_ms or [0.0]):.1f}",
                   reference_signal_overhead_us_min=f"{eager.ref_gap_us:.2f}",
                   exposed_us_median=f"{timing.median(kernel_loop.exposed_us or [0.0]):.1f}",
                   reference_exposed_us_median=f"{eager.ref_exposed_us:.1f}",
                   window_charge_us_median=f"{timing.median(charges or [0.0]):.1f}",
                   window_charge_us_max=f"{max(charges or [0.0]):.1f}",
                   spans_ms_median=f"{timing.median(kernel_loop.spans_ms):.6f}", gpu_process_check=(
                       "nvml" if ev.gpu.available else (ev.gpu.why or "not a GPU")))
    found.kernel_timing, found.eager_timing_before, found.eager_timing_after = kernel, eager.base, eager.check
    ev.say(f"rechecks: {config.rechecks} timed calls")
    found.rechecked_calls = checks.recheck(ev, seeds, keep)
    stages.mark("rechecks")
    found.launch_sites = list(ev.launch_sites)
    ev.say("DSL share: one profiled call")
    found.dsl_share = provenance.dsl_share(ev)
    stages.mark("dsl_share")
    ev.say(f"bypass test: {min(len(ev.launch_sites), config.max_bypass_sites)} launch site(s) suppressed in turn")
    found.bypass = provenance.bypass(ev)
    stages.mark("bypass")
    details["memory_plan"] = ev.memory.describe()
    return score(ev.problem, ev.dsl, kernel, eager, config, found)
