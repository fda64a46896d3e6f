"""What the candidate worker's audit hook costs a call: the audit events one call raises, and the call's
time with the grader's armed guard beside a plain process, interleaved round by round.

    python3 -m benchmarks.audit_events PROBLEM_FILE KERNEL_FILE --dsl cutedsl|tirx [--device cuda]
                                       [--reference] [--small] [--rounds 8] [--calls 25] [--out FILE]

The candidate worker runs every call under the grader's audit hook (``verifier.guard``), armed: each
event the call raises (a DSL's launch path may build ``ctypes`` pointers, whose ``ctypes.addressof``
and ``ctypes.cdata`` are audited) runs the hook's checks, a frame walk included, inside the call's
span. The trusted reference worker runs the same hook unarmed for enforcement (``enforce=False``),
which returns at once. Whether that is part of what the candidate's span reads above a plain loop
is a count and a difference of medians, with nothing else of the grader involved:

- one process with only a counting hook counts the events a call raises, per event name;
- ``plain``: a process with the DSL's launch hooks (``verifier.hooks``, as the worker installs them)
  and no guard times calls;
- ``guard``: the same with the candidate's guard installed and armed (the kernel file as the
  submission, a scratch folder of its own; a refusal is recorded, not acted on).

``--variants`` adds controls that take the guard apart: ``plain_b``, ``plain_c``, ``plain_d`` (more
plain processes: what identical processes differ by, the floor any other difference must clear),
``nap`` (a plain process that sleeps 2 ms before each call, outside the clock, as the grader's worker
waits on its pipe between calls, and so starts each call from a core that idled), ``hook``
(the audit hook alone, checking nothing, without the import gate) and ``gate`` (the import gate alone).
``--pin`` puts each timing process on one CPU of a physical core of its own, as the grader's core plan
puts its workers, so that the scheduler's placement is the same for every variant.

``--reference`` times the problem's eager reference instead, its ``guard`` process with the hook the
trusted reference worker installs (``enforce=False``): the eager side of a grade.

The timing processes are started once and timed in turns, round by round (the order shuffled each
round), so that drift of the host or the GPU hits all of them alike. Each call gets a fresh draw (made before
the clock starts), an L2 flush on the GPU, and a device synchronise on both sides of it: the
independent loop's stopwatch. Prints one JSON object; ``--out`` also writes it.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.independent_loop import l2_flush_buffer, load
from metakernelbench.verifier.cpu_list import siblings

VARIANTS = ("plain", "guard")
KNOWN_VARIANTS = ("plain", "plain_b", "plain_c", "plain_d", "nap", "hook", "gate", "guard")
NAP_S = 0.002  # the ``nap`` variant's sleep before each call (the worker's wait on its pipe)


class _Subject:
    """The problem's draws and the kernel's solve in this process, with the DSL's launch hooks in place."""

    def __init__(self, problem_file: str, kernel_file: str, dsl: str, device: str, small: bool,
                 reference: bool = False) -> None:
        import torch

        from metakernelbench.verifier import hooks

        if not reference:  # the candidate worker's launch hooks, before the kernel is imported
            hooks.INSTALLERS[dsl]()
        self.torch = torch
        self.device = torch.device(device)
        self.problem = load(problem_file, "audit_problem")
        self.workload = dict(getattr(self.problem, "SMALL_WORKLOAD", {})) if small else {}
        self.solve = self.problem.reference if reference else load(kernel_file, "audit_kernel").solve
        self.cuda = self.device.type == "cuda"
        self.flush = l2_flush_buffer(self.device) if self.cuda else None
        self.seeds = random.Random(12345)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def draw(self) -> tuple:
        gen = self.torch.Generator(device=self.device).manual_seed(self.seeds.getrandbits(63))
        return self.problem.make_inputs(self.device, gen, **self.workload)

    def call_ms(self, before=None, after=None, nap_s: float = 0.0) -> float:
        inputs = self.draw()
        if self.flush is not None:
            self.flush.bitwise_not_()
        self.sync()
        if nap_s:
            time.sleep(nap_s)
        if before:
            before()
        start = time.perf_counter()
        with self.torch.no_grad():
            self.solve(*inputs)
        self.sync()
        elapsed = (time.perf_counter() - start) * 1e3
        if after:
            after()
        return elapsed


def count_events(problem_file: str, kernel_file: str, dsl: str, device: str, small: bool, calls: int,
                 reference: bool = False) -> dict:
    """Audit events per call, by name (a counting hook only, after three calls that may compile)."""
    subject = _Subject(problem_file, kernel_file, dsl, device, small, reference)
    for _ in range(3):
        subject.call_ms()
    counts: collections.Counter[str] = collections.Counter()
    on = [False]

    def counting(event: str, args: tuple) -> None:
        if on[0]:
            counts[event] += 1

    sys.addaudithook(counting)
    for _ in range(calls):
        subject.call_ms(before=lambda: on.__setitem__(0, True), after=lambda: on.__setitem__(0, False))
    return {name: n / calls for name, n in counts.most_common()}


def _timer(conn, variant: str, problem_file: str, kernel_file: str, dsl: str, device: str, small: bool,
           warmup: int, reference: bool, cpu: int | None = None) -> None:
    """A timing process: set up ``variant``, then time ``n`` calls for every round it is sent."""
    refusals: list[str] = []
    try:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        if variant == "guard" and reference:
            from metakernelbench.verifier.guard import install_guard

            subject = _Subject(problem_file, kernel_file, dsl, device, small, reference)
            install_guard(os.devnull + ".no-submission", [], "none", lambda text, hack: refusals.append(text),
                          enforce=False)()  # the trusted reference worker's hook (``Worker.load``)
        elif variant == "guard":
            from metakernelbench.verifier.guard import install_guard

            # the DSL is imported before the guard, as in the worker (its package is then library code)
            __import__({"cutedsl": "cutlass", "tirx": "tvm"}[dsl])
            scratch = tempfile.mkdtemp(prefix="mkb-audit-")
            arm = install_guard(str(Path(kernel_file).resolve()), [], dsl,
                                lambda text, hack: refusals.append(text), scratch=scratch)
            subject = _Subject(problem_file, kernel_file, dsl, device, small)
            arm()
        elif variant == "hook":  # the audit hook that checks nothing, armed, without the import gate
            from metakernelbench.verifier.guard import ImportGate, install_guard

            subject = _Subject(problem_file, kernel_file, dsl, device, small, reference)
            install_guard(os.devnull + ".no-submission", [], "none", lambda text, hack: refusals.append(text),
                          enforce=False)()
            sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, ImportGate)]
        elif variant == "gate":  # the import gate alone
            from metakernelbench.verifier.guard import ImportGate

            subject = _Subject(problem_file, kernel_file, dsl, device, small, reference)
            sys.meta_path.insert(0, ImportGate())
        else:  # plain, plain_b, plain_c, plain_d, nap
            subject = _Subject(problem_file, kernel_file, dsl, device, small, reference)
        nap_s = NAP_S if variant == "nap" else 0.0
        for _ in range(warmup):
            subject.call_ms()
        conn.send(("ready", None))
        while True:
            n = conn.recv()
            if n is None:
                break
            conn.send(("times", [subject.call_ms(nap_s=nap_s) for _ in range(n)]))
        conn.send(("refusals", refusals[:20]))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which stops
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


def one_cpu_per_core(n: int) -> list[int]:
    """``n`` CPUs of this process's set, each on a physical core of its own, the highest first (the
    lowest core takes the host's interrupts more often); where the set has fewer cores than ``n``, the
    rest are other CPUs of the set (hyper-thread siblings), and fewer only when the set is smaller."""
    chosen: list[int] = []
    taken: set[int] = set()
    for cpu in sorted(os.sched_getaffinity(0), reverse=True):
        if cpu in taken:
            continue
        taken |= siblings(cpu)
        chosen.append(cpu)
        if len(chosen) == n:
            return chosen
    spare = sorted(set(os.sched_getaffinity(0)) - set(chosen), reverse=True)
    return chosen + spare[:n - len(chosen)]


def check_variants(variants: tuple[str, ...]) -> None:
    """ValueError unless ``variants`` holds plain and others of ``KNOWN_VARIANTS``, each once."""
    if set(variants) - set(KNOWN_VARIANTS) or "plain" not in variants or len(set(variants)) != len(variants):
        raise ValueError(f"plain and others from {', '.join(KNOWN_VARIANTS)}, each once (got {','.join(variants)})")


def timed_rounds(problem_file: str, kernel_file: str, dsl: str, device: str, small: bool, rounds: int,
                 calls: int, warmup: int, reference: bool = False, variants: tuple[str, ...] = VARIANTS,
                 pin: bool = False) -> dict:
    check_variants(variants)
    cpus = one_cpu_per_core(len(variants)) if pin else []
    if pin and len(cpus) < len(variants):
        raise ValueError(f"--pin needs {len(variants)} CPUs; this process has {len(cpus)}")
    ctx = mp.get_context("spawn")
    procs, conns = {}, {}
    for i, variant in enumerate(variants):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_timer, args=(child, variant, problem_file, kernel_file, dsl, device, small,
                                                warmup, reference, cpus[i] if pin else None), daemon=True)
        proc.start()
        procs[variant], conns[variant] = proc, parent
    samples: dict[str, list[float]] = {v: [] for v in variants}
    refusals: dict[str, list[str]] = {}
    try:
        for variant, conn in conns.items():
            kind, payload = conn.recv()
            if kind != "ready":
                raise RuntimeError(f"{variant}: {payload}")
        order = list(variants)
        shuffle = random.Random(7)
        for _ in range(rounds):
            shuffle.shuffle(order)
            for variant in order:
                conns[variant].send(calls)
                kind, payload = conns[variant].recv()
                if kind != "times":
                    raise RuntimeError(f"{variant}: {payload}")
                samples[variant].extend(payload)
        for variant, conn in conns.items():
            conn.send(None)
            kind, payload = conn.recv()
            refusals[variant] = payload if kind == "refusals" else [f"{kind}: {payload}"]
    finally:
        for proc in procs.values():
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    out = {v: {"median_ms": statistics.median(s), "p10_ms": _quantile(s, 0.1), "p90_ms": _quantile(s, 0.9),
               "calls": len(s)} for v, s in samples.items()}
    if "guard" in out:
        out["guard_minus_plain_us"] = round(1e3 * (out["guard"]["median_ms"] - out["plain"]["median_ms"]), 2)
    out["minus_plain_us"] = {v: round(1e3 * (out[v]["median_ms"] - out["plain"]["median_ms"]), 2)
                             for v in variants if v != "plain"}
    out["cpus"] = dict(zip(variants, cpus, strict=True)) if pin else None
    out["refusals"] = refusals
    return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("problem")
    p.add_argument("kernel")
    p.add_argument("--dsl", required=True, choices=("cutedsl", "tirx"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--small", action="store_true", help="the problem's SMALL_WORKLOAD (CPU checks)")
    p.add_argument("--reference", action="store_true",
                   help="time the eager reference (KERNEL is not loaded)")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--calls", type=int, default=25, help="calls per variant per round")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated timing processes, plain among them, from {','.join(KNOWN_VARIANTS)}")
    p.add_argument("--pin", action="store_true", help="each timing process on a physical core of its own")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    variants = tuple(v for v in args.variants.split(",") if v)
    try:
        check_variants(variants)
    except ValueError as exc:
        p.error(f"--variants: {exc}")
    problem, kernel = str(Path(args.problem).resolve()), str(Path(args.kernel).resolve())
    result = {
        "command": "python3 -m benchmarks.audit_events " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": args.device, "pid_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:  # counted in a process of its own: the counting hook stays out of the timers
        result["events_per_call"] = pool.apply(count_events, (problem, kernel, args.dsl, args.device, args.small,
                                                              args.calls, args.reference))
    result["timing"] = timed_rounds(problem, kernel, args.dsl, args.device, args.small, args.rounds, args.calls,
                                    args.warmup, args.reference, variants, args.pin)
    if args.device.startswith("cuda"):
        import torch

        result["device"] = torch.cuda.get_device_name(torch.device(args.device))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
