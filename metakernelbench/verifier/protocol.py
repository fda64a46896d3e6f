"""The requests the grader sends to a worker and the worker's setup (no torch: the judge's runner
can start workers before it imports torch itself, ``launch``).

The grader side is trusted: these travel pickled from the grader to the worker, never back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CallRequest", "FetchRequest", "LoadRequest", "WARM_READY", "WorkerSetup"]

# what a warm worker sends, once, when it has loaded everything it loads before its evaluation and
# waits for the evaluation's setup (the only message a worker sends before it has one; raw bytes)
WARM_READY = b"mkb-warm-ready"


@dataclass
class WorkerSetup:
    mode: str  # "candidate" | "reference"
    dsl: str  # "cutedsl" | "tirx" | "none"
    path: str  # kernel file (candidate) or problem file (reference)
    device: str
    num_outputs: int
    nonce: str
    protected_paths: list[str] = field(default_factory=list)
    doorbell: str = ""  # path of the shared page (``doorbell``)
    scratch: str = ""  # the only folder this worker may write in
    require_sandbox: bool = False  # an unavailable OS limit is an infrastructure fault, not a note
    hot_wait_ns: int = 0  # after each reply, poll this long for the next request before sleeping
    spawned_at: float = 0.0  # the grader's wall clock when it started this process (startup breakdown)
    # a worker started before its evaluation is known (``launch.start_warm_workers``): it loads torch,
    # its device and its DSL, then waits on its pipe for the evaluation's own setup (this class, with
    # ``warm`` False) and applies everything of the evaluation from there on
    warm: bool = False


@dataclass
class CallRequest:
    """One call. ``inputs`` are the grader's input buffers (shared memory / CUDA IPC) when they are
    new, else None (the worker keeps the last ones): they hold no draw when they arrive, since the
    grader writes each draw into them after the worker rang READY (``launch.WorkerHandle.request``).
    Non-tensor inputs are the workload's constants."""

    seq: int
    nonce: str
    inputs: tuple | None
    values: list = field(default_factory=list)  # (position, Python number) of this draw
    suppress: str | None = None
    send_outputs: bool = False
    keep_outputs: bool = False
    check_threads: bool = False
    # describe the returned outputs in the shared page before DONE (where the grader can read them
    # from outside the process: the CPU path, ``outside``)
    publish_outputs: bool = False
    # run the call under the GPU profiler and report every device kernel (the DSL share)
    profile: bool = False
    # Timing-loop calls: the worker defers its two heavy checks (the integrity of the grader's code
    # in its process, the native mappings) to the next fetch. Run between two timed calls they
    # evict the host code of the next call from the core's caches: on the H200 that made a launch's
    # host side 25-50 us slower than in a user's plain loop, a cost no user loop pays.
    light_checks: bool = False


@dataclass
class FetchRequest:
    seq: int
    nonce: str
    calls: list[int]


@dataclass
class LoadRequest:
    """Import the kernel file now. The candidate worker loads torch, its DSL and its limits first and
    then waits for this, so it can be started before the grader has decided anything (``launch``):
    no code of the submission runs until the grader says so."""
