"""Gated (SwiGLU) MLP with a fused gate/up weight, 1024 -> 2 x 4096 -> 1024, no biases, fp32.

h = x W_gu^T (rows 0..4095 of W_gu are the gate, 4096..8191 the up projection);
a = silu(h[..., :4096]) * h[..., 4096:]; y = a W_down^T. All fp32 (fp32-accurate GEMMs).
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Parakeet-TDT-0.6B-v3",
    upstream="nvidia/SOL-ExecBench L1/074_fused_gated_mlp_silu (nvidia/parakeet-tdt-0.6b-v3), "
    "workload index 9",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
)
INPUTS = ("hidden_states", "gate_up_weight", "down_weight")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=2, seq=5, dim=32, ff=48)


def make_inputs(device, generator, *, batch=64, seq=128, dim=1024, ff=4096):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    hidden_states = randn(batch, seq, dim)
    gate_up_weight = randn(2 * ff, dim) / dim ** 0.5
    down_weight = randn(dim, ff) / ff ** 0.5
    return hidden_states, gate_up_weight, down_weight


def reference(hidden_states, gate_up_weight, down_weight):
    h = acc(hidden_states) @ acc(gate_up_weight).T
    gate, up = h.chunk(2, dim=-1)
    return to_output((F.silu(gate) * up) @ acc(down_weight).T, torch.float32)


def physical_floor(*, batch, seq, dim, ff):
    tokens = batch * seq
    return {"bytes": 4 * (2 * tokens * dim + 3 * ff * dim), "flops": 6 * tokens * dim * ff,
            "math": "tf32"}
