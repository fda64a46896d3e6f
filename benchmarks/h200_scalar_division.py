"""Does torch's CUDA divide by a Python scalar equal a multiply by the fp32 reciprocal, bit for bit?

    python3 -m benchmarks.h200_scalar_division --out results/h200/scalar-division.json

The NVFP4 oracles (problems 55, 57, 58, 59, 61) reproduce the references' quantisers exactly; those
references divide fp32 tensors by Python scalars (``amax / 6.0``, ``x / scale``). PyTorch's CUDA
kernel for a tensor-by-scalar division may multiply by the reciprocal instead of dividing, and the
oracles assume it does; this records what the installed torch does on this GPU, per divisor, over
2**24 normal and 2**20 subnormal-range values.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from pathlib import Path

import torch

DIVISORS = (6.0, 448.0, 2688.0, 3.0, 7.0, 0.1)


def compare(x: torch.Tensor, divisor: float) -> dict:
    divided = x / divisor
    reciprocal = torch.tensor(1.0 / divisor, dtype=torch.float32, device=x.device)  # fl32(1/d)
    multiplied = x * reciprocal
    true_div = x / torch.tensor(divisor, dtype=torch.float32, device=x.device)  # IEEE division
    return {"divisor": divisor,
            "equals_multiply_by_fp32_reciprocal": bool(torch.equal(divided, multiplied)),
            "differs_from_multiply": int((divided != multiplied).sum()),
            "equals_ieee_division": bool(torch.equal(divided, true_div)),
            "differs_from_ieee_division": int((divided != true_div).sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    g = torch.Generator(device=args.device).manual_seed(0)
    normal = torch.randn(1 << 24, device=args.device, generator=g) * 100
    tiny = torch.randn(1 << 20, device=args.device, generator=g) * 1e-38
    rows = [dict(compare(normal, d), values="normal") for d in DIVISORS]
    rows += [dict(compare(tiny, d), values="subnormal range") for d in DIVISORS]
    record = {"command": "python3 -m benchmarks.h200_scalar_division --out " + str(args.out),
              "commit": os.environ.get("MKB_COMMIT", "unknown"),
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
              "torch": torch.__version__, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
