"""µs of host time the Triton attention launch spends on its cache key, on the CPU.

What: a launch with a known config (pinned, or the autotuner's pick) finds its compiled kernel
under a key of the kernel, device, options and its 32 runtime arguments (attention.py's
``_launch_known``). This times building that key and looking it up, two ways:

- ``argument_key`` (shipped): tensors by dtype and 16-byte alignment, every other argument
  by value (``launching.argument_key``);
- ``jit rules`` (the key before it, kept here as the reference): each argument reduced to
  what Triton's JIT specialises it on (an integer's width, whether it is 1, whether a
  multiple of 16), one ``isinstance`` chain per argument.

Why: on a short call the host's time is the call's (bench/host_overhead.py times the whole
call on a GPU); this isolates the key, which needs no GPU.

Run (no GPU)::

    python bench/launch_key.py            # median of 7 runs of 20,000 lookups each
"""

from __future__ import annotations

import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def jit_rules_key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Each argument as Triton's JIT specialises it (the key before ``argument_key``)."""
    key: list[Any] = []
    for a in args:
        if isinstance(a, bool):
            key.append(a)
        elif isinstance(a, int):
            kind = "i32" if -2**31 <= a < 2**31 else "i64" if a < 2**63 else "u64"
            key.append((a == 1, a % 16 == 0, kind))
        elif hasattr(a, "data_ptr"):
            key.append((a.dtype, a.data_ptr() % 16 == 0))
        else:
            key.append(type(a))
    return tuple(key)


def launch_args(b: int = 1, h: int = 8, s: int = 128, d: int = 64) -> tuple[Any, ...]:
    """The Triton attention kernel's 32 runtime arguments for a b x h x s x d call without a
    mask, in ``attention()``'s order: six tensors, 16 strides, the sizes, the scale, flags."""
    import torch

    q = torch.empty(b, h, s, d, dtype=torch.bfloat16)
    lse = torch.empty(1)
    strides = (*q.stride()[:3],) * 3 + (0, 0, 0, 0) + (*q.stride()[:3],)
    return (q, q, q, q, q, lse, *strides, h, 1, s, s, d, 0, 0.18, False, 128, b * h)


def main() -> int:
    import torch

    from onlinesm.kernels.launching import argument_key

    args = launch_args()
    options = dict(BLOCK_M=64, BLOCK_N=64, num_stages=3, num_warps=4, BLOCK_D=64, CAUSAL=False,
                   HAS_MASK=False, EVEN_D=True, SCALE_POSITIVE=True, ALIGNED=True,
                   INTERPRET=False, DOT_PRECISION="tf32")
    kernel, device = object(), torch.device("cpu")
    ways = {"argument_key": lambda: (kernel, device, *argument_key(args, 6), *options.items()),
            "jit rules": lambda: (kernel, device, jit_rules_key(args), *options.items())}
    print(f"the Triton attention launch's key, {len(args)} arguments, µs per lookup:")
    for name, key in ways.items():
        table = {key(): True}
        assert table.get(key()), name  # the same arguments find their entry
        runs = [timeit.timeit(lambda: table.get(key()), number=20000) / 20000 * 1e6
                for _ in range(7)]
        print(f"  {name:13s} median {statistics.median(runs):5.2f}  "
              f"(runs {min(runs):.2f}-{max(runs):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
