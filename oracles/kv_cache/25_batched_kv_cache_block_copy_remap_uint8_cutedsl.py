"""CuTe DSL oracle for problem 25: batched KV-cache block copy with a block remap, in place.

The whole computation is one DSL kernel. Each page is viewed as a row of machine words (8, 4 or 1
bytes, the widest that divides the page), so the copy is exact whatever the bytes are. Grid:
(word chunk, mapping row, k/v); each CTA reads its (src, dst) pair from ``block_mapping`` and copies
one chunk of the source page into the destination page. Every thread first loads its ``_UNROLL``
words and then stores them, so several loads are in flight per thread.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(num_blocks=1024, block_tokens=32, heads=8, head_bytes=256, pairs=256)
_THREADS = 256
_UNROLL = 4
_CHUNK = _THREADS * _UNROLL
_WORD_TYPES = ((8, torch.int64, cutlass.Int64), (4, torch.int32, cutlass.Int32),
               (1, torch.uint8, cutlass.Uint8))
_COMPILED = {}


@cute.jit
def _copy_chunk(src: cute.Tensor, dst: cute.Tensor, s: cutlass.Int32, d: cutlass.Int32,
                base: cutlass.Int32):
    """Copy words base + j * _THREADS (j < _UNROLL) of page src[s] into page dst[d]."""
    words = cute.size(src, mode=[1])
    vals = cute.make_rmem_tensor((_UNROLL,), src.element_type)
    if cutlass.const_expr(words % _CHUNK == 0):
        for j in cutlass.range_constexpr(_UNROLL):
            vals[j] = src[s, base + j * _THREADS]
        for j in cutlass.range_constexpr(_UNROLL):
            dst[d, base + j * _THREADS] = vals[j]
    else:
        for j in cutlass.range_constexpr(_UNROLL):
            if base + j * _THREADS < words:
                vals[j] = src[s, base + j * _THREADS]
        for j in cutlass.range_constexpr(_UNROLL):
            if base + j * _THREADS < words:
                dst[d, base + j * _THREADS] = vals[j]


@cute.kernel
def kv_block_copy_kernel(src_k: cute.Tensor, src_v: cute.Tensor, dst_k: cute.Tensor,
                         dst_v: cute.Tensor, mapping: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    chunk, pair, kv = cute.arch.block_idx()
    s = cutlass.Int32(mapping[pair, 0])
    d = cutlass.Int32(mapping[pair, 1])
    base = chunk * _CHUNK + tidx
    if kv == 0:
        _copy_chunk(src_k, dst_k, s, d, base)
    else:
        _copy_chunk(src_v, dst_v, s, d, base)


@cute.jit
def kv_block_copy(src_k: cute.Tensor, src_v: cute.Tensor, dst_k: cute.Tensor, dst_v: cute.Tensor,
                  mapping: cute.Tensor, stream: cuda.CUstream):
    words = cute.size(src_k, mode=[1])
    pairs = cute.size(mapping, mode=[0])
    kv_block_copy_kernel(src_k, src_v, dst_k, dst_v, mapping).launch(
        grid=[(words + _CHUNK - 1) // _CHUNK, pairs, 2], block=[_THREADS, 1, 1], stream=stream)


def _word(page_bytes):
    for size, torch_dtype, cute_dtype in _WORD_TYPES:
        if page_bytes % size == 0:
            return size, torch_dtype, cute_dtype
    raise AssertionError("unreachable: every size divides by 1")


def _compile(num_blocks, page_bytes, pairs, arch=None, ptx_dir=None):
    size, _, cute_dtype = _word(page_bytes)
    pages = [make_fake_compact_tensor(cute_dtype, (num_blocks, page_bytes // size), stride_order=(1, 0),
                                      assumed_align=16) for _ in range(4)]
    mapping = make_fake_compact_tensor(cutlass.Int64, (pairs, 2), stride_order=(1, 0))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(kv_block_copy, *pages, mapping, make_fake_stream(), options=options)


def solve(src_k, src_v, dst_k, dst_v, block_mapping):
    num_blocks = src_k.shape[0]
    page_bytes = src_k[0].numel()
    pairs = block_mapping.shape[0]
    if pairs == 0:
        return None
    key = (num_blocks, page_bytes, pairs)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _, word_dtype, _ = _word(page_bytes)
    views = [t.view(num_blocks, page_bytes).view(word_dtype) for t in (src_k, src_v, dst_k, dst_v)]
    _COMPILED[key](*views, block_mapping.contiguous(),
                   cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return None


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    page_bytes = w["block_tokens"] * w["heads"] * w["head_bytes"]
    return list(_compile(w["num_blocks"], page_bytes, w["pairs"], arch, ptx_dir).kernel_info)
