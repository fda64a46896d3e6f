"""Did the DSL kernels compute the answer? The audit (an answer handed to a kernel finished) and the
bypass test (a kernel whose suppression leaves the outputs valid)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .correctness import check_output
from .launch import Verdict
from .result import Mismatch, Status
from .tensors import StructureError

if TYPE_CHECKING:
    from .evaluation import Evaluation


def audit(ev: Evaluation) -> dict[str, str]:
    """Reject when every DSL launch site only received answers computed outside the DSL.

    One extra call snapshots, right before each DSL launch, every argument the size of a graded
    output that no earlier DSL launch of the call produced. A site is *trivial* when one of its
    snapshots already is a valid answer: that kernel copied or cast a result, it did not compute
    it. (A legitimate pipeline where kernel 2 reads kernel 1's output is exempt: that argument
    was produced by a DSL launch.)
    """
    seed = ev.seed()
    inputs = ev.draw(seed)
    ref, anchor = ev.expected(seed)
    numels = sorted({ref[n].numel() for n in ev.spec.graded_names}
                    | {-ref[n].numel() * ref[n].element_size() for n in ev.spec.graded_names})
    result, returned, snapshots = ev.call(ev.candidate, inputs, send_outputs=True, audit_numels=numels,
                                            check_threads=True)
    ev.check_call(seed, inputs, returned, -1, "audit draw", (ref, anchor))
    found: dict[str, str] = {}
    for site, snap in zip(result.snapshot_sites, snapshots, strict=True):
        for name in ev.spec.graded_names:
            want = ref[name]
            if site in found or name in ev.spec.sets:
                continue
            same_bytes = snap.numel() * snap.element_size() == want.numel() * want.element_size()
            if same_bytes:
                candidate = snap.reshape(-1).view(torch.uint8).view(want.dtype).reshape(want.shape)
            elif snap.numel() == want.numel() and want.dtype.is_floating_point:
                candidate = snap.to(want.dtype).reshape(want.shape)  # a cast is not a computation
            else:
                continue
            candidate = candidate.to(ev.device)
            if check_output(ev.spec, name, -1, candidate, want, anchor[name]) is None:
                found[site] = f"received a finished answer for {name!r} before it ran"
    sites = list(result.launches)
    if sites and all(site in found for site in sites):
        raise Verdict(Status.RULE_VIOLATION, "every DSL kernel only moved results computed outside the "
                                             "DSL (" + "; ".join(f"{k}: {v}" for k, v in found.items()) + ")")
    return found


def bypass(ev: Evaluation) -> dict[str, str]:
    """Each DSL launch site suppressed in turn on a fresh draw: outputs still valid without it mean
    that kernel does not compute them (RULE_VIOLATION). Per site, what happened without it."""
    outcomes: dict[str, str] = {}
    sites = ev.launch_sites[: ev.config.max_bypass_sites]
    for site in sites:
        seed = ev.seed()
        inputs = ev.draw(seed)
        try:
            _, returned, _ = ev.call(ev.candidate, inputs, send_outputs=True, suppress=site, check_threads=True)
            expected = ev.expected(seed)  # the trusted side's own faults are not caught below
            try:
                mismatch = ev.judge_draw(seed, inputs, returned, 0, expected)
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
