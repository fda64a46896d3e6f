"""Mamba-2 SSD intra-chunk (diagonal block) output, one 128-token chunk per sequence, bf16 I/O.

For each chunk, L[i, j] = exp(a_(j+1) + ... + a_i) for j <= i and 0 above the diagonal, where a is
the input named A_cumsum read as per-step increments (it is segment-summed here, as upstream does).
G[i, j] = C_i . B_j within a group (head h uses group h // (heads / groups)); Y_i = sum_j G L x_j.
Computed in fp32, rounded to bf16.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="NVIDIA-Nemotron-3-Nano-30B-A3B",
    upstream="nvidia/SOL-ExecBench L1/070_mamba2_fused_intra_chunk_diagonal_computation, workload index 7",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Despite its name, A_cumsum holds per-step log decays: the definition segment-sums it "
    "(exactly as the source does). Groups are expanded with repeat_interleave (head h uses h // 4).",
)
INPUTS = ("hidden_states", "A_cumsum", "B", "C")
OUTPUTS = ("Y_diag",)
SMALL_WORKLOAD = dict(batch=2, chunk_len=8, heads=4, head_dim=8, groups=2, state=8)


def make_inputs(device, generator, *, batch=16, chunks=1, chunk_len=128, heads=32, head_dim=128,
                groups=8, state=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    x = randn(batch, chunks, chunk_len, heads, head_dim)
    a = (-0.02 * torch.rand(batch, heads, chunks, chunk_len, device=device, generator=generator))
    b = randn(batch, chunks, chunk_len, groups, state)
    c = randn(batch, chunks, chunk_len, groups, state)
    return x, a.to(torch.bfloat16), b, c


def reference(hidden_states, A_cumsum, B, C):
    heads, groups = hidden_states.shape[3], B.shape[3]
    steps = acc(A_cumsum).cumsum(dim=-1)  # [b, h, c, l]
    segsum = steps[..., :, None] - steps[..., None, :]  # sum of a over (j, i]
    length = steps.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=steps.device).tril()
    decay = torch.exp(segsum.masked_fill(~causal, float("-inf"))).permute(0, 2, 1, 3, 4)  # [b,c,h,i,j]
    scores = torch.einsum("bcign,bcjgn->bcgij", acc(C), acc(B))
    scores = scores.repeat_interleave(heads // groups, dim=2) * decay
    y = torch.einsum("bchij,bcjhp->bcihp", scores, acc(hidden_states))
    return to_output(y, torch.bfloat16)


def physical_floor(*, batch, chunks, chunk_len, heads, head_dim, groups, state):
    tokens = batch * chunks * chunk_len
    io = 2 * (2 * tokens * heads * head_dim + 2 * tokens * groups * state + tokens * heads)
    pairs = batch * chunks * chunk_len * (chunk_len + 1) // 2  # causal (i, j) pairs per head/group
    return {"bytes": io, "flops": 2 * pairs * (groups * state + heads * head_dim), "math": "bf16"}
