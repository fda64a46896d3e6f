"""The few helpers a problem file may import: precision switches for the float64 anchor, and the
loader of the values its source captured (``captured``).

The grader runs every reference twice: once on the inputs as drawn (the *reference* result) and once
with every floating input promoted to float64 (the *anchor*). A reference is written once and must
honour both runs, so it never hard-codes ``float32`` accumulation or a final ``bfloat16`` cast; it asks
these helpers instead (``acc`` for working precision, ``to_output`` for the final rounding).
Outside the anchor run they return the problem's own precisions.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CAPTURED_FIELDS", "CAPTURED_SUFFIX", "acc", "acc_dtype", "anchor_mode", "captured", "captured_path",
    "in_anchor_mode", "round_to", "to_output", "true_divisor",
]

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


CAPTURED_SUFFIX = ".captured.json"
CAPTURED_FIELDS = ("source", "record", "license", "attribution", "values")


def captured_path(problem_file: str | os.PathLike[str]) -> Path:
    """Where a problem's captured values live: ``<problem stem>.captured.json`` beside the file."""
    path = Path(problem_file)
    return path.with_name(path.stem + CAPTURED_SUFFIX)


def captured(problem_file: str | os.PathLike[str]) -> dict[str, Any]:
    """The values a problem's source captured from real runs (index pointers, biases, decay rates).

    They are data, not code: a JSON file beside the problem holds them with their source, record,
    licence and attribution, so ``make_inputs`` draws around real values instead of synthetic ones.
    A problem file calls ``captured(__file__)`` and reads ``["name"]``. A missing or malformed file
    is an error naming the file, never a silent fallback to synthetic values.
    """
    path = captured_path(problem_file)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{path}: the problem's captured values are missing") from exc
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    missing = [f for f in CAPTURED_FIELDS if not isinstance(data, dict) or f not in data]
    if missing:
        raise ValueError(f"{path}: missing field(s) {', '.join(missing)}")
    if not isinstance(data["values"], dict) or not data["values"]:
        raise ValueError(f"{path}: 'values' must be a non-empty object of named values")
    return data["values"]


def true_divisor(value: float, like: torch.Tensor) -> torch.Tensor:
    """``value`` as a 0-dim fp32 tensor on ``like``'s device: dividing by it is a correctly rounded
    fp32 division on every device. torch's CUDA kernel turns a division by a Python number into a
    multiply by its fp32 reciprocal, which can differ in the last bit (and move a quantised code)."""
    return torch.full((), value, dtype=torch.float32, device=like.device)
