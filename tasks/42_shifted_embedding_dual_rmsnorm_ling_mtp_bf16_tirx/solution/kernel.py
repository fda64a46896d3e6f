"""TIRx oracle for problem 42: MTP input fusion (Ling-flash-2.0): shifted embedding, two RMSNorms, eh_proj.

Two TIRx kernels.

1. ``mkb_mtp_dual_rmsnorm``: one CTA per (token, part); part 0 normalises the embedding row of the
   shifted id (ids[b, s + 1], or token 0 at the last position, looked up in the kernel), part 1 the
   token's hidden state, and each writes its half of the GEMM operand X = [emb_norm | hidden_norm]
   ([tokens, 2 * hidden] bf16). Each of 256 threads keeps its strided share of the row in fp32
   registers; ``T.cuda.cta_sum`` (warp shuffles, then shared memory) gives the sum of squares. The
   reference's roundings are kept: n = bf16(x * rsqrt(sum / hidden + eps)) through a bf16 register,
   then y = bf16(n * w) (the product of two bf16 values is exact in fp32, so its one rounding
   matches the reference's). The fast-math rsqrt (about 2^-22 relative) can move n by one bf16 unit
   only next to a rounding midpoint.
2. ``mkb_eh_proj_gemm``: fused = X @ eh_proj_weight^T on the tensor cores through the warp-level
   ``mma.sync.m16n8k16`` (bf16 operands, fp32 accumulation), issued as a TIRx PTX intrinsic with the
   fragments placed by hand. TIRx 0.27 has no WGMMA path for sm_90, so this is the Ampere-style
   instruction, slower than a WGMMA GEMM. The CTA computes a 128 x 128 tile with 8 warps (2 x 4, each
   64 x 32, i.e. 4 x 4 m16n8k16 tiles); K advances in slices of 32. Each thread loads two 16-byte
   vectors (8 bf16) of A and two of B per slice into registers (the next slice's loads are issued
   before the current slice is computed) and stores them, as 32-bit words holding bf16 pairs, into
   shared-memory rows of 16 words padded to 20 (so the fragment reads of a warp hit 32 different
   banks). A lane (group g = lane / 4, t = lane % 4) then reads its fragments exactly as the PTX ISA
   lays them out for m16n8k16: A words (row g | g + 8, k-word t | t + 4), B words (column g, k-word t |
   t + 4), and its accumulators are rows g | g + 8, columns 2t, 2t + 1 of each 16 x 8 tile. Every
   operand value is bf16, so each product is exact and only the summation order differs from the
   reference's fp32 GEMM; the sums are rounded to bf16 once. Shapes that are not tile multiples (the
   small workload) use zero-padded scratch operands; the graded shapes need none.
"""

import torch
import tvm
from tvm.script import tirx as T

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


def _norm_kernel(batch, seq, hidden, vocab, x_rows, x_cols):
    """One CTA per (token, part); writes X[token, part * hidden + c] for c < hidden."""
    tokens = batch * seq
    per_thread = (hidden + NORM_THREADS - 1) // NORM_THREADS

    @T.prim_func
    def mkb_mtp_dual_rmsnorm(ids_h: T.handle, hs_h: T.handle, table_h: T.handle, ew_h: T.handle, hw_h: T.handle,
                             x_h: T.handle, eps: T.float32):
        ids = T.match_buffer(ids_h, (batch, seq), "int64")
        hs = T.match_buffer(hs_h, (tokens, hidden), "bfloat16")
        table = T.match_buffer(table_h, (vocab, hidden), "bfloat16")
        enorm = T.match_buffer(ew_h, (hidden,), "bfloat16")
        hnorm = T.match_buffer(hw_h, (hidden,), "bfloat16")
        X = T.match_buffer(x_h, (x_rows, x_cols), "bfloat16")
        T.device_entry()
        cta = T.cta_id([tokens * 2])
        tx = T.thread_id([NORM_THREADS])
        scratch = T.alloc_buffer((NORM_WARPS,), "float32", scope="shared")
        vals = T.alloc_buffer((per_thread,), "float32", scope="local")
        row_id = T.alloc_buffer((1,), "int32", scope="local")
        normed = T.alloc_buffer((1,), "bfloat16", scope="local")
        token: T.let = cta // 2
        part: T.let = cta % 2
        b: T.let = token // seq
        s: T.let = token % seq
        row_id[0] = 0
        if s + 1 < seq:
            row_id[0] = T.int32(ids[b, s + 1])
        sq: T.f32 = T.float32(0.0)
        for i in T.unroll(per_thread):
            vals[i] = T.float32(0.0)
            if i * NORM_THREADS + tx < hidden:
                if part == 0:
                    vals[i] = T.float32(table[row_id[0], i * NORM_THREADS + tx])
                else:
                    vals[i] = T.float32(hs[token, i * NORM_THREADS + tx])
                sq = sq + vals[i] * vals[i]
        total: T.f32 = T.cuda.cta_sum(sq, NORM_WARPS, scratch.ptr_to([0]))
        scale: T.f32 = T.rsqrt(total / T.float32(hidden) + eps)
        for i in T.unroll(per_thread):
            if i * NORM_THREADS + tx < hidden:
                normed[0] = T.bfloat16(vals[i] * scale)
                if part == 0:
                    X[token, i * NORM_THREADS + tx] = T.bfloat16(
                        T.float32(normed[0]) * T.float32(enorm[i * NORM_THREADS + tx]))
                else:
                    X[token, hidden + i * NORM_THREADS + tx] = T.bfloat16(
                        T.float32(normed[0]) * T.float32(hnorm[i * NORM_THREADS + tx]))

    return mkb_mtp_dual_rmsnorm


def _gemm_kernel(m, n, k):
    """C[m, n] = bf16(sum_k A[m, k] B[n, k]) on the tensor cores (mma.sync m16n8k16, fp32 accumulation);
    m, n multiples of 128, k of 32."""
    k_tiles = k // BK
    tiles_n = n // BN

    @T.prim_func
    def mkb_eh_proj_gemm(a_h: T.handle, b_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, (m, k), "bfloat16")
        B = T.match_buffer(b_h, (n, k), "bfloat16")
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
                        out[j] = T.bfloat16(acc[(mt * 4 + nt) * 4 + hr * 2 + j])
                    for j in T.vectorized(2):
                        C[row0 + wr + mt * 16 + hr * 8 + g, col0 + wc + nt * 8 + t * 2 + j] = out[j]

    return mkb_eh_proj_gemm


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


def solve(input_ids, hidden_states, word_embeddings, enorm_weight, hnorm_weight, eh_proj_weight, rms_norm_eps):
    batch, seq, hidden = hidden_states.shape
    vocab = word_embeddings.shape[0]
    n, k = eh_proj_weight.shape
    tokens = batch * seq
    out = torch.empty(batch, seq, n, dtype=torch.bfloat16, device=hidden_states.device)
    if tokens == 0:
        return out
    mp, np_, kp = _up(tokens, BM), _up(n, BN), _up(k, BK)
    padded = (mp, np_, kp) != (tokens, n, k)
    if padded:  # zero-padded operands (zero rows / columns add nothing to the sums)
        x = torch.zeros(mp, kp, dtype=torch.bfloat16, device=out.device)
        w = torch.zeros(np_, kp, dtype=torch.bfloat16, device=out.device)
        w[:n, :k] = eh_proj_weight
        c = torch.empty(mp, np_, dtype=torch.bfloat16, device=out.device)
    else:
        x = torch.empty(tokens, k, dtype=torch.bfloat16, device=out.device)
        w = eh_proj_weight.contiguous()
        c = out.view(tokens, n)
    _kernel_fn("norm", (batch, seq, hidden, vocab, mp if padded else tokens, kp))(
        input_ids.contiguous(), hidden_states.reshape(tokens, hidden).contiguous(), word_embeddings.contiguous(),
        enorm_weight.contiguous(), hnorm_weight.contiguous(), x, float(rms_norm_eps))
    _kernel_fn("gemm", (x.shape[0], c.shape[1], kp))(x, w, c)
    if padded:
        out.view(tokens, n).copy_(c[:tokens, :n])
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


def kernel_sources(arch="sm_90a", batch=32, seq=256, hidden=4096, vocab=157184):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults)."""
    tokens = batch * seq
    sources = {}
    for kind, shape in (("norm", (batch, seq, hidden, vocab, tokens, 2 * hidden)),
                        ("gemm", (tokens, hidden, 2 * hidden))):
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
