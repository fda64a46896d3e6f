"""FLUX final layer: continuous adaptive LayerNorm modulated by the timestep embedding, then proj_out, fp32.

norm = LayerNorm over 3072 without affine (biased variance, eps). mod = SiLU(temb) W^T + b
(3072 -> 6144) per sample; shift = mod[:, :3072], scale = mod[:, 3072:].
x = norm * (1 + scale) + shift (broadcast over the sequence); output = x W_out^T + b_out (3072 -> 64).
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="FLUX.1-Kontext-dev",
    upstream="nvidia/SOL-ExecBench L1/036_flux_output_norm_projection_chain "
    "(black-forest-labs/FLUX.1-Kontext-dev), workload index 1",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The first half of the modulation vector is the shift and the second the scale, as the "
    "catalogue describes the source problem.",
)
INPUTS = ("hidden_states", "temb", "linear_weight", "linear_bias", "proj_out_weight", "proj_out_bias",
          "eps")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=2, seq=5, dim=32, out_dim=8)


def make_inputs(device, generator, *, batch=32, seq=256, dim=3072, out_dim=64):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    hidden_states = randn(batch, seq, dim)
    temb = randn(batch, dim)
    linear_weight = randn(2 * dim, dim) / dim ** 0.5
    linear_bias = randn(2 * dim)
    proj_out_weight = randn(out_dim, dim) / dim ** 0.5
    proj_out_bias = randn(out_dim)
    return hidden_states, temb, linear_weight, linear_bias, proj_out_weight, proj_out_bias, 1e-6


def reference(hidden_states, temb, linear_weight, linear_bias, proj_out_weight, proj_out_bias, eps):
    h = acc(hidden_states)
    centred = h - h.mean(dim=-1, keepdim=True)
    norm = centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)
    mod = F.silu(acc(temb)) @ acc(linear_weight).T + acc(linear_bias)
    shift, scale = mod.chunk(2, dim=-1)
    x = norm * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)
    return to_output(x @ acc(proj_out_weight).T + acc(proj_out_bias), torch.float32)


def physical_floor(*, batch, seq, dim, out_dim):
    tokens = batch * seq
    params = 2 * dim * dim + 2 * dim + out_dim * dim + out_dim
    return {"bytes": 4 * (tokens * dim + batch * dim + params + tokens * out_dim),
            "flops": 4 * batch * dim * dim + 2 * tokens * dim * out_dim, "math": "tf32"}
