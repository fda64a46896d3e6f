"""Gemma-3n audio local attention with relative positions and soft-capping, 8 heads x 64, fp32.

q/k/v = x W^T (512 -> 512, no bias); q is scaled by 64^-0.5 / softplus(0) * softplus(per_dim_scale).
Frames are cut into 32-frame query blocks; each block attends a context window of the 127 frames
before it plus its own 32, and query frame i may see key frame j only if 0 <= i - j <= 127 (a local
causal band) and j is not padding (mask is True on padding). Logits = q.k + q.r(i - j), where
r(d) = pos_proj([sin(d * inv_timescales), cos(d * inv_timescales)]) for d = 0..127, realigned per
window with the Transformer-XL relative shift; then soft-capped 50 * tanh(z / 50), masked with the
most negative float, softmaxed in fp32 and applied to the value windows. Output [B, T, 8, 64]; rows of
padded query frames are produced too (their band always holds a valid frame).
"""

import math

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Gemma-3n-E2B (audio encoder)",
    upstream="nvidia/SOL-ExecBench L2/038_audio_relative_position_attention, workload index 12",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The sinusoid puts the 256 sines before the 256 cosines (the usual timing-signal layout).",
)
INPUTS = ("hidden_states", "mask", "q_proj_weight", "k_proj_weight", "v_proj_weight", "pos_proj_weight",
          "per_dim_scale", "inv_timescales", "attention_logits_soft_cap")
OUTPUTS = ("context_vectors",)
SMALL_WORKLOAD = dict(batch=2, frames=200, channels=32, heads=2)
# Per-row errors of two equally accurate fp32 implementations scatter widely here: a draw has 881k
# rows of 64 values, each row's error is dominated by a few shared softmax terms, so in some rows the
# reference happens to be far more accurate than its own typical row. Measured (H100, graded draws 2
# and 3, results/h200/oracle-check.json run 4): both oracles' errors against the float64 anchor are
# below the reference's overall (2-norm 0.67x, maximum 0.56-0.73x, median row 0.65x), yet their row error
# reaches 3.6-4.0x the reference's in 4-17 rows a draw (425-539 rows above 2x); two fp32 orders of
# the reference itself on the CPU (projections summed in 128-wide chunks or not) reach 3.9-4.3x. At
# F = 3 every draw fails; F = 6 leaves the largest observed row at 0.66 of its allowance.
TOLERANCE_FACTOR = 6.0
TOLERANCE_NOTE = ("row errors of equally accurate fp32 orders reach 4.0x the reference's (881k rows of 64 per "
                  "draw; medians 0.65x): F = 3 rejects every draw of a kernel more accurate than the reference")
BLOCK, MAX_PAST = 32, 127  # query block and the farthest key frame back; no future frames


def make_inputs(device, generator, *, batch=64, frames=1721, channels=512, heads=8):
    def randn(*shape, scale=1.0):
        return scale * torch.randn(*shape, device=device, generator=generator)

    hidden_states = randn(batch, frames, channels)
    valid = torch.randint(frames - MAX_PAST, frames + 1, (batch, 1), device=device, generator=generator)
    mask = torch.arange(frames, device=device) >= valid  # a contiguous padded tail per row
    weights = [randn(channels, channels, scale=channels ** -0.5) for _ in range(4)]
    per_dim_scale = randn(channels // heads, scale=0.1)
    steps = torch.arange(channels // 2, dtype=torch.float64)
    inv_timescales = torch.exp(-steps * math.log(1e4) / (channels // 2 - 1)).to(torch.float32).to(device)
    return hidden_states, mask, *weights, per_dim_scale, inv_timescales, 50.0


def windows(x, count):
    """[B, T, ...] -> [B, count, BLOCK + MAX_PAST, ...]: frames u*BLOCK - MAX_PAST .. u*BLOCK + BLOCK - 1,
    zero (or False) outside the sequence."""
    pad = [0, 0] * (x.dim() - 2) + [MAX_PAST, count * BLOCK - x.shape[1]]
    return F.pad(x, pad).unfold(1, BLOCK + MAX_PAST, BLOCK).movedim(-1, 2)


def reference(hidden_states, mask, q_proj_weight, k_proj_weight, v_proj_weight, pos_proj_weight,
              per_dim_scale, inv_timescales, attention_logits_soft_cap):
    batch, frames, channels = hidden_states.shape
    head_dim = per_dim_scale.shape[0]
    heads = channels // head_dim
    block, span, context = BLOCK, MAX_PAST + 1, BLOCK + MAX_PAST
    count = -(-frames // block)
    x = acc(hidden_states)
    q = (x @ acc(q_proj_weight).T).view(batch, frames, heads, head_dim)
    k = (x @ acc(k_proj_weight).T).view(batch, frames, heads, head_dim)
    v = (x @ acc(v_proj_weight).T).view(batch, frames, heads, head_dim)
    q = q * (head_dim ** -0.5 / math.log(2.0)) * F.softplus(acc(per_dim_scale))  # softplus(0) = ln 2

    q_blocks = F.pad(q, [0, 0, 0, 0, 0, count * block - frames]).view(batch, count, block, heads, head_dim)
    k_win, v_win = windows(k, count), windows(v, count)
    content = torch.einsum("buwnh,bucnh->bnuwc", q_blocks, k_win)

    distance = torch.arange(MAX_PAST, -1, -1, device=x.device, dtype=x.dtype)  # column j: distance 127 - j
    angles = distance[:, None] * acc(inv_timescales)
    rel = (torch.cat([angles.sin(), angles.cos()], dim=-1) @ acc(pos_proj_weight).T).view(span, heads, head_dim)
    by_distance = torch.einsum("buwnh,jnh->bnuwj", q_blocks, rel)  # [B, N, U, W, span]
    # relative shift: entry (w, c) of the window takes column c - w (zero outside 0..span-1)
    padded = F.pad(by_distance, [0, context + 1 - span]).flatten(-2)[..., :block * context]
    logits = content + padded.reshape(batch, heads, count, block, context)

    cap = attention_logits_soft_cap
    logits = torch.tanh(logits / cap) * cap
    offset = torch.arange(context, device=x.device) - torch.arange(block, device=x.device)[:, None]
    band = (offset >= 0) & (offset <= MAX_PAST)  # [W, C]: key frame within MAX_PAST before the query
    valid_keys = windows(~mask, count)  # frames outside the sequence are invalid too
    allowed = band & valid_keys[:, None, :, None, :]
    logits = logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)
    probs = torch.softmax(logits, dim=-1)
    out = torch.einsum("bnuwc,bucnh->buwnh", probs, v_win).reshape(batch, count * block, heads, head_dim)
    return to_output(out[:, :frames], torch.float32)


def physical_floor(*, batch, frames, channels, heads):
    """fp32-accurate GEMMs can run on TF32 tensor cores (3xTF32), so the floor uses the TF32 rate."""
    pairs = sum(min(t + 1, MAX_PAST + 1) for t in range(frames))  # band pairs per (batch, head)
    head_dim = channels // heads
    flops = 2 * batch * frames * channels * 3 * channels + 6 * batch * heads * pairs * head_dim
    io_bytes = 2 * batch * frames * channels * 4 + batch * frames + 4 * channels * channels * 4
    return {"bytes": io_bytes, "flops": flops, "math": "tf32"}
