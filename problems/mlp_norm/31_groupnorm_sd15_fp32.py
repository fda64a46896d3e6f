"""GroupNorm with 32 groups on NCHW [32, 1280, 8, 8] (Stable-Diffusion-1.5 UNet), fp32.

For each (sample, group of 40 channels) the mean and biased variance over 40 x 8 x 8 values are taken;
y = (x - mean) / sqrt(var + eps) * weight[c] + bias[c].
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Stable-Diffusion-1.5 (UNet)",
    upstream="nvidia/SOL-ExecBench L1/078_group_norm_fusion (runwayml/stable-diffusion-v1-5), "
    "workload index 10",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
)
INPUTS = ("x", "weight", "bias", "eps")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=3, channels=64, height=3, width=5)
GROUPS = 32


def make_inputs(device, generator, *, batch=32, channels=1280, height=8, width=8):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    x = randn(batch, channels, height, width)
    weight = 1 + 0.1 * randn(channels)
    bias = 0.1 * randn(channels)
    return x, weight, bias, 1e-5


def reference(x, weight, bias, eps):
    n, c, h, w = x.shape
    groups = acc(x).reshape(n, GROUPS, -1)
    centred = groups - groups.mean(dim=-1, keepdim=True)
    var = centred.pow(2).mean(dim=-1, keepdim=True)
    y = (centred * torch.rsqrt(var + eps)).view(n, c, h, w)
    return to_output(y * acc(weight).view(1, c, 1, 1) + acc(bias).view(1, c, 1, 1), torch.float32)


def physical_floor(*, batch, channels, height, width):
    values = batch * channels * height * width
    return {"bytes": 4 * (2 * values + 2 * channels), "flops": 8 * values, "math": "fp32"}
