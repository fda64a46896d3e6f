"""Vision patch merger (Qwen3-Omni vision encoder): LayerNorm, 2x2 spatial shuffle, GELU MLP, bf16.

Each of the patches (1536 features, rows in raster order t, h, w per image) gets a LayerNorm with
fp32 statistics (biased variance, eps) and affine weight and bias, rounded to bf16. Per image of
grid_thw (t, h, w), every 2x2 spatial window becomes one token of 4 x 1536 = 6144 features: windows in
order (t, h/2, w/2), and inside a window the patches (dh, dw) concatenated row-major. Then bf16 linear
layers: fc1 (6144 -> 6144, bias) rounded to bf16, exact (erf) GELU rounded to bf16, and fc2
(6144 -> 3584, bias) rounded to bf16.
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, round_to, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-Omni-30B-A3B (vision encoder)",
    upstream="nvidia/SOL-ExecBench L1/020_vision_patch_merger_spatial_shuffle_mlp "
    "(Qwen/Qwen3-Omni-30B-A3B-Instruct), workload index 7",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The record's workload in full: 8 images of 1 x 64 x 64 patches (32768 patches, 8192 merged "
    "tokens). Values are synthetic draws (the source publishes shapes only).",
)
INPUTS = ("hidden", "grid_thw", "ln_weight", "ln_bias", "fc1_weight", "fc1_bias", "fc2_weight",
          "fc2_bias", "eps")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(images=2, frames=1, grid_h=4, grid_w=6, context=16, out_dim=24)
MERGE = 2


def make_inputs(device, generator, *, images=8, frames=1, grid_h=64, grid_w=64, context=1536,
                out_dim=3584):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    patches = images * frames * grid_h * grid_w
    merged = context * MERGE * MERGE
    hidden = (randn(patches, context) + 0.5 * randn(patches, 1)).to(torch.bfloat16)
    grid_thw = torch.tensor([[frames, grid_h, grid_w]] * images, dtype=torch.int64, device=device)
    ln_weight = (1 + 0.1 * randn(context)).to(torch.bfloat16)
    ln_bias = (0.1 * randn(context)).to(torch.bfloat16)
    fc1_weight = (randn(merged, merged) / merged ** 0.5).to(torch.bfloat16)
    fc1_bias = randn(merged).to(torch.bfloat16)
    fc2_weight = (randn(out_dim, merged) / merged ** 0.5).to(torch.bfloat16)
    fc2_bias = randn(out_dim).to(torch.bfloat16)
    return hidden, grid_thw, ln_weight, ln_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias, 1e-6


def reference(hidden, grid_thw, ln_weight, ln_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias, eps):
    x = acc(hidden)
    centred = x - x.mean(dim=-1, keepdim=True)
    var = centred.pow(2).mean(dim=-1, keepdim=True)
    normed = round_to(centred * torch.rsqrt(var + eps) * acc(ln_weight) + acc(ln_bias), torch.bfloat16)
    windows, start = [], 0
    for t, h, w in grid_thw.tolist():
        image = normed[start:start + t * h * w].view(t, h // MERGE, MERGE, w // MERGE, MERGE, -1)
        windows.append(image.permute(0, 1, 3, 2, 4, 5).reshape(t * (h // MERGE) * (w // MERGE), -1))
        start += t * h * w
    tokens = torch.cat(windows)
    h1 = round_to(tokens @ acc(fc1_weight).T + acc(fc1_bias), torch.bfloat16)
    act = round_to(F.gelu(h1), torch.bfloat16)
    return to_output(act @ acc(fc2_weight).T + acc(fc2_bias), torch.bfloat16)


def physical_floor(*, images, frames, grid_h, grid_w, context, out_dim):
    patches = images * frames * grid_h * grid_w
    tokens, merged = patches // (MERGE * MERGE), context * MERGE * MERGE
    weights = merged * merged + out_dim * merged + merged + out_dim + 2 * context
    return {"bytes": 2 * (patches * context + weights + tokens * out_dim) + images * 24,
            "flops": 2 * tokens * merged * (merged + out_dim), "math": "bf16"}
