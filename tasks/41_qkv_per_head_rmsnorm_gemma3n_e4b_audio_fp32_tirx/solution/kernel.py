"""TIRx oracle for problem 41: Q/K/V projections (fp32) with per-head RMSNorm on Q and K.

One TIRx kernel, ``mkb_qkv_proj_norm`` (built with and without the norm epilogue), launched once per
projection: q and k with the norm, v without. It is a shared-memory tiled SIMT GEMM in fp32: the
reference is an fp32 GEMM judged at fp32 tolerance, so TF32 tensor cores would be far too coarse
(and TIRx 0.27 has no WGMMA path for sm_90 anyway); the products run as CUDA-core FMAs with fp32
accumulation. A 256-thread CTA computes a 128 x 128 tile; K advances in slices of 16: each thread
loads two 16-byte vectors (8 fp32) of x and of W per slice into registers (the next slice's loads
are issued before the current slice is computed) and stores them K-major into shared memory; each
thread then accumulates an 8 x 8 block of outputs (rows ty*4 + {0..3} and 64 + ty*4 + {0..3},
columns tc*4 + {0..3} and 64 + tc*4 + {0..3}, ty = tid / 16, tc = tid % 16) from float4
shared-memory reads.

Norm epilogue: a head's columns lie in one tile (head_dim divides 128), and the threads sharing a
row are the 16 consecutive lanes of a half-warp, so a row's sum of squares over a head is an xor
shuffle inside those lanes (all 16 for head_dim 128; aligned groups of head_dim / 4 lanes, per
column half, for smaller heads). Then t * rsqrt(sum / head_dim + eps) * w in fp32, the
reference's order; the fast-math rsqrt (about 2^-22 relative) is far below the GEMM's own
rounding. Shapes that are not tile multiples (the small workload) are zero-padded by the host into
scratch tiles (a zero row normalises to zero); the graded shapes need none.
"""

import torch
import tvm
from tvm.script import tirx as T

BM = 128
BN = 128
BK = 16
THREADS = 256
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _kernel(m, n, k, head_dim, norm):
    """y [m, n] = x [m, k] W [n, k]^T (tile multiples), with the per-head RMSNorm epilogue if ``norm``."""
    k_tiles = k // BK
    tiles_n = n // BN
    full = head_dim == BN
    lanes = head_dim // 4  # lanes per head and column half when the head is narrower than the tile
    offsets = []
    offset = 8 if full else lanes // 2
    while offset > 0:
        offsets.append(offset)
        offset //= 2

    @T.prim_func
    def mkb_qkv_proj_norm(a_h: T.handle, b_h: T.handle, c_h: T.handle, w_h: T.handle, eps: T.float32):
        A = T.match_buffer(a_h, (m, k), "float32")
        B = T.match_buffer(b_h, (n, k), "float32")
        C = T.match_buffer(c_h, (m, n), "float32")
        W = T.match_buffer(w_h, (head_dim,), "float32")
        T.device_entry()
        cta = T.cta_id([(m // BM) * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK, BM), "float32", scope="shared")
        b_s = T.alloc_buffer((BK, BN), "float32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((8,), "float32", scope="local")
        bf = T.alloc_buffer((8,), "float32", scope="local")
        ra = T.alloc_buffer((8,), "float32", scope="local")
        rb = T.alloc_buffer((8,), "float32", scope="local")
        wv = T.alloc_buffer((8,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx // 2
        lk: T.let = (tx % 2) * 8
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            for j in T.vectorized(4):
                ra[h * 4 + j] = A[row0 + lrow, lk + h * 4 + j]
            for j in T.vectorized(4):
                rb[h * 4 + j] = B[col0 + lrow, lk + h * 4 + j]
        for kt in range(k_tiles):
            for j in T.unroll(8):
                a_s[lk + j, lrow] = ra[j]
                b_s[lk + j, lrow] = rb[j]
            T.cuda.cta_sync()
            if kt + 1 < k_tiles:  # next slice's loads fly while this slice is computed
                for h in T.unroll(2):
                    for j in T.vectorized(4):
                        ra[h * 4 + j] = A[row0 + lrow, (kt + 1) * BK + lk + h * 4 + j]
                    for j in T.vectorized(4):
                        rb[h * 4 + j] = B[col0 + lrow, (kt + 1) * BK + lk + h * 4 + j]
            for kk in T.unroll(BK):
                for i in T.vectorized(4):
                    af[i] = a_s[kk, ty * 4 + i]
                for i in T.vectorized(4):
                    af[4 + i] = a_s[kk, 64 + ty * 4 + i]
                for j in T.vectorized(4):
                    bf[j] = b_s[kk, tc * 4 + j]
                for j in T.vectorized(4):
                    bf[4 + j] = b_s[kk, 64 + tc * 4 + j]
                for i in T.unroll(8):
                    for j in T.unroll(8):
                        acc[i * 8 + j] = acc[i * 8 + j] + af[i] * bf[j]
            T.cuda.cta_sync()
        if norm:
            for j in T.unroll(4):
                wv[j] = W[(tc * 4 + j) % head_dim]
                wv[4 + j] = W[(64 + tc * 4 + j) % head_dim]
            for i in T.unroll(8):
                s_lo: T.f32 = T.float32(0.0)
                s_hi: T.f32 = T.float32(0.0)
                for j in T.unroll(4):
                    s_lo = s_lo + acc[i * 8 + j] * acc[i * 8 + j]
                    s_hi = s_hi + acc[i * 8 + 4 + j] * acc[i * 8 + 4 + j]
                if full:
                    s_lo = s_lo + s_hi
                    for r in T.unroll(len(offsets)):
                        s_lo = s_lo + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), s_lo, T.shift_right(8, r), 32)
                    s_hi = s_lo
                else:
                    for r in T.unroll(len(offsets)):
                        s_lo = s_lo + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), s_lo,
                                                             T.shift_right(lanes // 2, r), 32)
                        s_hi = s_hi + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), s_hi,
                                                             T.shift_right(lanes // 2, r), 32)
                r_lo: T.f32 = T.rsqrt(s_lo / T.float32(head_dim) + eps)
                r_hi: T.f32 = T.rsqrt(s_hi / T.float32(head_dim) + eps)
                for j in T.unroll(4):
                    acc[i * 8 + j] = acc[i * 8 + j] * r_lo * wv[j]
                    acc[i * 8 + 4 + j] = acc[i * 8 + 4 + j] * r_hi * wv[4 + j]
        for i in T.unroll(8):
            for jh in T.unroll(2):
                for j in T.vectorized(4):
                    C[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] = acc[i * 8 + jh * 4 + j]

    return mkb_qkv_proj_norm


def _build(shape, arch):
    """Compile once per (m, n, k, head_dim, norm, arch) and return the tvm Executable."""
    key = (shape, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _kernel(*shape)}), target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(shape):
    key = (shape, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _plan_ok(head_dim):
    lanes = head_dim // 4
    return head_dim == BN or (head_dim % 4 == 0 and 1 <= lanes <= 16 and lanes & (lanes - 1) == 0)


def solve(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight, q_norm_weight, k_norm_weight, eps):
    batch, seq, dim = hidden_states.shape
    head_dim = q_norm_weight.shape[0]
    if not _plan_ok(head_dim):
        raise ValueError("head_dim must be 128 or 4 times a power of two <= 16")
    tokens, n = batch * seq, q_proj_weight.shape[0]
    x = hidden_states.reshape(tokens, dim).contiguous()
    outs = [torch.empty(tokens, n, dtype=torch.float32, device=x.device) for _ in range(3)]
    if tokens > 0:
        padded = tokens % BM or n % BN or dim % BK
        mp, np_, kp = _up(tokens, BM), _up(n, BN), _up(dim, BK)
        if padded:  # zero-pad to whole tiles; zero rows and columns add nothing and normalise to zero
            xp = torch.zeros(mp, kp, dtype=torch.float32, device=x.device)
            xp[:tokens, :dim] = x
            x = xp
        for out, weight, nw, norm in ((outs[0], q_proj_weight, q_norm_weight, True),
                                      (outs[1], k_proj_weight, k_norm_weight, True),
                                      (outs[2], v_proj_weight, q_norm_weight, False)):
            w = weight.contiguous()
            c = out
            if padded:
                w = torch.zeros(np_, kp, dtype=torch.float32, device=x.device)
                w[:n, :dim] = weight
                c = torch.empty(mp, np_, dtype=torch.float32, device=x.device)
            _kernel_fn((mp, np_, kp, head_dim, norm))(x, w, c, nw.contiguous(), float(eps))
            if padded:
                out.copy_(c[:tokens, :n])
    return tuple(o.view(batch, seq, n // head_dim, head_dim) for o in outs)


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


def kernel_sources(arch="sm_90a", batch=64, seq=128, heads=8, head_dim=128, norm=True):
    """{kernel symbol: generated CUDA source} at the graded workload (the norm variant by default)."""
    m, n = batch * seq, heads * head_dim
    source = _build((m, n, n, head_dim, norm), arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    names = list(kernel_sources(arch, norm=True))
    kernel_sources(arch, norm=False)
    return names
