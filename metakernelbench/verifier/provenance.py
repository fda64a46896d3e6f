"""Did the DSL kernels compute the answer? The DSL share of the call's time (measured) and the bypass
test (a kernel whose suppression leaves the outputs valid)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from metakernelbench.contract import MIN_DSL_SHARE, Status, Verdict

from .result import Mismatch
from .tensors import StructureError

__all__ = ["CUTE_KERNEL_PREFIX", "MIN_DSL_SHARE", "NO_WORK_OPS", "bypass", "dsl_share", "is_dsl_kernel"]

if TYPE_CHECKING:
    from .evaluation import Evaluation


CUTE_KERNEL_PREFIX = "kernel_cutlass_"  # the symbol prefix CuTe DSL gives every kernel it compiles
# torch operators that compute nothing (views, metadata, allocation): on the CPU path their host time
# is dispatch, which counts for neither side of the share
NO_WORK_OPS = frozenset({
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided", "aten::empty", "aten::empty_like",
    "aten::empty_strided", "aten::contiguous", "aten::detach", "aten::alias", "aten::t", "aten::transpose",
    "aten::permute", "aten::expand", "aten::select", "aten::slice", "aten::unsqueeze", "aten::squeeze",
    "aten::resolve_conj", "aten::resolve_neg", "aten::lift_fresh", "aten::unflatten", "aten::flatten",
    "aten::split", "aten::chunk", "aten::narrow", "aten::unbind", "aten::view_as", "aten::expand_as",
    "aten::set_", "aten::result_type", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense",
    "aten::to", "aten::_to_copy", "aten::unfold", "aten::movedim", "aten::swapaxes",
})


def is_dsl_kernel(name: str, dsl: str, symbols: set[str]) -> bool:
    """Whether a profiled device kernel is one the DSL compiled (torch's, cuBLAS's, copies and fills
    are not). CuTe DSL names every kernel with its prefix; TIRx kernels are the symbols its launch
    sites declared."""
    base = name.split("(")[0]
    if dsl == "cutedsl" and name.startswith(CUTE_KERNEL_PREFIX):
        return True
    return name in symbols or base in symbols


def dsl_share(ev: Evaluation) -> dict[str, Any]:
    """How much of one call's device time the DSL kernels took; RULE_VIOLATION below the minimum.

    The bypass test shows that a DSL kernel matters to the outputs, not that it computed them: an
    eager result copied through a DSL kernel, or multiplied by a one that a DSL kernel produced,
    depends on that kernel. So one more call, on a fresh draw, runs under the GPU profiler and every
    device kernel is listed with its time; the DSL kernels' share of the total must reach
    ``MIN_DSL_SHARE``. Eager work is not forbidden, it is bounded: with a share of at least one half,
    eager kernels take no more of the call than the DSL's do, so a call that routes an eager result
    through the DSL is at least twice as slow as that eager work, never a speedup gained by it.

    On the CPU (TIRx compiled for llvm) there are no device kernels: a DSL kernel runs on the calling
    thread, so the host time inside DSL launches (counted by the launch hooks) stands for the DSL's
    kernels and every torch operator's own host time (the profiler's CPU activity) for the eager
    work; Python's own dispatch counts for neither.
    """
    seed = ev.seed()
    call = ev.call(ev.candidate, ev.draw(seed), snapshot=True, send_outputs=True, profile=True, check_threads=True)
    ev.check_call(seed, call.inputs, call.outputs, -1, "profiled draw")
    symbols = {name for names in ev.kernel_names.values() for name in names}
    if ev.device.type == "cuda":
        kernels = [{"name": k.name, "us": round(k.us, 3), "dsl": is_dsl_kernel(k.name, ev.dsl, symbols)}
                   for k in sorted(call.result.kernels or [], key=lambda k: -k.us)]
        total = sum(k["us"] for k in kernels)
        mine = sum(k["us"] for k in kernels if k["dsl"])
        share = mine / total if total > 0 else 0.0
        source = "GPU profiler: device time of DSL kernels / all device kernels of one call"
    else:
        mine = call.result.dsl_ns / 1e3
        kernels = [{"name": f"DSL launches ({', '.join(call.result.launches)})", "us": round(mine, 3), "dsl": True}]
        kernels += [{"name": k.name, "us": round(k.us, 3), "dsl": False if k.name not in NO_WORK_OPS else None}
                    for k in sorted(call.result.kernels or [], key=lambda k: -k.us)]
        total = sum(k["us"] for k in kernels if k["dsl"] is not None)
        share = mine / total if total > 0 else 0.0
        source = ("CPU: host time inside DSL launches / that plus the own time of every torch operator "
                  "that computes (views and allocations excluded: dsl null)")
    record = {"dsl_share": round(share, 4), "dsl_us": round(mine, 3), "total_us": round(total, 3),
              "kernels": kernels, "source": source}
    if share < MIN_DSL_SHARE:
        raise Verdict(Status.RULE_VIOLATION, f"DSL kernels took {100 * share:.1f} % of the call's time "
                                             f"({source}); the contract requires at least "
                                             f"{100 * MIN_DSL_SHARE:.0f} % (eager work may not do the main "
                                             "computation)", dsl_share=record)
    return record


def bypass(ev: Evaluation) -> dict[str, str]:
    """Each DSL launch site suppressed in turn on a fresh draw: outputs still valid without it mean
    that kernel does not compute them (RULE_VIOLATION). Per site, what happened without it."""
    outcomes: dict[str, str] = {}
    sites = ev.launch_sites[: ev.config.max_bypass_sites]
    for site in sites:
        seed = ev.seed()
        try:
            call = ev.call(ev.candidate, ev.draw(seed), snapshot=True, send_outputs=True, suppress=site,
                           check_threads=True)
            expected = ev.expected(seed)  # the trusted side's own faults are not caught below
            try:
                mismatch = ev.judge_draw(seed, call.inputs, call.outputs, 0, expected)
            except (StructureError, ValueError) as exc:
                mismatch = Mismatch(output="?", draw=0, check="structure", detail=str(exc))
        except Verdict as exc:
            outcomes[site] = f"call failed without it ({exc.status.value})"
            if exc.status is Status.REWARD_HACK or exc.status is Status.RULE_VIOLATION:
                raise
            if exc.status is Status.TIMEOUT or not ev.candidate.process.is_alive():
                ev.restart_candidate()  # a worker that answered is still usable: no restart
            continue
        if mismatch is None:
            outcomes[site] = "outputs still valid"
            raise Verdict(Status.RULE_VIOLATION, f"bypass test: with the DSL launch {site!r} suppressed "
                                                 "the outputs are still correct, so that kernel does "
                                                 "not compute them", bypass=outcomes)
        outcomes[site] = f"outputs broken without it, as required ({mismatch.check} check on {mismatch.output!r})"
    return outcomes
