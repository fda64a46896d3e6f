"""Backward of the Gemma-3 attention core (q/k RMSNorm, RoPE, soft-capped causal GQA), recomputing the forward, fp32.

Forward: q/k/v = x W^T (3072 -> 24x128 / 8x128 / 8x128, no bias); per-head RMSNorm of q and k with
Gemma's (1 + w) weight, eps rms_norm_eps; rotate-half RoPE with the given cos/sin; query head h uses
KV head h // 3; logits = (q.k) * scaling, soft-capped c = 50 tanh(z / 50), causally masked (key j <=
query i), softmax in fp32, P V, then the o-projection (3072 -> 3072). Given grad_output, the reference
returns the gradients of the hidden states (summed over the q, k and v paths), of the four projection
weights and of the two norm weights (reduced over batch, positions and heads). Derived by hand: the
soft-cap derivative is 1 - tanh^2, RoPE's inverse rotation is applied to the gradients, and the
RMSNorm backward is r * (g - x_hat * mean(g * x_hat)). The graded batch is 64 sequences of 256 tokens.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Gemma-3-4B",
    upstream="nvidia/SOL-ExecBench L2/037_qk_norm_rope_attention_core_backward, workload index 5",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Upstream's workload in full: 64 sequences of 256 tokens (16384 tokens), hidden 3072. Every "
    "input is synthetic, as in upstream (weights, hidden states and grad_output drawn per draw; the "
    "rotary tables rebuilt from positions 0..255).",
)
INPUTS = ("grad_output", "hidden_states", "cos", "sin", "q_weight", "k_weight", "v_weight", "o_weight",
          "q_norm_weight", "k_norm_weight", "scaling", "attn_logit_softcapping", "rms_norm_eps")
OUTPUTS = ("grad_hidden_states", "grad_q_weight", "grad_k_weight", "grad_v_weight", "grad_o_weight",
           "grad_q_norm_weight", "grad_k_norm_weight")
SMALL_WORKLOAD = dict(batch=2, seq=12, hidden=48, heads=6, kv_heads=2, head_dim=8)
THETA = 10000.0


def make_inputs(device, generator, *, batch=64, seq=256, hidden=3072, heads=24, kv_heads=8, head_dim=128):
    def randn(*shape, scale=1.0):
        return scale * torch.randn(*shape, device=device, generator=generator)

    grad_output, hidden_states = randn(batch, seq, hidden), randn(batch, seq, hidden)
    inv_freq = THETA ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1).expand(batch, -1, -1)
    cos = angles.cos().to(torch.float32).contiguous().to(device)
    sin = angles.sin().to(torch.float32).contiguous().to(device)
    w = hidden ** -0.5
    q_weight, k_weight = randn(heads * head_dim, hidden, scale=w), randn(kv_heads * head_dim, hidden, scale=w)
    v_weight, o_weight = randn(kv_heads * head_dim, hidden, scale=w), randn(hidden, heads * head_dim, scale=w)
    q_norm_weight, k_norm_weight = randn(head_dim, scale=0.1), randn(head_dim, scale=0.1)
    return (grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight, o_weight, q_norm_weight,
            k_norm_weight, head_dim ** -0.5, 50.0, 1e-6)


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rotate_half_transposed(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([second, -first], dim=-1)


def rms_norm(x, weight, eps):
    """Gemma RMSNorm over the last dim: returns y = x_hat (1 + w), x_hat and the reciprocal rms r."""
    r = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    x_hat = x * r
    return x_hat * (1 + weight), x_hat, r


def rms_norm_backward(grad_y, x_hat, r, weight):
    """Gradients of x and of w for y = x_hat (1 + w); w's is summed over every leading dim."""
    grad_w = (grad_y * x_hat).flatten(0, -2).sum(dim=0)
    g = grad_y * (1 + weight)
    return r * (g - x_hat * (g * x_hat).mean(dim=-1, keepdim=True)), grad_w


def reference(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight, o_weight, q_norm_weight,
              k_norm_weight, scaling, attn_logit_softcapping, rms_norm_eps):
    batch, seq, hidden = hidden_states.shape
    head_dim = q_norm_weight.shape[0]
    heads, kv_heads = q_weight.shape[0] // head_dim, k_weight.shape[0] // head_dim
    group, cap = heads // kv_heads, attn_logit_softcapping
    x, dy = acc(hidden_states), acc(grad_output)
    wq, wk, wv, wo = acc(q_weight), acc(k_weight), acc(v_weight), acc(o_weight)
    q_w, k_w = acc(q_norm_weight), acc(k_norm_weight)
    cos, sin = acc(cos).unsqueeze(2), acc(sin).unsqueeze(2)  # [B, S, 1, D]

    # forward, keeping what the backward needs
    q_lin = (x @ wq.T).view(batch, seq, heads, head_dim)
    k_lin = (x @ wk.T).view(batch, seq, kv_heads, head_dim)
    v = (x @ wv.T).view(batch, seq, kv_heads, head_dim)
    q_n, q_hat, q_r = rms_norm(q_lin, q_w, rms_norm_eps)
    k_n, k_hat, k_r = rms_norm(k_lin, k_w, rms_norm_eps)
    q = (q_n * cos + rotate_half(q_n) * sin).view(batch, seq, kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    k = (k_n * cos + rotate_half(k_n) * sin).transpose(1, 2).unsqueeze(2)  # [B, KV, 1, S, D]
    v = v.transpose(1, 2).unsqueeze(2)
    tanh = torch.tanh(q @ k.transpose(-1, -2) * (scaling / cap))  # [B, KV, G, S, S]
    future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
    probs = torch.softmax((tanh * cap).masked_fill(future, float("-inf")), dim=-1)
    attn = probs @ v  # [B, KV, G, S, D]
    attn_flat = attn.permute(0, 3, 1, 2, 4).reshape(batch * seq, heads * head_dim)

    # backward
    dy_flat = dy.reshape(batch * seq, hidden)
    grad_o_weight = dy_flat.T @ attn_flat
    d_attn = (dy_flat @ wo).view(batch, seq, kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    d_probs = d_attn @ v.transpose(-1, -2)
    d_v = (probs.transpose(-1, -2) @ d_attn).sum(dim=2)  # [B, KV, S, D]
    d_capped = probs * (d_probs - (d_probs * probs).sum(dim=-1, keepdim=True))
    d_logits = d_capped * (1 - tanh * tanh) * scaling
    d_q = d_logits @ k  # [B, KV, G, S, D]
    d_k = (d_logits.transpose(-1, -2) @ q).sum(dim=2)  # [B, KV, S, D]
    d_q = d_q.permute(0, 3, 1, 2, 4).reshape(batch, seq, heads, head_dim)
    d_k = d_k.transpose(1, 2)
    d_q_n = d_q * cos + rotate_half_transposed(d_q * sin)
    d_k_n = d_k * cos + rotate_half_transposed(d_k * sin)
    d_q_lin, grad_q_norm_weight = rms_norm_backward(d_q_n, q_hat, q_r, q_w)
    d_k_lin, grad_k_norm_weight = rms_norm_backward(d_k_n, k_hat, k_r, k_w)
    d_q_lin = d_q_lin.reshape(batch * seq, -1)
    d_k_lin = d_k_lin.reshape(batch * seq, -1)
    d_v = d_v.transpose(1, 2).reshape(batch * seq, -1)
    x_flat = x.reshape(batch * seq, hidden)
    grad_hidden = (d_q_lin @ wq + d_k_lin @ wk + d_v @ wv).view(batch, seq, hidden)
    f32 = torch.float32
    return (to_output(grad_hidden, f32), to_output(d_q_lin.T @ x_flat, f32), to_output(d_k_lin.T @ x_flat, f32),
            to_output(d_v.T @ x_flat, f32), to_output(grad_o_weight, f32), to_output(grad_q_norm_weight, f32),
            to_output(grad_k_norm_weight, f32))


def physical_floor(*, batch, seq, hidden, heads, kv_heads, head_dim):
    """fp32-accurate GEMMs can run on TF32 tensor cores (3xTF32), so the floor uses the TF32 rate.

    The forward o-projection output is not needed by any gradient, so it is not counted.
    """
    tokens = batch * seq
    proj = heads * head_dim + 2 * kv_heads * head_dim
    pairs = batch * heads * seq * (seq + 1) // 2  # causal (query, key) pairs over all query heads
    flops = (3 * 2 * tokens * hidden * proj  # q/k/v forward, their weight and input gradients
             + 2 * 2 * tokens * hidden * heads * head_dim  # o_proj weight and input gradients
             + 6 * 2 * pairs * head_dim)  # QK and PV forward; dP, dV, dQ, dK backward
    weights = hidden * proj + hidden * heads * head_dim + 2 * head_dim
    acts = 3 * tokens * hidden + 2 * tokens * head_dim
    return {"bytes": 4 * (2 * weights + acts), "flops": flops, "math": "tf32"}
