"""TIRx oracle for problem 24: gather a mixed-layout FP8 MLA cache (656-byte entries) into bf16 rows.

One TIRx kernel does the gather and the up-conversion; one CTA of 64 threads per output row
(token). The CTA finds its request by walking the (few) sequence lengths in order, so nothing is
prepared eagerly, looks up block_table[request, position // block_size], and converts that cache
entry. Thread t takes NoPE bytes [8t, 8t + 8) (one 8-byte vector load) and the fp32 scale of their
group of 128 (t // 16); it writes 8 bf16 (one 16-byte store). Threads 0..7 also copy the 64 RoPE
bf16 values (bytes 528..655) unchanged, one 16-byte vector each.

The e4m3 bytes are decoded with integer arithmetic (``e4m3_to_f32``): a normal value's fp32 bit
pattern is built from its sign, exponent (rebiased from 7 to 127) and mantissa; a subnormal is
mantissa * 2^-9 with its sign (so 0x80 stays -0), exact in fp32; exponent 15 with mantissa 7 is
NaN. The decode is exact, the product with the scale is one fp32 multiply (never subnormal for
these scales, so flush-to-zero cannot act) and the bf16 conversion rounds to nearest even: the
reference's own steps, so the output is bit-exact (the problem declares it EXACT).

The host passes the byte cache together with its fp32 and bf16 views (the same memory, no copy),
so the scales and the RoPE values are read in their own types. The output row count is the sum
of seq_lens, which the host needs to allocate the output (the reference reads it too): the lengths
are copied once into pinned host memory and added by the CPU, so the TIRx kernel is the only
kernel of a call and that small copy its only other GPU work.
"""

import torch
import tvm
from tvm.script import tirx as T

NOPE, GROUPS, ROPE = 512, 4, 64
ENTRY = NOPE + 4 * GROUPS + 2 * ROPE  # 656 bytes
VEC = 8  # values per thread: 8 e4m3 bytes in, 8 bf16 out (16 bytes)
THREADS = NOPE // VEC  # 64
# The graded workload (the problem's make_inputs defaults) that precompile builds for.
WORKLOAD = dict(block_size=64)
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def e4m3_to_f32(code):
    """The fp32 value of an e4m3fn byte given as an int32 in [0, 255] (exact, NaN for 0x7f/0xff)."""
    sign = T.shift_left(T.shift_right(code, 7), 31)
    exponent = T.bitwise_and(T.shift_right(code, 3), 15)
    mantissa = T.bitwise_and(code, 7)
    normal = T.reinterpret("float32", T.bitwise_or(
        sign, T.bitwise_or(T.shift_left(exponent + 120, 23), T.shift_left(mantissa, 20))))
    tiny = T.float32(mantissa) * T.float32(0.001953125)  # mantissa * 2^-9
    subnormal = T.if_then_else(code >= 128, tiny * T.float32(-1.0), tiny)  # keeps -0 for 0x80
    nan = T.reinterpret("float32", T.bitwise_or(sign, T.int32(0x7FC00000)))
    return T.if_then_else(exponent == 0, subnormal,
                          T.if_then_else(T.bitwise_and(code, 127) == 127, nan, normal))


def _gather_kernel(block_size):
    scale_base = NOPE // 4  # first scale, in fp32 words of the entry
    rope_base = (NOPE + 4 * GROUPS) // 2  # first RoPE value, in bf16 words of the entry
    group_threads = THREADS // GROUPS

    @T.prim_func
    def mkb_cp_gather_upconvert(codes_h: T.handle, scales_h: T.handle, rope_h: T.handle, table_h: T.handle,
                                lens_h: T.handle, out_h: T.handle):
        num_blocks = T.int32()
        requests = T.int32()
        width = T.int32()
        total = T.int32()
        codes = T.match_buffer(codes_h, (num_blocks, block_size, ENTRY), "uint8")
        scales = T.match_buffer(scales_h, (num_blocks, block_size, ENTRY // 4), "float32")
        rope = T.match_buffer(rope_h, (num_blocks, block_size, ENTRY // 2), "bfloat16")
        table = T.match_buffer(table_h, (requests, width), "int32")
        lens = T.match_buffer(lens_h, (requests,), "int32")
        out = T.match_buffer(out_h, (total, NOPE + ROPE), "bfloat16")
        T.device_entry()
        token = T.cta_id([total])
        tx = T.thread_id([THREADS])
        raw = T.alloc_buffer((VEC,), "uint8", scope="local")
        res = T.alloc_buffer((VEC,), "bfloat16", scope="local")
        rp = T.alloc_buffer((VEC,), "bfloat16", scope="local")
        start: T.i32 = 0
        request: T.i32 = 0
        found: T.i32 = 0
        for i in range(requests):
            if found == 0:
                if token < start + lens[i]:
                    found = 1
                else:
                    start = start + lens[i]
                    request = request + 1
        position: T.let = token - start
        block: T.let = table[request, position // block_size]
        offset: T.let = position % block_size
        scale: T.let = scales[block, offset, scale_base + tx // group_threads]
        for j in T.vectorized(VEC):
            raw[j] = codes[block, offset, tx * VEC + j]
        for j in T.unroll(VEC):
            res[j] = T.bfloat16(e4m3_to_f32(T.int32(raw[j])) * scale)
        for j in T.vectorized(VEC):
            out[token, tx * VEC + j] = res[j]
        if tx < ROPE // VEC:
            for j in T.vectorized(VEC):
                rp[j] = rope[block, offset, rope_base + tx * VEC + j]
            for j in T.vectorized(VEC):
                out[token, NOPE + tx * VEC + j] = rp[j]

    return mkb_cp_gather_upconvert


def _build(block_size, arch):
    """Compile once per (block size, arch) and return the tvm Executable."""
    key = (block_size, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _gather_kernel(block_size)}), target=target,
                                     tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(block_size):
    key = (block_size, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


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
    if total > 0:
        codes = cache.contiguous()
        _kernel_fn(block_size)(codes, codes.view(torch.float32), codes.view(torch.bfloat16),
                               block_table.contiguous(), seq_lens.contiguous(), out)
    return out


def _symbols(source):
    """Kernel names declared in a generated CUDA source (``<global_symbol>_kernel``)."""
    names = []
    for part in source.split("__global__ void ")[1:]:
        if part.startswith("__launch_bounds__"):
            part = part[part.index(")") + 1:]
        name = part[:part.index("(")].strip()
        if name not in names:
            names.append(name)
    return names


def kernel_sources(arch="sm_90a", block_size=WORKLOAD["block_size"]):
    """{kernel symbol: generated CUDA source} at the graded cache geometry (blocks of 64 entries)."""
    source = _build(block_size, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
