"""CuTe DSL oracle for problem 24: gather a mixed-layout FP8 MLA cache (656-byte entries) into bf16 rows.

One DSL kernel does the gather and the up-conversion; one CTA of 64 threads per output row
(token). The CTA finds its request by walking the (few) sequence lengths in order, so no index
tensor is built eagerly, then reads block_table[request, position // block_size] and converts that
cache entry. Thread t takes NoPE bytes [8t, 8t + 8) (one 8-byte load) and the fp32 scale of their
group of 128 (t // 16), decodes the e4m3 bytes to fp32 (exact: every e4m3 value is an fp32 value,
the sign of zero included), multiplies by the scale in fp32 and rounds to bf16 to nearest even:
the reference's fp32 multiply and bf16 rounding, so the output is bit-exact (the problem declares
it EXACT). Threads 0..7 also copy the 64 RoPE bf16 values (bytes 528..655, one 16-byte vector
each) unchanged. The cache is reinterpreted inside the kernel as e4m3 bytes, fp32 scales and bf16
RoPE values; the host only passes the byte tensor. The output row count is the sum of seq_lens,
which the host needs to allocate the output (the reference reads it too): the lengths are copied
once into pinned host memory and added by the CPU, so the DSL kernel is the only kernel of a call
and that small copy its only other GPU work.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

NOPE, GROUPS, ROPE = 512, 4, 64
ENTRY = NOPE + 4 * GROUPS + 2 * ROPE  # 656 bytes
VEC = 8  # values per thread: 8 e4m3 bytes in, 8 bf16 out (16 bytes)
THREADS = NOPE // VEC  # 64
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(block_size=64)
_COMPILED = {}


@cute.kernel
def cp_gather_upconvert_kernel(cache: cute.Tensor, table: cute.Tensor, lens: cute.Tensor, out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    token, _, _ = cute.arch.block_idx()
    block_size = cute.size(cache, mode=[1])
    requests = cute.size(lens, mode=[0])

    start = cutlass.Int32(0)
    request = cutlass.Int32(0)
    found = cutlass.Int32(0)
    for i in range(requests):
        length = cutlass.Int32(lens[i])
        if found == 0:
            if token < start + length:
                found = cutlass.Int32(1)
            else:
                start = start + length
                request = request + 1
    position = token - start
    block = cutlass.Int32(table[request, position // block_size])
    offset = position % block_size

    codes = cute.zipped_divide(cute.recast_tensor(cache, cutlass.Float8E4M3FN)[block, offset, None], (VEC,))
    scales = cute.recast_tensor(cache, cutlass.Float32)[block, offset, None]
    g_out = cute.zipped_divide(out[token, None], (VEC,))
    scale = cutlass.Float32(scales[NOPE // 4 + tidx // (THREADS // GROUPS)])
    vals = cute.make_rmem_tensor((VEC,), cutlass.Float32)
    vals.store(codes[None, tidx].load().to(cutlass.Float32))
    g_out[None, tidx].store((vals.load() * scale).to(cutlass.BFloat16))
    if tidx < ROPE // VEC:
        rope = cute.zipped_divide(cute.recast_tensor(cache, cutlass.BFloat16)[block, offset, None], (VEC,))
        g_out[None, THREADS + tidx].store(rope[None, (NOPE + 4 * GROUPS) // (2 * VEC) + tidx].load())


@cute.jit
def cp_gather_upconvert(cache: cute.Tensor, table: cute.Tensor, lens: cute.Tensor, out: cute.Tensor,
                        stream: cuda.CUstream):
    cp_gather_upconvert_kernel(cache, table, lens, out).launch(
        grid=[cute.size(out, mode=[0]), 1, 1], block=[THREADS, 1, 1], stream=stream)


def _compile(block_size, arch=None, ptx_dir=None):
    """Static entry layout and block size; cache blocks, requests, table width and rows are runtime symbols."""
    num_blocks, requests, width, total = (cute.sym_int() for _ in range(4))
    cache = make_fake_compact_tensor(cutlass.Uint8, (num_blocks, block_size, ENTRY), stride_order=(2, 1, 0),
                                     assumed_align=16)
    table = make_fake_compact_tensor(cutlass.Int32, (requests, width), stride_order=(1, 0))
    lens = make_fake_compact_tensor(cutlass.Int32, (requests,))
    out = make_fake_compact_tensor(cutlass.BFloat16, (total, NOPE + ROPE), stride_order=(1, 0), assumed_align=16)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(cp_gather_upconvert, cache, table, lens, out, make_fake_stream(), options=options)


def _row_count(seq_lens):
    """sum(seq_lens), the output's row count, read on the host without a device kernel.

    The lengths come over in one copy into pinned memory of their own dtype (a dtype change would
    run a conversion kernel first) and the CPU adds them. Summing on the device instead runs torch's
    int32-to-int64 conversion and reduction kernels before the same copy, eager kernels that took
    more of a call's GPU time than the gather itself at the graded size."""
    lens = torch.empty(seq_lens.shape, dtype=seq_lens.dtype, pin_memory=True)
    lens.copy_(seq_lens)
    return sum(lens.tolist())


def solve(cache, block_table, seq_lens):
    _, block_size, entry = cache.shape
    if entry != ENTRY:
        raise ValueError(f"cache entries must be {ENTRY} bytes")
    total = _row_count(seq_lens)
    out = torch.empty(total, NOPE + ROPE, dtype=torch.bfloat16, device=cache.device)
    if total == 0:
        return out
    if block_size not in _COMPILED:
        _COMPILED[block_size] = _compile(block_size)
    _COMPILED[block_size](cache.contiguous(), block_table.contiguous(), seq_lens.contiguous(), out,
                          cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    return list(_compile(WORKLOAD["block_size"], arch, ptx_dir).kernel_info)
