"""Does where a row starts matter? onlinesm's softmax on rows at set offsets from 128 bytes.

What: for each length N, the same rows laid out contiguously (row r starts at r * N elements,
so with N an odd multiple of 8 in 16-bit every other row starts 16 bytes past a 32-byte
boundary) and inside a buffer whose rows are 128 bytes apart, at an offset of 0, 16, 32 or 64
bytes from that boundary. GB/s counts one read and one write, as bench/softmax.py; % of the
copy of a contiguous tensor of the same size. Every output is checked against torch.softmax in
float64 on a few rows first.

    python bench/row_alignment.py --ns 21000,21504 --dtypes bfloat16

Why: 16-bit rows whose length is an odd multiple of 8 (21,000, 23,000, 33,000) ran 3-5 points
of copy bandwidth below their neighbours that are multiples of 16 (22,000, 23,552, 34,000) on
the same plan; this tells the layout's share from the length's. Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import copy_gbps, gbps, markdown_table, time_ms  # noqa: E402

__all__ = ["layouts", "main"]


def layouts(base: Any, n: int, itemsize: int) -> dict[str, Any]:
    """Views of N columns of ``base`` (rows 128 bytes apart, 64 bytes of slack per row) by name."""
    out = {}
    for offset in (0, 16, 32, 64):
        col = offset // itemsize
        out[f"128B rows +{offset}B"] = base[:, col:col + n]
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    from onlinesm.kernels import softmax

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="21000,21504,33000,34000,12288,1000")
    ap.add_argument("--dtypes", default="bfloat16")
    ap.add_argument("--gb", type=float, default=0.5, help="size of x in GB")
    args = ap.parse_args(argv)
    sm = sys.modules["onlinesm.kernels.softmax"]
    rows: list[list[Any]] = []
    for dname in args.dtypes.split(","):
        dtype = getattr(torch, dname)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        for n in (int(v) for v in args.ns.split(",")):
            m = max(1, int(args.gb * 1e9) // (n * itemsize))
            x = torch.randn(m, n, device="cuda", dtype=dtype) * 4
            _, copy = copy_gbps(x)
            pitch = -(-(n + 64 // itemsize) * itemsize // 128) * 128 // itemsize
            base = torch.empty(m, pitch, device="cuda", dtype=dtype)
            cases = {"contiguous": x}
            for name, view in layouts(base, n, itemsize).items():
                view.copy_(x)
                cases[name] = view
            for name, t in cases.items():
                y = softmax(t[:64])
                want = torch.softmax(t[:64].double(), -1)
                err = (y.double() - want).abs().max().item()
                if err > 1e-2:
                    raise SystemExit(f"{dname} N={n} {name}: max error {err:.2e} against float64")
                ms = time_ms(lambda t=t: softmax(t))
                bw = gbps(2 * m * n * itemsize, ms)
                # softmax() writes a contiguous y, laid out as x is
                plan, _, _, shift = sm._launch_plan(t, x, "auto", None, None, None)
                rows.append([dname, n, name, f"{bw:.0f}", f"{100 * bw / copy:.1f}%",
                             f"{plan.path} s{plan.split} win{shift}"])
                print(" | ".join(str(c) for c in rows[-1]), flush=True)
            del x, base
            torch.cuda.empty_cache()
    print(markdown_table(["dtype", "N", "layout", "GB/s", "of copy", "plan"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
