"""FP8 MLA KV down/up projection with a mid-chain RMSNorm and re-quantisation (DeepSeek-V3.1).

Every FP8 linear quantises its bf16 activation (1 x 128 blocks along K) and its bf16 weight
(128 x 128 blocks) to float8 e4m3fn inside the call: per block scale = max(amax(block) / 448, 1e-12),
q = clamp(x / scale, -448, 448) rounded to e4m3 (nearest even), in fp32; the dequantised operands
(q * scale) are multiplied in fp32 and the result is rounded to bf16.

hidden [B, S, 7168] -> FP8 linear with kv_a [640, 7168] (576 rows padded to 640; the 64 padding rows
are random and share the last 128-row block with the k_pe rows, so they influence k_pe's weight
scale) -> columns 0..511 are the compressed kv, 512..575 are k_pe, the rest is discarded. The
compressed kv gets RMSNorm (fp32 statistics, eps from the input, the normalised value rounded to
bf16, then a bf16 product with the weight), is re-quantised and goes through the FP8 linear with
kv_b [32768, 512]: kv_expanded [B, S, 128, 256] (per head 128 k_nope then 128 v). k_pe is returned
as [B, S, 1, 64]. The graded batch is 64 sequences of 256 tokens.

Grading: the float64 anchor keeps every quantisation step but not the bf16 roundings in between, so
it re-quantises the unrounded RMSNorm output; fp32 intermediates up to that quantiser track it best.
"""

import torch

from metakernelbench.problem_kit import acc, to_output, true_divisor

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="DeepSeek-V3.1-Terminus",
    upstream="nvidia/SOL-ExecBench Quant/013_fp8_mla_kv_compression_projection, workload index 2",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Upstream's workload in full: 64 sequences of 256 tokens (16384 tokens), hidden 7168, 128 "
    "heads. Every input is synthetic, as in upstream (activation, both weights with per-block gain and "
    "the norm weight drawn per draw). "
    "The quantisation runs in fp32 in the float64 anchor too, so the first GEMM's e4m3 codes are "
    "the same in both runs; the re-quantised RMSNorm output differs between the runs only by the "
    "anchor's unrounded values.",
)
INPUTS = ("hidden_states", "kv_a_proj_weight", "kv_a_layernorm_weight", "kv_b_proj_weight", "rms_norm_eps")
OUTPUTS = ("kv_expanded", "k_pe")
SMALL_WORKLOAD = dict(batch=2, seq=3, hidden=256, kv_lora=128, heads=1)
BLOCK = 128
FP8_MAX = 448.0
MIN_SCALE = 1e-12
ROPE_DIM = 64
HEAD_PAIR = 256  # 128 k_nope + 128 v values per head in kv_b's output



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


def fp8_linear(x, weight):
    """bf16(dequant(x) @ dequant(weight)^T), both operands quantised in the call."""
    return _bf16(fp8_block_dequant(x, 1) @ fp8_block_dequant(weight, BLOCK).T)


def text_values(*, kv_lora, **_):
    """kv_a's live rows: the compressed kv followed by k_pe."""
    return {"kv_a rows": kv_lora + ROPE_DIM}


def make_inputs(device, generator, *, batch=64, seq=256, hidden=7168, kv_lora=512, heads=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    def weight(rows, cols):
        gain = 0.5 + 1.5 * torch.rand(rows // BLOCK, cols // BLOCK, device=device, generator=generator)
        gain = gain.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)
        return (randn(rows, cols) / cols ** 0.5 * gain).to(torch.bfloat16)

    a_rows = kv_lora + 2 * ROPE_DIM  # k_pe rows plus as many padding rows
    return (randn(batch, seq, hidden).to(torch.bfloat16), weight(a_rows, hidden),
            (1 + 0.1 * randn(kv_lora)).to(torch.bfloat16), weight(heads * HEAD_PAIR, kv_lora), 1e-6)


def reference(hidden_states, kv_a_proj_weight, kv_a_layernorm_weight, kv_b_proj_weight, rms_norm_eps):
    batch, seq, hidden = hidden_states.shape
    kv_lora = kv_a_layernorm_weight.shape[0]
    compressed = fp8_linear(hidden_states.reshape(batch * seq, hidden), kv_a_proj_weight)
    kv_c, k_pe = compressed[:, :kv_lora], compressed[:, kv_lora:kv_lora + ROPE_DIM]
    normed = _bf16(kv_c * torch.rsqrt(kv_c.pow(2).mean(dim=-1, keepdim=True) + rms_norm_eps))
    normed = _bf16(normed * acc(kv_a_layernorm_weight))
    kv = fp8_linear(normed, kv_b_proj_weight).view(batch, seq, -1, HEAD_PAIR)
    return to_output(kv, torch.bfloat16), to_output(k_pe.reshape(batch, seq, 1, ROPE_DIM), torch.bfloat16)


def physical_floor(*, batch, seq, hidden, kv_lora, heads):
    tokens, a_rows, b_rows = batch * seq, kv_lora + 2 * ROPE_DIM, heads * HEAD_PAIR
    weights = (a_rows * hidden + kv_lora + b_rows * kv_lora) * 2
    outputs = tokens * (b_rows + ROPE_DIM) * 2
    return {"bytes": tokens * hidden * 2 + weights + outputs,
            "flops": 2 * tokens * (hidden * (kv_lora + ROPE_DIM) + kv_lora * b_rows), "math": "fp8"}
