"""A byte copy done by a CuTe DSL kernel, for building negative controls.

``dsl_copy(t)`` returns a new tensor holding the same bytes as ``t``; the bytes travel through one
CuTe DSL kernel over a flattened uint8 view, so any dtype works. The grader must reject a submission
that computes eagerly and only routes the result through this copy: the copy launches a DSL kernel
that the output depends on, yet it does none of the problem's computation. The module is
self-contained because its source is inlined into generated control files.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

_DSL_COPY_THREADS = 256
_DSL_COPY_COMPILED = {}


@cute.kernel
def dsl_byte_copy_kernel(src: cute.Tensor, dst: cute.Tensor, n: cutlass.Int32):
    """One thread per byte: dst[i] = src[i] for i < n."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * _DSL_COPY_THREADS + tidx
    if i < n:
        dst[i] = src[i]


@cute.jit
def dsl_byte_copy(src: cute.Tensor, dst: cute.Tensor, stream: cuda.CUstream):
    n = cute.size(src)
    blocks = (n + _DSL_COPY_THREADS - 1) // _DSL_COPY_THREADS
    dsl_byte_copy_kernel(src, dst, n).launch(grid=[blocks, 1, 1], block=[_DSL_COPY_THREADS, 1, 1],
                                             stream=stream)


def _dsl_copy_compile(arch=None, ptx_dir=None):
    """Compile once for any length (the length is a runtime symbol); on the GPU the arch is detected."""
    n = cute.sym_int()
    src = make_fake_compact_tensor(cutlass.Uint8, (n,))
    dst = make_fake_compact_tensor(cutlass.Uint8, (n,))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(dsl_byte_copy, src, dst, make_fake_stream(), options=options)


def dsl_copy(t: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor with ``t``'s shape, dtype and bytes, copied by a DSL kernel."""
    src = t.contiguous()
    out = torch.empty_like(src, memory_format=torch.contiguous_format)
    nbytes = src.numel() * src.element_size()
    if nbytes == 0:
        return out
    assert nbytes < 2**31, "dsl_copy indexes bytes with int32"
    if "copy" not in _DSL_COPY_COMPILED:
        _DSL_COPY_COMPILED["copy"] = _dsl_copy_compile()
    src_bytes = src.reshape(-1).view(torch.uint8)
    dst_bytes = out.reshape(-1).view(torch.uint8)
    _DSL_COPY_COMPILED["copy"](src_bytes, dst_bytes, cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile the copy kernel without a GPU; return its kernel names (PTX to ``ptx_dir`` if given)."""
    return list(_dsl_copy_compile(arch, ptx_dir).kernel_info)
