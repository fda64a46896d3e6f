"""CuTe DSL oracle for problem 29: FLUX feed-forward block (Linear, tanh GELU, Linear), fp32.

One DSL kernel, ``ff_gemm_kernel``, built twice: fc1 with the bias + tanh-GELU epilogue, fc2 with
the bias epilogue. It is a shared-memory tiled SIMT GEMM in fp32: the reference is an fp32 GEMM
judged at fp32 tolerance, so TF32 tensor cores would be far too coarse; the products run as
CUDA-core FMAs with fp32 accumulation (slower than cuBLAS's fp32 GEMM that the eager reference
uses). A 256-thread CTA computes a 128 x 128 tile; K advances in slices of 16: each thread loads two
16-byte vectors (8 fp32) of the activation row and of the weight row per slice into registers (the
next slice's loads are issued before the current slice is computed) and stores them K-major into
shared memory; each thread then accumulates an 8 x 8 block of outputs (rows ty*4 + {0..3} and
64 + ty*4 + {0..3}, columns tc*4 + {0..3} and 64 + tc*4 + {0..3}, ty = tid / 16, tc = tid % 16) from
16-byte shared-memory reads. The sums are two-level: each chunk of 8 slices (128 K values) is
accumulated from zero into a second register block and then added to the running total, which keeps
the fp32 rounding error of the long sums (K = 3072 and 12288) near that of a blocked library GEMM
rather than growing like a strictly sequential sum.

Epilogues, in the reference's fp32 order: h = sum + b (one fp32 add after the GEMM, as the
reference's separate bias add); fc1 then writes a = 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))
with torch's operation order and a precise tanh (CUDA's tanhf algorithm, about 2 ulp), and fc2
writes y = sum + b2. The activation stays fp32 between the GEMMs (the reference does not round it).
Shapes that are not tile multiples (the small workload) are zero-padded by the host into scratch
tiles (padded fc1 columns give gelu(0) = 0 and meet zero fc2 weights); the graded shapes need none.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 2): 60.9 ms against the
eager reference's 49.9 ms (0.82x). Over the problem's declared arithmetic (2.47 TFLOP, its
physical_floor) that is 40.6 TFLOP/s against eager's 49.6: both issue the fp32 products as CUDA-core
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
WORKLOAD = dict(batch=32, seq=512, dim=3072, ff=12288)
_BM, _BN, _BK = 128, 128, 16
_FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
_THREADS = 256
_SQRT_2_OVER_PI = 0.7978845608028654  # torch's kBeta = M_SQRT2 * M_2_SQRTPI * 0.5
_KAPPA = 0.044715
_COMPILED = {}


@cute.kernel
def ff_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, gelu: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    k_tiles = cute.size(mA, mode=[1]) // _BK
    tiles_n = cute.size(mC, mode=[1]) // _BN
    row0 = (cta // tiles_n) * _BM
    col0 = (cta % tiles_n) * _BN
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
    g_b = cute.zipped_divide(mB[col0 + lrow, None], (8,))

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

    bias = cute.make_rmem_tensor((8,), cutlass.Float32)
    for jh in cutlass.range_constexpr(2):
        for j in cutlass.range_constexpr(4):
            bias[jh * 4 + j] = mBias[col0 + jh * 64 + tc * 4 + j]
    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    for i in cutlass.range_constexpr(8):
        row = row0 + (i // 4) * 64 + ty * 4 + i % 4
        g_c = cute.zipped_divide(mC[row, None], (4,))
        for jh in cutlass.range_constexpr(2):
            for j in cutlass.range_constexpr(4):
                h = acc[i * 8 + jh * 4 + j] + bias[jh * 4 + j]
                if cutlass.const_expr(gelu):  # torch: 0.5 * x * (1 + tanh(kBeta * (x + kKappa * x^3)))
                    inner = _SQRT_2_OVER_PI * (h + _KAPPA * (h * h * h))
                    h = 0.5 * h * (1.0 + cute.math.tanh(inner))
                out[j] = h
            g_c[None, col0 // 4 + jh * 16 + tc].store(out.load())


@cute.jit
def ff_gemm(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, gelu: cutlass.Constexpr,
            stream: cuda.CUstream):
    tiles = (cute.size(mC, mode=[0]) // _BM) * (cute.size(mC, mode=[1]) // _BN)
    ff_gemm_kernel(mA, mB, mBias, mC, gelu).launch(grid=[tiles, 1, 1], block=[_THREADS, 1, 1], stream=stream)


def _compile(m, n, k, gelu, arch=None, ptx_dir=None):
    """A [m, k], W [n, k], bias [n], C [m, n] (m, n multiples of 128, k of 128); one build per epilogue."""
    a = make_fake_compact_tensor(cutlass.Float32, (m, k), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(cutlass.Float32, (n, k), stride_order=(1, 0), assumed_align=16)
    bias = make_fake_compact_tensor(cutlass.Float32, (n,), assumed_align=16)
    c = make_fake_compact_tensor(cutlass.Float32, (m, n), stride_order=(1, 0), assumed_align=16)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(ff_gemm, a, b, bias, c, gelu, make_fake_stream(), options=options)


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(t, shape):
    if tuple(t.shape) == tuple(shape):
        return t.contiguous()
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def solve(hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    batch, seq, dim = hidden_states.shape
    ff = fc1_weight.shape[0]
    tokens = batch * seq
    dev = hidden_states.device
    out = torch.empty(batch, seq, dim, dtype=torch.float32, device=dev)
    if tokens == 0:
        return out
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    mp, kp, fp, np_ = _up(tokens, _BM), _up(dim, _BK * _FOLD), _up(ff, _BN), _up(dim, _BN)
    x = _padded(hidden_states.reshape(tokens, dim), (mp, kp))
    act = torch.empty(mp, fp, dtype=torch.float32, device=dev)
    c = out.view(tokens, dim) if (mp, np_) == (tokens, dim) else torch.empty(mp, np_, dtype=torch.float32,
                                                                             device=dev)
    key = (mp, fp, kp, True)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _COMPILED[key](x, _padded(fc1_weight, (fp, kp)), _padded(fc1_bias, (fp,)), act, stream)
    key = (mp, np_, fp, False)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _COMPILED[key](act, _padded(fc2_weight, (np_, fp)), _padded(fc2_bias, (np_,)), c, stream)
    if c.data_ptr() != out.data_ptr():
        out.view(tokens, dim).copy_(c[:tokens, :dim])
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile both builds (fc1 with the GELU epilogue, fc2 without) for the fixed workload."""
    w = WORKLOAD
    m, dim, ff = w["batch"] * w["seq"], w["dim"], w["ff"]
    names = list(_compile(m, ff, dim, True, arch, ptx_dir).kernel_info)
    names += list(_compile(m, dim, ff, False, arch, ptx_dir).kernel_info)
    return names
