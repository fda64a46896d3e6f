"""The few helpers a problem file may import: precision switches for the float64 anchor.

The grader runs every reference twice: once on the inputs as drawn (the *reference* result) and once
with every floating input promoted to float64 (the *anchor*). A reference is written once and must
honour both runs, so it never hard-codes ``float32`` accumulation or a final ``bfloat16`` cast; it asks
these helpers instead (``acc`` for working precision, ``to_output`` for the final rounding).
Outside the anchor run they return the problem's own precisions.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

_ANCHOR: contextvars.ContextVar[bool] = contextvars.ContextVar("mkb_anchor", default=False)


@contextlib.contextmanager
def anchor_mode() -> Iterator[None]:
    """Run the enclosed reference call as the float64 anchor."""
    token = _ANCHOR.set(True)
    try:
        yield
    finally:
        _ANCHOR.reset(token)


def in_anchor_mode() -> bool:
    """True while the grader computes the float64 anchor."""
    return _ANCHOR.get()


def acc_dtype() -> torch.dtype:
    """Accumulation precision: float32 normally, float64 for the anchor."""
    return torch.float64 if _ANCHOR.get() else torch.float32


def acc(t: torch.Tensor) -> torch.Tensor:
    """``t`` in the accumulation precision (float32, or float64 for the anchor)."""
    return t.to(acc_dtype())


def to_output(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round ``t`` to an output dtype; the anchor keeps float64 instead of rounding.

    Integer and boolean dtypes are always honoured: the anchor only lifts floating rounding.
    """
    if _ANCHOR.get() and dtype.is_floating_point:
        return t.to(torch.float64)
    return t.to(dtype)


def round_to(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round to ``dtype`` and come back to the working precision, in both runs.

    For intermediate roundings that are part of the problem's definition (e.g. an fp8 quantisation
    step or a bf16 GEMM output the model really stores): the anchor must see them too.
    """
    return t.to(dtype).to(t.dtype)
