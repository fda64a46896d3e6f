"""Oracles for problem 58 (GQA attention core with NVFP4-quantised matmuls, Qwen3-14B): compile checks on
the CPU, grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "58_quantized_attention_scores_qwen3_14b_nvfp4"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["nvfp4_amax_kernel", "nvfp4_global_scale_kernel", "nvfp4_act_quant_kernel", "nvfp4_amax_kernel",
               "nvfp4_act_quant_kernel", "nvfp4_vt_quant_kernel", "qk_block_kernel", "softmax_kernel",
               "nvfp4_act_quant_kernel", "pv_gemm_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "cp.async.cg.shared.global", "cvt.rn.satfinite.e4m3x2.f32", "div.rn.f32", "div.rn.f64",
         "cvt.rn.f32.f64", "shfl.sync.bfly.b32", "0d3FB6A09E667F3BCD"],  # 128^-0.5 as the exact double
        tmp_path)
    assert ptx.count("cvt.rn.satfinite.e4m3x2.f32") == 4  # Q, K, V^T and P quantisers


def test_tirx_sources():
    check_tirx_sources(
        STEM, ["mkb_nvfp4_amax_n83886080_kernel", "mkb_nvfp4_global_scale_kernel",
               "mkb_nvfp4_act_quant_bf16_r655360_kernel", "mkb_nvfp4_amax_n16777216_kernel",
               "mkb_nvfp4_act_quant_bf16_r131072_kernel", "mkb_nvfp4_vt_quant_kernel", "mkb_qk_block_kernel",
               "mkb_softmax_kernel", "mkb_nvfp4_act_quant_kernel",
               "mkb_pv_gemm_kernel"],
        ["__shfl_xor_sync", "cvt.rn.satfinite.e4m3x2.f32", "div.rn.f32 ", "exp((vals_ptr[0]",
         "(int64_t)4591033472335690701", "acc_ptr[0] = (acc_ptr[0] + ((double)part_ptr[0]))",
         "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}"])


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")


@pytest.mark.gpu
def test_tirx_on_gpu():
    check_on_gpu(STEM, "tirx")


def test_the_probabilities_global_scale_is_a_constant_the_oracles_use():
    """amax(P) = 1 on every draw (the causal mask leaves query 0 one key), so g_p = fl(1 / 2688); a kernel
    that computed it would compute a constant, which the bypass test cannot tell from no kernel."""
    import torch
    from oracle_support import load

    from metakernelbench.problems import find_problem

    problem = find_problem(STEM)
    for seed in range(3):
        inputs = problem.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(seed),
                                     **problem.spec.small_workload)
        _, weights = problem.reference(*inputs)
        assert float(weights.float().amax()) == 1.0
        assert bool((weights[:, :, 0, 0] == 1).all())  # query 0 of every (batch, head)
    exact = torch.tensor(1 / 2688, dtype=torch.float32)
    for dsl in ("cutedsl", "tirx"):
        g_p = load(STEM, dsl)._probabilities_scale(torch.device("cpu"))
        assert g_p.dtype == torch.float32 and bool(g_p[0] == exact)
