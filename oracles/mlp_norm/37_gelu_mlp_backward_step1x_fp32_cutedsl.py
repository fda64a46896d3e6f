"""CuTe DSL oracle for problem 37: backward of a tanh-GELU MLP from saved activations (Step1X-Edit), fp32.

Two DSL kernels. ``bwd_gemm_kernel`` is built for the four GEMMs, ``colsum_kernel`` for the two bias
gradients:
  dZ = (dY W2) * gelu_tanh'(z)   (A = dY [tokens, dim], B = W2 [dim, ff], GELU-gradient epilogue)
  dW2 = dY^T act                 (A = dY read transposed, B = act [tokens, ff])
  dX = dZ W1                     (A = dZ [tokens, ff], B = W1 [ff, dim])
  dW1 = dZ^T x                   (A = dZ read transposed, B = x [tokens, dim])
  db2 = column sums of dY, db1 = column sums of dZ.

``bwd_gemm_kernel`` is a shared-memory tiled SIMT GEMM in fp32 (the reference's GEMMs are true fp32
and judged at fp32 tolerance, so TF32 tensor cores would be far too coarse; this is slower than the
cuBLAS fp32 GEMMs of the eager reference). A 256-thread CTA computes a 128 x 128 tile; K advances in
slices of 16, held K-major in shared memory. The B operand is always stored [K, N]: thread t loads
8 consecutive values of slice row t / 16 at columns (t % 16) * 8 and stores them unchanged. A stored
[M, K] is loaded as 8 consecutive K values of row t / 2 (half t % 2) and transposed on the store; A
read transposed (stored [K, M]) is loaded like B. The next slice's loads are issued before the
current slice is computed. Each thread accumulates an 8 x 8 block (rows ty*4 + {0..3} and
64 + ty*4 + {0..3}, columns tc*4 + {0..3} and 64 + tc*4 + {0..3}, ty = tid / 16, tc = tid % 16) from
16-byte shared-memory reads. Sums are two-level: each chunk of 128 K values is accumulated from zero
and then added to the running total, which keeps the error of the long sums (K = 2048 to 8192) near
that of a blocked library GEMM. The dZ build multiplies the fp32 sum by gelu_tanh'(z) in the
reference's operation order (tanh is the precise library algorithm, not tanh.approx).

``colsum_kernel``: a 256-thread CTA owns 32 columns: lane = column (a warp reads 128 contiguous bytes
of a row), warp w takes rows w, w + 8, ...; each thread sums in chunks of 16 rows (two-level), then
the 8 warp partials are added in order through shared memory.

Shapes that are not tile multiples (the small workload) are zero-padded by the host: padded rows and
columns are zero in every operand (z = 0 meets dA = 0), so they add nothing; results are sliced.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 5): 29.1 ms against the
eager reference's 25.2 ms (0.87x). Over the problem's declared arithmetic (1.10 TFLOP, its
physical_floor) that is 37.8 TFLOP/s against eager's 43.6: both issue the fp32 products as CUDA-core
FMAs (the H100 SXM's rate without tensor cores is about 67 TFLOP/s), and the cuBLAS SGEMM kernels that
eager calls issue them faster than these tiled SIMT loops; fusing the elementwise steps does not make up
the difference. The route that would beat eager, not taken here: fp32-accurate products on the tensor
cores by the 3xTF32 split (each fp32 operand as a TF32 high part plus a TF32 residual; three TF32 WGMMA
products summed in fp32), at several times the FMA rate, keeping this kernel's fusion.
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=128, dim=2048, ff=8192)
_BM, _BN, _BK = 128, 128, 16
_FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
_THREADS = 256
_CS_COLS = 32  # columns per column-sum CTA
_CS_CHUNK = 16  # rows per thread summed from zero before they are added to the total
_ROOT = math.sqrt(2 / math.pi)
_C = 0.044715
_C3 = 3 * 0.044715  # the reference's 3 * GELU_C, folded in Python
_COMPILED = {}


def _gelu_tanh_grad(z):
    """0.5 (1 + t) + 0.5 z (1 - t^2) root (1 + 3c z^2), t = tanh(root z (1 + c z^2)), in the reference's order."""
    z2 = z * z
    t = cute.math.tanh(_ROOT * z * (1.0 + _C * z2))
    return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * _ROOT * (1.0 + _C3 * z2)


@cute.kernel
def bwd_gemm_kernel(a_km: cutlass.Constexpr, gelu_grad: cutlass.Constexpr, mA: cute.Tensor, mB: cute.Tensor,
                    mC: cute.Tensor, mZ: cute.Tensor, k: cutlass.Constexpr):
    # The flags lead the signature so that they lead the mangled kernel name, which CuTe DSL cuts at
    # 180 characters: at the graded workload the dX and dW1 builds differ only in a_km.
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    k_tiles = k // _BK
    tiles_n = cute.size(mC, mode=[1]) // _BN
    row0 = (cta // tiles_n) * _BM
    col0 = (cta % tiles_n) * _BN
    ty = tidx // 16
    tc = tidx % 16
    lrow = tidx // 2
    lchunk = tidx % 2  # [M, K] A: which 8-wide half of the 16-wide K slice this thread loads
    kr = tidx // 16  # [K, X] operands: the slice row this thread loads
    xq = tidx % 16  # ... and its 8-wide column group

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
    g_a = cute.zipped_divide(mA[row0 + lrow, None], (8,))  # [M, K] A: (8, K / 8)

    if cutlass.const_expr(a_km):
        ra.store(cute.zipped_divide(mA[kr, None], (8,))[None, row0 // 8 + xq].load())
    else:
        ra.store(g_a[None, lchunk].load())
    rb.store(cute.zipped_divide(mB[kr, None], (8,))[None, col0 // 8 + xq].load())
    for kc in range(k_tiles // _FOLD):
        part.fill(0.0)
        for ks in range(_FOLD):
            kt = kc * _FOLD + ks
            if cutlass.const_expr(a_km):
                cute.zipped_divide(a_s[kr, None], (8,))[None, xq].store(ra.load())
            else:
                for j in cutlass.range_constexpr(8):
                    a_s[lchunk * 8 + j, lrow] = ra[j]
            cute.zipped_divide(b_s[kr, None], (8,))[None, xq].store(rb.load())
            cute.arch.sync_threads()
            if kt + 1 < k_tiles:  # the next slice's loads fly while this slice is computed
                nrow = (kt + 1) * _BK + kr
                if cutlass.const_expr(a_km):
                    ra.store(cute.zipped_divide(mA[nrow, None], (8,))[None, row0 // 8 + xq].load())
                else:
                    ra.store(g_a[None, (kt + 1) * 2 + lchunk].load())
                rb.store(cute.zipped_divide(mB[nrow, None], (8,))[None, col0 // 8 + xq].load())
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
        for jh in cutlass.range_constexpr(2):
            if cutlass.const_expr(gelu_grad):
                zv = cute.zipped_divide(mZ[row, None], (4,))[None, col0 // 4 + jh * 16 + tc].load()
                for j in cutlass.range_constexpr(4):
                    out[j] = acc[i * 8 + jh * 4 + j] * _gelu_tanh_grad(zv[j])
            else:
                for j in cutlass.range_constexpr(4):
                    out[j] = acc[i * 8 + jh * 4 + j]
            g_c[None, col0 // 4 + jh * 16 + tc].store(out.load())


@cute.kernel
def colsum_kernel(mX: cute.Tensor, mOut: cute.Tensor, rows: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    c = cta * _CS_COLS + tidx % 32
    phase = tidx // 32
    smem = cutlass.memory.SmemAllocator()
    red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((8, 32), stride=(32, 1)), 16)
    tot = cute.make_rmem_tensor((1,), cutlass.Float32)
    part = cute.make_rmem_tensor((1,), cutlass.Float32)
    tot[0] = 0.0
    iters = (rows + 7) // 8
    for ci in range((iters + _CS_CHUNK - 1) // _CS_CHUNK):
        part[0] = 0.0
        for i in cutlass.range_constexpr(_CS_CHUNK):
            p = phase + 8 * (ci * _CS_CHUNK + i)
            if p < rows:
                part[0] = part[0] + mX[p, c]
        tot[0] = tot[0] + part[0]
    red[phase, tidx % 32] = tot[0]
    cute.arch.sync_threads()
    if tidx < 32:
        s = red[0, tidx]
        for r in cutlass.range_constexpr(1, 8):
            s = s + red[r, tidx]
        mOut[c] = s


@cute.jit
def bwd_gemm(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mZ: cute.Tensor, k: cutlass.Constexpr,
             a_km: cutlass.Constexpr, gelu_grad: cutlass.Constexpr, stream: cuda.CUstream):
    tiles = (cute.size(mC, mode=[0]) // _BM) * (cute.size(mC, mode=[1]) // _BN)
    bwd_gemm_kernel(a_km, gelu_grad, mA, mB, mC, mZ, k).launch(grid=[tiles, 1, 1], block=[_THREADS, 1, 1],
                                                                stream=stream)


@cute.jit
def colsum(mX: cute.Tensor, mOut: cute.Tensor, rows: cutlass.Constexpr, stream: cuda.CUstream):
    colsum_kernel(mX, mOut, rows).launch(grid=[cute.size(mOut) // _CS_COLS, 1, 1], block=[_THREADS, 1, 1],
                                         stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(*shape):
    if len(shape) == 1:
        return make_fake_compact_tensor(cutlass.Float32, shape, assumed_align=16)
    return make_fake_compact_tensor(cutlass.Float32, shape, stride_order=(1, 0), assumed_align=16)


def _compile_gemm(m, n, k, a_km, gelu_grad, arch=None, ptx_dir=None):
    """C [m, n] = A B with A stored [m, k] (or [k, m] when a_km), B stored [k, n]; Z [m, n] read only for
    gelu_grad (the other builds are passed C there)."""
    a = _fake(k, m) if a_km else _fake(m, k)
    return cute.compile(bwd_gemm, a, _fake(k, n), _fake(m, n), _fake(m, n), k, a_km, gelu_grad, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_colsum(rows_p, n, rows, arch=None, ptx_dir=None):
    return cute.compile(colsum, _fake(rows_p, n), _fake(n), rows, make_fake_stream(), options=_options(arch, ptx_dir))


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(t, shape):
    if tuple(t.shape) == tuple(shape):
        return t.contiguous()
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def _run(key, builder, *args):
    if key not in _COMPILED:
        _COMPILED[key] = builder()
    _COMPILED[key](*args)


def solve(grad_output, hidden_states, weight1, weight2, intermediate, intermediate_activated):
    dim, ff = weight2.shape
    tokens = grad_output.numel() // dim if dim else 0
    dev = grad_output.device
    tp, dp, fp = _up(max(tokens, 1), _BM), _up(max(dim, 1), _BN), _up(max(ff, 1), _BN)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    dy = _padded(grad_output.reshape(tokens, dim), (tp, dp))
    x = _padded(hidden_states.reshape(tokens, dim), (tp, dp))
    z = _padded(intermediate.reshape(tokens, ff), (tp, fp))
    act = _padded(intermediate_activated.reshape(tokens, ff), (tp, fp))
    w1 = _padded(weight1, (fp, dp))
    w2 = _padded(weight2, (dp, fp))
    dz = torch.empty(tp, fp, dtype=torch.float32, device=dev)
    dx = torch.empty(tp, dp, dtype=torch.float32, device=dev)
    dw1 = torch.empty(fp, dp, dtype=torch.float32, device=dev)
    dw2 = torch.empty(dp, fp, dtype=torch.float32, device=dev)
    db1 = torch.empty(fp, dtype=torch.float32, device=dev)
    db2 = torch.empty(dp, dtype=torch.float32, device=dev)
    _run(("dz", tp, fp, dp), lambda: _compile_gemm(tp, fp, dp, False, True), dy, w2, dz, z, stream)
    _run(("dw2", dp, fp, tp), lambda: _compile_gemm(dp, fp, tp, True, False), dy, act, dw2, dw2, stream)
    _run(("dx", tp, dp, fp), lambda: _compile_gemm(tp, dp, fp, False, False), dz, w1, dx, dx, stream)
    _run(("dw1", fp, dp, tp), lambda: _compile_gemm(fp, dp, tp, True, False), dz, x, dw1, dw1, stream)
    _run(("colsum", tp, fp, tokens), lambda: _compile_colsum(tp, fp, tokens), dz, db1, stream)
    _run(("colsum", tp, dp, tokens), lambda: _compile_colsum(tp, dp, tokens), dy, db2, stream)
    return (dx[:tokens, :dim].reshape(grad_output.shape).contiguous(), dw1[:ff, :dim].contiguous(),
            db1[:ff].contiguous(), dw2[:dim, :ff].contiguous(), db2[:dim].contiguous())


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every build (four GEMMs, two column sums) for the graded workload; kernel symbol names."""
    w = WORKLOAD
    t, dim, ff = w["batch"] * w["seq"], w["dim"], w["ff"]
    names = list(_compile_gemm(t, ff, dim, False, True, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(dim, ff, t, True, False, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(t, dim, ff, False, False, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(ff, dim, t, True, False, arch, ptx_dir).kernel_info)
    names += list(_compile_colsum(t, ff, t, arch, ptx_dir).kernel_info)
    names += list(_compile_colsum(t, dim, t, arch, ptx_dir).kernel_info)
    return names
