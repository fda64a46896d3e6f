"""Is a kernel's host time a property of the process, of the CPU it runs on, or of the moment?

    python3 -m benchmarks.h200_drift --problem 28 --kernel oracles/mlp_norm/28_..._tirx.py [--out FILE]

A plain timing loop (the independent loop's: fresh draw, L2 flush, device sync, call, device sync)
runs in several persistent processes that take turns, segment by segment: if the processes differ
by a constant in every segment, the host time belongs to the process; if they move together from
segment to segment, it belongs to the moment (the host's load, its clock). A second pass moves one
process over the CPUs, one segment per CPU in shuffled rounds: a stable per-CPU pattern means the
placement decides. Each segment also records the host's steal time (``/proc/stat``), the share of
CPU time the hypervisor gave to others. With ``--dsl``, gradings in this process then alternate the
worker's ``hot_wait_ms`` settings (``--hot-waits``), the independent loop before, between and after.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _steal_ticks() -> int:
    with open("/proc/stat") as fh:
        fields = fh.readline().split()
    return int(fields[8]) if len(fields) > 8 else 0


LAYERS = ("bare", "tools", "tools_reset", "seccomp", "seccomp_noallow", "hooks", "guard", "worker", "worker_noallow",
          "replica")


def localize(inputs: tuple) -> tuple:
    """Copies of a draw's GPU inputs in memory this process allocated, aliasing kept.

    ``make_inputs`` hands a loop fresh tensors; the candidate worker's calls read inputs from buffers
    it allocated once and the grader refills. The copies stand in for those buffers: one per distinct
    storage, every view rebuilt with its offset and strides, so inputs that share memory still share it.
    """
    import torch

    copies: dict[int, object] = {}
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "cuda":
            shared = x.untyped_storage()
            key = shared.data_ptr()
            if key not in copies:
                local = torch.empty(shared.nbytes(), dtype=torch.uint8, device=x.device).untyped_storage()
                local.copy_(shared)
                copies[key] = local
            view = torch.empty(0, dtype=x.dtype, device=x.device)
            view.set_(copies[key], x.storage_offset(), x.size(), x.stride())
            out.append(view)
        else:
            out.append(x)
    return tuple(out)


def _enter_layers(layers: str, kernel: str, problem_file: str, dsl: str | None) -> None:
    """The candidate worker's limits in this process: ``seccomp`` (the filter alone) or ``worker``
    (launch hooks, audit hook, every OS limit), each with or without the speculation allowance;
    ``tools``/``tools_reset`` (the grader's device helpers, see ``child``) are not set here;
    ``replica`` is ``worker`` with ``tools_reset`` and inputs in memory of its own (``localize``)."""
    if layers in ("bare", "tools", "tools_reset"):
        return
    import tempfile

    from metakernelbench.verifier import sandbox

    allow = not layers.endswith("_noallow")
    layers = "worker" if layers == "replica" else layers
    if layers.startswith("seccomp"):
        libc = sandbox.load_libc()
        libc.prctl(sandbox.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        sandbox.install_seccomp(libc, spec_allow=allow)
        return
    from metakernelbench.verifier import hooks
    from metakernelbench.verifier.guard import install_guard

    scratch = tempfile.mkdtemp(prefix="mkb-drift-")
    os.environ["TMPDIR"] = tempfile.tempdir = scratch  # the only folder left writable
    if dsl in hooks.INSTALLERS:
        hooks.INSTALLERS[dsl]()
    if layers == "hooks":
        return
    guard = install_guard(kernel, [str(Path(problem_file).parent)], dsl or "none", scratch=scratch)
    if layers != "guard":
        sandbox.enter(scratch, submission=kernel, spec_allow=allow)
    guard.armed = True


def child(problem_file: str, kernel: str, device_name: str, layers: str = "bare", dsl: str | None = None) -> None:
    """Serve ``run CALLS CPU`` lines from stdin: pin to CPU (``all``: every CPU), time CALLS calls."""
    import torch

    from benchmarks.independent_loop import load
    from metakernelbench.verifier.device import DeviceTools
    from metakernelbench.verifier.sandbox import speculation_state

    device = torch.device(device_name)
    problem = load(problem_file, "drift_problem")
    counting = {"on": False, "events": collections.Counter()}

    def count(event, _args):  # the audit events one call raises (each runs the guard's hook too)
        if counting["on"]:
            counting["events"][event] += 1

    sys.addaudithook(count)
    tools = None
    if layers.startswith("tools") or layers == "replica":  # the worker's device helpers (cuda-python)
        tools = DeviceTools.create(device)
    _enter_layers(layers, kernel, problem_file, dsl)
    module = load(kernel, "drift_kernel")
    on_gpu = device.type == "cuda"
    flush = torch.empty(2 * torch.cuda.get_device_properties(device).L2_cache_size if on_gpu else 1024,
                        dtype=torch.uint8, device=device)

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()

    everything = os.sched_getaffinity(0)
    seeds = random.Random(os.getpid())
    print(json.dumps({"ready": os.getpid(), "speculation": speculation_state()}), flush=True)
    for line in sys.stdin:
        _, calls, cpu = line.split()
        os.sched_setaffinity(0, everything if cpu == "all" else {int(cpu)})
        totals, launches = [], []
        for i in range(int(calls) + 3):
            gen = torch.Generator(device=device).manual_seed(seeds.getrandbits(63))
            inputs = problem.make_inputs(device, gen)
            if layers == "replica":
                inputs = localize(inputs)
            if layers in ("tools_reset", "replica"):
                tools.cold_l2()  # the worker's flush: persisting-L2 reset, then the buffer write
            else:
                flush.bitwise_not_()
            sync()
            counting["on"] = i == 3
            t0 = time.perf_counter_ns()
            with torch.no_grad():
                module.solve(*inputs)
            t_ret = time.perf_counter_ns()
            counting["on"] = False
            sync()
            t1 = time.perf_counter_ns()
            if i >= 3:
                totals.append((t1 - t0) / 1e3)
                launches.append((t_ret - t0) / 1e3)
            del inputs
        print(json.dumps({"median_us": round(statistics.median(totals), 2),
                          "host_launch_us": round(statistics.median(launches), 2),
                          "cpu_seen": os.sched_getaffinity(0) == everything and "all" or cpu,
                          "audit_events_one_call": dict(counting["events"])}), flush=True)
        counting["events"].clear()


def _independent(problem_file: str, kernel: str) -> float | None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.independent_loop", problem_file, kernel,
                           "--eager-timed", "10"], capture_output=True, text=True, timeout=300, cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1])["kernel_ms"] if done.returncode == 0 else None


def gradings(args, problem_file: str, kernel: str) -> list[dict]:
    """Gradings with each hot-wait setting in turn, the independent loop between rounds."""
    from metakernelbench.problems import find_problem
    from metakernelbench.verifier.grader import GradeConfig, grade

    problem = find_problem(args.problem)
    rows = [{"independent_kernel_ms": _independent(problem_file, kernel)}]
    for _ in range(args.grade_rounds):
        for hot in [float(h) for h in args.hot_waits.split(",")]:
            result = grade(problem, kernel, args.dsl, device=args.device, config=GradeConfig(hot_wait_ms=hot))
            rows.append({"hot_wait_ms": hot, "status": result.status.value, "kernel_ms": result.kernel_ms,
                         "host_launch_us": result.details.get("host_launch_us_median"),
                         "grade_wall_s": result.grade_wall_s})
            print(json.dumps(rows[-1]), flush=True)
        rows.append({"independent_kernel_ms": _independent(problem_file, kernel)})
    return rows


class Runner:
    def __init__(self, problem_file: str, kernel: str, device: str, layers: str = "bare", dsl: str | None = None):
        env = None
        if layers.endswith("+env"):  # the candidate worker's environment (launch.scrubbed_env)
            import tempfile

            from metakernelbench.verifier.launch import scrubbed_env

            env = scrubbed_env(tempfile.mkdtemp(prefix="mkb-drift-env-"))
            layers = layers.removesuffix("+env")
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.h200_drift", "--child",
                                      "--problem-file", problem_file, "--kernel", kernel, "--device", device,
                                      "--layers", layers, *(["--dsl", dsl] if dsl else [])], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
        self.layers = layers + ("+env" if env is not None else "")
        hello = json.loads(self.proc.stdout.readline())
        self.pid, self.speculation = hello["ready"], hello["speculation"]

    def run(self, calls: int, cpu: str) -> dict:
        self.proc.stdin.write(f"run {calls} {cpu}\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problem")
    p.add_argument("--problem-file")
    p.add_argument("--kernel", required=True)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--layers", default="bare",
                   help=f"comma-separated, one process each (overrides --processes): {', '.join(LAYERS)}; "
                        "a '+env' suffix runs that process in the candidate worker's environment")
    p.add_argument("--segments", type=int, default=12)
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--cpu-rounds", type=int, default=2)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--dsl", default=None, help="grade too (in this process), alternating --hot-waits")
    p.add_argument("--hot-waits", default="0,50")
    p.add_argument("--grade-rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    if args.child:
        child(args.problem_file, args.kernel, args.device, args.layers, args.dsl)
        return 0
    from metakernelbench.problems import find_problem

    problem_file = str(find_problem(args.problem).spec.path)
    kernel = str(Path(args.kernel).resolve())
    layers = args.layers.split(",")
    if len(layers) == 1:
        layers *= args.processes
    runners = [Runner(problem_file, kernel, args.device, layer, args.dsl) for layer in layers]
    segments = []
    for s in range(args.segments):
        order = random.Random(s).sample(range(len(runners)), len(runners))
        row = {}
        steal0, t0 = _steal_ticks(), time.monotonic()
        for i in order:
            row[f"p{i}"] = runners[i].run(args.calls, "all")
        row["steal_ticks_per_s"] = round((_steal_ticks() - steal0) / (time.monotonic() - t0), 2)
        segments.append(row)
        print(json.dumps({"segment": s, **row}), flush=True)
    cpus = sorted(os.sched_getaffinity(0))
    per_cpu: dict[str, list] = {str(c): [] for c in cpus}
    for r in range(args.cpu_rounds):
        for c in random.Random(100 + r).sample(cpus, len(cpus)):
            per_cpu[str(c)].append(runners[0].run(args.calls, str(c)))
    print(json.dumps({"per_cpu": per_cpu}), flush=True)
    for runner in runners:
        runner.close()

    def spread(values: list[float]) -> dict:
        return {"min": round(min(values), 1), "median": round(statistics.median(values), 1),
                "max": round(max(values), 1)}

    summary = {"process_layers": {f"p{i}": [r.layers, r.speculation] for i, r in enumerate(runners)},
               "process_medians_us": {f"p{i}": spread([seg[f"p{i}"]["median_us"] for seg in segments])
                                      for i in range(len(runners))},
               "process_host_launch_us": {f"p{i}": spread([seg[f"p{i}"]["host_launch_us"] for seg in segments])
                                          for i in range(len(runners))},
               "cpu_medians_us": {c: [x["median_us"] for x in rows] for c, rows in per_cpu.items()}}
    record = {"what": __doc__.strip().splitlines()[0],
              "command": " ".join(["python3 -m benchmarks.h200_drift", *sys.argv[1:]]), "kernel": args.kernel,
              "summary": summary, "segments": segments, "per_cpu": per_cpu}
    if args.dsl and args.grade_rounds > 0:
        record["gradings"] = gradings(args, problem_file, kernel)
        print(json.dumps({"gradings": record["gradings"]}), flush=True)
    print(json.dumps({"summary": summary}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
