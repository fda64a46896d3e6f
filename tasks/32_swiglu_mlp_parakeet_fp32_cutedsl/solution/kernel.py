"""CuTe DSL oracle for problem 32: Parakeet gated (SwiGLU) MLP with a fused gate/up weight, fp32.

One DSL kernel, ``mlp_gemm_kernel``, built twice: the gate/up projection with the SwiGLU epilogue,
and the down projection. It is a shared-memory tiled SIMT GEMM in fp32: the reference is an fp32
GEMM judged at fp32 tolerance, so TF32 tensor cores would be far too coarse; the products run as
CUDA-core FMAs with fp32 accumulation (slower than cuBLAS's fp32 GEMM that the eager reference
uses). A 256-thread CTA computes a 128 x 128 tile of x W^T; K advances in slices of 16: each thread
loads two 16-byte vectors (8 fp32) of the activation row and of the weight row per slice into
registers (the next slice's loads are issued before the current slice is computed) and stores them
K-major into shared memory; each thread then accumulates an 8 x 8 block (rows ty*4 + {0..3} and
64 + ty*4 + {0..3}, tile columns tc*4 + {0..3} and 64 + tc*4 + {0..3}, ty = tid / 16, tc = tid % 16)
from 16-byte shared-memory reads. The sums are two-level: each chunk of 8 slices (128 K values) is
accumulated from zero into a second register block and then added to the running total, which
keeps the fp32 rounding error near that of a blocked library GEMM.

Gate/up build: a CTA owns 64 output columns c0 .. c0 + 63; its weight tile rows 0-63 are the gate
rows c0 + r of W_gu and rows 64-127 the up rows ff + c0 + r, so each thread's tile columns tc*4 + j
and 64 + tc*4 + j are the gate and the up sum of the same output column c0 + tc*4 + j, and it writes
a = silu(g) * u = g / (1 + exp(-g)) * u in fp32 (the reference's order, IEEE division). exp(x) is
ex2.approx of x log2(e) corrected for the rounding of that product (an fma recovers it), about as
accurate as CUDA's expf. The activation stays fp32 (the reference does not round it). Down build:
y = a W_down^T, plain fp32 stores.
Shapes that are not tile multiples (the small workload) are zero-padded by the host into scratch
tiles (gate and up halves padded separately; padded columns give a = 0 and meet zero down
weights); the graded shapes need none.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 5): 5.4 ms against the
eager reference's 4.4 ms (0.82x). Over the problem's declared arithmetic (0.21 TFLOP, its
physical_floor) that is 38.2 TFLOP/s against eager's 46.6: both issue the fp32 products as CUDA-core
FMAs (the H100 SXM's rate without tensor cores is about 67 TFLOP/s), and the cuBLAS SGEMM kernels that
eager calls issue them faster than these tiled SIMT loops; fusing the elementwise steps does not make up
the difference. The route that would beat eager, not taken here: fp32-accurate products on the tensor
cores by the 3xTF32 split (each fp32 operand as a TF32 high part plus a TF32 residual; three TF32 WGMMA
products summed in fp32), at several times the FMA rate, keeping this kernel's fusion.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=128, dim=1024, ff=4096)
_BM, _BN, _BK = 128, 128, 16
_FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
_THREADS = 256
_LOG2E = 1.4426950408889634
_LOG2E_TAIL = 1.925963033500e-08  # log2(e) - fp32(log2(e))
_LN2 = 0.6931471805599453
_COMPILED = {}


def _exp(x):
    """exp(x) = 2^t (1 + ln2 d), t = fp32(x log2 e), d = the rounding error of t plus x times log2(e)'s tail."""
    t = x * _LOG2E
    d = cute.math.fma(x, _LOG2E, -t) + x * _LOG2E_TAIL
    p = cute.math.exp2(t)
    return cute.math.fma(p, d * _LN2, p)


@cute.kernel
def mlp_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, swiglu: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    k_tiles = cute.size(mA, mode=[1]) // _BK
    tile_n = _BN // 2 if swiglu else _BN  # output columns per CTA
    tiles_n = cute.size(mC, mode=[1]) // tile_n
    row0 = (cta // tiles_n) * _BM
    col0 = (cta % tiles_n) * tile_n
    ty = tidx // 16
    tc = tidx % 16
    lrow = tidx // 2
    lchunk = tidx % 2  # which 8-wide half of the 16-wide K slice this thread loads

    smem = cutlass.memory.SmemAllocator()
    a_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _BM), stride=(_BM, 1)), 16)
    b_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _BN), stride=(_BN, 1)), 16)
    acc = cute.make_rmem_tensor((64,), cutlass.Float32)
    acc.fill(0.0)
    part = cute.make_rmem_tensor((64,), cutlass.Float32)
    af = cute.make_rmem_tensor((8,), cutlass.Float32)
    bf = cute.make_rmem_tensor((8,), cutlass.Float32)
    ra = cute.make_rmem_tensor((8,), cutlass.Float32)
    rb = cute.make_rmem_tensor((8,), cutlass.Float32)
    g_a = cute.zipped_divide(mA[row0 + lrow, None], (8,))  # (8, K / 8)
    b_row = col0 + lrow
    if cutlass.const_expr(swiglu):  # tile rows 0-63: gate rows col0 + r; rows 64-127: up rows ff + col0 + r - 64
        b_row = col0 + lrow + (lrow // 64) * (cute.size(mB, mode=[0]) // 2 - 64)
    g_b = cute.zipped_divide(mB[b_row, None], (8,))

    ra.store(g_a[None, lchunk].load())
    rb.store(g_b[None, lchunk].load())
    for kc in range(k_tiles // _FOLD):
        part.fill(0.0)
        for ks in range(_FOLD):
            kt = kc * _FOLD + ks
            for j in cutlass.range_constexpr(8):
                a_s[lchunk * 8 + j, lrow] = ra[j]
                b_s[lchunk * 8 + j, lrow] = rb[j]
            cute.arch.sync_threads()
            if kt + 1 < k_tiles:  # the next slice's loads fly while this slice is computed
                ra.store(g_a[None, (kt + 1) * 2 + lchunk].load())
                rb.store(g_b[None, (kt + 1) * 2 + lchunk].load())
            for kk in cutlass.range_constexpr(_BK):
                s_a = cute.zipped_divide(a_s[kk, None], (4,))  # (4, 32)
                s_b = cute.zipped_divide(b_s[kk, None], (4,))
                lo = s_a[None, ty].load()
                hi = s_a[None, 16 + ty].load()
                blo = s_b[None, tc].load()
                bhi = s_b[None, 16 + tc].load()
                for i in cutlass.range_constexpr(4):
                    af[i] = lo[i]
                    af[4 + i] = hi[i]
                    bf[i] = blo[i]
                    bf[4 + i] = bhi[i]
                for i in cutlass.range_constexpr(8):
                    for j in cutlass.range_constexpr(8):
                        part[i * 8 + j] = part[i * 8 + j] + af[i] * bf[j]
            cute.arch.sync_threads()
        for i in cutlass.range_constexpr(64):  # fold the chunk's partial sums into the total
            acc[i] = acc[i] + part[i]

    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    for i in cutlass.range_constexpr(8):
        row = row0 + (i // 4) * 64 + ty * 4 + i % 4
        g_c = cute.zipped_divide(mC[row, None], (4,))
        if cutlass.const_expr(swiglu):  # column tc*4 + j of gate is in acc[.. + j], of up in acc[.. + 4 + j]
            for j in cutlass.range_constexpr(4):
                gate = acc[i * 8 + j]
                out[j] = gate / (1.0 + _exp(-gate)) * acc[i * 8 + 4 + j]
            g_c[None, col0 // 4 + tc].store(out.load())
        else:
            for jh in cutlass.range_constexpr(2):
                for j in cutlass.range_constexpr(4):
                    out[j] = acc[i * 8 + jh * 4 + j]
                g_c[None, col0 // 4 + jh * 16 + tc].store(out.load())


@cute.jit
def mlp_gemm(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, swiglu: cutlass.Constexpr, stream: cuda.CUstream):
    tile_n = _BN // 2 if swiglu else _BN
    tiles = (cute.size(mC, mode=[0]) // _BM) * (cute.size(mC, mode=[1]) // tile_n)
    mlp_gemm_kernel(mA, mB, mC, swiglu).launch(grid=[tiles, 1, 1], block=[_THREADS, 1, 1], stream=stream)


def _compile(m, n, k, swiglu, arch=None, ptx_dir=None):
    """A [m, k], W [n or 2 n, k], C [m, n] (m multiple of 128, n of 128 (64 for swiglu), k of 128)."""
    a = make_fake_compact_tensor(cutlass.Float32, (m, k), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(cutlass.Float32, (2 * n if swiglu else n, k), stride_order=(1, 0), assumed_align=16)
    c = make_fake_compact_tensor(cutlass.Float32, (m, n), stride_order=(1, 0), assumed_align=16)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(mlp_gemm, a, b, c, swiglu, make_fake_stream(), options=options)


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(t, shape):
    if tuple(t.shape) == tuple(shape):
        return t.contiguous()
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def solve(hidden_states, gate_up_weight, down_weight):
    batch, seq, dim = hidden_states.shape
    ff = down_weight.shape[1]
    tokens = batch * seq
    dev = hidden_states.device
    out = torch.empty(batch, seq, dim, dtype=torch.float32, device=dev)
    if tokens == 0:
        return out
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    fold = _BK * _FOLD
    mp, kp, fp, np_ = _up(tokens, _BM), _up(dim, fold), _up(ff, fold), _up(dim, _BN)
    x = _padded(hidden_states.reshape(tokens, dim), (mp, kp))
    if (fp, kp) == (ff, dim):
        w_gu = gate_up_weight.contiguous()
    else:  # gate rows at 0 .., up rows at fp ..
        w_gu = torch.zeros(2 * fp, kp, dtype=torch.float32, device=dev)
        w_gu[:ff, :dim] = gate_up_weight[:ff]
        w_gu[fp:fp + ff, :dim] = gate_up_weight[ff:]
    act = torch.empty(mp, fp, dtype=torch.float32, device=dev)
    c = out.view(tokens, dim) if (mp, np_) == (tokens, dim) else torch.empty(mp, np_, dtype=torch.float32,
                                                                             device=dev)
    key = (mp, fp, kp, True)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _COMPILED[key](x, w_gu, act, stream)
    key = (mp, np_, fp, False)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _COMPILED[key](act, _padded(down_weight, (np_, fp)), c, stream)
    if c.data_ptr() != out.data_ptr():
        out.view(tokens, dim).copy_(c[:tokens, :dim])
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile both builds (gate/up with the SwiGLU epilogue, down plain) for the fixed workload."""
    w = WORKLOAD
    m, dim, ff = w["batch"] * w["seq"], w["dim"], w["ff"]
    names = list(_compile(m, ff, dim, True, arch, ptx_dir).kernel_info)
    names += list(_compile(m, dim, ff, False, arch, ptx_dir).kernel_info)
    return names
