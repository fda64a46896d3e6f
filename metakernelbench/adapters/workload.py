"""Describe a problem's graded inputs (shape, dtype, scalar values) for its instructions.

The problem file defines its inputs only through ``make_inputs``; the agent should not have to run
it to learn the shapes. Drawing the full workload on the CPU can take minutes and tens of GB
(quantised weights, MoE tables), so the draw runs on the ``meta`` device, which allocates nothing.
Meta tensors have no values, so the few data-dependent operations a generator uses (``.item()``,
``nonzero``, ``.tolist()``) are answered with placeholder values by a dispatch mode.

The draw is made twice, with different seeds *and* different placeholder values. A shape or scalar
that is the same in both runs does not depend on drawn values and is reported; one that differs is
reported as depending on the draw. A generator that cannot run on meta at all (for example a
rejection-sampling loop that needs real values) is described by names only: the problem file stays
the definition, and the build never fails or slows down because of a description.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel
from torch.utils._python_dispatch import TorchDispatchMode

from metakernelbench.problems import Problem

__all__ = ["InputInfo", "VARIES", "describe_inputs"]

_aten = torch.ops.aten
_RUNS = (0, 1)  # seed and placeholder salt of each run


class InputInfo(BaseModel):
    """One positional input of ``solve``."""

    name: str
    kind: str  # "tensor", a Python type name, or "" when unknown
    shape: str = ""  # "[63, 5, 128]", VARIES, or "" when unknown
    dtype: str = ""  # "bfloat16" for tensors
    value: str = ""  # a scalar's value when it does not depend on the draw


VARIES = "depends on the draw"


class _Placeholders(TorchDispatchMode):
    """Answer value-dependent operations on meta tensors with values that depend on ``salt``."""

    def __init__(self, salt: int):
        super().__init__()
        self.salt = salt
        self.used = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        first = args[0] if args else None
        if not (isinstance(first, torch.Tensor) and first.device.type == "meta"):
            return func(*args, **kwargs)
        if func is _aten._local_scalar_dense.default:  # .item(), bool(t), int(t), float(t)
            self.used = True
            if first.dtype == torch.bool:
                return True
            return 0.5 + self.salt if first.dtype.is_floating_point else 3 + 2 * self.salt
        if func is _aten.nonzero.default:
            self.used = True
            rows = max(1, first.numel() // (2 + self.salt))
            return torch.empty((rows, first.dim()), dtype=torch.long, device="meta")
        device = kwargs.get("device")
        if func is _aten._to_copy.default and device is not None and torch.device(device).type != "meta":
            self.used = True  # .cpu(), .tolist(), .numpy()
            dtype = kwargs.get("dtype") or first.dtype
            return torch.full(first.shape, 3 + 2 * self.salt, dtype=dtype, device=device)
        return func(*args, **kwargs)


def _draw(problem: Problem, run: int) -> tuple[tuple, bool]:
    generator = torch.Generator().manual_seed(run)
    with torch.no_grad(), _Placeholders(run) as mode:
        values = tuple(problem.make_inputs(torch.device("meta"), generator))
    return values, mode.used


def _describe(name: str, values: list, placeholders_used: bool) -> InputInfo:
    first = values[0]
    if isinstance(first, torch.Tensor):
        if not all(isinstance(v, torch.Tensor) for v in values):
            return InputInfo(name=name, kind="")
        shapes = {tuple(v.shape) for v in values}
        dtypes = sorted({str(v.dtype).removeprefix("torch.") for v in values})
        shape = str(list(next(iter(shapes)))) if len(shapes) == 1 else VARIES
        return InputInfo(name=name, kind="tensor", shape=shape, dtype=", ".join(dtypes))
    same = all(type(v) is type(first) and v == first for v in values)
    # A boolean placeholder is the same in both runs, so a bool scalar computed from it proves nothing.
    if isinstance(first, bool) and placeholders_used:
        same = False
    return InputInfo(name=name, kind=type(first).__name__, value=repr(first) if same else "")


def describe_inputs(problem: Problem) -> tuple[InputInfo, ...]:
    """Shape/dtype/value of each input at the graded workload, as far as meta draws show them."""
    names = problem.spec.inputs
    try:
        draws = [_draw(problem, run) for run in _RUNS]
    except Exception:  # noqa: BLE001 - any failure means "describe by name only"
        draws = None
    if draws is None or any(len(values) != len(names) for values, _ in draws):
        return tuple(InputInfo(name=n, kind="") for n in names)
    used = any(u for _, u in draws)
    return tuple(_describe(n, [values[i] for values, _ in draws], used) for i, n in enumerate(names))
