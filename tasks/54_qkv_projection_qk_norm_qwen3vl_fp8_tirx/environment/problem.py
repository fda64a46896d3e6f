"""FP8 Q/K/V projections with bias and per-head QK RMSNorm (Qwen3-VL: 60 q heads, 8 kv heads, 7680).

Each of the three linears (7680 -> 7680, 1024, 1024) quantises the bf16 activation (1 x 128 blocks
along K) and its bf16 weight (128 x 128 blocks) to float8 e4m3fn inside the call: per block scale =
max(amax(block) / 448, 1e-12), q = clamp(x / scale, -448, 448) rounded to e4m3 (nearest even), in
fp32. The dequantised operands (q * scale) are multiplied in fp32, the bias is added in fp32 and the
result is rounded to bf16. q is viewed as 60 heads and k, v as 8 heads of 128; q and k get RMSNorm
(fp32 statistics, eps from the input, the normalised value rounded to bf16, then a bf16 product with
the weight). All three are returned head-major, [B, heads, S, 128], contiguous. The graded batch is
64 sequences of 256 tokens.
"""

import torch

from metakernelbench.problem_kit import acc, to_output, true_divisor

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-VL (FP8 checkpoint; 60 q heads, 8 kv heads, hidden 7680)",
    upstream="nvidia/SOL-ExecBench Quant/002_fp8_attention_qkv_projection, workload index 12",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Upstream's workload in full: 64 sequences of 256 tokens (16384 tokens), hidden 7680. Every "
    "input is synthetic, as in upstream (activation, weights with per-block gain, biases and norm "
    "weights drawn per draw). "
    "The quantisation runs in fp32 in the float64 anchor too (the operands hold bf16 values, so the "
    "cast is exact), so both runs use the same e4m3 codes.",
)
INPUTS = ("hidden_states", "q_weight", "k_weight", "v_weight", "q_bias", "k_bias", "v_bias",
          "q_norm_weight", "k_norm_weight", "rms_norm_eps")
OUTPUTS = ("query_states", "key_states", "value_states")
SMALL_WORKLOAD = dict(batch=2, seq=3, hidden=256, heads=2, kv_heads=1)
BLOCK = 128
HEAD_DIM = 128
FP8_MAX = 448.0
MIN_SCALE = 1e-12



def _bf16(t):
    """A bf16 rounding the eager model performs; the float64 anchor lifts it."""
    return acc(to_output(t, torch.bfloat16))


def fp8_block_dequant(x, block_rows):
    """Quantise x [R, K] to e4m3 per block_rows x 128 block (in fp32) and return q * scale."""
    x32 = x.to(torch.float32)  # the quantisation step is defined in fp32, in both runs
    rows, cols = x32.shape
    blocks = x32.view(rows // block_rows, block_rows, cols // BLOCK, BLOCK)
    scale = torch.clamp(blocks.abs().amax(dim=(1, 3), keepdim=True) / true_divisor(FP8_MAX, blocks), min=MIN_SCALE)
    q = (blocks / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return (acc(q) * acc(scale)).view(rows, cols)


def fp8_linear(x, weight, bias):
    """bf16(dequant(x) @ dequant(weight)^T + bias), both operands quantised in the call."""
    return _bf16(fp8_block_dequant(x, 1) @ fp8_block_dequant(weight, BLOCK).T + acc(bias))


def rms_norm(x, weight, eps):
    return _bf16(_bf16(x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)) * weight)


def make_inputs(device, generator, *, batch=64, seq=256, hidden=7680, heads=60, kv_heads=8):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    def weight(rows):
        gain = 0.5 + 1.5 * torch.rand(rows // BLOCK, hidden // BLOCK, device=device, generator=generator)
        gain = gain.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)
        return (randn(rows, hidden) / hidden ** 0.5 * gain).to(torch.bfloat16)

    def bf16(t):
        return t.to(torch.bfloat16)

    q_rows, kv_rows = heads * HEAD_DIM, kv_heads * HEAD_DIM
    return (bf16(randn(batch, seq, hidden)), weight(q_rows), weight(kv_rows), weight(kv_rows),
            bf16(randn(q_rows)), bf16(randn(kv_rows)), bf16(randn(kv_rows)),
            bf16(1 + 0.1 * randn(HEAD_DIM)), bf16(1 + 0.1 * randn(HEAD_DIM)), 1e-5)


def reference(hidden_states, q_weight, k_weight, v_weight, q_bias, k_bias, v_bias, q_norm_weight,
              k_norm_weight, rms_norm_eps):
    batch, seq, hidden = hidden_states.shape
    x = hidden_states.reshape(batch * seq, hidden)

    def heads_of(t):
        return t.view(batch, seq, -1, HEAD_DIM)

    q = rms_norm(heads_of(fp8_linear(x, q_weight, q_bias)), acc(q_norm_weight), rms_norm_eps)
    k = rms_norm(heads_of(fp8_linear(x, k_weight, k_bias)), acc(k_norm_weight), rms_norm_eps)
    v = heads_of(fp8_linear(x, v_weight, v_bias))
    return tuple(to_output(t.transpose(1, 2).contiguous(), torch.bfloat16) for t in (q, k, v))


def physical_floor(*, batch, seq, hidden, heads, kv_heads):
    tokens, out = batch * seq, (heads + 2 * kv_heads) * HEAD_DIM
    return {"bytes": tokens * hidden * 2 + out * hidden * 2 + out * 2 + tokens * out * 2,
            "flops": 2 * tokens * hidden * out, "math": "fp8"}
