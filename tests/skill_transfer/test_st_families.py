"""Task names and families: problem files first, the benchmark's id ranges as the fallback."""

import pytest

from metakernelbench.problems import FAMILIES, problem_paths
from metakernelbench.skill_transfer.families import FAMILY_ID_RANGES, family_from_id, family_of, parse_task_name


def test_parse_task_name():
    assert parse_task_name("metakernelbench/02_gqa_paged_decode_h5_kv1_d128_ps1_bf16_tirx") == (
        "02_gqa_paged_decode_h5_kv1_d128_ps1_bf16", "tirx")
    assert parse_task_name("tasks/28_fused_add_rmsnorm_h4096_llama31_8b_bf16_cutedsl/") == (
        "28_fused_add_rmsnorm_h4096_llama31_8b_bf16", "cutedsl")
    for bad in ("hello-world", "02_x_triton", "2_x_tirx"):
        with pytest.raises(ValueError):
            parse_task_name(bad)


def test_id_ranges_cover_the_74_problems_with_the_design_counts():
    counts = {family: hi - lo + 1 for lo, hi, family in FAMILY_ID_RANGES}
    assert counts == {"attention": 18, "kv_cache": 8, "linear_attention": 13, "mlp_norm": 17, "moe": 8,
                      "quantization": 10}
    assert [family_from_id(i) for i in (1, 18, 19, 26, 27, 43, 44, 51, 52, 61, 62, 74)] == [
        "attention", "attention", "kv_cache", "kv_cache", "mlp_norm", "mlp_norm", "moe", "moe",
        "quantization", "quantization", "linear_attention", "linear_attention"]
    for bad in (0, 75):
        with pytest.raises(ValueError):
            family_from_id(bad)


def test_problem_files_agree_with_the_id_ranges():
    """The published problems' files agree with the id ranges; a problem added later is placed by its folder."""
    paths = problem_paths()
    assert paths, "the repository ships problem files"
    published = max(hi for _, hi, _ in FAMILY_ID_RANGES)
    for path in paths:
        assert path.parent.name in FAMILIES
        assert family_of(path.stem) == path.parent.name
        if int(path.stem[:2]) <= published:
            assert path.parent.name == family_from_id(int(path.stem[:2]))


def test_fallback_for_unknown_problem_files():
    assert family_of("50_not_a_file_yet") == "moe"
