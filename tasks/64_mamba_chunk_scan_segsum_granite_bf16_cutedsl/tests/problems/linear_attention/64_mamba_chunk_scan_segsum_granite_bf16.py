"""Mamba-2 SSD chunked scan (chunk 256) on pre-discretised inputs with a carried state, bf16 I/O.

A [B, H, S] holds per-token log decays; B and C [B, S, 1, N] are shared by all heads; x is
[B, S, H, P]. With a_cum the within-chunk cumulative sum of A, in fp32:
Y_diag[i] = sum_{j<=i} (C_i . B_j) exp(a_cum_i - a_cum_j) x_j; each chunk's own state is
sum_j exp(a_cum_end - a_cum_j) x_j B_j^T; the carried state starts at initial_states and moves to
the next chunk as state * exp(a_cum_end) + chunk state; Y_off[i] = exp(a_cum_i) C_i . state_in.
y = Y_diag + Y_off + D x, returned as [B, S, H * P] together with the final state [B, H, P, N].
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Granite-4.0-1B (hybrid Mamba-2)",
    upstream="nvidia/SOL-ExecBench L2/043_mamba_chunk_scan_with_segsum, workload index 8",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The inter-chunk state passing is written as a sequential loop over the 4 chunks, which "
    "equals the source's segment-sum-of-chunk-totals formulation.",
)
INPUTS = ("hidden_states", "A", "B", "C", "D", "initial_states")
OUTPUTS = ("output", "final_state")
SMALL_WORKLOAD = dict(batch=2, seqlen=16, heads=2, head_dim=4, state=8)
CHUNK = 256  # the result does not depend on it mathematically; it shapes the reference's work


def make_inputs(device, generator, *, batch=8, seqlen=1024, heads=16, head_dim=64, state=256):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    x = randn(batch, seqlen, heads, head_dim)
    u = torch.rand(batch, heads, seqlen, device=device, generator=generator)
    a = (-0.02 + 0.0195 * u).to(torch.bfloat16)  # U(-0.02, -0.0005)
    b = randn(batch, seqlen, 1, state)
    c = randn(batch, seqlen, 1, state)
    d = randn(heads)
    initial = randn(batch, heads, head_dim, state)
    return x, a, b, c, d, initial


def reference(hidden_states, A, B, C, D, initial_states):
    batch, seqlen, heads, head_dim = hidden_states.shape
    chunk = min(CHUNK, seqlen)
    nc = seqlen // chunk
    x = acc(hidden_states).view(batch, nc, chunk, heads, head_dim)
    a_cum = acc(A).view(batch, heads, nc, chunk).cumsum(dim=-1)
    b = acc(B)[:, :, 0].reshape(batch, nc, chunk, -1)
    c = acc(C)[:, :, 0].reshape(batch, nc, chunk, -1)

    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=x.device).tril()
    segsum = (a_cum[..., :, None] - a_cum[..., None, :]).masked_fill(~causal, float("-inf"))
    scores = torch.einsum("bzin,bzjn->bzij", c, b)[:, :, None] * torch.exp(segsum).transpose(1, 2)
    y = torch.einsum("bzhij,bzjhp->bzihp", scores, x)

    to_end = torch.exp(a_cum[..., -1:] - a_cum).permute(0, 2, 3, 1)  # [b, z, l, h]
    chunk_states = torch.einsum("bzlhp,bzln->bzhpn", x * to_end[..., None], b)
    from_start = torch.exp(a_cum).permute(0, 2, 3, 1)  # [b, z, l, h]
    total = torch.exp(a_cum[..., -1])  # [b, h, z]
    carried = acc(initial_states)
    for z in range(nc):
        y_off = torch.einsum("bln,bhpn->blhp", c[:, z], carried) * from_start[:, z, :, :, None]
        y[:, z] += y_off
        carried = carried * total[:, :, z, None, None] + chunk_states[:, z]
    y = y + acc(D)[:, None] * x
    output = y.reshape(batch, seqlen, heads * head_dim)
    return to_output(output, torch.bfloat16), to_output(carried, torch.bfloat16)


def physical_floor(*, batch, seqlen, heads, head_dim, state):
    chunk = min(CHUNK, seqlen)
    tokens = batch * seqlen
    io = 2 * (2 * tokens * heads * head_dim + 2 * tokens * state + tokens * heads
              + 2 * batch * heads * head_dim * state)
    intra = 2 * batch * seqlen * (chunk + 1) // 2 * (state + heads * head_dim)
    inter = 2 * 2 * tokens * heads * head_dim * state  # chunk states and Y_off
    return {"bytes": io, "flops": intra + inter, "math": "bf16"}
