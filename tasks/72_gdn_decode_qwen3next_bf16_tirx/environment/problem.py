"""Gated delta net (GDN) single-token decode, 8 q/k heads on 16 value heads of 128 (Qwen3-Next TP=2).

64 sequences, one token each.
Per token and value head, in fp32: g = exp(-exp(A_log) softplus(a + dt_bias)), beta = sigmoid(b);
value head h reads q/k head h // 2. With the state S viewed as [K, V]: S <- g S; old = k^T S;
new = beta v + (1 - beta) old; S <- S + k (new - old)^T; o = scale q^T S.
States arrive and leave 'k-last' as [batch, head, V, K] fp32; the updated state is a new tensor.
"""

import math

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, captured, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Qwen3-Next-80B-A3B (TP=2)",
    upstream="flashinfer-ai/flashinfer-trace definitions/gdn/gdn_decode_qk8_v16_d128_k_last.json "
    "(workload record 35b0abd8-5892-44f2-a152-52cba6b59493)",
    license="Apache-2.0",
    notes="The graded workload is the source's record in full. Captured values (sidecar "
    "72_gdn_decode_qwen3next_bf16.captured.json): the 16 value heads' A_log and dt_bias, used verbatim. "
    "Drawn per draw, as in the source's record: q, k, v, a, b and the incoming states at the "
    "capture-measured scales. The small CPU workload uses the first value heads' captured A_log and "
    "dt_bias.",
)
INPUTS = ("q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "scale")
OUTPUTS = ("output", "new_state")
SMALL_WORKLOAD = dict(batch=3, qk_heads=2, v_heads=4, head_dim=8)


def captured_heads(name, v_heads, device):
    """The captured per-head values (A_log or dt_bias) of the first ``v_heads`` value heads, fp32; the
    graded workload (16 value heads) uses them all, verbatim."""
    values = captured(__file__)[name]
    assert 1 <= v_heads <= len(values)
    return torch.tensor(values[:v_heads], dtype=torch.float32, device=device)


def make_inputs(device, generator, *, batch=64, qk_heads=8, v_heads=16, head_dim=128):
    def randn(*shape, std=1.0, mean=0.0):
        return mean + std * torch.randn(*shape, device=device, generator=generator)

    bf16 = torch.bfloat16
    q = randn(batch, 1, qk_heads, head_dim, std=0.18).to(bf16)
    k = randn(batch, 1, qk_heads, head_dim, std=0.13).to(bf16)
    v = randn(batch, 1, v_heads, head_dim, std=0.073).to(bf16)
    state = randn(batch, v_heads, head_dim, head_dim, std=0.009)
    a_log = captured_heads("A_log", v_heads, device)
    a = randn(batch, 1, v_heads, std=1.56, mean=1.33).to(bf16)
    dt_bias = captured_heads("dt_bias", v_heads, device)
    b = randn(batch, 1, v_heads, std=1.38, mean=0.4).to(bf16)
    return q, k, v, state, a_log, a, dt_bias, b, 1 / math.sqrt(head_dim)


def reference(q, k, v, state, A_log, a, dt_bias, b, scale):
    group = v.shape[2] // q.shape[2]
    g = torch.exp(-torch.exp(acc(A_log)) * F.softplus(acc(a[:, 0]) + acc(dt_bias)))  # [B, H]
    beta = torch.sigmoid(acc(b[:, 0]))
    qh = acc(q[:, 0]).repeat_interleave(group, dim=1)  # [B, H, K]
    kh = acc(k[:, 0]).repeat_interleave(group, dim=1)
    s = acc(state).transpose(-1, -2) * g[..., None, None]  # [B, H, K, V]
    old = torch.einsum("bhk,bhkv->bhv", kh, s)
    new = beta[..., None] * acc(v[:, 0]) + (1 - beta[..., None]) * old
    s = s + kh[..., :, None] * (new - old)[..., None, :]
    o = scale * torch.einsum("bhk,bhkv->bhv", qh, s)
    return to_output(o[:, None], torch.bfloat16), to_output(s.transpose(-1, -2), torch.float32)


def physical_floor(*, batch, qk_heads, v_heads, head_dim):
    states = batch * v_heads * head_dim * head_dim * 4
    io = 2 * states + 2 * batch * (2 * qk_heads + 2 * v_heads) * head_dim + 8 * batch * v_heads
    return {"bytes": io, "flops": 8 * batch * v_heads * head_dim * head_dim, "math": "fp32"}
