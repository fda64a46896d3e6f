"""GDN multi-token verification: 32 requests gather pooled states and run 4 draft tokens (Qwen3-Next).

A pool of 49 states; 8 q/k heads on 16 value heads of 128.
Each request r starts from initial_state[initial_state_indices[r]] ('k-last' [V, K] fp32, used as
S = [K, V]) and runs its T draft tokens in order. Per token and value head, in fp32:
g = exp(-exp(A_log) softplus(a + dt_bias)), beta = sigmoid(b); value head h reads q/k head h // 2;
S <- g S; old = k^T S; new = beta v + (1 - beta) old; S <- S + k (new - old)^T; o = scale q^T S.
No state is written back: the second output is an unchanged copy of the whole pool.
"""

import math

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, captured, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Qwen3-Next-80B-A3B (TP=2, multi-token-prediction verification)",
    upstream="flashinfer-ai/flashinfer-trace definitions/gdn/gdn_mtp_qk8_v16_d128_k_last.json "
    "(workload record 4c266399-6168-447d-b374-cfb1234e296c)",
    license="Apache-2.0",
    notes="The graded workload is the source's record in full. As in the source, final_state is the initial "
    "pool unchanged (verification without commit). Captured values (sidecar "
    "73_gdn_mtp_qwen3next_bf16.captured.json): the 16 value heads' A_log and dt_bias, used verbatim. "
    "Drawn per draw, as in the source's record: the pool routing (distinct slots), q, k, v, a, b and "
    "the state pool at the capture-measured scales. The small CPU workload uses the first value heads' "
    "captured A_log and dt_bias.",
)
INPUTS = ("q", "k", "v", "initial_state", "initial_state_indices", "A_log", "a", "dt_bias", "b", "scale")
OUTPUTS = ("output", "final_state")
EXACT = ("final_state",)
SMALL_WORKLOAD = dict(batch=3, draft=2, pool=5, qk_heads=2, v_heads=4, head_dim=8)


def captured_heads(name, v_heads, device):
    """The captured per-head values (A_log or dt_bias) of the first ``v_heads`` value heads, fp32; the
    graded workload (16 value heads) uses them all, verbatim."""
    values = captured(__file__)[name]
    assert 1 <= v_heads <= len(values)
    return torch.tensor(values[:v_heads], dtype=torch.float32, device=device)


def make_inputs(device, generator, *, batch=32, draft=4, pool=49, qk_heads=8, v_heads=16, head_dim=128):
    def randn(*shape, std=1.0, mean=0.0):
        return mean + std * torch.randn(*shape, device=device, generator=generator)

    bf16 = torch.bfloat16
    q = randn(batch, draft, qk_heads, head_dim, std=0.63).to(bf16)
    k = randn(batch, draft, qk_heads, head_dim, std=0.26).to(bf16)
    v = randn(batch, draft, v_heads, head_dim, std=0.13).to(bf16)
    initial_state = randn(pool, v_heads, head_dim, head_dim, std=0.0215)
    indices = torch.randperm(pool, device=device, generator=generator)[:batch].to(torch.int32)
    a_log = captured_heads("A_log", v_heads, device)
    a = randn(batch, draft, v_heads, std=2.24, mean=0.82).to(bf16)
    dt_bias = captured_heads("dt_bias", v_heads, device)
    b = randn(batch, draft, v_heads, std=2.02, mean=0.45).to(bf16)
    return q, k, v, initial_state, indices, a_log, a, dt_bias, b, 1 / math.sqrt(head_dim)


def reference(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale):
    group = v.shape[2] // q.shape[2]
    g = torch.exp(-torch.exp(acc(A_log)) * F.softplus(acc(a) + acc(dt_bias)))  # [B, T, H]
    beta = torch.sigmoid(acc(b))
    qh = acc(q).repeat_interleave(group, dim=2)  # [B, T, H, K]
    kh = acc(k).repeat_interleave(group, dim=2)
    vh = acc(v)
    s = acc(initial_state[initial_state_indices.long()]).transpose(-1, -2)  # [B, H, K, V]
    outputs = []
    for t in range(q.shape[1]):
        s = s * g[:, t, :, None, None]
        kt = kh[:, t]
        old = torch.einsum("bhk,bhkv->bhv", kt, s)
        bt = beta[:, t, :, None]
        new = bt * vh[:, t] + (1 - bt) * old
        s = s + kt[..., :, None] * (new - old)[..., None, :]
        outputs.append(scale * torch.einsum("bhk,bhkv->bhv", qh[:, t], s))
    output = torch.stack(outputs, dim=1)
    return to_output(output, torch.bfloat16), to_output(initial_state.clone(), torch.float32)


def physical_floor(*, batch, draft, pool, qk_heads, v_heads, head_dim):
    state = v_heads * head_dim * head_dim * 4
    tokens = batch * draft
    io = 2 * pool * state + 2 * tokens * (2 * qk_heads + 2 * v_heads) * head_dim
    return {"bytes": io, "flops": 8 * tokens * v_heads * head_dim * head_dim, "math": "fp32"}
