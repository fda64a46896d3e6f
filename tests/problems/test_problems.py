"""Every problem file: valid declarations, agreement with the catalogue, a deterministic CPU reference.

These run each reference at its small workload on the CPU, twice with the same seed (determinism),
and once as the float64 anchor, and check that the returned structure matches the declarations.
"""

import tomllib

import pytest
import torch

from metakernelbench.problem_kit import anchor_mode
from metakernelbench.problems import load_problem, problem_paths, problems_dir
from metakernelbench.verifier.tensors import promote_floats, snapshot_graded

CATALOG = {p["id"]: p for p in tomllib.loads((problems_dir() / "catalog.toml").read_text())["problem"]}
PATHS = problem_paths()


def _draw(problem, seed):
    gen = torch.Generator().manual_seed(seed)
    return problem.make_inputs(torch.device("cpu"), gen, **problem.spec.small_workload)


def _graded(problem, inputs, anchor=False):
    with torch.no_grad():
        if anchor:
            inputs = promote_floats(inputs)
            with anchor_mode():
                returned = problem.reference(*inputs)
        else:
            returned = problem.reference(*inputs)
    return snapshot_graded(problem.spec, inputs, returned)


@pytest.mark.parametrize("entry_id", sorted(CATALOG))
def test_catalog_problem_has_its_file(entry_id):
    """The catalogue records the 74 published problems: each has exactly one file that agrees with it.
    (A problem added later needs no entry: its file is the whole definition.)"""
    entry = CATALOG[entry_id]
    matches = [p for p in PATHS if p.stem[:2] == entry_id]
    assert len(matches) == 1, f"problem {entry_id}: {len(matches)} files"
    spec = load_problem(matches[0]).spec
    assert (spec.slug, spec.family) == (entry["slug"], entry["family"])
    assert spec.provenance.source == entry["source"]
    assert spec.inputs == tuple(i["name"] for i in entry["inputs"])


def test_problem_ids_are_unique():
    ids = [p.stem[:2] for p in PATHS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem[:2] for p in PATHS])
def test_reference_small_workload_is_deterministic_and_well_formed(path):
    problem = load_problem(path)
    spec = problem.spec
    first = _draw(problem, 1)
    assert len(first) == len(spec.inputs)
    out_a = _graded(problem, first)
    out_b = _graded(problem, _draw(problem, 1))
    assert list(out_a) == list(spec.graded_names)
    for name in spec.graded_names:
        a, b = out_a[name], out_b[name]
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b) or torch.allclose(a, b, equal_nan=True), name
    other = _graded(problem, _draw(problem, 2))
    assert any(not torch.equal(out_a[n], other[n]) for n in spec.graded_names), "seed has no effect"
    anchor = _graded(problem, _draw(problem, 1), anchor=True)
    for name in spec.graded_names:
        ref, anc = out_a[name], anchor[name]
        assert anc.shape == ref.shape, name
        if ref.dtype.is_floating_point:
            assert anc.dtype == torch.float64, f"{name}: the anchor run must stay in float64"
            assert torch.isfinite(anc).all() == torch.isfinite(ref).all()
        else:
            assert anc.dtype == ref.dtype and torch.equal(anc, ref), name


def test_every_catalog_family_range_is_respected():
    ranges = {"attention": (1, 18), "kv_cache": (19, 26), "mlp_norm": (27, 43), "moe": (44, 51),
              "quantization": (52, 61), "linear_attention": (62, 74)}
    for entry in CATALOG.values():
        lo, hi = ranges[entry["family"]]
        assert lo <= int(entry["id"]) <= hi
    assert len(CATALOG) == 74
