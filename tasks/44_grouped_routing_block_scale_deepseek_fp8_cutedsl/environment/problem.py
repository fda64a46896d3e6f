"""DeepSeek-V3 MoE layer on one expert-parallel rank (32 local experts of 256), FP8 block-scaled, bf16 out.

14107 tokens. Routing over all 256 experts in fp32, with routing_bias the correction bias captured
from DeepSeek-V3: s = sigmoid(logits), b = s + routing_bias; each of 8 groups of 32 is scored by
the sum of its two largest b; the top-4 groups are kept and the top-8 experts by b inside them
selected; weights = s at those experts / (their sum + 1e-20) * routed_scaling_factor.
Only experts local_expert_offset .. +31 are computed. Operands dequantise as e4m3 value times scale:
activations per (token, 128-channel block) with scales stored [H/128, T], weights per 128 x 128
block. Per local expert e and its tokens: G = x W13_e^T (7168 -> 4096), h = silu(G[:, 2048:]) *
G[:, :2048], y = h W2_e^T (2048 -> 7168); out += weight * y in fp32 (experts in ascending order);
the sum over local experts is rounded to bf16.
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, captured, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="DeepSeek-V3 (one EP rank: 32 local experts of 256)",
    upstream="flashinfer-ai/flashinfer-trace definitions/moe/"
    "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048.json "
    "(workload record 5e8dc11c-f2a9-42d5-8dce-9419cbf34d5d)",
    license="Apache-2.0",
    notes="Upstream's workload in full: 14107 tokens (the record's sequence length), 32 local experts at "
    "offset 32, hidden 7168, intermediate 2048. The routing bias is the record's captured bias, read from "
    "the sidecar 44_grouped_routing_block_scale_deepseek_fp8.captured.json: 4.96875 for a captured list of "
    "101 experts and 4.9375 for the rest (the CPU test workload keeps the captured experts below its "
    "expert count). Logits, activations, weights and scales are synthetic per draw (logits from the "
    "captured moments on the bf16 grid). Routing rows are redrawn, only those offending, until the group "
    "and expert selection gaps are >= 1e-4 (at 14107 tokens about 2% of rows need a second draw; a draw "
    "settles in 3 passes). Grader memory (estimate): fp8 weights 1.4 GB, their float64 anchor copies "
    "11.3 GB, activations 0.1 GB (0.8 GB in float64), per-expert float64 dequantised weights 0.2 GB, "
    "outputs and fp64 accumulators ~2 GB. Measured on the H200 (results/h200/problems.json): the "
    "reference, its float64 anchor and the controls peak at 31.3 GB in one process.",
)
INPUTS = ("routing_logits", "routing_bias", "hidden_states", "hidden_states_scale", "gemm1_weights",
          "gemm1_weights_scale", "gemm2_weights", "gemm2_weights_scale", "local_expert_offset",
          "routed_scaling_factor")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(tokens=16, experts=32, local_experts=4, local_offset=4, hidden=256, inter=128)
GROUPS, TOPK_GROUPS, TOP_K, BLOCK = 8, 4, 8, 128
MIN_GAP = 1e-4
WEIGHT_SUM_EPS = 1e-20  # added to the selected scores' sum before dividing


def routing_bias(experts):
    """The captured correction bias (bf16, CPU): a higher value for a captured list of experts, a base
    value for the rest; a workload with fewer experts keeps the captured experts below its count."""
    values = captured(__file__)
    high = torch.tensor([e for e in values["routing_bias_high_experts"] if e < experts], dtype=torch.long)
    bias = torch.full((experts,), values["routing_bias_base"])
    bias[high] = values["routing_bias_high"]
    return bias.to(torch.bfloat16)


def _route(logits, bias, scaling):
    """Selected experts, their weights, and the smaller of the group and expert decision gaps."""
    s = torch.sigmoid(logits)
    b = s + bias
    tokens, experts = b.shape
    grouped = b.view(tokens, GROUPS, experts // GROUPS)
    group_score = grouped.topk(2, dim=-1).values.sum(dim=-1)
    ranked = group_score.sort(dim=-1, descending=True)
    keep = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, ranked.indices[:, :TOPK_GROUPS], True)
    masked = b.masked_fill(~keep.repeat_interleave(experts // GROUPS, dim=1), torch.finfo(b.dtype).min)
    top = masked.topk(TOP_K + 1, dim=-1)
    index = top.indices[:, :TOP_K]
    chosen = s.gather(1, index)
    weight = chosen / (chosen.sum(dim=-1, keepdim=True) + WEIGHT_SUM_EPS) * scaling
    gap = torch.minimum(ranked.values[:, TOPK_GROUPS - 1] - ranked.values[:, TOPK_GROUPS],
                        top.values[:, TOP_K - 1] - top.values[:, TOP_K])
    return index, weight, gap


def text_values(*, local_experts, inter, **_):
    """The last local expert's offset and the fused gate/up width the description quotes."""
    return {"last local expert": local_experts - 1, "gate/up width": 2 * inter}


def make_inputs(device, generator, *, tokens=14107, experts=256, local_experts=32, local_offset=32,
                hidden=7168, inter=2048):
    def logits_rows(n):
        x = -1.6706 + 0.656 * torch.randn(n, experts, device=device, generator=generator)
        return x.to(torch.bfloat16).float()  # values on the bf16 grid, stored as fp32

    def rand(*shape):
        return torch.rand(*shape, device=device, generator=generator)

    def e4m3(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.float8_e4m3fn)

    bias = routing_bias(experts).to(device)
    logits = logits_rows(tokens)
    for _ in range(100):  # redraw only the rows whose group or expert selection is within MIN_GAP of a tie
        _, _, gap = _route(logits, bias.float(), 1.0)
        bad = (gap < MIN_GAP).nonzero().flatten()
        if bad.numel() == 0:
            break
        logits[bad] = logits_rows(bad.numel())
    else:
        raise RuntimeError("could not draw routing logits with unambiguous selections")
    return (logits, bias, e4m3(tokens, hidden), rand(hidden // BLOCK, tokens),
            e4m3(local_experts, 2 * inter, hidden), rand(local_experts, 2 * inter // BLOCK, hidden // BLOCK),
            e4m3(local_experts, hidden, inter), rand(local_experts, hidden // BLOCK, inter // BLOCK),
            local_offset, 2.5)


def _dequant_weight(w, scale):
    """[rows, cols] e4m3 values times their [rows/128, cols/128] block scales, working precision."""
    rows, cols = w.shape
    blocks = acc(w).view(rows // BLOCK, BLOCK, cols // BLOCK, BLOCK) * acc(scale)[:, None, :, None]
    return blocks.view(rows, cols)


def reference(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights,
              gemm1_weights_scale, gemm2_weights, gemm2_weights_scale, local_expert_offset,
              routed_scaling_factor):
    index, weight, _ = _route(acc(routing_logits), acc(routing_bias), routed_scaling_factor)
    tokens, hidden = hidden_states.shape
    local, inter = gemm1_weights.shape[0], gemm2_weights.shape[2]
    x = acc(hidden_states).view(tokens, hidden // BLOCK, BLOCK) * acc(hidden_states_scale).T[:, :, None]
    x = x.view(tokens, hidden)

    flat = index.flatten() - local_expert_offset
    flat = torch.where((flat >= 0) & (flat < local), flat, local)  # non-local selections -> `local`
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=local + 1)[:local].tolist()
    out = torch.zeros_like(x)
    start = 0
    for e, count in enumerate(counts):
        if count == 0:
            continue
        pair = order[start:start + count]
        start += count
        tok = pair // TOP_K  # distinct tokens within one expert
        g = x[tok] @ _dequant_weight(gemm1_weights[e], gemm1_weights_scale[e]).T
        h = F.silu(g[:, inter:]) * g[:, :inter]
        y = h @ _dequant_weight(gemm2_weights[e], gemm2_weights_scale[e]).T
        out.index_add_(0, tok, y * weight.flatten()[pair, None])
    return to_output(out, torch.bfloat16)


def physical_floor(*, tokens, experts, local_experts, local_offset, hidden, inter):
    weights = local_experts * 3 * inter * hidden
    scales = 4 * (tokens * hidden // BLOCK + local_experts * 3 * inter * hidden // BLOCK // BLOCK)
    io = tokens * experts * 4 + weights + tokens * hidden + scales + 2 * tokens * hidden
    local_pairs = tokens * TOP_K * local_experts // experts // 2  # half the balanced share, a safe bound
    return {"bytes": io, "flops": 2 * local_pairs * 3 * inter * hidden, "math": "fp8"}
