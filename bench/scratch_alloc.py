"""µs of host time per Gluon attention launch spent on Triton's global scratch, on a GPU.

What: the Gluon kernel makes its TMA descriptors on the device, in global scratch that
Triton's launcher asks an allocator for on every launch. This times one such request two ways:

- ``stream buffer`` (shipped): ``attention_gluon._StreamScratch``, one buffer kept per device
  and stream and handed to every launch on it;
- ``torch.empty`` (the allocator before it): a tensor from torch's CUDA caching allocator per
  launch, freed when the launch returns.

Why: a short attention call's time is the host's (bench/host_overhead.py times whole calls,
whose noise between processes is larger than this part); this isolates the allocation.

Run (GPU)::

    python bench/scratch_alloc.py         # median of 7 runs of 20,000 requests each
"""

from __future__ import annotations

import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

#: a launch's request: 132 programs x 4 descriptors of 128 bytes (an H100's or H200's grid)
SIZE, ALIGN = 132 * 4 * 128, 128


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("scratch_alloc.py needs a CUDA device", file=sys.stderr)
        return 2
    from onlinesm.kernels import attention_gluon

    stream = torch.cuda.current_stream().cuda_stream
    kept = attention_gluon._StreamScratch()

    def fresh() -> None:  # the tensor dies at once, as the launcher drops it after the launch
        torch.empty(SIZE, dtype=torch.int8, device="cuda")

    def stream_buffer() -> None:
        kept(SIZE, ALIGN, stream)

    n = 20_000
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: µs per request of "
          f"{SIZE} bytes, median of 7 runs of {n}")
    for name, fn in (("torch.empty", fresh), ("stream buffer", stream_buffer)):
        fn()
        runs = timeit.repeat(fn, number=n, repeat=7)
        print(f"{name:14s} {statistics.median(runs) / n * 1e6:6.2f} µs "
              f"(runs {min(runs) / n * 1e6:.2f}-{max(runs) / n * 1e6:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
