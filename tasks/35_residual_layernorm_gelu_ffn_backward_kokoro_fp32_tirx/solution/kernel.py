"""TIRx oracle for problem 35: backward of LayerNorm(hidden + fc2(gelu_tanh(fc1(hidden)))) from
saved activations (Kokoro-82M), fp32.

Everything is fp32 on the CUDA cores (the problem is judged at fp32 tolerance, so no TF32; TIRx
0.27 has no WGMMA path on sm_90 anyway); torch only allocates (and zero-pads operands of shapes that
are not tile multiples, e.g. the small workload; the graded shapes need none). NVRTC builds with
--use_fast_math, so exp, division and square root are precise forms written out here (a
range-reduced polynomial exp, Newton-corrected quotient and root).

- ``mkb_row``: a warp per token, a lane owning 4-wide column groups; g = dY w, the row sums of g and
  g n by lane-sequential sums and butterfly shuffles, means = sum * (1 / dim), and
  dres = ((g - mean(g)) - n mean(g n)) / sqrt(var + eps), zero on padded rows and columns.
- ``mkb_dgelu``, ``mkb_dhidden``, ``mkb_dw2``, ``mkb_dw1``: one shared-memory tiled SIMT GEMM
  C = A B (128 x 128 tile per 256-thread CTA, 8 x 8 outputs per thread from float4 shared reads,
  K in slices of 16 staged K-major with the next slice's loads in flight). B is always
  N-contiguous [K, N]; A is K-contiguous [M, K] or, for the weight gradients, M-contiguous [K, M].
  Two-level sums: each chunk of 8 slices (128 K values) is summed from zero and then added to the
  total. dgelu = dres W2 with the epilogue dpre = dgelu * gelu_tanh'(fc1_out) (torch's operation
  order; tanh(u) = 2 / (1 + exp(-2u)) - 1); dhidden = dpre W1 + dres; dW2 = dres^T gelu_out and
  dW1 = dpre^T hidden split over the tokens in chunks of 2048 (fp32 partial per chunk).
- ``mkb_colsum_*``: column sums over chunks of 64 tokens (a thread per column, fp32), for dW_ln
  (sum dY n), db_ln (sum dY), db2 (sum dres) and db1 (sum dpre).
- ``mkb_reduce_*``: sums the partials (per-chunk column sums, split-K weight-gradient partials)
  per output in fp64, in chunk order, and rounds to fp32 once.
SIMT fp32 GEMMs are slower than cuBLAS's fp32 GEMMs on an H200, but are what fp32 accuracy needs.
"""

import torch
import tvm
from tvm.script import tirx as T

# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(batch=64, seq=1087, dim=512, ff=2048)
EPS = 1e-5  # the problem's eps; kernels are built for the eps they are called with
BM, BN, BK = 128, 128, 16
FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
SPLIT_TILES = 128  # K slices (2048 tokens) per split of the weight-gradient GEMMs
THREADS = 256
ROW_WARPS = 8
CH = 64  # tokens per column-sum partial
COLS = 128  # columns per column-sum CTA
ROOT = 0.7978845608028654  # sqrt(2 / pi)
GC = 0.044715
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _let(value, body, name):
    """Bind ``value`` once (a TIR Let) so the expression tree does not repeat it."""
    var = T.Var(name, "float32")
    return T.Let(body(var), where={var: value})


def exp_precise(x):
    """exp(x) in fp32 within about 1 ulp from arithmetic that --use_fast_math keeps exact.

    exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split so n * hi is exact);
    exp(r) by a degree-7 Taylor polynomial; 2^n from exponent bits. Inputs below -87 give 0;
    inputs are clamped at 88.
    """

    def with_xc(xc):
        def with_n(n):
            def with_r(r):
                poly = _f32(1.0 / 5040.0)
                for coef in (1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
                    poly = poly * r + _f32(coef)
                scale = T.reinterpret("float32", T.shift_left(T.int32(n) + 127, 23))
                return poly * scale

            reduced = xc - n * _f32(0.693145751953125) - n * _f32(1.428606765330187e-06)
            return _let(reduced, with_r, "r")

        return _let(T.floor(xc * _f32(1.4426950408889634) + _f32(0.5)), with_n, "n")

    def with_x(xv):
        clamped = T.max(T.min(xv, _f32(88.0)), _f32(-87.0))
        return T.if_then_else(xv < _f32(-87.0), _f32(0.0), _let(clamped, with_xc, "xc"))

    return _let(x, with_x, "x")


def div_precise(num, den):
    """num / den: the fast-math quotient corrected by one Newton step on the residual."""

    def with_operands(n, d):
        def with_r(r):
            return _let(n * r, lambda q: q + (n - d * q) * r, "q")

        return _let(_f32(1.0) / d, with_r, "rcp")

    return _let(num, lambda n: _let(den, lambda d: with_operands(n, d), "den"), "num")


def sqrt_precise(a):
    """sqrt(a) for a >= 0: the fast-math root corrected by one Newton step (s + (a - s^2) / 2s)."""

    def with_a(av):
        def with_s(s):
            return T.if_then_else(av > _f32(0.0), s + div_precise(av - s * s, s + s), s)

        return _let(T.sqrt(av), with_s, "s")

    return _let(a, with_a, "a")


def _shfl_xor(value, mask):
    return T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), value, mask, 32)


def _row_kernel(plan, tokens, dim, eps):
    tr, tp, dp = plan[0], plan[1], plan[2]
    per = dp // 128
    inv_dim = 1.0 / dim

    @T.prim_func
    def mkb_row(dy_h: T.handle, n_h: T.handle, v_h: T.handle, w_h: T.handle, o_h: T.handle):
        dy = T.match_buffer(dy_h, (tr, dp), "float32")
        nm = T.match_buffer(n_h, (tr, dp), "float32")
        var = T.match_buffer(v_h, (tr, 1), "float32")
        w = T.match_buffer(w_h, (dp,), "float32")
        o = T.match_buffer(o_h, (tp, dp), "float32")
        T.device_entry()
        bx = T.cta_id([tp // ROW_WARPS])
        tx = T.thread_id([ROW_WARPS * 32])
        gv = T.alloc_buffer((per * 4,), "float32", scope="local")
        nv = T.alloc_buffer((per * 4,), "float32", scope="local")
        wv = T.alloc_buffer((4,), "float32", scope="local")
        red = T.alloc_buffer((2,), "float32", scope="local")
        sc = T.alloc_buffer((3,), "float32", scope="local")
        out = T.alloc_buffer((4,), "float32", scope="local")
        row: T.let = bx * ROW_WARPS + tx // 32
        lane: T.let = tx % 32
        if row < tokens:
            red[0] = T.float32(0.0)
            red[1] = T.float32(0.0)
            for j in T.unroll(per):
                for e in T.vectorized(4):
                    gv[j * 4 + e] = dy[row, j * 128 + lane * 4 + e]
                for e in T.vectorized(4):
                    nv[j * 4 + e] = nm[row, j * 128 + lane * 4 + e]
                for e in T.vectorized(4):
                    wv[e] = w[j * 128 + lane * 4 + e]
                for e in T.unroll(4):
                    gv[j * 4 + e] = gv[j * 4 + e] * wv[e]
                    red[0] = red[0] + gv[j * 4 + e]
                    red[1] = red[1] + gv[j * 4 + e] * nv[j * 4 + e]
            for i in T.unroll(5):
                red[0] = red[0] + _shfl_xor(red[0], T.shift_right(16, i))
                red[1] = red[1] + _shfl_xor(red[1], T.shift_right(16, i))
            sc[0] = red[0] * _f32(inv_dim)
            sc[1] = red[1] * _f32(inv_dim)
            sc[2] = div_precise(_f32(1.0), sqrt_precise(var[row, 0] + _f32(eps)))
            for j in T.unroll(per):
                for e in T.unroll(4):
                    out[e] = T.if_then_else(j * 128 + lane * 4 + e < dim,
                                            ((gv[j * 4 + e] - sc[0]) - nv[j * 4 + e] * sc[1]) * sc[2], _f32(0.0))
                for e in T.vectorized(4):
                    o[row, j * 128 + lane * 4 + e] = out[e]
        else:
            for j in T.unroll(per):
                for e in T.unroll(4):
                    out[e] = _f32(0.0)
                for e in T.vectorized(4):
                    o[row, j * 128 + lane * 4 + e] = out[e]

    return mkb_row


def _gemm_kernel(kind, plan, tokens):
    """dgelu: A dres [tp, dp], B W2 [dp, fp], C dpre [tp, fp], X fc1_out [tr, fp].
    dhidden: A dpre [tp, fp], B W1 [fp, dp], C dhidden [tr, dp], X dres [tp, dp].
    dw2: A^T dres [tp, dp], B gelu_out [tr, fp], C part [splits, dp, fp]; dw1: A^T dpre [tp, fp], B x [tr, dp],
    C part [splits, fp, dp] (X unused: given A)."""
    tr, tp, dp, fp, k_tok, splits, _ = plan
    if kind == "dgelu":
        a_shape, b_shape, c_shape, x_shape, m, n, k_len = (tp, dp), (dp, fp), (tp, fp), (tr, fp), tp, fp, dp
    elif kind == "dhidden":
        a_shape, b_shape, c_shape, x_shape, m, n, k_len = (tp, fp), (fp, dp), (tr, dp), (tp, dp), tp, dp, fp
    elif kind == "dw2":
        a_shape, b_shape, c_shape, x_shape, m, n, k_len = (tp, dp), (tr, fp), (splits, dp, fp), (tp, dp), dp, fp, k_tok
    else:
        a_shape, b_shape, c_shape, x_shape, m, n, k_len = (tp, fp), (tr, dp), (splits, fp, dp), (tp, fp), fp, dp, k_tok
    split = kind in ("dw2", "dw1")
    k_tiles = k_len // BK
    folds = (SPLIT_TILES if split else k_tiles) // FOLD
    nz = splits if split else 1

    @T.prim_func
    def gemm(a_h: T.handle, b_h: T.handle, c_h: T.handle, x_h: T.handle):
        A = T.match_buffer(a_h, a_shape, "float32")
        B = T.match_buffer(b_h, b_shape, "float32")
        C = T.match_buffer(c_h, c_shape, "float32")
        X = T.match_buffer(x_h, x_shape, "float32")
        T.device_entry()
        mb, nb, s = T.cta_id([m // BM, n // BN, nz])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK, BM), "float32", scope="shared")
        b_s = T.alloc_buffer((BK, BN), "float32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        part = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((8,), "float32", scope="local")
        bf = T.alloc_buffer((8,), "float32", scope="local")
        ra = T.alloc_buffer((8,), "float32", scope="local")
        rb = T.alloc_buffer((8,), "float32", scope="local")
        xv = T.alloc_buffer((4,), "float32", scope="local")
        ev = T.alloc_buffer((3,), "float32", scope="local")
        out = T.alloc_buffer((4,), "float32", scope="local")
        row0: T.let = mb * BM
        col0: T.let = nb * BN
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx // 2
        lk: T.let = (tx % 2) * 8  # [M, K] A: which 8-wide half of the K slice this thread loads
        kr: T.let = tx // 16  # [K, *] operands: the K row of the slice this thread loads
        c8: T.let = (tx % 16) * 8  # [K, *] operands: the first of the 8 columns this thread loads
        kt0: T.let = s * SPLIT_TILES
        kt1: T.let = T.min(kt0 + SPLIT_TILES, k_tiles) if split else k_tiles
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            if split:
                for j in T.vectorized(4):
                    ra[h * 4 + j] = A[kt0 * BK + kr, row0 + c8 + h * 4 + j]
            else:
                for j in T.vectorized(4):
                    ra[h * 4 + j] = A[row0 + lrow, lk + h * 4 + j]
            for j in T.vectorized(4):
                rb[h * 4 + j] = B[kt0 * BK + kr, col0 + c8 + h * 4 + j]
        for kc in range(folds):
            for i in T.unroll(64):
                part[i] = T.float32(0.0)
            for ks in range(FOLD):
                if kt0 + kc * FOLD + ks < kt1:
                    for j in T.unroll(8):
                        if split:
                            a_s[kr, c8 + j] = ra[j]
                        else:
                            a_s[lk + j, lrow] = ra[j]
                        b_s[kr, c8 + j] = rb[j]
                    T.cuda.cta_sync()
                    if kt0 + kc * FOLD + ks + 1 < kt1:  # next slice's loads fly while this slice is computed
                        for h in T.unroll(2):
                            if split:
                                for j in T.vectorized(4):
                                    ra[h * 4 + j] = A[(kt0 + kc * FOLD + ks + 1) * BK + kr, row0 + c8 + h * 4 + j]
                            else:
                                for j in T.vectorized(4):
                                    ra[h * 4 + j] = A[row0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                            for j in T.vectorized(4):
                                rb[h * 4 + j] = B[(kt0 + kc * FOLD + ks + 1) * BK + kr, col0 + c8 + h * 4 + j]
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
                                part[i * 8 + j] = part[i * 8 + j] + af[i] * bf[j]
                    T.cuda.cta_sync()
            for i in T.unroll(64):  # fold the chunk's partial sums into the total
                acc[i] = acc[i] + part[i]
        for i in T.unroll(8):
            for jh in T.unroll(2):
                if split:
                    for j in T.unroll(4):
                        out[j] = acc[i * 8 + jh * 4 + j]
                    for j in T.vectorized(4):
                        C[s, row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] = out[j]
                elif kind == "dgelu":  # dpre = dgelu * gelu_tanh'(z), zero on padded rows
                    for j in T.vectorized(4):
                        xv[j] = X[T.min(row0 + (i // 4) * 64 + ty * 4 + i % 4, tokens - 1),
                                  col0 + jh * 64 + tc * 4 + j]
                    for j in T.unroll(4):
                        ev[0] = xv[j] * xv[j]  # z^2
                        ev[1] = div_precise(_f32(2.0), _f32(1.0) + exp_precise(
                            _f32(-2.0) * ((_f32(ROOT) * xv[j]) * (_f32(1.0) + _f32(GC) * ev[0])))) - _f32(1.0)  # tanh
                        ev[2] = _f32(0.5) * (_f32(1.0) + ev[1]) + (((_f32(0.5) * xv[j]) * (_f32(1.0) - ev[1] * ev[1]))
                                                                  * _f32(ROOT)) * (_f32(1.0) + _f32(3.0 * GC) * ev[0])
                        out[j] = T.if_then_else(row0 + (i // 4) * 64 + ty * 4 + i % 4 < tokens,
                                                acc[i * 8 + jh * 4 + j] * ev[2], _f32(0.0))
                    for j in T.vectorized(4):
                        C[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] = out[j]
                else:  # dhidden = dpre W1 + dres on the valid rows
                    if row0 + (i // 4) * 64 + ty * 4 + i % 4 < tokens:
                        for j in T.vectorized(4):
                            xv[j] = X[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j]
                        for j in T.unroll(4):
                            out[j] = acc[i * 8 + jh * 4 + j] + xv[j]
                        for j in T.vectorized(4):
                            C[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] = out[j]

    return gemm.with_attr("global_symbol", "mkb_" + kind)


def _colsum_kernel(kind, plan, tokens):
    """part[p, c] = sum over tokens [64 p, 64 p + 64) of x[t, c] (times y[t, c] for dn), fp32 in order."""
    tr, tp, dp, fp, _, _, chunks = plan
    rows, cols = (tp, fp) if kind == "f" else (tr, dp)
    prod = kind == "dn"

    @T.prim_func
    def colsum(x_h: T.handle, y_h: T.handle, p_h: T.handle):
        X = T.match_buffer(x_h, (rows, cols), "float32")
        Y = T.match_buffer(y_h, (rows, cols), "float32")
        P = T.match_buffer(p_h, (chunks, cols), "float32")
        T.device_entry()
        cb, p = T.cta_id([cols // COLS, chunks])
        tx = T.thread_id([COLS])
        acc = T.alloc_buffer((1,), "float32", scope="local")
        acc[0] = T.float32(0.0)
        for r in range(CH):
            if p * CH + r < tokens:
                if prod:
                    acc[0] = acc[0] + X[p * CH + r, cb * COLS + tx] * Y[p * CH + r, cb * COLS + tx]
                else:
                    acc[0] = acc[0] + X[p * CH + r, cb * COLS + tx]
        P[p, cb * COLS + tx] = acc[0]

    return colsum.with_attr("global_symbol", "mkb_colsum_" + kind)


def _reduce_kernel(kind, plan):
    """out[c] = fp32(sum_p part[p, c] in fp64), p ascending."""
    _, _, dp, fp, _, splits, chunks = plan
    parts, cols = {"d": (chunks, dp), "f": (chunks, fp), "w": (splits, dp * fp)}[kind]

    @T.prim_func
    def reduce(p_h: T.handle, o_h: T.handle):
        P = T.match_buffer(p_h, (parts, cols), "float32")
        dst = T.match_buffer(o_h, (cols,), "float32")
        T.device_entry()
        bx = T.cta_id([(cols + THREADS - 1) // THREADS])
        tx = T.thread_id([THREADS])
        acc = T.alloc_buffer((1,), "float64", scope="local")
        if bx * THREADS + tx < cols:
            acc[0] = T.float64(0.0)
            for p in range(parts):
                acc[0] = acc[0] + T.float64(P[p, bx * THREADS + tx])
            dst[bx * THREADS + tx] = T.float32(acc[0])

    return reduce.with_attr("global_symbol", "mkb_reduce_" + kind)


_NAMES = ("row", "dgelu", "dhidden", "dw2", "dw1", "colsum_d", "colsum_dn", "colsum_f", "reduce_d", "reduce_f",
          "reduce_w")


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _plan(tokens, dim, ff, padded):
    """(rows of the token inputs, padded tokens, dim, ff, K of the token sums, splits, partial chunks)."""
    tp, dp, fp = _up(tokens, BM), _up(dim, BN), _up(ff, BN)
    tr = tp if padded else tokens
    k_tok = tp if padded else tokens
    splits = (k_tok // BK + SPLIT_TILES - 1) // SPLIT_TILES
    return tr, tp, dp, fp, k_tok, splits, (tokens + CH - 1) // CH


def _exported(funcs):
    """An IRModule whose functions are exported under their keys (a prim_func otherwise exports its
    own global_symbol, and the runtime module would have no function by the key's name); the device
    kernels are then named ``<key>_kernel``."""
    return tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})


def _build(plan, tokens, dim, eps, arch):
    """Compile every kernel once per shape, eps and arch; return the tvm Executable."""
    key = (plan, tokens, dim, eps, arch)
    if key not in _EXES:
        funcs = {"row": _row_kernel(plan, tokens, dim, eps)}
        for kind in ("dgelu", "dhidden", "dw2", "dw1"):
            funcs[kind] = _gemm_kernel(kind, plan, tokens)
        for kind in ("d", "dn", "f"):
            funcs["colsum_" + kind] = _colsum_kernel(kind, plan, tokens)
        for kind in ("d", "f", "w"):
            funcs["reduce_" + kind] = _reduce_kernel(kind, plan)
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(_exported(funcs), target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fns(plan, tokens, dim, eps):
    key = (plan, tokens, dim, eps, _device_arch())
    if key not in _FNS:
        mod = _build(*key).mod
        _FNS[key] = {name: mod[name] for name in _NAMES}
    return _FNS[key]


def _padded(t, shape, fill=0.0):
    t = t.contiguous()
    if tuple(t.shape) == tuple(shape):
        return t
    p = torch.full(shape, fill, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def solve(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output, fc2_weight, normalized, var, ln_weight,
          eps):
    dim, ff = fc2_weight.shape
    tokens = grad_output.numel() // dim
    dev = grad_output.device
    f32 = torch.float32
    padded = dim % BN != 0 or ff % BN != 0 or tokens % BK != 0
    plan = _plan(tokens, dim, ff, padded)
    tr, tp, dp, fp, _, splits, chunks = plan
    k = _kernel_fns(plan, tokens, dim, float(eps))
    dy = _padded(grad_output.reshape(tokens, dim), (tr, dp))
    nrm = _padded(normalized.reshape(tokens, dim), (tr, dp))
    x = _padded(hidden_states.reshape(tokens, dim), (tr, dp))
    z = _padded(fc1_output.reshape(tokens, ff), (tr, fp))
    gelu = _padded(gelu_output.reshape(tokens, ff), (tr, fp))
    dres = torch.empty(tp, dp, dtype=f32, device=dev)
    k["row"](dy, nrm, _padded(var.reshape(tokens, 1), (tr, 1), 1.0), _padded(ln_weight, (dp,)), dres)
    dpre = torch.empty(tp, fp, dtype=f32, device=dev)
    k["dgelu"](dres, _padded(fc2_weight, (dp, fp)), dpre, z)
    dhid = torch.empty(tr, dp, dtype=f32, device=dev)
    k["dhidden"](dpre, _padded(fc1_weight, (fp, dp)), dhid, dres)
    part_w = torch.empty(splits, dp * fp, dtype=f32, device=dev)
    gw2 = torch.empty(dp, fp, dtype=f32, device=dev)
    k["dw2"](dres, gelu, part_w.view(splits, dp, fp), dres)
    k["reduce_w"](part_w, gw2.view(-1))
    gw1 = torch.empty(fp, dp, dtype=f32, device=dev)
    k["dw1"](dpre, x, part_w.view(splits, fp, dp), dpre)
    k["reduce_w"](part_w, gw1.view(-1))
    part_d = torch.empty(chunks, dp, dtype=f32, device=dev)
    sums = []
    for name, a, b in (("colsum_dn", dy, nrm), ("colsum_d", dy, dy), ("colsum_d", dres[:tr], dres[:tr])):
        k[name](a, b, part_d)
        out = torch.empty(dp, dtype=f32, device=dev)
        k["reduce_d"](part_d, out)
        sums.append(out)
    gln_w, gln_b, gb2 = sums
    part_f = torch.empty(chunks, fp, dtype=f32, device=dev)
    k["colsum_f"](dpre, dpre, part_f)
    gb1 = torch.empty(fp, dtype=f32, device=dev)
    k["reduce_f"](part_f, gb1)
    if padded:
        dhid = dhid[:tokens, :dim]
        gw1, gw2 = gw1[:ff, :dim].contiguous(), gw2[:dim, :ff].contiguous()
        gb1, gb2 = gb1[:ff].contiguous(), gb2[:dim].contiguous()
        gln_w, gln_b = gln_w[:dim].contiguous(), gln_b[:dim].contiguous()
    return (dhid.reshape(grad_output.shape).contiguous(), gw1, gb1, gw2, gb2, gln_w, gln_b)


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


def kernel_sources(arch="sm_90a"):
    """{kernel symbol: generated CUDA source} at the graded workload."""
    w = WORKLOAD
    tokens = w["batch"] * w["seq"]
    plan = _plan(tokens, w["dim"], w["ff"], False)
    source = _build(plan, tokens, w["dim"], EPS, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
