"""TIRx oracle for problem 27: Qwen3-Omni vision patch merger (LayerNorm, 2x2 shuffle, GELU MLP), bf16.

Two TIRx kernels (the GEMM kernel is built twice: with and without the GELU epilogue).

1. ``mkb_patch_layernorm``: one CTA per patch row. Each of 256 threads keeps its strided share of
   the row in fp32 registers; ``T.cuda.cta_sum`` (warp shuffles, then shared memory) gives the row
   sum and then the sum of squared deviations from the mean: mean = sum / C, var = sum((x -
   mean)^2) / C (biased, as the reference), normed = bf16((x - mean) * rsqrt(var + eps) * w + b) in
   the reference's order. The 2x2 spatial shuffle is fused into the store: the host prepares, per
   patch, dest = token * 4 + slot (token of its 2x2 window in (t, h / 2, w / 2) order, slot =
   2 * (h % 2) + w % 2, image by image from grid_thw), and the kernel writes the normalised row at
   columns slot * C .. slot * C + C - 1 of row ``token`` of the fc1 operand [tokens, 4 C]. The
   fast-math rsqrt and division (about 2 ulp) can move a value by one bf16 unit only next to a
   rounding midpoint.
2. ``mkb_bias_gemm``: C = A W^T + bias on the tensor cores through the warp-level
   ``mma.sync.m16n8k16`` (bf16 operands, fp32 accumulation), issued as a TIRx PTX intrinsic with the
   fragments placed by hand. TIRx 0.27 has no WGMMA path for sm_90, so this is the Ampere-style
   instruction, slower than a WGMMA GEMM. The CTA computes a 128 x 128 tile with 8 warps (2 x 4, each
   64 x 32, i.e. 4 x 4 m16n8k16 tiles); K advances in slices of 32. Each thread loads two 16-byte
   vectors (8 bf16) of A and two of W per slice into registers (the next slice's loads are issued
   before the current slice is computed) and stores them, as 32-bit words holding bf16 pairs, into
   shared-memory rows of 16 words padded to 20 (so the fragment reads of a warp hit 32 different
   banks). A lane (g = lane / 4, t = lane % 4) reads A words (row g | g + 8, k-word t | t + 4) and W
   words (column g, k-word t | t + 4); its accumulators are rows g | g + 8, columns 2t, 2t + 1 of
   each 16 x 8 tile, as the PTX ISA lays out m16n8k16. Every operand value is bf16, so each product
   is exact and only the summation order differs from the reference's fp32 GEMMs. Epilogue: the
   fp32 sum plus the bias (one fp32 add) rounded to bf16; for fc1 then the exact GELU
   x * 0.5 * (1 + erf(x / sqrt(2))) in fp32 (torch's formula; erff is not replaced under
   --use_fast_math), rounded to bf16. fc1 (6144 -> 6144) runs with the GELU epilogue and writes the
   fc2 operand; fc2 (6144 -> 3584) without.
Shapes that are not tile multiples (the small workload) use zero-padded scratch operands (padded
fc1 columns are gelu(0) = 0 and meet zero fc2 weights); the graded shapes need none.
"""

import torch
import tvm
from tvm.script import tirx as T

MERGE = 2
BM = 128
BN = 128
BK = 32
PAD = BK // 2 + 4  # 32-bit words per shared-memory row: 16 of data and 4 of padding
THREADS = 256
NORM_THREADS = 256
NORM_WARPS = NORM_THREADS // 32
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _epilogue(v, gelu):
    """bf16(v), then (gelu) x * 0.5 * (1 + erf(x * sqrt(1/2))) of it, in fp32."""
    r = T.float32(T.bfloat16(v))
    if not gelu:
        return r
    var = T.Var("hb", "float32")
    return T.Let(var * T.float32(0.5) * (T.float32(1.0) + T.erf(var * T.float32(0.7071067811865476))),
                 where={var: r})


def _norm_kernel(patches, width, x_rows, x_cols):
    """One CTA per patch p; writes X[dest[p] / 4, (dest[p] % 4) * width + c] for c < width."""
    per_thread = (width + NORM_THREADS - 1) // NORM_THREADS

    @T.prim_func
    def mkb_patch_layernorm(h_h: T.handle, d_h: T.handle, w_h: T.handle, b_h: T.handle, x_h: T.handle,
                            eps: T.float32):
        hidden = T.match_buffer(h_h, (patches, width), "bfloat16")
        dest = T.match_buffer(d_h, (patches,), "int32")
        weight = T.match_buffer(w_h, (width,), "bfloat16")
        bias = T.match_buffer(b_h, (width,), "bfloat16")
        X = T.match_buffer(x_h, (x_rows, x_cols), "bfloat16")
        T.device_entry()
        patch = T.cta_id([patches])
        tx = T.thread_id([NORM_THREADS])
        scratch_sum = T.alloc_buffer((NORM_WARPS,), "float32", scope="shared")
        scratch_sq = T.alloc_buffer((NORM_WARPS,), "float32", scope="shared")
        vals = T.alloc_buffer((per_thread,), "float32", scope="local")
        token: T.let = dest[patch] // 4
        slot: T.let = dest[patch] % 4
        s: T.f32 = T.float32(0.0)
        for i in T.unroll(per_thread):
            vals[i] = T.float32(0.0)
            if i * NORM_THREADS + tx < width:
                vals[i] = T.float32(hidden[patch, i * NORM_THREADS + tx])
                s = s + vals[i]
        total: T.f32 = T.cuda.cta_sum(s, NORM_WARPS, scratch_sum.ptr_to([0]))
        mean: T.f32 = total / T.float32(width)
        sq: T.f32 = T.float32(0.0)
        for i in T.unroll(per_thread):
            if i * NORM_THREADS + tx < width:
                vals[i] = vals[i] - mean
                sq = sq + vals[i] * vals[i]
        total_sq: T.f32 = T.cuda.cta_sum(sq, NORM_WARPS, scratch_sq.ptr_to([0]))
        scale: T.f32 = T.rsqrt(total_sq / T.float32(width) + eps)
        for i in T.unroll(per_thread):
            if i * NORM_THREADS + tx < width:
                X[token, slot * width + i * NORM_THREADS + tx] = T.bfloat16(
                    vals[i] * scale * T.float32(weight[i * NORM_THREADS + tx])
                    + T.float32(bias[i * NORM_THREADS + tx]))

    return mkb_patch_layernorm


def _gemm_kernel(m, n, k, gelu):
    """C[m, n] = bf16(sum_k A[m, k] B[n, k] + bias[n]), then (gelu) bf16(gelu_erf(.)); m, n multiples of 128,
    k of 32."""
    k_tiles = k // BK
    tiles_n = n // BN

    @T.prim_func
    def mkb_bias_gemm(a_h: T.handle, b_h: T.handle, bias_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, (m, k), "bfloat16")
        B = T.match_buffer(b_h, (n, k), "bfloat16")
        bias = T.match_buffer(bias_h, (n,), "bfloat16")
        C = T.match_buffer(c_h, (m, n), "bfloat16")
        T.device_entry()
        cta = T.cta_id([(m // BM) * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BM, PAD), "uint32", scope="shared")
        b_s = T.alloc_buffer((BN, PAD), "uint32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((16,), "uint32", scope="local")
        bfr = T.alloc_buffer((8,), "uint32", scope="local")
        ra = T.alloc_buffer((16,), "bfloat16", scope="local")
        rb = T.alloc_buffer((16,), "bfloat16", scope="local")
        ra_w = T.decl_buffer((8,), "uint32", data=ra.data, scope="local")
        rb_w = T.decl_buffer((8,), "uint32", data=rb.data, scope="local")
        out = T.alloc_buffer((2,), "bfloat16", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wr: T.let = (warp // 4) * 64
        wc: T.let = (warp % 4) * 32
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            for j in T.vectorized(8):
                ra[h * 8 + j] = A[row0 + (tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 8 + j]
            for j in T.vectorized(8):
                rb[h * 8 + j] = B[col0 + (tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 8 + j]
        for kt in range(k_tiles):
            for h in T.unroll(2):
                for j in T.vectorized(4):
                    a_s[(tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 4 + j] = ra_w[h * 4 + j]
                for j in T.vectorized(4):
                    b_s[(tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 4 + j] = rb_w[h * 4 + j]
            T.cuda.cta_sync()
            if kt + 1 < k_tiles:
                for h in T.unroll(2):
                    for j in T.vectorized(8):
                        ra[h * 8 + j] = A[row0 + (tx + h * THREADS) // 4,
                                          (kt + 1) * BK + ((tx + h * THREADS) % 4) * 8 + j]
                    for j in T.vectorized(8):
                        rb[h * 8 + j] = B[col0 + (tx + h * THREADS) // 4,
                                          (kt + 1) * BK + ((tx + h * THREADS) % 4) * 8 + j]
            for ks in T.unroll(2):
                for mt in T.unroll(4):
                    af[mt * 4 + 0] = a_s[wr + mt * 16 + g, ks * 8 + t]
                    af[mt * 4 + 1] = a_s[wr + mt * 16 + g + 8, ks * 8 + t]
                    af[mt * 4 + 2] = a_s[wr + mt * 16 + g, ks * 8 + t + 4]
                    af[mt * 4 + 3] = a_s[wr + mt * 16 + g + 8, ks * 8 + t + 4]
                for nt in T.unroll(4):
                    bfr[nt * 2 + 0] = b_s[wc + nt * 8 + g, ks * 8 + t]
                    bfr[nt * 2 + 1] = b_s[wc + nt * 8 + g, ks * 8 + t + 4]
                for mt in T.unroll(4):
                    for nt in T.unroll(4):
                        T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"](
                            acc[(mt * 4 + nt) * 4 + 0], acc[(mt * 4 + nt) * 4 + 1],
                            acc[(mt * 4 + nt) * 4 + 2], acc[(mt * 4 + nt) * 4 + 3],
                            af[mt * 4 + 0], af[mt * 4 + 1], af[mt * 4 + 2], af[mt * 4 + 3],
                            bfr[nt * 2 + 0], bfr[nt * 2 + 1],
                            acc[(mt * 4 + nt) * 4 + 0], acc[(mt * 4 + nt) * 4 + 1],
                            acc[(mt * 4 + nt) * 4 + 2], acc[(mt * 4 + nt) * 4 + 3])
            T.cuda.cta_sync()
        for mt in T.unroll(4):
            for nt in T.unroll(4):
                for hr in T.unroll(2):
                    for j in T.unroll(2):
                        out[j] = T.bfloat16(_epilogue(acc[(mt * 4 + nt) * 4 + hr * 2 + j]
                                                      + T.float32(bias[col0 + wc + nt * 8 + t * 2 + j]), gelu))
                    for j in T.vectorized(2):
                        C[row0 + wr + mt * 16 + hr * 8 + g, col0 + wc + nt * 8 + t * 2 + j] = out[j]

    return mkb_bias_gemm


def _build(kind, shape, arch):
    """Compile one kernel once per (kind, shape, arch) and return the tvm Executable."""
    key = (kind, shape, arch)
    if key not in _EXES:
        func = _gemm_kernel(*shape) if kind == "gemm" else _norm_kernel(*shape)
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(kind, shape):
    key = (kind, shape, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(w, shape):
    if tuple(w.shape) == tuple(shape):
        return w.contiguous()
    p = torch.zeros(*shape, dtype=torch.bfloat16, device=w.device)
    p[tuple(slice(0, s) for s in w.shape)] = w
    return p


def _destinations(grid, device):
    """dest[p] = token * 4 + slot of every patch row p (2x2 windows in (t, h / 2, w / 2) order, image by image)."""
    parts, tokens = [], 0
    for t, h, w in grid:
        local = torch.arange(t * h * w, device=device, dtype=torch.int32)
        frame, rest = local // (h * w), local % (h * w)
        row, col = rest // w, rest % w
        token = tokens + frame * (h // MERGE) * (w // MERGE) + (row // MERGE) * (w // MERGE) + col // MERGE
        parts.append(token * (MERGE * MERGE) + (row % MERGE) * MERGE + col % MERGE)
        tokens += t * (h // MERGE) * (w // MERGE)
    return torch.cat(parts), tokens


def solve(hidden, grid_thw, ln_weight, ln_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias, eps):
    patches, width = hidden.shape
    merged, out_dim = fc1_weight.shape[0], fc2_weight.shape[0]
    dev = hidden.device
    dest, tokens = _destinations(grid_thw.tolist(), dev)
    out = torch.empty(tokens, out_dim, dtype=torch.bfloat16, device=dev)
    if tokens == 0:
        return out
    mp, kp, n1, n2 = _up(tokens, BM), _up(merged, BK), _up(merged, BN), _up(out_dim, BN)
    if (mp, kp) != (tokens, merged):
        x = torch.zeros(mp, kp, dtype=torch.bfloat16, device=dev)
    else:
        x = torch.empty(tokens, merged, dtype=torch.bfloat16, device=dev)
    act = torch.empty(mp, n1, dtype=torch.bfloat16, device=dev)
    c = out if (mp, n2) == (tokens, out_dim) else torch.empty(mp, n2, dtype=torch.bfloat16, device=dev)
    _kernel_fn("norm", (patches, width, mp, kp))(hidden.contiguous(), dest, ln_weight.contiguous(),
                                                 ln_bias.contiguous(), x, float(eps))
    _kernel_fn("gemm", (mp, n1, kp, True))(x, _padded(fc1_weight, (n1, kp)), _padded(fc1_bias, (n1,)), act)
    _kernel_fn("gemm", (mp, n2, n1, False))(act, _padded(fc2_weight, (n2, n1)), _padded(fc2_bias, (n2,)), c)
    if c.data_ptr() != out.data_ptr():
        out.copy_(c[:tokens, :out_dim])
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


def kernel_sources(arch="sm_90a", images=8, frames=1, grid_h=64, grid_w=64, context=1536, out_dim=3584, gelu=True):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults): the norm kernel
    and the fc1 GEMM (GELU epilogue), or with gelu=False the plain fc2 GEMM."""
    patches = images * frames * grid_h * grid_w
    tokens, merged = patches // (MERGE * MERGE), context * MERGE * MERGE
    builds = (("norm", (patches, context, tokens, merged)), ("gemm", (tokens, merged, merged, True)))
    if not gelu:
        builds = (("gemm", (tokens, out_dim, merged, False)),)
    sources = {}
    for kind, shape in builds:
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    names = list(kernel_sources(arch))
    kernel_sources(arch, gelu=False)
    return names
