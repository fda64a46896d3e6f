"""Tensor plumbing shared by the grader and the tests: promotion for the anchor, graded snapshots.

A problem's graded values are its returned outputs (named by ``OUTPUTS``) followed by the inputs it
updates in place (named by ``INPLACE``); ``snapshot_graded`` turns one call's result into that
ordered name -> tensor mapping, checking the returned structure on the way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from metakernelbench.problems import ProblemSpec

__all__ = ["StructureError", "clone_inputs", "promote_floats", "returned_as_tuple", "snapshot_graded", "tensor_nbytes"]


class StructureError(ValueError):
    """A call returned something whose structure differs from the reference's."""


def promote_floats(values: Sequence[Any], device: torch.device | None = None) -> tuple[Any, ...]:
    """Inputs for the float64 anchor: floating tensors become float64 copies, the rest is kept.

    Integer tensors and Python scalars keep their values; in-place inputs get copies, so the
    anchor run never touches the tensors of the reference run. ``device``: where the copies go (the
    values' own device by default; the CPU for an anchor computed off the GPU, converted there).
    """
    promoted = []
    for v in values:
        if isinstance(v, torch.Tensor):
            target = v.device if device is None else device
            if v.dtype.is_floating_point:
                v = v.to(target, torch.float64)
            else:
                v = v.clone() if target == v.device else v.to(target)
        promoted.append(v)
    return tuple(promoted)


def clone_inputs(values: Sequence[Any]) -> tuple[Any, ...]:
    """Deep-enough copy of an input tuple: tensors cloned, scalars shared."""
    return tuple(v.clone() if isinstance(v, torch.Tensor) else v for v in values)


def returned_as_tuple(spec: ProblemSpec, returned: Any) -> tuple[Any, ...]:
    """The returned value as a tuple of outputs, validated against the declared structure.

    The reference convention: no OUTPUTS -> returns None; one output -> returns the tensor itself;
    several -> returns a tuple of exactly that length. Container types must match exactly.
    """
    n = len(spec.outputs)
    if n == 0:
        if returned is not None:
            raise StructureError(f"expected None (the problem updates inputs in place), got "
                                 f"{type(returned).__name__}")
        return ()
    if n == 1:
        return (returned,)
    if type(returned) is not tuple:
        raise StructureError(f"expected a tuple of {n} outputs {spec.outputs}, got "
                             f"{type(returned).__name__}")
    if len(returned) != n:
        raise StructureError(f"expected {n} outputs {spec.outputs}, got a tuple of {len(returned)}")
    return returned


def snapshot_graded(spec: ProblemSpec, inputs: Sequence[Any], returned: Any) -> dict[str, torch.Tensor]:
    """Name -> tensor for every graded value of one call (returned outputs, then in-place inputs)."""
    values = dict(zip(spec.outputs, returned_as_tuple(spec, returned), strict=True))
    by_name = dict(zip(spec.inputs, inputs, strict=True))
    for name in spec.inplace:
        values[name] = by_name[name]
    return values


def tensor_nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()
