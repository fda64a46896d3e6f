"""CuTe DSL oracle for problem 23: gather a paged FP8 MLA latent cache into fp32, times a scalar scale.

One DSL kernel does the gather and the dequantisation; one CTA per output row (token). The CTA
finds its request by walking the (few) sequence lengths in order, so no index tensor is built
eagerly, then reads block_table[request, position // block_size] and copies that cache entry:
each thread loads ``vec`` e4m3 bytes (one 4-byte load), converts them to fp32 (exact: every
e4m3 value is an fp32 value) and multiplies by the fp32 scale, one rounding, as the reference does,
so the output is bit-exact (the problem declares it EXACT). The cache is reinterpreted as
Float8E4M3FN inside the kernel; the host only passes the byte tensor. The output row count is the
sum of seq_lens, read once on the host to allocate the output (the reference does the same).
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(num_blocks=1024, block_size=16, entry=576, requests=8, tokens=4096)
_MAX_THREADS = 256
_COMPILED = {}


def _plan(entry):
    """(bytes per thread and step, threads per CTA, steps per thread, whether steps need a bound check)."""
    vec = 4 if entry % 4 == 0 else 1
    chunks = entry // vec
    threads = min(_MAX_THREADS, (chunks + 31) // 32 * 32)
    steps = (chunks + threads - 1) // threads
    return vec, threads, steps, chunks % threads != 0


@cute.kernel
def mla_gather_dequant_kernel(src: cute.Tensor, table: cute.Tensor, lens: cute.Tensor, out: cute.Tensor,
                              scale: cutlass.Float32, vec: cutlass.Constexpr, threads: cutlass.Constexpr,
                              steps: cutlass.Constexpr, bounded: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    token, _, _ = cute.arch.block_idx()
    block_size = cute.size(src, mode=[1])
    entry = cute.size(src, mode=[2])
    requests = cute.size(lens, mode=[0])
    chunks = entry // vec

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

    fp8 = cute.recast_tensor(src, cutlass.Float8E4M3FN)
    g_in = cute.zipped_divide(fp8[block, offset, None], (vec,))
    g_out = cute.zipped_divide(out[token, None], (vec,))
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        if cutlass.const_expr(bounded):
            if c < chunks:
                g_out[None, c].store(g_in[None, c].load().to(cutlass.Float32) * scale)
        else:
            g_out[None, c].store(g_in[None, c].load().to(cutlass.Float32) * scale)


@cute.jit
def mla_gather_dequant(src: cute.Tensor, table: cute.Tensor, lens: cute.Tensor, out: cute.Tensor,
                       scale: cutlass.Float32, stream: cuda.CUstream):
    vec, threads, steps, bounded = _plan(cute.size(src, mode=[2]))
    mla_gather_dequant_kernel(src, table, lens, out, scale, vec, threads, steps, bounded).launch(
        grid=[cute.size(out, mode=[0]), 1, 1], block=[threads, 1, 1], stream=stream)


def _compile(num_blocks, block_size, entry, requests, width, arch=None, ptx_dir=None):
    """Static cache and table shapes; the output row count is a runtime symbol."""
    src = make_fake_compact_tensor(cutlass.Uint8, (num_blocks, block_size, entry), stride_order=(2, 1, 0),
                                   assumed_align=16)
    table = make_fake_compact_tensor(cutlass.Int32, (requests, width), stride_order=(1, 0))
    lens = make_fake_compact_tensor(cutlass.Int32, (requests,))
    out = make_fake_compact_tensor(cutlass.Float32, (cute.sym_int(), entry), stride_order=(1, 0),
                                   assumed_align=16)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(mla_gather_dequant, src, table, lens, out, cutlass.Float32(1.0), make_fake_stream(),
                        options=options)


def solve(src_cache, block_table, seq_lens, scale):
    num_blocks, block_size, entry = src_cache.shape
    requests, width = block_table.shape
    total = int(seq_lens.sum())
    out = torch.empty(total, entry, dtype=torch.float32, device=src_cache.device)
    if total == 0 or entry == 0:
        return out
    key = (num_blocks, block_size, entry, requests, width)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _COMPILED[key](src_cache.contiguous(), block_table.contiguous(), seq_lens.contiguous(), out, float(scale),
                   cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(w["num_blocks"], w["block_size"], w["entry"], w["requests"], w["num_blocks"], arch,
                         ptx_dir).kernel_info)
