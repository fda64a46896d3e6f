"""Where a final grade's tensors live, planned from their sizes and the GPU's memory.

A final grade puts three processes on one GPU: the grader (the input buffers of both workers, the
draws, the eager reference and the float64 anchor it recomputes for every checked call, the
comparison), the candidate worker (its kernel, its outputs and, as the contract keeps them for the
secret rechecks, the outputs of every timed call) and the trusted reference worker (the eager
reference's own working memory while its baseline is timed). At upstream workloads the float64
anchor alone can take more than an 80 GB card (problem 45: 61 GB of promoted inputs).

Only some of this must be on the GPU: the candidate's inputs and its own work, and the eager
reference timed where the kernel is. Everything else may move to host memory without changing a
comparison or a verdict:

- ``keep_on_device`` off: the candidate worker does not keep every timed call's outputs on the GPU;
  each timed call sends its outputs to the grader (every one of them, so the worker still cannot
  tell which calls are rechecked), which keeps those of the secretly chosen calls in host memory;
- ``expected_on_host``: the reference's graded values (and the anchor's) go to host memory as soon as
  they are computed, and the comparison brings one output at a time to the device;
- ``compare_on_device`` off: the comparison runs on the CPU, one output at a time;
- ``anchor_on_device`` off: the float64 anchor is computed on the CPU from the draw made on the GPU
  (the same values: a draw is always made on the grading device), slower by minutes at the largest
  workloads.

``plan`` keeps everything on the device (the fastest grade) unless the grade's estimated peak,
with room for the kernel's own work, exceeds the budget; then it moves the cheapest set of parts
off. The comparison itself is the same function with the same allowances wherever it runs (float64
either way; a norm summed in another order differs in its last bits, never by a tolerance).
``stage_peaks`` is the model the plan and
the README's table use (``adapters/memory_estimates.py``); the grader fills ``Sizes`` from the
tensors it holds and the working memory it measures (``Evaluation``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from metakernelbench.contract import GradeConfig

__all__ = [
    "ALL_ON_DEVICE", "CALL_STAGES", "COMPARE_WORK_PER_ELEMENT", "CONTEXT_BYTES", "COSTS", "EXACT_WORK_PER_ELEMENT",
    "FLUSH_BYTES", "GB", "GIB", "LEAST", "Measured", "Overheads", "Placement", "Plan", "Planner", "RESERVE", "Sizes",
    "check_peak", "compare_items", "cost", "device_budget", "gib", "nbytes", "peak", "placements", "plan",
    "process_peak", "promoted_bytes", "release", "stage_peaks", "storage_bytes", "to_host",
]

GB = 10**9
GIB = 1 << 30
CONTEXT_BYTES = 600 << 20  # one process's CUDA context and torch's own state on an H100 (an estimate)
FLUSH_BYTES = 2 * 2 * (50 << 20)  # the grader's L2 flush: two buffers of twice an H100's 50 MB L2
RESERVE = 0.05  # of the budget, left for fragmentation and library workspaces (cuBLAS, the DSLs)
COMPARE_WORK_PER_ELEMENT = 4 * 8 + 8  # _float_check: four float64 tensors at once, plus its boolean masks
EXACT_WORK_PER_ELEMENT = 2  # an exact comparison: one boolean mask and its negation


@dataclass(frozen=True)
class Sizes:
    """Bytes of what one draw of a problem puts on a device, by component.

    ``draw``: the draw's distinct tensor storages (what one worker's input buffers hold, and a fresh
    draw); ``outputs``: the returned outputs of one call; ``inplace``: the graded in-place inputs;
    ``reference_work``: the eager reference's peak above its inputs (its intermediates and outputs);
    ``anchor_inputs``: the float64 anchor's promoted inputs; ``anchor_work``: the anchor's peak above
    them (None: not known yet); ``anchor_outputs``: its graded values; ``compare_items``: per graded
    output, (bytes of its candidate, reference and anchor values, the comparison's working bytes).
    """

    draw: int
    outputs: int
    inplace: int
    reference_work: int
    anchor_inputs: int
    anchor_work: int | None
    anchor_outputs: int
    compare_items: tuple[tuple[int, int, int, int], ...] = ()
    timed: int = GradeConfig.timed

    @property
    def kept(self) -> int:
        """The timed calls' outputs the candidate worker keeps for the rechecks (all of them)."""
        return self.timed * self.outputs

    def compare_peak(self, stream_values: bool, stream_anchor: bool) -> int:
        """The comparison's device bytes at its largest output: its working memory, plus the values
        brought to the device one output at a time (the candidate's and the reference's when
        ``stream_values``, the anchor's when ``stream_anchor``)."""
        return max((work + (got + ref if stream_values else 0) + (anchor if stream_anchor else 0)
                    for got, ref, anchor, work in self.compare_items), default=0)


@dataclass(frozen=True)
class Placement:
    """Where a grade's movable parts live (True: on the grading device)."""

    keep_on_device: bool = True
    expected_on_host: bool = False
    compare_on_device: bool = True
    anchor_on_device: bool = True

    def describe(self) -> str:
        parts = [("timed outputs kept by the candidate worker on the GPU" if self.keep_on_device
                  else "timed outputs sent to the grader, the rechecked ones held in host memory"),
                 "expected values in host memory between stages" if self.expected_on_host else "",
                 "comparison on the GPU" if self.compare_on_device else "comparison on the CPU",
                 "float64 anchor on the GPU" if self.anchor_on_device else "float64 anchor on the CPU"]
        return "; ".join(p for p in parts if p)


ALL_ON_DEVICE = Placement()
LEAST = Placement(keep_on_device=False, expected_on_host=True, compare_on_device=False, anchor_on_device=False)
# what each part costs in grading time when it leaves the device: the kept outputs cross a socket
# after each timed call, the expected values cross to host memory once per check, the comparison runs
# on CPU cores, and the float64 anchor (the reference's whole computation) on CPU cores: minutes at the
# largest workloads
COSTS = {"keep_on_device": 1, "expected_on_host": 1, "compare_on_device": 2, "anchor_on_device": 4}


def cost(p: Placement) -> int:
    return sum(weight for name, weight in COSTS.items() if getattr(p, name) != getattr(ALL_ON_DEVICE, name))


def placements() -> list[Placement]:
    """Every placement, cheapest first."""
    every = [Placement(k, e, c, a) for k in (True, False) for e in (False, True) for c in (True, False)
             for a in (True, False)]
    return sorted(every, key=cost)


@dataclass(frozen=True)
class Overheads:
    """What the grade holds besides the problem's tensors: the three processes' CUDA contexts and
    the grader's L2 flush buffers (zero on a CPU grade)."""

    contexts: int = 3 * CONTEXT_BYTES
    flush: int = FLUSH_BYTES

    @property
    def total(self) -> int:
        return self.contexts + self.flush


def check_peak(s: Sizes, p: Placement, held: int) -> int:
    """The device bytes while the grader recomputes one draw's expected values and compares a call's
    results with them, ``held`` bytes being held meanwhile by everything else.

    Stages, each freeing what the next does not need: the reference on a fresh draw; that draw
    promoted to float64 (on the device, or straight to the CPU); the anchor; the comparison.
    """
    ref_kept = 0 if p.expected_on_host else s.outputs + s.inplace
    anchor_kept = s.anchor_outputs if p.anchor_on_device and not p.expected_on_host else 0
    got = 0 if p.expected_on_host else s.outputs  # the call's returned outputs, brought to the device
    reference = s.draw + s.reference_work
    promote = ref_kept + s.draw + (s.anchor_inputs if p.anchor_on_device else 0)
    anchor = ref_kept + s.anchor_inputs + (s.anchor_work or 0) if p.anchor_on_device else 0
    streamed = s.compare_peak(p.expected_on_host, p.expected_on_host or not p.anchor_on_device)
    compare = ref_kept + anchor_kept + got + (streamed if p.compare_on_device else 0)
    return held + max(reference, promote, anchor, compare)


CALL_STAGES = ("correctness call", "timed call")  # the stages in which the kernel runs


def stage_peaks(s: Sizes, p: Placement, overheads: Overheads = Overheads(),
                candidate_work: int = 0) -> dict[str, int]:
    """The device bytes of each stage of a final grade (every process together).

    ``candidate_work``: the kernel's own working memory beyond its outputs (the submission's: the
    grade's own peak leaves it out, ``plan`` sets room aside for it). The input buffers: one per
    worker (the reference worker's from the eager stage on, as the worker keeps the last buffers it
    was sent), and the draw the grader writes into them, held during a call. The profiled call and
    the bypass test's calls are timed calls for memory, their checks rechecks.
    """
    base = overheads.total
    kept = s.kept if p.keep_on_device else 0
    call = s.draw + s.draw + s.outputs + candidate_work  # a buffer, the draw written into it, the outputs
    return {
        "correctness call": base + call,
        "correctness check": check_peak(s, p, base + s.draw),
        "eager call": base + s.draw + s.draw + s.draw + s.reference_work,
        "timed call": base + s.draw + call + kept,
        "recheck": check_peak(s, p, base + s.draw + s.draw + kept),
    }


def peak(s: Sizes, p: Placement, overheads: Overheads = Overheads(), candidate_work: int = 0) -> int:
    return max(stage_peaks(s, p, overheads, candidate_work).values())


@dataclass(frozen=True)
class Plan:
    """A placement, the grade's own peak with it (the kernel's working memory left out), the room
    set aside for the kernel and the usable budget."""

    placement: Placement
    peak: int
    kernel_room: int
    budget: int
    stages: dict[str, int] = field(default_factory=dict)
    with_room: int = 0  # the peak with ``kernel_room`` taken by the kernel in its calls

    @property
    def fits(self) -> bool:
        return self.with_room <= self.budget

    @property
    def left_for_kernel(self) -> int:
        """Device bytes the kernel may use beyond its outputs in its calls (negative: the grade alone
        is over the budget there)."""
        return self.budget - max(self.stages.get(name, 0) for name in CALL_STAGES)


def plan(s: Sizes, budget: int, overheads: Overheads = Overheads(), reserve: float = RESERVE,
         kernel_room: int | None = None) -> Plan:
    """The cheapest placement (``COSTS``; fewest parts off the device) under which the grade, with
    ``kernel_room`` set aside for the kernel's own work, fits ``budget`` less ``reserve`` of it; among
    equally cheap ones the lowest peak. When none fits, the placement with the lowest peak (``LEAST``'s,
    the cheapest placement that reaches it): the grade then needs a larger device, and ``Plan.fits``
    says so.

    ``kernel_room``: by default the eager reference's working memory (any kernel as frugal as the
    reference fits). An unknown ``anchor_work`` (the anchor has not run yet) counts as zero: the
    grader then runs the anchor on the device if the rest fits, measures it and plans again, or
    computes it on the CPU when the device runs out of memory (``Evaluation.expected``).
    """
    usable = int(budget * (1 - reserve))
    room = s.reference_work if kernel_room is None else kernel_room
    fitting = [p for p in placements() if peak(s, p, overheads, room) <= usable]
    if fitting:
        best = min(fitting, key=lambda p: (cost(p), peak(s, p, overheads)))
    else:
        best = min(placements(), key=lambda p: (peak(s, p, overheads), cost(p)))
    return Plan(best, peak(s, best, overheads), room, usable, stage_peaks(s, best, overheads),
                peak(s, best, overheads, room))


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def storage_bytes(values) -> int:
    """Bytes of the distinct storages behind the tensors in ``values`` (shared storages once)."""
    seen: dict[tuple[str, int], int] = {}
    for v in values:
        if isinstance(v, torch.Tensor):
            storage = v.untyped_storage()
            key = (str(v.device), storage.data_ptr() or storage._cdata)
            seen[key] = storage.nbytes()
    return sum(seen.values())


def promoted_bytes(values) -> int:
    """Bytes of ``tensors.promote_floats(values)``: float64 copies of floating tensors, clones of the rest."""
    return sum(v.numel() * (8 if v.dtype.is_floating_point else v.element_size())
               for v in values if isinstance(v, torch.Tensor))


def compare_items(graded: dict[str, torch.Tensor], exact: tuple[str, ...] = ()) -> tuple[tuple[int, ...], ...]:
    """Per graded value (the reference's): (its candidate bytes, reference bytes, anchor bytes, the
    comparison's working bytes)."""
    items = []
    for name, t in graded.items():
        floating = t.dtype.is_floating_point and name not in exact
        anchor = t.numel() * 8 if t.dtype.is_floating_point else nbytes(t)
        work = t.numel() * (COMPARE_WORK_PER_ELEMENT if floating else EXACT_WORK_PER_ELEMENT)
        items.append((nbytes(t), nbytes(t), anchor, work))
    return tuple(items)


def gib(n: int | None) -> float | None:
    return None if n is None else round(n / GIB, 2)


def device_budget(device: torch.device, configured: int | None = None) -> int | None:
    """The bytes a grade plans for: ``configured`` (``GradeConfig.memory_budget_bytes``), else the
    CUDA device's whole memory, else None (a CPU grade: nothing to plan)."""
    if configured is not None:
        return configured
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    return None


class Measured:
    """The device's allocation peak above its start over a ``with`` block (CUDA; ``bytes`` None
    elsewhere). The peak counter is reset for the block; the process's own peak survives in
    ``process_peak``."""

    _process_peak: dict[int, int] = {}

    def __init__(self, device: torch.device):
        self.device, self.bytes = device, None

    def __enter__(self) -> Measured:
        if self.device.type == "cuda":
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            self._index = index
            Measured._process_peak[index] = process_peak(self.device)
            self._start = torch.cuda.memory_allocated(index)
            torch.cuda.reset_peak_memory_stats(index)
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self.bytes = torch.cuda.max_memory_allocated(self._index) - self._start


def process_peak(device: torch.device) -> int:
    """This process's allocation peak on ``device`` since it started, across ``Measured`` blocks."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return max(Measured._process_peak.get(index, 0), torch.cuda.max_memory_allocated(index))


def release(device: torch.device) -> None:
    """Give this process's cached, unused device memory back (another process may need it next)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def to_host(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.cpu() for name, t in values.items()}


class Planner:
    """One grade's placement, planned again as its sizes become known.

    Without a budget (a CPU grade) everything stays on the device. With one, the grade starts on the
    device and plans from what it has seen: one draw's tensors (``saw_draw``), the reference's
    values and measured working memory (``saw_reference``), and the anchor's (``saw_anchor``). Until
    the anchor has run its working memory counts as zero; a device anchor that runs out of memory
    (``anchor_ran_out``) moves every later anchor to the CPU.
    """

    def __init__(self, device: torch.device, budget: int | None, overheads: Overheads | None = None,
                 timed: int = GradeConfig.timed):
        self.device, self.budget, self.host = device, budget, torch.device("cpu")
        self.overheads = overheads or (Overheads() if device.type == "cuda" else Overheads(0, 0))
        self.timed = timed
        self.draw = self.outputs = self.inplace = self.reference_work = 0
        self.anchor_inputs = self.anchor_outputs = 0
        self.anchor_work: int | None = None
        self.items: tuple[tuple[int, int, int, int], ...] = ()
        self.anchor_out_of_memory = False
        self.chosen: Plan | None = None
        self._replan()

    @property
    def sizes(self) -> Sizes:
        return Sizes(self.draw, self.outputs, self.inplace, self.reference_work, self.anchor_inputs,
                     self.anchor_work, self.anchor_outputs, self.items, self.timed)

    @property
    def placement(self) -> Placement:
        return ALL_ON_DEVICE if self.chosen is None else self.chosen.placement

    def _replan(self) -> None:
        if self.budget is None:
            return
        chosen = plan(self.sizes, self.budget, self.overheads)
        if self.anchor_out_of_memory and chosen.placement.anchor_on_device:
            off = [p for p in placements() if not p.anchor_on_device]
            usable = int(self.budget * (1 - RESERVE))
            fits = [p for p in off if peak(self.sizes, p, self.overheads, chosen.kernel_room) <= usable]
            best = min(fits, key=cost) if fits else LEAST
            chosen = Plan(best, peak(self.sizes, best, self.overheads), chosen.kernel_room, usable,
                          stage_peaks(self.sizes, best, self.overheads),
                          peak(self.sizes, best, self.overheads, chosen.kernel_room))
        self.chosen = chosen

    def saw_draw(self, draw: tuple, spec) -> None:
        by_name = dict(zip(spec.inputs, draw, strict=True))
        self.draw = max(self.draw, storage_bytes(draw))
        self.inplace = sum(nbytes(by_name[n]) for n in spec.inplace)
        self.anchor_inputs = promoted_bytes(draw)
        self._replan()

    def saw_reference(self, graded: dict[str, torch.Tensor], spec, work: int | None) -> None:
        self.outputs = sum(nbytes(graded[n]) for n in spec.outputs)
        self.items = compare_items(graded, spec.exact)
        self.anchor_outputs = sum(t.numel() * 8 if t.dtype.is_floating_point else nbytes(t) for t in graded.values())
        if work is not None:
            self.reference_work = max(self.reference_work, work)
        self._replan()

    def saw_anchor(self, work: int | None) -> None:
        if work is not None:
            self.anchor_work = max(self.anchor_work or 0, work)
            self._replan()

    def anchor_ran_out(self) -> None:
        self.anchor_out_of_memory = True
        self._replan()

    @property
    def compare_device(self) -> torch.device:
        return self.device if self.placement.compare_on_device else self.host

    @property
    def values_device(self) -> torch.device | None:
        """Where a call's returned outputs go for the comparison (None: stay where they arrived)."""
        p = self.placement
        return self.device if p.compare_on_device and not p.expected_on_host else None

    def describe(self) -> str:
        if self.chosen is None:
            return "no device budget: everything on the grading device"
        c = self.chosen
        return (f"{c.placement.describe()} (planned peak {c.peak / GB:.1f} GB of {c.budget / GB:.1f} GB usable; "
                f"room for the kernel {c.kernel_room / GB:.1f} GB{'' if c.fits else '; does not fit'})")
