"""The smallest CuTe DSL kernel behind the oracles' misaligned-address fault, and its fix.

    python3 -m benchmarks.h200_cute_swizzle --out results/h200/cute-swizzle.json

One CTA copies a 16 x 64 bf16 tile from global into shared memory with 16-byte ``cp.async`` vectors
(the oracles' global-to-shared copy), then writes it back element by element through the same shared
tensor. The shared tensor is allocated with a pointer swizzle (``SmemAllocator.allocate_tensor(...,
swizzle=cute.make_swizzle(B, M, S))``), and such a swizzle acts on *byte* addresses: it xors address
bits [M + S, M + S + B) into bits [M, M + B). With M = 3 it permutes 8-byte units, so a 16-byte
vector is split and half of the ``cp.async`` (and ``ldmatrix``) addresses are only 8-byte aligned:
``cudaErrorMisalignedAddress``. M = 4 permutes whole 16-byte chunks (the element-index swizzle
<3, 3, 3> of CUTLASS's bf16 layouts is <3, 4, 3> on bytes). Each swizzle runs in its own process,
since the fault ends the CUDA context; the record gives, per swizzle, whether the round trip is
exact or the error it raised.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor

REPO = Path(__file__).resolve().parents[1]
SWIZZLES = ((3, 3, 3), (2, 3, 3), (3, 4, 3), (2, 4, 3))
ROWS, COLS = 16, 64
THREADS = 128


@cute.kernel
def roundtrip_kernel(src: cute.Tensor, dst: cute.Tensor, b: cutlass.Constexpr, m: cutlass.Constexpr,
                     s: cutlass.Constexpr):
    """dst = src through a shared tile filled by 16-byte cp.async and read back element by element."""
    tidx, _, _ = cute.arch.thread_idx()
    smem = cutlass.memory.SmemAllocator()
    atom = cute.make_layout((8, COLS), stride=(COLS, 1))
    s_tile = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (ROWS, COLS), (0, 1)), 1024,
                                  swizzle=cute.make_swizzle(b, m, s))
    g2s = cute.make_tiled_copy_tv(
        cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                            cutlass.BFloat16, num_bits_per_copy=128),
        cute.make_layout((THREADS // (COLS // 8), COLS // 8), stride=(COLS // 8, 1)),
        cute.make_layout((1, 8)))
    thr = g2s.get_slice(tidx)
    cute.copy(g2s, thr.partition_S(src), thr.partition_D(s_tile))
    cute.arch.cp_async_commit_group()
    cute.arch.cp_async_wait_group(0)
    cute.arch.sync_threads()
    for i in range(tidx, ROWS * COLS, THREADS):
        dst[i // COLS, i % COLS] = s_tile[i // COLS, i % COLS]


@cute.jit
def roundtrip(src: cute.Tensor, dst: cute.Tensor, b: cutlass.Constexpr, m: cutlass.Constexpr,
              s: cutlass.Constexpr):
    roundtrip_kernel(src, dst, b, m, s).launch(grid=[1, 1, 1], block=[THREADS, 1, 1])


def one(b: int, m: int, s: int, device: str, ptx_dir: str | None = None) -> dict:
    """Run the round trip with swizzle (b, m, s); the outcome as a dict. With ``ptx_dir``, only compile
    (for sm_90a, no GPU needed) and keep the PTX there."""
    import torch

    out: dict = {"swizzle": [b, m, s]}
    try:
        fake = [make_fake_compact_tensor(cutlass.BFloat16, (ROWS, COLS), stride_order=(1, 0), assumed_align=16)
                for _ in range(2)]
        options = "--enable-tvm-ffi" + (f" --gpu-arch sm_90a --keep-ptx --dump-dir {ptx_dir}" if ptx_dir else "")
        fn = cute.compile(roundtrip, *fake, b, m, s, options=options)
        if ptx_dir:
            return out
        src = torch.arange(ROWS * COLS, device=device, dtype=torch.float32).to(torch.bfloat16).view(ROWS, COLS)
        dst = torch.zeros_like(src)
        fn(src, dst)
        torch.cuda.synchronize()
        out["exact"] = bool(torch.equal(src, dst))
    except Exception as exc:  # noqa: BLE001 - the record says what broke
        out["error"] = f"{type(exc).__name__}: {exc}"[:500]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--one", nargs=3, type=int, metavar=("B", "M", "S"), help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path)
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(*args.one, args.device)))
        return 0
    if args.out is None:
        p.error("--out is required")
    from benchmarks.h200_judge import device_name, git_commit

    record = {"command": "python3 -m benchmarks.h200_cute_swizzle " + " ".join(argv or sys.argv[1:]),
              "commit": git_commit(), "date": dt.datetime.now(dt.UTC).isoformat(),
              "device": device_name(f"{args.device}:0" if ":" not in args.device else args.device),
              "tile": [ROWS, COLS], "results": []}
    for swz in SWIZZLES:
        done = subprocess.run([sys.executable, "-m", "benchmarks.h200_cute_swizzle", "--one", *map(str, swz),
                               "--device", args.device], capture_output=True, text=True, timeout=300, cwd=REPO)
        lines = done.stdout.strip().splitlines()
        entry = json.loads(lines[-1]) if lines else {"swizzle": list(swz),
                                                      "error": f"exit {done.returncode}: {done.stderr[-500:]}"}
        record["results"].append(entry)
        print(entry, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
