"""Problem 50 (backward of routed SwiGLU experts with a weighted combine, MiMo-V2-Flash, fp32): the oracles
compile for sm_90a (four expert-row GEMM builds, two weight-gradient builds, one combine) with the
instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources, load

STEM = "50_expert_parallel_execution_backward_mimo_fp32"


def test_cutedsl_compiles(tmp_path):
    # fp64 FMAs of the fp32 operands rounded once to fp32, shared-memory staging with barriers, the fp64
    # sigmoid (floor for the exponent split, IEEE reciprocal), warp shuffles for the routing-weight gradient
    check_cutedsl_compiles(STEM, ["moe_rows_kernel"] * 4 + ["moe_wgrad_kernel"] * 2 + ["moe_combine_kernel"],
                           ["fma.rn.f64", "cvt.rn.f32.f64", "bar.sync", "cvt.rmi.f64.f64", "rcp.rn.f64",
                            "shfl.sync.bfly.b32", ".reqntid 256, 1, 1"], tmp_path)


def test_cutedsl_compiles_the_small_shape():
    """The small workload (12 tokens, hidden 16, inter 8: partial K slices and column tiles) builds too."""
    module = load(STEM, "cutedsl")
    for kind in module._KINDS:
        assert len(module._compile(kind, 12, 16, 8, 8, 3, arch="sm_90a").kernel_info) == 1


def test_tirx_sources():
    sources = check_tirx_sources(STEM, ["mkb_moe_rows_gate_up_kernel", "mkb_moe_rows_down_kernel",
                                        "mkb_moe_rows_d_inter_kernel", "mkb_moe_rows_d_x_kernel",
                                        "mkb_moe_wgrad_gate_kernel", "mkb_moe_wgrad_down_kernel",
                                        "mkb_moe_combine_kernel"],
                                 ["double dv_ptr[6]", "floor(((dv_ptr[1] * 1.442695040888963)",
                                  "tvm_builtin_cuda_cta_sync()",
                                  "double tot1_ptr[8]", "double acc_ptr[16]", "double red_ptr[8]",
                                  "__shfl_xor_sync(", "__launch_bounds__(256)", "float sw1_ptr[2080]"])
    for source in sources.values():
        assert "expf(" not in source and "exp(" not in source  # exp by the fp64 polynomial


def test_tirx_builds_the_small_shape():
    """The small workload (12 tokens, hidden 16, inter 8, 8 experts, top 3) builds too."""
    sources = load(STEM, "tirx").kernel_sources("sm_90a", tokens=12, hidden=16, inter=8, experts=8, top_k=3)
    assert len(sources) == 7


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
