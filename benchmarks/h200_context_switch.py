"""Does a call read slower when another process's GPU work ran just before it, as the input stage does?

    python3 -m benchmarks.h200_context_switch PROBLEM_FILE KERNEL_FILE [--reference] [--rounds 60]
                                              [--warmup 10] [--out FILE]

The grader writes each draw into the candidate's input buffers and flushes the L2 from its own
process (``verifier/stage.py``), so the candidate's first launch after GO follows work of another
CUDA context. A plain loop does all of that in its own context. This measures the difference with
nothing else of the grader involved: one timing process (the candidate's stand-in; the problem and
kernel files loaded as plain modules, as ``independent_loop.py`` does) and one stage process (its own
CUDA context, the buffers opened by IPC), signalling through a shared page by spinning. Variants,
interleaved in a shuffled order each round so drift of the host or GPU hits all alike:

- ``own``: the timing process writes the draw into the buffers, flushes and synchronises itself
  (the independent loop's order);
- ``stage``: the stage process writes the draw, flushes and synchronises, then rings GO (the
  grader's order);
- ``stage_touch``: as ``stage``, then the timing process runs one tiny kernel of its own and
  synchronises before the clock starts (whether the cost, if any, is the switch between contexts);
- ``signal``: as ``own``, then a GO from the stage process with no GPU work there (the signal path
  alone);
- ``stage_copy``: the timing process runs a tiny kernel of its own before READY; the stage process
  then only copies (a draw made in advance into the buffers, and the L2 flush as a device-to-device
  copy of a buffer twice its size) before GO: whether work on the copy engines alone avoids the cost;
- ``copy_wait_N``: as ``stage_copy``, then the stage process waits N microseconds before GO (whether
  the cost fades once the other context has been idle a while);
- ``tiny``: the stage process runs one one-element kernel of its own (no draw, no flush) before GO
  (whether the cost depends on how much work the other context did).

Per variant: the median, 10th and 90th percentile of the call (clock start to the end of the device
synchronise after it) and of its host part (until the function returned), in microseconds.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime

import torch
import torch.multiprocessing as mp

# the plain loop's own loader (this file, like it, imports nothing of the grader)
from benchmarks.independent_loop import l2_flush_buffer, load

VARIANTS = ("own", "stage", "stage_touch", "signal", "stage_copy", "copy_wait_200", "copy_wait_1000",
            "copy_wait_5000", "tiny")
READY, MODE, GO, STOP, DELAY = 0, 1, 2, 3, 4
FILL, SIGNAL, COPY, TINY = 1, 2, 3, 4


def page(path: str) -> memoryview:
    fd = os.open(path, os.O_RDWR)
    mapped = mmap.mmap(fd, 4096, mmap.MAP_SHARED)
    os.close(fd)
    return memoryview(mapped).cast("q")


def stage_process(problem_file: str, page_path: str, queue) -> None:
    """The grader's stand-in: writes draws into the timing process's buffers from its own context."""
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    problem = load(problem_file, "stage_problem")
    buffers = queue.get()
    flush = l2_flush_buffer(device)
    seeds = random.Random(7)
    # COPY: draws made in advance and an L2 flush by a device-to-device copy, so that nothing but
    # copies (the copy engines, not the SMs) runs in this context between READY and GO
    pool = [problem.make_inputs(device, torch.Generator(device=device).manual_seed(s)) for s in range(4)]
    flush_src = torch.empty_like(flush)
    own = torch.zeros(1, device=device)
    torch.cuda.synchronize()
    slots = page(page_path)
    served = 0
    while True:
        while slots[READY] == served and not slots[STOP]:
            pass
        if slots[STOP]:
            return
        seq = slots[READY]
        if slots[MODE] == FILL:
            gen = torch.Generator(device=device).manual_seed(seeds.getrandbits(63))
            draw = problem.make_inputs(device, gen)
            for buffer, x in zip(buffers, draw, strict=True):
                if isinstance(x, torch.Tensor):
                    buffer.copy_(x)
            flush.bitwise_not_()
            torch.cuda.synchronize()
            del draw
        elif slots[MODE] == COPY:
            for buffer, x in zip(buffers, pool[seq % len(pool)], strict=True):
                if isinstance(x, torch.Tensor):
                    buffer.copy_(x)
            flush.copy_(flush_src)
            torch.cuda.synchronize()
        elif slots[MODE] == TINY:
            own.add_(1)
            torch.cuda.synchronize()
        if slots[DELAY]:
            until = time.perf_counter_ns() + 1000 * slots[DELAY]
            while time.perf_counter_ns() < until:
                pass
        slots[GO] = seq
        served = seq


def summary(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median_us": round(statistics.median(xs), 2), "p10_us": round(xs[len(xs) // 10], 2),
            "p90_us": round(xs[(9 * len(xs)) // 10], 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("problem")
    p.add_argument("kernel")
    p.add_argument("--reference", action="store_true", help="time the problem's eager reference instead")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--out")
    args = p.parse_args()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    problem = load(args.problem, "timed_problem")
    fn = problem.reference if args.reference else load(args.kernel, "timed_kernel").solve
    gen = torch.Generator(device=device).manual_seed(1)
    first = problem.make_inputs(device, gen)
    buffers = [torch.empty_like(x) if isinstance(x, torch.Tensor) else x for x in first]
    for b, x in zip(buffers, first, strict=True):
        if isinstance(x, torch.Tensor):
            b.copy_(x)
    flush = l2_flush_buffer(device)
    touch = torch.zeros(1, device=device)
    folder = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    page_path = os.path.join(folder, f"mkb-switch-{os.getpid()}")
    with open(page_path, "wb") as f:
        f.write(b"\0" * 4096)
    slots = page(page_path)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    stage = ctx.Process(target=stage_process, args=(args.problem, page_path, queue), daemon=True)
    stage.start()
    queue.put(buffers)
    seeds = random.Random(12345)
    order = random.Random(3)
    seq = 0
    figures = {v: {"call": [], "host": []} for v in VARIANTS}

    def ask(mode: int, delay_us: int = 0) -> None:
        nonlocal seq
        seq += 1
        slots[MODE] = mode
        slots[DELAY] = delay_us
        slots[READY] = seq
        while slots[GO] != seq:
            pass

    try:
        for r in range(args.warmup + args.rounds):
            variants = list(VARIANTS)
            order.shuffle(variants)
            for variant in variants:
                if variant in ("own", "signal"):
                    g = torch.Generator(device=device).manual_seed(seeds.getrandbits(63))
                    draw = problem.make_inputs(device, g)
                    for b, x in zip(buffers, draw, strict=True):
                        if isinstance(x, torch.Tensor):
                            b.copy_(x)
                    del draw
                    flush.bitwise_not_()
                    torch.cuda.synchronize()
                    if variant == "signal":
                        ask(SIGNAL)
                elif variant == "stage_copy" or variant.startswith("copy_wait_"):
                    touch.add_(1)  # this context's last SM work before READY (as after the draw's generation)
                    torch.cuda.synchronize()
                    ask(COPY, int(variant.rpartition("_")[2]) if variant.startswith("copy_wait_") else 0)
                elif variant == "tiny":
                    touch.add_(1)
                    torch.cuda.synchronize()
                    ask(TINY)
                else:
                    ask(FILL)
                    if variant == "stage_touch":
                        touch.add_(1)
                        torch.cuda.synchronize()
                t0 = time.perf_counter_ns()
                with torch.no_grad():
                    fn(*buffers)
                t_ret = time.perf_counter_ns()
                torch.cuda.synchronize()
                t1 = time.perf_counter_ns()
                if r >= args.warmup:
                    figures[variant]["call"].append((t1 - t0) / 1e3)
                    figures[variant]["host"].append((t_ret - t0) / 1e3)
    finally:
        slots[STOP] = 1
        stage.join(10)
        os.unlink(page_path)
    record = {
        "command": "python3 -m benchmarks.h200_context_switch " + " ".join(sys.argv[1:]),
        "date": datetime.now(UTC).isoformat(), "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__, "rounds": args.rounds,
        "timed": "reference" if args.reference else os.path.basename(args.kernel),
        "variants": {v: {"call": summary(f["call"]), "host": summary(f["host"])} for v, f in figures.items()},
    }
    print(json.dumps(record))
    if args.out:
        with open(args.out, "w") as f:
            f.write(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
