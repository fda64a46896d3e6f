"""The correctness contract of design.md §4, applied to one draw's graded values.

Floats are judged against the float64 *anchor* (the reference recomputed with float64 inputs):
the candidate's error may be at most F times the reference's own error, or F times one rounding
unit of the output dtype at the anchor's magnitude, whichever is larger. Three views of the error
are checked, because each alone can be gamed: the element-wise maximum, the whole-tensor 2-norm,
and the 2-norm of each row (so a tail of small-magnitude rows cannot hide under a large maximum).
Integer, boolean and declared-exact outputs must match bit for bit. NaN/Inf must sit exactly where
the reference has them.
"""

from __future__ import annotations

import torch

from metakernelbench.problems import ProblemSpec

from .result import Mismatch

__all__ = ["ROW_FLOOR_FRACTION", "check_draw", "check_output"]

ROW_FLOOR_FRACTION = 1e-3  # rows below 1e-3 of the tensor's peak get an absolute error floor


def _exactly_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise bitwise equality (NaNs with equal bits compare equal)."""
    if a.dtype.is_floating_point:
        width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return a.contiguous().view(width) == b.contiguous().view(width)
    return a == b


def _first_index(mask: torch.Tensor) -> list[int]:
    """The multi-index of the first True element. (Plain arithmetic: ``torch.unravel_index`` imports
    torch's reference decompositions on first use, seconds of a fresh grader's time.)"""
    flat = int(mask.flatten().nonzero()[0])
    index = []
    for size in reversed(mask.shape):
        flat, rest = divmod(flat, size)
        index.append(rest)
    return index[::-1]


def _structure(name: str, draw: int, got: torch.Tensor, ref: torch.Tensor) -> Mismatch | None:
    if type(got) is not torch.Tensor:
        return Mismatch(output=name, draw=draw, check="structure",
                        detail=f"expected a torch.Tensor, got {type(got).__name__}")
    for what, g, r in (("dtype", got.dtype, ref.dtype), ("shape", tuple(got.shape), tuple(ref.shape))):
        if g != r:
            return Mismatch(output=name, draw=draw, check="structure", detail=f"{what} {g} != expected {r}")
    return None


def _sorted_sets(spec: ProblemSpec, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Apply the SETS rules: sort each set output along its dim and permute its companions alike."""
    values = dict(values)
    for name, rule in spec.sets.items():
        keys = values[name]
        order = keys.argsort(dim=rule.dim, stable=True)
        values[name] = keys.gather(rule.dim, order)
        for companion in rule.with_:
            values[companion] = values[companion].gather(rule.dim, order)
    return values


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1]) if t.dim() >= 2 else t.reshape(1, -1)


def _float_check(name: str, draw: int, got: torch.Tensor, ref: torch.Tensor, anchor: torch.Tensor,
                 factor: float) -> Mismatch | None:
    finite_ref = torch.isfinite(ref)
    same_nonfinite = _exactly_equal(got, ref) & ~finite_ref
    bad_nonfinite = (~torch.isfinite(got) | ~finite_ref) & ~same_nonfinite
    del same_nonfinite
    if bad_nonfinite.any():
        idx = _first_index(bad_nonfinite)
        return Mismatch(output=name, draw=draw, check="nan", index=idx,
                        got=float(got[tuple(idx)]), expected=float(ref[tuple(idx)]),
                        detail="NaN/Inf where the reference has a different value")
    del bad_nonfinite
    keep = finite_ref
    eps = torch.finfo(ref.dtype).eps
    tiny = torch.finfo(ref.dtype).tiny
    # The errors against the anchor, in float64, over the finite elements. Each difference is made in
    # place of its float64 copy and the copies are not kept, so at most four float64 tensors of the
    # output's size exist at once (the anchor, two differences and one temporary): at upstream sizes
    # an output of 872M elements is 7 GB per float64 tensor.
    a64 = torch.where(keep, anchor.to(torch.float64), 0.0)
    peak = float(a64.abs().max()) if a64.numel() else 0.0
    g_err = torch.where(keep, got.to(torch.float64), 0.0).sub_(a64)  # the candidate's: g64 - a64
    r_err = torch.where(keep, ref.to(torch.float64), 0.0).sub_(a64)  # the reference's: r64 - a64
    del keep, finite_ref

    ref_max = float(r_err.abs().max()) if r_err.numel() else 0.0
    allowance = factor * max(ref_max, eps * peak) + tiny
    err_max = float(g_err.abs().max()) if g_err.numel() else 0.0
    if g_err.numel() and err_max > allowance:
        err = g_err.abs()
        idx = _first_index(err == err.max())
        # an element over the allowance (> 0) is finite in the reference, so g64 there is got's value
        return Mismatch(output=name, draw=draw, check="max_abs", index=idx, got=float(got[tuple(idx)]),
                        expected=float(a64[tuple(idx)]), error=float(err.max()), allowance=allowance,
                        detail="largest element-wise error exceeds the anchored allowance")

    norm_err = float(torch.linalg.vector_norm(g_err))
    norm_allow = factor * max(float(torch.linalg.vector_norm(r_err)),
                              eps * float(torch.linalg.vector_norm(a64))) + tiny
    if norm_err > norm_allow:
        return Mismatch(output=name, draw=draw, check="norm", error=norm_err, allowance=norm_allow,
                        detail="whole-tensor 2-norm error exceeds the anchored allowance")

    if a64.dim() >= 1 and a64.numel():
        rows_a = _rows(a64)
        row_err = torch.linalg.vector_norm(_rows(g_err), dim=-1)
        row_ref = torch.linalg.vector_norm(_rows(r_err), dim=-1)
        row_mag = torch.linalg.vector_norm(rows_a, dim=-1)
        floor = eps * peak * ROW_FLOOR_FRACTION * rows_a.shape[-1] ** 0.5
        row_allow = factor * torch.maximum(row_ref, eps * row_mag) + floor + tiny
        over = row_err > row_allow
        if over.any():
            row = int(over.nonzero()[0])
            return Mismatch(output=name, draw=draw, check="row_norm", index=[row],
                            error=float(row_err[row]), allowance=float(row_allow[row]),
                            detail=f"row {row} (last-dim slice) 2-norm error exceeds its allowance")
    return None


def check_draw(spec: ProblemSpec, draw: int, got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
               anchor: dict[str, torch.Tensor], device: torch.device | None = None) -> Mismatch | None:
    """The first contract violation among one draw's graded values, or None when all pass.

    ``got``, ``ref`` and ``anchor`` map each graded name to a tensor; ``anchor`` holds float64 for
    floating outputs. Without ``device`` each output's three values must share one device; with it,
    each output's values are brought to ``device`` for its comparison and let go after it, one output
    at a time (the grade's memory plan: ``memory.Planner.compare_device``). The comparison is the
    same wherever it runs.
    """
    for name in spec.graded_names:
        if name not in got:
            return Mismatch(output=name, draw=draw, check="structure", detail="output missing")
        problem = _structure(name, draw, got[name], ref[name])
        if problem:
            return problem
    got, ref, anchor = (_sorted_sets(spec, v) for v in (got, ref, anchor))
    for name in spec.graded_names:
        values = (got[name], ref[name], anchor[name])
        if device is not None:
            values = tuple(v.to(device) for v in values)
        problem = check_output(spec, name, draw, *values)
        del values
        if problem:
            return problem
    return None


def check_output(spec: ProblemSpec, name: str, draw: int, got: torch.Tensor, ref: torch.Tensor,
                 anchor: torch.Tensor) -> Mismatch | None:
    """One graded value against its reference and anchor (structure already checked, sets applied)."""
    if not ref.dtype.is_floating_point or name in spec.exact:
        same = _exactly_equal(got, ref)
        if not bool(same.all()):
            idx = _first_index(~same)
            check = "set" if name in spec.sets else "exact"
            return Mismatch(output=name, draw=draw, check=check, index=idx, got=float(got[tuple(idx)]),
                            expected=float(ref[tuple(idx)]), detail="values must match exactly")
        return None
    return _float_check(name, draw, got, ref, anchor, spec.tolerance_factor)
