"""A byte copy through a TIRx CUDA kernel, for the "eager result routed through a DSL copy" control.

``dsl_copy(t)`` returns a new tensor with the bytes of ``t`` (same shape and dtype, contiguous),
moved by a one-byte-per-thread TIRx kernel over flattened uint8 views. A submission that computes
its answer in eager torch and only passes it through this copy does launch a DSL kernel whose
result the output depends on, so the grader must reject it by other means. The module is
self-contained because its source is inlined into generated control submissions.
"""

import torch
import tvm
from tvm.script import tirx as _tirx  # private alias: this source is inlined into other files

_COPY_THREADS = 256
_COPY_FNS: dict = {}


@_tirx.prim_func
def mkb_dsl_copy(src_h: _tirx.handle, dst_h: _tirx.handle):
    n = _tirx.int32()
    src = _tirx.match_buffer(src_h, (n,), "uint8")
    dst = _tirx.match_buffer(dst_h, (n,), "uint8")
    _tirx.device_entry()
    bx = _tirx.cta_id([_tirx.ceildiv(n, _COPY_THREADS)])
    tx = _tirx.thread_id([_COPY_THREADS])
    i: _tirx.let = bx * _COPY_THREADS + tx
    if i < n:
        dst[i] = src[i]


def _copy_build(arch):
    """Compile the copy kernel for ``arch`` (n is symbolic, so once per arch)."""
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    with target:
        return tvm.compile(tvm.IRModule({"main": mkb_dsl_copy}), target=target, tir_pipeline="tirx")


def _copy_fn(device):
    major, minor = torch.cuda.get_device_capability(device)
    arch = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    if arch not in _COPY_FNS:
        exe = _copy_build(arch)
        _COPY_FNS[arch] = (exe, exe.mod["main"])
    return _COPY_FNS[arch][1]


def dsl_copy(t: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor with the same bytes as ``t``, copied by the TIRx kernel."""
    src = t.contiguous()
    out = torch.empty_like(src, memory_format=torch.contiguous_format)
    nbytes = src.numel() * src.element_size()
    if nbytes == 0:
        return out
    if nbytes >= 2**31:
        raise ValueError("dsl_copy: tensor too large for 32-bit indexing")
    _copy_fn(src.device)(src.reshape(-1).view(torch.uint8), out.reshape(-1).view(torch.uint8))
    return out
