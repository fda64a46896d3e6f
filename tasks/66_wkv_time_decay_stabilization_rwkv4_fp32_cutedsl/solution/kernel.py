"""CuTe DSL oracle for problem 66: RWKV-4 WKV recurrence with exponent stabilisation, fp32.

The whole computation is one DSL kernel: one thread per (batch, channel) walks the time steps in
order and keeps the state (m, a, b) in registers. Loads and stores of consecutive channels are
coalesced across a warp. The arithmetic follows the reference expression by expression (the same
sums are formed before each exp, e.g. (k + u) - p and (m + w) - q), with the accurate expf.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, steps=1721, channels=2048)
_THREADS = 256
_COMPILED = {}


def _max(a, b):
    return cutlass.select_(a > b, a, b)


@cute.kernel
def wkv_forward_kernel(time_decay: cute.Tensor, key: cute.Tensor, time_first: cute.Tensor,
                       value: cute.Tensor, max_state: cute.Tensor, num_state: cute.Tensor,
                       den_state: cute.Tensor, out: cute.Tensor, max_out: cute.Tensor,
                       num_out: cute.Tensor, den_out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    batch = cute.size(key, mode=[0])
    steps = cute.size(key, mode=[1])
    channels = cute.size(key, mode=[2])
    i = bidx * _THREADS + tidx
    if i < batch * channels:
        b = i // channels
        c = i - b * channels
        w = -cute.math.exp(time_decay[c])
        u = time_first[c]
        m = max_state[b, c]
        num = num_state[b, c]
        den = den_state[b, c]
        for t in range(steps):
            kt = key[b, t, c]
            vt = value[b, t, c]
            ku = kt + u
            p = _max(m, ku)
            e_state = cute.math.exp(m - p)
            e_new = cute.math.exp(ku - p)
            out[b, t, c] = (e_state * num + e_new * vt) / (e_state * den + e_new)
            mw = m + w
            q = _max(mw, kt)
            e_state = cute.math.exp(mw - q)
            e_new = cute.math.exp(kt - q)
            num = e_state * num + e_new * vt
            den = e_state * den + e_new
            m = q
        max_out[b, c] = m
        num_out[b, c] = num
        den_out[b, c] = den


@cute.jit
def wkv_forward(time_decay: cute.Tensor, key: cute.Tensor, time_first: cute.Tensor, value: cute.Tensor,
                max_state: cute.Tensor, num_state: cute.Tensor, den_state: cute.Tensor, out: cute.Tensor,
                max_out: cute.Tensor, num_out: cute.Tensor, den_out: cute.Tensor, stream: cuda.CUstream):
    lanes = cute.size(key, mode=[0]) * cute.size(key, mode=[2])
    wkv_forward_kernel(time_decay, key, time_first, value, max_state, num_state, den_state, out,
                       max_out, num_out, den_out).launch(
        grid=[(lanes + _THREADS - 1) // _THREADS, 1, 1], block=[_THREADS, 1, 1], stream=stream)


def _compile(batch, steps, channels, arch=None, ptx_dir=None):
    def fake(*shape):
        return make_fake_compact_tensor(cutlass.Float32, shape, stride_order=tuple(reversed(range(len(shape)))))

    chan = fake(channels)
    seq = fake(batch, steps, channels)
    state = fake(batch, channels)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(wkv_forward, chan, seq, chan, seq, state, state, state, seq, state, state, state,
                        make_fake_stream(), options=options)


def solve(time_decay, key, time_first, value, max_state, num_state, den_state):
    batch, steps, channels = key.shape
    ins = [t.contiguous() for t in (time_decay, key, time_first, value, max_state, num_state, den_state)]
    out = torch.empty_like(ins[1])
    states = [torch.empty_like(ins[4]) for _ in range(3)]
    if batch * channels == 0:
        return out, *states
    key_ = (batch, steps, channels)
    if key_ not in _COMPILED:
        _COMPILED[key_] = _compile(*key_)
    _COMPILED[key_](*ins, out, *states, cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out, *states


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(w["batch"], w["steps"], w["channels"], arch, ptx_dir).kernel_info)
