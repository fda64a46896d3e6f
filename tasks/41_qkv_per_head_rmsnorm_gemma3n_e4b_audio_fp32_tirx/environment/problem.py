"""Audio-attention Q/K/V projections with per-head RMSNorm on Q and K (Gemma-3n-E4B audio), fp32.

q, k, v = x W^T (1024 -> 1024 each, no bias), viewed as [B, S, 8 heads, 128]. q and k are normalized
per head: t / sqrt(mean(t^2) + eps) * w (w of length 128); v is returned as projected.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Gemma-3n-E4B (audio encoder)",
    upstream="nvidia/SOL-ExecBench L1/054_audio_attention_qkv_projection_with_normalization "
    "(google/gemma-3n-E4B), workload index 5",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
)
INPUTS = ("hidden_states", "q_proj_weight", "k_proj_weight", "v_proj_weight", "q_norm_weight",
          "k_norm_weight", "eps")
OUTPUTS = ("query_states", "key_states", "value_states")
SMALL_WORKLOAD = dict(batch=2, seq=5, heads=2, head_dim=16)


def make_inputs(device, generator, *, batch=64, seq=128, heads=8, head_dim=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    dim = heads * head_dim
    hidden_states = randn(batch, seq, dim)
    q_proj_weight, k_proj_weight, v_proj_weight = (randn(dim, dim) / dim ** 0.5 for _ in range(3))
    q_norm_weight = 1 + 0.1 * randn(head_dim)
    k_norm_weight = 1 + 0.1 * randn(head_dim)
    return (hidden_states, q_proj_weight, k_proj_weight, v_proj_weight, q_norm_weight, k_norm_weight,
            1e-6)


def reference(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight, q_norm_weight,
              k_norm_weight, eps):
    batch, seq, _ = hidden_states.shape
    head_dim = q_norm_weight.shape[0]
    x = acc(hidden_states)

    def project(weight):
        return (x @ acc(weight).T).view(batch, seq, -1, head_dim)

    def rms_norm(t, weight):
        return t * torch.rsqrt(t.pow(2).mean(dim=-1, keepdim=True) + eps) * acc(weight)

    q = rms_norm(project(q_proj_weight), q_norm_weight)
    k = rms_norm(project(k_proj_weight), k_norm_weight)
    v = project(v_proj_weight)
    f32 = torch.float32
    return to_output(q, f32), to_output(k, f32), to_output(v, f32)


def physical_floor(*, batch, seq, heads, head_dim):
    tokens, dim = batch * seq, heads * head_dim
    return {"bytes": 4 * (4 * tokens * dim + 3 * dim * dim + 2 * head_dim),
            "flops": 6 * tokens * dim * dim, "math": "tf32"}
