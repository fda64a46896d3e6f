"""CuTe DSL oracle for problem 34: backward of a SwiGLU MLP (Hermes-4-405B) from saved activations,
bf16.

Five launches of three tensor-core kernels; torch only allocates (and zero-pads operands of shapes
that are not tile multiples, e.g. the small workload; the graded shapes need no padding).

All GEMMs run on the tensor cores through warp-level ``mma.sync`` m16n8k16 (bf16 operands, fp32
accumulation, so every product is exact and only the fp32 summation order differs from the
reference). A CTA of 8 warps (4 x 2) owns a 64 x 128 output tile; K advances in slices of 32
through a two-stage shared-memory ring filled by 16-byte ``cp.async`` copies into swizzled tiles;
K-major operands are read by ``ldmatrix`` and M- or N-major ones by ``ldmatrix.trans``.

1. ``dh_kernel``: dH = dY W_d ([tokens, hidden] x [hidden, inter], W_d N-major) with the whole
   elementwise backward in its epilogue, at the reference's rounding points: dh = bf16(acc),
   da = bf16(dh u), du = bf16(dh a), sig = 1 / (1 + exp(-g)) (exp through ex2.approx, a few fp32
   ulps; IEEE division), dg = bf16((da sig) (1 + g (1 - sig))), and au = bf16(a u) for dW_d.
   dg, du and au are stored [tokens, inter].
2. ``dx_kernel``: dx = bf16(bf16(dg W_g) + bf16(du W_u)): the CTA runs the K loop twice (dg with
   W_g, then du with W_u, both weights N-major), keeps the first product rounded to bf16 in
   registers and adds the second, rounded, before the final rounding.
3. ``dw_kernel`` (three launches): out = bf16(A^T B) with both operands token-major, the K
   dimension (tokens) unsplit: dW_d = dY^T au, dW_g = dg^T x, dW_u = du^T x.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=128, hidden=16384, intermediate=53248)
TBM, TBN, TBK = 64, 128, 32  # output tile rows, columns, K step
_THREADS = 256
_COMPILED = {}


def _bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return x.to(cutlass.BFloat16).to(cutlass.Float32)


def _mma_parts():
    """The 8-warp (4 x 2) bf16 mma.sync tiling of a 64 x 128 tile and its shared-to-register copies."""
    tiled_mma = cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((4, 2, 1)), permutation_mnk=(64, 32, 16))
    ldsm = cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16)
    ldsm_t = cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(True, 4), cutlass.BFloat16)
    return tiled_mma, ldsm, ldsm_t


def _g2s(rows, cols):
    """16-byte cp.async copies of a (rows, cols) bf16 tile, 8 contiguous values per thread and pass."""
    atom = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                               cutlass.BFloat16, num_bits_per_copy=128)
    return cute.make_tiled_copy_tv(atom, cute.make_layout((_THREADS // (cols // 8), cols // 8), stride=(cols // 8, 1)),
                                   cute.make_layout((1, 8)))


def _smem_nmajor(smem, rows, cols):
    """Two stages of a (rows, cols) bf16 tile, cols contiguous (64-wide atoms; a byte-address swizzle
    of whole 16-byte chunks, M = 4)."""
    atom = cute.make_layout((8, 64), stride=(64, 1))
    return smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (rows, cols, 2), (0, 1, 2)), 1024,
                                swizzle=cute.make_swizzle(3, 4, 3))


def _smem_kmajor(smem, rows):
    """Two stages of a (rows, TBK) bf16 tile, K contiguous (32-wide atoms; a byte-address swizzle
    of whole 16-byte chunks, M = 4)."""
    atom = cute.make_layout((8, TBK), stride=(TBK, 1))
    return smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (rows, TBK, 2), (0, 1, 2)), 1024,
                                swizzle=cute.make_swizzle(2, 4, 3))


@cute.jit
def _mainloop_kn(a: cute.Tensor, b: cute.Tensor, acc: cute.Tensor, sA: cute.Tensor, sB: cute.Tensor,
                 mb: cutlass.Int32, nb: cutlass.Int32, tidx: cutlass.Int32):
    """acc += A[mb tile, :] B[:, nb tile], A [M, K] K-major, B [K, N] N-major; the ring is left idle."""
    k_tiles = cute.size(a, mode=[1]) // TBK
    sBt = cute.composition(sB, cute.make_layout((TBN, TBK, 2), stride=(TBK, 1, TBN * TBK)))  # (n, k, stage)
    g2s_a = _g2s(TBM, TBK)
    g2s_b = _g2s(TBK, TBN)
    tAgA = g2s_a.get_slice(tidx).partition_S(cute.local_tile(a, (TBM, TBK), (mb, None)))
    tAsA = g2s_a.get_slice(tidx).partition_D(sA)
    tBgB = g2s_b.get_slice(tidx).partition_S(cute.local_tile(b, (TBK, TBN), (None, nb)))
    tBsB = g2s_b.get_slice(tidx).partition_D(sB)
    tiled_mma, ldsm, ldsm_t = _mma_parts()
    thr_mma = tiled_mma.get_slice(tidx)
    tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA)[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sBt)[None, None, None, 0])
    cp_a = cute.make_tiled_copy_A(ldsm, tiled_mma)
    cp_b = cute.make_tiled_copy_B(ldsm_t, tiled_mma)
    tXsA = cp_a.get_slice(tidx).partition_S(sA)
    tXrA = cp_a.get_slice(tidx).retile(tCrA)
    tXsB = cp_b.get_slice(tidx).partition_S(sBt)
    tXrB = cp_b.get_slice(tidx).retile(tCrB)

    cute.copy(g2s_a, tAgA[None, None, None, 0], tAsA[None, None, None, 0])
    cute.copy(g2s_b, tBgB[None, None, None, 0], tBsB[None, None, None, 0])
    cute.arch.cp_async_commit_group()
    for kt in range(k_tiles):
        if kt + 1 < k_tiles:  # prefetch the next K tile into the other stage
            cute.copy(g2s_a, tAgA[None, None, None, kt + 1], tAsA[None, None, None, (kt + 1) % 2])
            cute.copy(g2s_b, tBgB[None, None, None, kt + 1], tBsB[None, None, None, (kt + 1) % 2])
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(1)
        cute.arch.sync_threads()
        for kk in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.copy(cp_a, tXsA[None, None, kk, kt % 2], tXrA[None, None, kk])
            cute.copy(cp_b, tXsB[None, None, kk, kt % 2], tXrB[None, None, kk])
            cute.gemm(tiled_mma, acc, tCrA[None, None, kk], tCrB[None, None, kk], acc)
        cute.arch.sync_threads()
    cute.arch.cp_async_wait_group(0)
    cute.arch.sync_threads()


@cute.kernel
def dh_kernel(dy: cute.Tensor, wd: cute.Tensor, g: cute.Tensor, u: cute.Tensor, a: cute.Tensor, dg: cute.Tensor,
              du: cute.Tensor, au: cute.Tensor):
    """dh = bf16(dY W_d) and the SwiGLU backward: dg, du, au (see the module docstring)."""
    tidx, _, _ = cute.arch.thread_idx()
    mb, nb, _ = cute.arch.block_idx()
    smem = cutlass.memory.SmemAllocator()
    sA = _smem_kmajor(smem, TBM)
    sB = _smem_nmajor(smem, TBK, TBN)
    tiled_mma, _, _ = _mma_parts()
    thr_mma = tiled_mma.get_slice(tidx)
    acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((TBM, TBN)), cutlass.Float32)
    acc.fill(0.0)
    _mainloop_kn(dy, wd, acc, sA, sB, mb, nb, tidx)
    tCcC = thr_mma.partition_C(cute.make_identity_tensor((TBM, TBN)))
    for i in cutlass.range_constexpr(cute.size(acc)):
        m = mb * TBM + tCcC[i][0]
        n = nb * TBN + tCcC[i][1]
        dh = _bf16(acc[i])
        uu = u[m, n].to(cutlass.Float32)
        aa = a[m, n].to(cutlass.Float32)
        gg = g[m, n].to(cutlass.Float32)
        da = _bf16(dh * uu)
        sig = 1.0 / (1.0 + cute.math.exp(-gg))
        dg[m, n] = ((da * sig) * (1.0 + gg * (1.0 - sig))).to(cutlass.BFloat16)
        du[m, n] = (dh * aa).to(cutlass.BFloat16)
        au[m, n] = (aa * uu).to(cutlass.BFloat16)


@cute.kernel
def dx_kernel(dg: cute.Tensor, wg: cute.Tensor, du: cute.Tensor, wu: cute.Tensor, dx: cute.Tensor):
    """dx = bf16(bf16(dg W_g) + bf16(du W_u))."""
    tidx, _, _ = cute.arch.thread_idx()
    mb, nb, _ = cute.arch.block_idx()
    smem = cutlass.memory.SmemAllocator()
    sA = _smem_kmajor(smem, TBM)
    sB = _smem_nmajor(smem, TBK, TBN)
    tiled_mma, _, _ = _mma_parts()
    thr_mma = tiled_mma.get_slice(tidx)
    acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((TBM, TBN)), cutlass.Float32)
    acc.fill(0.0)
    _mainloop_kn(dg, wg, acc, sA, sB, mb, nb, tidx)
    first = cute.make_rmem_tensor(thr_mma.partition_shape_C((TBM, TBN)), cutlass.Float32)
    for i in cutlass.range_constexpr(cute.size(acc)):
        first[i] = _bf16(acc[i])
    acc.fill(0.0)
    _mainloop_kn(du, wu, acc, sA, sB, mb, nb, tidx)
    tCcC = thr_mma.partition_C(cute.make_identity_tensor((TBM, TBN)))
    for i in cutlass.range_constexpr(cute.size(acc)):
        dx[mb * TBM + tCcC[i][0], nb * TBN + tCcC[i][1]] = (first[i] + _bf16(acc[i])).to(cutlass.BFloat16)


@cute.kernel
def dw_kernel(at: cute.Tensor, b: cute.Tensor, out: cute.Tensor):
    """out = bf16(A B) over all K, A given transposed [K, M], B [K, N] (both token-major)."""
    tidx, _, _ = cute.arch.thread_idx()
    mb, nb, _ = cute.arch.block_idx()
    k_tiles = cute.size(at, mode=[0]) // TBK
    smem = cutlass.memory.SmemAllocator()
    sA = _smem_nmajor(smem, TBK, TBM)  # (k, m, stage), m contiguous
    sB = _smem_nmajor(smem, TBK, TBN)
    sAt = cute.composition(sA, cute.make_layout((TBM, TBK, 2), stride=(TBK, 1, TBM * TBK)))  # (m, k, stage)
    sBt = cute.composition(sB, cute.make_layout((TBN, TBK, 2), stride=(TBK, 1, TBN * TBK)))  # (n, k, stage)
    g2s_a = _g2s(TBK, TBM)
    g2s_b = _g2s(TBK, TBN)
    tAgA = g2s_a.get_slice(tidx).partition_S(cute.local_tile(at, (TBK, TBM), (None, mb)))
    tAsA = g2s_a.get_slice(tidx).partition_D(sA)
    tBgB = g2s_b.get_slice(tidx).partition_S(cute.local_tile(b, (TBK, TBN), (None, nb)))
    tBsB = g2s_b.get_slice(tidx).partition_D(sB)
    tiled_mma, _, ldsm_t = _mma_parts()
    thr_mma = tiled_mma.get_slice(tidx)
    tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sAt)[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sBt)[None, None, None, 0])
    acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((TBM, TBN)), cutlass.Float32)
    acc.fill(0.0)
    cp_a = cute.make_tiled_copy_A(ldsm_t, tiled_mma)
    cp_b = cute.make_tiled_copy_B(ldsm_t, tiled_mma)
    tXsA = cp_a.get_slice(tidx).partition_S(sAt)
    tXrA = cp_a.get_slice(tidx).retile(tCrA)
    tXsB = cp_b.get_slice(tidx).partition_S(sBt)
    tXrB = cp_b.get_slice(tidx).retile(tCrB)

    cute.copy(g2s_a, tAgA[None, None, None, 0], tAsA[None, None, None, 0])
    cute.copy(g2s_b, tBgB[None, None, None, 0], tBsB[None, None, None, 0])
    cute.arch.cp_async_commit_group()
    for kt in range(k_tiles):
        if kt + 1 < k_tiles:  # prefetch the next K tile into the other stage
            cute.copy(g2s_a, tAgA[None, None, None, kt + 1], tAsA[None, None, None, (kt + 1) % 2])
            cute.copy(g2s_b, tBgB[None, None, None, kt + 1], tBsB[None, None, None, (kt + 1) % 2])
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(1)
        cute.arch.sync_threads()
        for kk in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.copy(cp_a, tXsA[None, None, kk, kt % 2], tXrA[None, None, kk])
            cute.copy(cp_b, tXsB[None, None, kk, kt % 2], tXrB[None, None, kk])
            cute.gemm(tiled_mma, acc, tCrA[None, None, kk], tCrB[None, None, kk], acc)
        cute.arch.sync_threads()
    tCcC = thr_mma.partition_C(cute.make_identity_tensor((TBM, TBN)))
    for i in cutlass.range_constexpr(cute.size(acc)):
        out[mb * TBM + tCcC[i][0], nb * TBN + tCcC[i][1]] = acc[i].to(cutlass.BFloat16)


@cute.jit
def dh_step(dy: cute.Tensor, wd: cute.Tensor, g: cute.Tensor, u: cute.Tensor, a: cute.Tensor, dg: cute.Tensor,
            du: cute.Tensor, au: cute.Tensor, stream: cuda.CUstream):
    dh_kernel(dy, wd, g, u, a, dg, du, au).launch(
        grid=[cute.size(dg, mode=[0]) // TBM, cute.size(dg, mode=[1]) // TBN, 1], block=[_THREADS, 1, 1],
        stream=stream)


@cute.jit
def dx_step(dg: cute.Tensor, wg: cute.Tensor, du: cute.Tensor, wu: cute.Tensor, dx: cute.Tensor,
            stream: cuda.CUstream):
    dx_kernel(dg, wg, du, wu, dx).launch(
        grid=[cute.size(dx, mode=[0]) // TBM, cute.size(dx, mode=[1]) // TBN, 1], block=[_THREADS, 1, 1],
        stream=stream)


@cute.jit
def dw_step(at: cute.Tensor, b: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
    dw_kernel(at, b, out).launch(
        grid=[cute.size(out, mode=[0]) // TBM, cute.size(out, mode=[1]) // TBN, 1], block=[_THREADS, 1, 1],
        stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(shape):
    return make_fake_compact_tensor(cutlass.BFloat16, shape, stride_order=(1, 0), assumed_align=16)


def _compile(kind, tokens, hidden, inter, arch=None, ptx_dir=None):
    """tokens, hidden, inter: the padded (tile-multiple) sizes."""
    opts = _options(arch, ptx_dir)
    ti = _fake((tokens, inter))
    if kind == "dh":
        return cute.compile(dh_step, _fake((tokens, hidden)), _fake((hidden, inter)), ti, ti, ti, ti, ti, ti,
                            make_fake_stream(), options=opts)
    if kind == "dx":
        return cute.compile(dx_step, ti, _fake((inter, hidden)), ti, _fake((inter, hidden)),
                            _fake((tokens, hidden)), make_fake_stream(), options=opts)
    if kind == "dw_down":
        return cute.compile(dw_step, _fake((tokens, hidden)), ti, _fake((hidden, inter)), make_fake_stream(),
                            options=opts)
    return cute.compile(dw_step, ti, _fake((tokens, hidden)), _fake((inter, hidden)), make_fake_stream(),
                        options=opts)


def _fn(kind, shape):
    key = (kind, shape)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(kind, *shape)
    return _COMPILED[key]


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(t, rows, cols):
    t = t.reshape(-1, t.shape[-1])
    if tuple(t.shape) == (rows, cols):
        return t.contiguous()
    p = torch.zeros(rows, cols, dtype=torch.bfloat16, device=t.device)
    p[:t.shape[0], :t.shape[1]] = t
    return p



def solve(grad_output, x, gate_output, up_output, activated_gate, gate_weight, up_weight, down_weight):
    hidden, inter = x.shape[-1], gate_output.shape[-1]
    tokens = x.numel() // hidden
    dev = x.device
    bf16 = torch.bfloat16
    # Rows padded to 64 (the M tile and a whole number of 32-token K steps), hidden and inter to 128.
    mp, hp, ip = _up(max(tokens, 1), TBM), _up(hidden, TBN), _up(inter, TBN)
    shape = (mp, hp, ip)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    dy = _padded(grad_output, mp, hp)
    xs = _padded(x, mp, hp)
    dg = torch.empty(mp, ip, dtype=bf16, device=dev)
    du = torch.empty(mp, ip, dtype=bf16, device=dev)
    au = torch.empty(mp, ip, dtype=bf16, device=dev)
    _fn("dh", shape)(dy, _padded(down_weight, hp, ip), _padded(gate_output, mp, ip), _padded(up_output, mp, ip),
                     _padded(activated_gate, mp, ip), dg, du, au, stream)
    dx = torch.empty(mp, hp, dtype=bf16, device=dev)
    _fn("dx", shape)(dg, _padded(gate_weight, ip, hp), du, _padded(up_weight, ip, hp), dx, stream)
    gw_down = torch.empty(hp, ip, dtype=bf16, device=dev)
    _fn("dw_down", shape)(dy, au, gw_down, stream)
    gw_gate = torch.empty(ip, hp, dtype=bf16, device=dev)
    gw_up = torch.empty(ip, hp, dtype=bf16, device=dev)
    _fn("dw_in", shape)(dg, xs, gw_gate, stream)
    _fn("dw_in", shape)(du, xs, gw_up, stream)
    if (mp, hp, ip) != (tokens, hidden, inter):
        dx = dx[:tokens, :hidden].contiguous()
        gw_down = gw_down[:hidden, :inter].contiguous()
        gw_gate = gw_gate[:inter, :hidden].contiguous()
        gw_up = gw_up[:inter, :hidden].contiguous()
    return dx.reshape(x.shape), gw_gate, gw_up, gw_down


_KINDS = ("dh", "dx", "dw_down", "dw_in")


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    shape = (w["batch"] * w["seq"], w["hidden"], w["intermediate"])
    return [name for kind in _KINDS for name in _compile(kind, *shape, arch, ptx_dir).kernel_info]
