"""FIBO joint attention block: adaLN-modulated image tokens attend to themselves and to text tokens, fp32.

mod = Linear(SiLU(timestep_embedding)) (3072 -> 6 x 3072); its first three chunks are scale, shift and
gate. Image tokens: LayerNorm without affine (eps 1e-5), then x * (1 + scale) + shift, then q/k/v
linears with bias (24 heads x 128). 3-axis RoPE on q and k: head dims [0:42), [42:84) and [84:126)
belong to axes 0, 1 and 2; each 42-dim slice is split into halves of 21 that are rotated with
columns 0..20 of that axis' cos/sin tables gathered at the token's position on the axis; dims 126
and 127 pass through. Text tokens: LayerNorm without affine (eps 1e-5) over 4096, then k/v linears
with bias (no RoPE), appended after the image keys. Image queries attend all 1024 + 256 keys without
a mask, scale 1/sqrt(128), softmax in fp32. output = hidden_states + gate * (attn @ W_out^T + b_out).
"""

import math

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="FIBO (briaai)",
    upstream="nvidia/SOL-ExecBench L2/032_dual_stream_attention_with_conditional_cross_attention, "
    "workload index 3",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Only the joint variant (is_joint_block = 1) is defined; the reference rejects other values.",
)
INPUTS = ("hidden_states", "timestep_embedding", "encoder_hidden_states", "adaln_linear_weight",
          "adaln_linear_bias", "to_q_weight", "to_q_bias", "to_k_weight", "to_k_bias", "to_v_weight",
          "to_v_bias", "to_k_context_weight", "to_k_context_bias", "to_v_context_weight",
          "to_v_context_bias", "to_out_weight", "to_out_bias", "pos_idx_axis0", "pos_idx_axis1",
          "pos_idx_axis2", "rope_cos_axis0", "rope_sin_axis0", "rope_cos_axis1", "rope_sin_axis1",
          "rope_cos_axis2", "rope_sin_axis2", "is_joint_block")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=2, grid=(2, 4, 4), text_tokens=8, heads=2, text_dim=48)
HEAD_DIM, AXIS_DIM, EPS, THETA = 128, 42, 1e-5, 10000.0
TABLE_POSITIONS = (16, 56, 56)


def text_values(**_):
    """The head-dim boundaries the description quotes: three AXIS_DIM slices, halves, the tail."""
    return {"slice ends": [AXIS_DIM * (a + 1) for a in range(3)], "half": AXIS_DIM // 2,
            "last table column": AXIS_DIM // 2 - 1, "pass-through dims": list(range(3 * AXIS_DIM, HEAD_DIM)),
            "adaLN chunks": 6}


def rope_table(positions):
    """cos and sin of p * THETA^(-j/42) for p < positions, j < 42, fp32 [positions, 42]."""
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * THETA ** (
        -torch.arange(AXIS_DIM, dtype=torch.float64) / AXIS_DIM)
    return angles.cos().to(torch.float32), angles.sin().to(torch.float32)


def make_inputs(device, generator, *, batch=4, grid=(4, 16, 16), text_tokens=256, heads=24, text_dim=4096):
    hidden = heads * HEAD_DIM
    image_tokens = grid[0] * grid[1] * grid[2]

    def randn(*shape, scale=1.0):
        return scale * torch.randn(*shape, device=device, generator=generator)

    def linear(out_features, in_features):
        return randn(out_features, in_features, scale=in_features ** -0.5), randn(out_features, scale=0.1)

    hidden_states = randn(batch, image_tokens, hidden)
    timestep_embedding = randn(batch, hidden)
    encoder_hidden_states = randn(batch, text_tokens, text_dim)
    weights = [*linear(6 * hidden, hidden), *linear(hidden, hidden), *linear(hidden, hidden),
               *linear(hidden, hidden), *linear(hidden, text_dim), *linear(hidden, text_dim),
               *linear(hidden, hidden)]
    token = torch.arange(image_tokens, device=device)
    rows_cols = grid[1] * grid[2]
    positions = [token // rows_cols, (token // grid[2]) % grid[1], token % grid[2]]
    tables = [t.to(device) for n in TABLE_POSITIONS for t in rope_table(n)]
    return (hidden_states, timestep_embedding, encoder_hidden_states, *weights, *positions, *tables, 1)


def rope_3axis(x, positions, tables):
    """Rotate the three 42-dim axis slices of x [B, N, heads, 128]; dims 126.. pass through."""
    half = AXIS_DIM // 2
    parts = []
    for axis, pos in enumerate(positions):
        cos, sin = (acc(t)[pos, :half][None, :, None, :] for t in tables[2 * axis:2 * axis + 2])
        first = x[..., axis * AXIS_DIM:axis * AXIS_DIM + half]
        second = x[..., axis * AXIS_DIM + half:(axis + 1) * AXIS_DIM]
        parts += [first * cos - second * sin, second * cos + first * sin]
    return torch.cat(parts + [x[..., 3 * AXIS_DIM:]], dim=-1)


def reference(hidden_states, timestep_embedding, encoder_hidden_states, adaln_linear_weight,
              adaln_linear_bias, to_q_weight, to_q_bias, to_k_weight, to_k_bias, to_v_weight, to_v_bias,
              to_k_context_weight, to_k_context_bias, to_v_context_weight, to_v_context_bias,
              to_out_weight, to_out_bias, pos_idx_axis0, pos_idx_axis1, pos_idx_axis2, rope_cos_axis0,
              rope_sin_axis0, rope_cos_axis1, rope_sin_axis1, rope_cos_axis2, rope_sin_axis2,
              is_joint_block):
    if is_joint_block != 1:
        raise ValueError("only the joint block (is_joint_block = 1) is defined")
    batch, tokens, hidden = hidden_states.shape
    heads = hidden // HEAD_DIM

    def linear(x, weight, bias):
        return x @ acc(weight).T + acc(bias)

    x = acc(hidden_states)
    mod = linear(F.silu(acc(timestep_embedding)), adaln_linear_weight, adaln_linear_bias)
    scale, shift, gate = (c.unsqueeze(1) for c in mod.chunk(6, dim=-1)[:3])
    x_mod = F.layer_norm(x, (hidden,), eps=EPS) * (1 + scale) + shift
    q, k, v = (linear(x_mod, w, b).view(batch, tokens, heads, HEAD_DIM) for w, b in
               ((to_q_weight, to_q_bias), (to_k_weight, to_k_bias), (to_v_weight, to_v_bias)))
    positions = (pos_idx_axis0, pos_idx_axis1, pos_idx_axis2)
    tables = (rope_cos_axis0, rope_sin_axis0, rope_cos_axis1, rope_sin_axis1, rope_cos_axis2, rope_sin_axis2)
    q, k = rope_3axis(q, positions, tables), rope_3axis(k, positions, tables)

    text = acc(encoder_hidden_states)
    text = F.layer_norm(text, (text.shape[-1],), eps=EPS)
    k_text = linear(text, to_k_context_weight, to_k_context_bias).view(batch, -1, heads, HEAD_DIM)
    v_text = linear(text, to_v_context_weight, to_v_context_bias).view(batch, -1, heads, HEAD_DIM)
    keys = torch.cat([k, k_text], dim=1).transpose(1, 2)  # [B, heads, tokens + text, 128]
    values = torch.cat([v, v_text], dim=1).transpose(1, 2)
    logits = q.transpose(1, 2) @ keys.transpose(2, 3) / math.sqrt(HEAD_DIM)
    attn = (torch.softmax(logits, dim=-1) @ values).transpose(1, 2).reshape(batch, tokens, hidden)
    return to_output(x + gate * linear(attn, to_out_weight, to_out_bias), torch.float32)


def physical_floor(*, batch, grid, text_tokens, heads, text_dim):
    """fp32-accurate GEMMs can run on TF32 tensor cores (3xTF32), so the floor uses the TF32 rate."""
    hidden = heads * HEAD_DIM
    tokens = grid[0] * grid[1] * grid[2]
    keys = tokens + text_tokens
    # only the first three adaLN chunks (scale, shift, gate) are used
    weight_bytes = (3 * hidden * hidden + 4 * hidden * hidden + 2 * hidden * text_dim + 9 * hidden) * 4
    act_bytes = (2 * batch * tokens * hidden + batch * hidden + batch * text_tokens * text_dim) * 4
    flops = (2 * batch * hidden * 3 * hidden + 2 * batch * tokens * hidden * 4 * hidden
             + 2 * batch * text_tokens * text_dim * 2 * hidden + 4 * batch * heads * tokens * keys * HEAD_DIM)
    return {"bytes": weight_bytes + act_bytes, "flops": flops, "math": "tf32"}
