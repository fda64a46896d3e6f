"""Problem 50 (backward of routed SwiGLU experts with a weighted combine, MiMo-V2-Flash, fp32): the oracles
compile for sm_90a (four expert-row GEMM builds, two weight-gradient builds, one combine) with the
instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, load

STEM = "50_expert_parallel_execution_backward_mimo_fp32"


def test_cutedsl_compiles(tmp_path):
    # fp32 FMAs on the CUDA cores, shared-memory staging with barriers, the sigmoid's exp and correctly
    # rounded reciprocal, warp shuffles for the routing-weight gradient; 256-thread CTAs throughout
    check_cutedsl_compiles(STEM, ["moe_rows_kernel"] * 4 + ["moe_wgrad_kernel"] * 2 + ["moe_combine_kernel"],
                           ["fma.rn.f32", "bar.sync", "ex2.approx", "rcp.rn.f32", "shfl.sync.bfly.b32",
                            ".reqntid 256, 1, 1"], tmp_path)


def test_cutedsl_compiles_the_small_shape():
    """The small workload (12 tokens, hidden 16, inter 8: partial K slices and column tiles) builds too."""
    module = load(STEM, "cutedsl")
    for kind in module._KINDS:
        assert len(module._compile(kind, 12, 16, 8, 8, 3, arch="sm_90a").kernel_info) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
