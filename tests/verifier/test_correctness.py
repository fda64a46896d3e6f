"""The anchored correctness contract (``verifier.correctness``, design.md §4) on hand-built tensors.

Each case builds the float64 anchor, the reference (the anchor plus a chosen reference error) and a
candidate by hand, so the expected verdict follows from the rule itself: the candidate's error may
be at most F = 3 times the reference's own error (or F rounding units at the anchor's magnitude),
judged element-wise, over the whole tensor and per row.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from metakernelbench.problems import ProblemSpec
from metakernelbench.verifier.correctness import check_draw

PROVENANCE = dict(source="test", model="none", upstream="none", license="none")


def make_spec(outputs=("out",), inplace=(), inputs=None, **extra) -> ProblemSpec:
    inputs = inputs or tuple(inplace) + ("x",)
    return ProblemSpec(id="00", slug="unit", family="mlp_norm", path=Path("/nonexistent/00_unit.py"),
                       title="unit", provenance=PROVENANCE, inputs=inputs, outputs=outputs, inplace=inplace,
                       workload={}, small_workload={}, **extra)


SPEC = make_spec()


def anchor_and_reference(seed: int = 0, shape=(4, 16), ref_error: float = 1e-3):
    """A float64 anchor and a float64 reference whose error pattern is known exactly."""
    gen = torch.Generator().manual_seed(seed)
    anchor = torch.randn(*shape, generator=gen, dtype=torch.float64)
    pattern = torch.randn(*shape, generator=gen, dtype=torch.float64)
    return anchor, anchor + ref_error * pattern


def verdict(got, ref, anchor, spec=SPEC, name="out"):
    return check_draw(spec, 0, {name: got}, {name: ref}, {name: anchor})


# ---- the anchor rule ------------------------------------------------------------------------

@pytest.mark.parametrize("k", [0.0, 1.0, 2.9])
def test_error_within_f_times_the_reference_error_passes(k):
    anchor, ref = anchor_and_reference()
    got = anchor + k * (ref - anchor)  # the reference's own error pattern, scaled
    assert verdict(got, ref, anchor) is None


@pytest.mark.parametrize("k", [3.1, 10.0])
def test_error_beyond_f_times_the_reference_error_fails(k):
    anchor, ref = anchor_and_reference()
    got = anchor + k * (ref - anchor)
    mismatch = verdict(got, ref, anchor)
    assert mismatch is not None and mismatch.check == "max_abs"
    assert mismatch.excess == pytest.approx(k / 3, rel=1e-6)


def test_exact_reference_gets_f_rounding_units_at_the_anchor_magnitude():
    anchor = torch.tensor([[1.0, 2.0, 4.0, 8.0]], dtype=torch.float64)
    ref = anchor.float()  # exact: the reference error is zero
    eps = torch.finfo(torch.float32).eps
    inside = anchor.clone()
    inside[0, 3] += 2.5 * eps * 8.0
    assert verdict(inside.float(), ref, anchor) is None
    outside = anchor.clone()
    outside[0, 3] += 4.0 * eps * 8.0
    mismatch = verdict(outside.float(), ref, anchor)
    assert mismatch is not None and mismatch.check == "max_abs"


def test_tolerance_factor_comes_from_the_spec():
    anchor, ref = anchor_and_reference()
    got = anchor + 4.0 * (ref - anchor)
    assert verdict(got, ref, anchor) is not None
    loose = make_spec(tolerance_factor=5.0, tolerance_note="unit test")
    assert verdict(got, ref, anchor, spec=loose) is None


# ---- structure ------------------------------------------------------------------------------

def test_dtype_mismatch_is_a_structure_error():
    anchor, ref = anchor_and_reference()
    mismatch = verdict(ref.float(), ref, anchor)
    assert mismatch.check == "structure" and "dtype" in mismatch.detail


def test_shape_mismatch_is_a_structure_error():
    anchor, ref = anchor_and_reference()
    mismatch = verdict(ref.reshape(16, 4), ref, anchor)
    assert mismatch.check == "structure" and "shape" in mismatch.detail


def test_missing_output_is_a_structure_error():
    anchor, ref = anchor_and_reference()
    mismatch = check_draw(SPEC, 0, {}, {"out": ref}, {"out": anchor})
    assert mismatch.check == "structure" and "missing" in mismatch.detail


def test_tensor_subclass_is_a_structure_error():
    class Sub(torch.Tensor):
        pass

    anchor, ref = anchor_and_reference()
    mismatch = verdict(ref.clone().as_subclass(Sub), ref, anchor)
    assert mismatch.check == "structure" and "Sub" in mismatch.detail


def test_every_output_is_checked():
    spec = make_spec(outputs=("a", "b"))
    anchor, ref = anchor_and_reference()
    got = {"a": ref.clone(), "b": ref + 1.0}
    mismatch = check_draw(spec, 0, got, {"a": ref, "b": ref}, {"a": anchor, "b": anchor})
    assert mismatch is not None and mismatch.output == "b"


# ---- NaN / Inf ------------------------------------------------------------------------------

def _with(t, index, value):
    t = t.clone()
    t[index] = value
    return t


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_where_the_reference_has_it_passes(value):
    anchor, ref = anchor_and_reference()
    anchor, ref = _with(anchor, (1, 2), value), _with(ref, (1, 2), value)
    assert verdict(ref.clone(), ref, anchor) is None


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_where_the_reference_is_finite_fails(value):
    anchor, ref = anchor_and_reference()
    mismatch = verdict(_with(ref, (1, 2), value), ref, anchor)
    assert mismatch.check == "nan" and mismatch.index == [1, 2]


def test_finite_where_the_reference_is_nan_fails():
    anchor, ref = anchor_and_reference()
    anchor, ref = _with(anchor, (0, 0), float("nan")), _with(ref, (0, 0), float("nan"))
    mismatch = verdict(_with(ref, (0, 0), 0.0), ref, anchor)
    assert mismatch.check == "nan" and mismatch.index == [0, 0]


def test_inf_of_the_wrong_sign_fails():
    anchor, ref = anchor_and_reference()
    anchor, ref = _with(anchor, (2, 3), float("inf")), _with(ref, (2, 3), float("inf"))
    mismatch = verdict(_with(ref, (2, 3), float("-inf")), ref, anchor)
    assert mismatch.check == "nan"


def test_nan_moved_to_another_place_fails():
    anchor, ref = anchor_and_reference()
    anchor, ref = _with(anchor, (0, 0), float("nan")), _with(ref, (0, 0), float("nan"))
    got = _with(_with(ref, (0, 0), anchor[0, 1].item()), (0, 1), float("nan"))
    assert verdict(got, ref, anchor).check == "nan"


# ---- exact values ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_and_boolean_outputs_must_match_exactly(dtype):
    ref = (torch.arange(24).reshape(4, 6) % 2 if dtype is torch.bool else torch.arange(24).reshape(4, 6)).to(dtype)
    assert verdict(ref.clone(), ref, ref) is None
    off = ref.clone()
    off[3, 5] = (~off[3, 5]) if dtype is torch.bool else off[3, 5] + 1
    mismatch = verdict(off, ref, ref)
    assert mismatch.check == "exact" and mismatch.index == [3, 5]


def test_declared_exact_float_output_must_match_bit_for_bit():
    spec = make_spec(exact=("out",))
    anchor, ref = anchor_and_reference()
    assert verdict(ref.clone(), ref, anchor, spec=spec) is None
    nudged = ref.clone()
    nudged[0, 0] = torch.nextafter(nudged[0, 0], torch.tensor(10.0, dtype=torch.float64))
    assert verdict(nudged, ref, anchor, spec=spec).check == "exact"
    assert verdict(nudged, ref, anchor) is None  # the same value passes without EXACT


# ---- sets with companions -------------------------------------------------------------------

SET_SPEC = make_spec(outputs=("idx", "val"), sets={"idx": {"dim": -1, "with": ("val",)}})


def _set_case():
    idx = torch.tensor([[5, 1, 9, 3], [0, 7, 2, 8]])
    val = torch.tensor([[0.5, 0.1, 0.9, 0.3], [0.0, 0.7, 0.2, 0.8]], dtype=torch.float64)
    return idx, val


def test_set_output_in_another_order_with_its_companion_passes():
    idx, val = _set_case()
    perm = torch.tensor([[2, 0, 3, 1], [3, 2, 1, 0]])
    got = {"idx": idx.gather(-1, perm), "val": val.gather(-1, perm)}
    assert check_draw(SET_SPEC, 0, got, {"idx": idx, "val": val}, {"idx": idx, "val": val}) is None


def test_set_companion_permuted_differently_fails():
    idx, val = _set_case()
    perm = torch.tensor([[2, 0, 3, 1], [3, 2, 1, 0]])
    got = {"idx": idx.gather(-1, perm), "val": val}  # companion left in the reference's order
    mismatch = check_draw(SET_SPEC, 0, got, {"idx": idx, "val": val}, {"idx": idx, "val": val})
    assert mismatch is not None and mismatch.output == "val"


def test_set_with_a_different_member_fails():
    idx, val = _set_case()
    other = idx.clone()
    other[1, 3] = 6
    got = {"idx": other, "val": val}
    mismatch = check_draw(SET_SPEC, 0, got, {"idx": idx, "val": val}, {"idx": idx, "val": val})
    assert mismatch is not None and mismatch.check == "set" and mismatch.output == "idx"


# ---- in-place outputs -----------------------------------------------------------------------

def test_in_place_outputs_are_graded_by_name():
    spec = make_spec(outputs=(), inplace=("cache",), inputs=("cache", "x"))
    cache = torch.arange(12, dtype=torch.uint8).reshape(3, 4)
    assert check_draw(spec, 0, {"cache": cache.clone()}, {"cache": cache}, {"cache": cache}) is None
    stale = cache.clone()
    stale[2] = 0
    mismatch = check_draw(spec, 0, {"cache": stale}, {"cache": cache}, {"cache": cache})
    assert mismatch.output == "cache" and mismatch.check == "exact" and mismatch.index == [2, 0]


def test_in_place_and_returned_outputs_together():
    spec = make_spec(outputs=("out",), inplace=("buf",), inputs=("buf", "x"))
    anchor, ref = anchor_and_reference()
    buf = torch.ones(3, dtype=torch.int64)
    good = {"out": ref.clone(), "buf": buf.clone()}
    refs, anchors = {"out": ref, "buf": buf}, {"out": anchor, "buf": buf}
    assert check_draw(spec, 0, good, refs, anchors) is None
    mismatch = check_draw(spec, 0, {"out": ref.clone(), "buf": buf * 0}, refs, anchors)
    assert mismatch.output == "buf"


# ---- the norm and row-norm views ------------------------------------------------------------

def _two_scales():
    """Row 0 at magnitude ~1000, row 1 at ~1e-3; the reference error is relative (1e-6)."""
    gen = torch.Generator().manual_seed(1)
    anchor = torch.randn(2, 16, generator=gen, dtype=torch.float64)
    anchor[0] *= 1000.0
    anchor[1] *= 1e-3
    ref = anchor * (1 + 1e-6 * torch.randn(2, 16, generator=gen, dtype=torch.float64))
    return anchor, ref


def test_zeroed_small_row_passes_the_max_check_but_fails_the_row_check():
    anchor, ref = _two_scales()
    got = ref.clone()
    got[1] = 0.0  # the whole small-magnitude row dropped
    err, ref_err = (got - anchor).abs().max(), (ref - anchor).abs().max()
    assert err <= 3 * ref_err, "the construction must stay inside the element-wise allowance"
    mismatch = verdict(got, ref, anchor)
    assert mismatch is not None and mismatch.check == "row_norm" and mismatch.index == [1]


def test_error_spread_everywhere_passes_the_max_check_but_fails_the_norm_check():
    anchor = torch.linspace(1.0, 2.0, 64, dtype=torch.float64).reshape(4, 16)
    ref = anchor.clone()
    ref[0, 0] += 1e-3  # the reference errs in one place only
    got = anchor + 2.9e-3  # just inside the max allowance, at every element
    mismatch = verdict(got, ref, anchor)
    assert mismatch is not None and mismatch.check == "norm"


def test_row_check_allows_rows_their_own_reference_error():
    anchor, ref = _two_scales()
    got = anchor + 2.0 * (ref - anchor)
    assert verdict(got, ref, anchor) is None


def test_first_index_is_the_first_true_element_in_row_major_order():
    from metakernelbench.verifier.correctness import _first_index

    mask = torch.zeros(3, 4, 5, dtype=torch.bool)
    mask[2, 1, 3] = mask[2, 3, 0] = True
    assert _first_index(mask) == [2, 1, 3]
    assert _first_index(torch.tensor(True)) == []
    assert _first_index(torch.tensor([False, True])) == [1]


def test_locating_a_mismatch_imports_nothing():
    """A fresh grader reports its first mismatch without importing more of torch (``torch.unravel_index``
    pulls in sympy and mpmath on first use: seconds of a fresh grader's audit on the H200 host)."""
    import subprocess
    import sys

    code = ("import sys, torch\n"
            "from metakernelbench.verifier.correctness import _first_index\n"
            "before = set(sys.modules)\n"
            "_first_index(torch.arange(12).reshape(3, 4) == 7)\n"
            "print(sorted(set(sys.modules) - before))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]


# ---- the comparison's memory: the same verdicts with fewer float64 tensors -----------------------

def _float_check_as_it_was(name, draw, got, ref, anchor, factor):
    """``_float_check`` before its float64 copies were replaced by differences made in place (kept
    here word for word, but for the imports): every figure it reports must stay the same."""
    from metakernelbench.verifier.correctness import ROW_FLOOR_FRACTION, Mismatch, _exactly_equal, _first_index, _rows

    finite_ref = torch.isfinite(ref)
    same_nonfinite = _exactly_equal(got, ref) & ~finite_ref
    bad_nonfinite = (~torch.isfinite(got) | ~finite_ref) & ~same_nonfinite
    if bad_nonfinite.any():
        idx = _first_index(bad_nonfinite)
        return Mismatch(output=name, draw=draw, check="nan", index=idx,
                        got=float(got[tuple(idx)]), expected=float(ref[tuple(idx)]),
                        detail="NaN/Inf where the reference has a different value")
    keep = finite_ref
    g64 = torch.where(keep, got.to(torch.float64), 0.0)
    r64 = torch.where(keep, ref.to(torch.float64), 0.0)
    a64 = torch.where(keep, anchor.to(torch.float64), 0.0)
    eps = torch.finfo(ref.dtype).eps
    tiny = torch.finfo(ref.dtype).tiny
    peak = float(a64.abs().max()) if a64.numel() else 0.0
    err = (g64 - a64).abs()
    ref_err = (r64 - a64).abs()
    allowance = factor * max(float(ref_err.max()) if ref_err.numel() else 0.0, eps * peak) + tiny
    if err.numel() and float(err.max()) > allowance:
        idx = _first_index(err == err.max())
        return Mismatch(output=name, draw=draw, check="max_abs", index=idx, got=float(g64[tuple(idx)]),
                        expected=float(a64[tuple(idx)]), error=float(err.max()), allowance=allowance,
                        detail="largest element-wise error exceeds the anchored allowance")
    norm_err = float(torch.linalg.vector_norm(g64 - a64))
    norm_allow = factor * max(float(torch.linalg.vector_norm(r64 - a64)),
                              eps * float(torch.linalg.vector_norm(a64))) + tiny
    if norm_err > norm_allow:
        return Mismatch(output=name, draw=draw, check="norm", error=norm_err, allowance=norm_allow,
                        detail="whole-tensor 2-norm error exceeds the anchored allowance")
    if a64.dim() >= 1 and a64.numel():
        rows_a = _rows(a64)
        row_err = torch.linalg.vector_norm(_rows(g64) - rows_a, dim=-1)
        row_ref = torch.linalg.vector_norm(_rows(r64) - rows_a, dim=-1)
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


def _cases():
    """Candidates near and past every check's allowance, in bf16, fp16 and fp32, with non-finite
    values where the reference has them (or not), on contiguous and transposed tensors."""
    gen = torch.Generator().manual_seed(5)
    for i in range(150):
        dtype = (torch.bfloat16, torch.float16, torch.float32)[i % 3]
        anchor = torch.randn(8, 64, generator=gen, dtype=torch.float64) * 4
        ref = anchor.to(dtype)
        if i % 7 == 0:
            ref[1, 3], ref[2, 5] = float("nan"), float("inf")
        finite = torch.isfinite(ref)
        ref_max = float((ref.double() - anchor)[finite].abs().max())
        noise = torch.randn(8, 64, generator=gen, dtype=torch.float64)
        kind = i % 5
        if kind == 0:  # sparse errors around the element-wise allowance
            scale = (0.0, 1.0, 2.0, 3.5, 8.0)[(i // 5) % 5] * ref_max
            got = ref.double() + scale * noise * (torch.rand(8, 64, generator=gen) < 0.05)
        elif kind == 1:  # just under the maximum everywhere: the 2-norm decides
            got = ref.double() + 2.9 * ref_max * noise.sign()
        elif kind == 2:  # one zeroed row
            got = ref.double().clone()
            got[3] = 0
        elif kind == 3:  # dense small errors
            got = ref.double() + 0.5 * ref_max * noise
        else:  # a NaN where the reference is finite, or exactly the reference
            got = ref.double().clone()
            if (i // 5) % 2:
                got[4, 4] = float("nan")
        got = torch.where(finite, got.to(dtype), ref)
        yield (got.T, ref.T, anchor.T) if i % 2 else (got, ref, anchor)


def test_the_comparison_reports_what_it_reported_before_its_memory_was_cut():
    from metakernelbench.verifier.correctness import _float_check

    verdicts = set()
    for got, ref, anchor in _cases():
        before = _float_check_as_it_was("out", 0, got, ref, anchor, 3.0)
        after = _float_check("out", 0, got, ref, anchor, 3.0)
        assert repr(after) == repr(before)  # (repr: a NaN figure equals itself there)
        verdicts.add(None if before is None else before.check)
    assert verdicts == {None, "max_abs", "norm", "row_norm", "nan"}


def test_values_brought_to_a_comparison_device_one_output_at_a_time_give_the_same_verdict():
    anchor, ref = anchor_and_reference(seed=3)
    got = ref + 5e-3 * torch.ones_like(ref)
    spec = make_spec(outputs=("a", "b"))
    values = ({"a": ref, "b": got}, {"a": ref, "b": ref}, {"a": anchor, "b": anchor})
    assert check_draw(spec, 0, *values) == check_draw(spec, 0, *values, device=torch.device("cpu"))
    assert check_draw(spec, 0, *values, device=torch.device("cpu")).output == "b"
