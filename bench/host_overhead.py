"""Host time per call of onlinesm's softmax and attention, beside torch's, on a GPU.

What: for each case, four figures in µs per call:
- ``host``: the Python and launch time alone: calls issued while the GPU is held busy by a
  long sleep kernel, so none waits for the GPU (what a model loop pays on the CPU per call);
- ``loop``: calls back to back, synchronised once at the end (host or GPU, whichever bounds);
- ``kernel``: ``triton.testing.do_bench``'s median, as the speed tables time (L2 flushed
  between calls, which also hides up to the flush's time of host work);
- ``graph``: the GPU's time alone, 20 calls captured in a CUDA graph and replayed (do_bench's
  median over 20): where ``kernel`` exceeds it, the host bounded the speed table's figure.

Why: the speed tables time large inputs, where the kernel's time hides the launcher's. A
model calls softmax and attention on small inputs too, and there a launch that spends 100 µs
of Python loses to torch's 7 µs however fast its kernel.

Run (GPU)::

    python bench/host_overhead.py             # the table; OUT=... also writes host_overhead.{json,md}
    python bench/host_overhead.py --calls 500 --repeat 5 --only attention
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table, time_ms, write_outputs  # noqa: E402

#: softmax cases: (rows, N), bf16
SOFTMAX_CASES = ((256, 1024), (4096, 4096), (16384, 1024), (1024, 32768))
#: attention cases: (B, H, S, D, causal), bf16
ATTENTION_CASES = ((1, 8, 512, 64, False), (16, 32, 1024, 64, True), (16, 32, 1024, 64, False),
                   (4, 16, 4096, 128, False),
                   # the speed table's shortest rows (B * S = 16k): tens of µs on the GPU
                   (64, 32, 256, 64, False), (64, 32, 256, 64, True), (64, 16, 256, 128, True),
                   # below S = 256: the Triton kernel, launched under launching.argument_key
                   (1, 8, 128, 64, False))


def host_us(fn: Callable[[], Any], calls: int) -> float:
    """µs of host time per call, the GPU held busy by a sleep so that no call waits for it."""
    import torch

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    # GPU busy for about 1 ms per call at 2 GHz (at least 0.1 s): far longer than any host call
    torch.cuda._sleep(int(max(2e8, 2e6 * calls)))
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def loop_us(fn: Callable[[], Any], calls: int) -> float:
    """µs per call of calls issued back to back, synchronised at the end."""
    import torch

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def graph_us(fn: Callable[[], Any], calls: int = 20) -> float:
    """µs of GPU time per call: ``calls`` calls captured in one CUDA graph, its replay timed
    (no host work between the kernels); NaN where the call cannot be captured."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up off the default stream, as capture needs
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except RuntimeError as e:
        print(f"  no CUDA graph: {str(e).splitlines()[0][:120]}", flush=True)
        return float("nan")
    return time_ms(graph.replay) * 1e3 / calls


def run(calls: int, repeat: int = 1, only: str = "") -> list[dict[str, Any]]:
    """Each case's four figures for onlinesm and its torch peer (the host and loop figures
    the median of ``repeat`` measurements; ``only``: the cases whose name holds it)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from onlinesm import kernels

    kernels.use_interpreter(False)
    from onlinesm.kernels import attention, softmax

    rows: list[dict[str, Any]] = []

    def measure(case: str, impl: str, fn: Callable[[], Any]) -> None:
        if only not in case:
            return
        row = dict(case=case, impl=impl,
                   host=statistics.median(host_us(fn, calls) for _ in range(repeat)),
                   loop=statistics.median(loop_us(fn, calls) for _ in range(repeat)),
                   kernel=time_ms(fn) * 1e3, graph=graph_us(fn))
        rows.append(row)
        print(f"{case:32s} {impl:9s} host {row['host']:7.1f}  loop {row['loop']:7.1f}  "
              f"kernel {row['kernel']:7.1f}  graph {row['graph']:7.1f} µs", flush=True)

    for n_rows, n in SOFTMAX_CASES:
        x = torch.randn(n_rows, n, device="cuda", dtype=torch.bfloat16)
        case = f"softmax bf16 {n_rows} x {n}"
        measure(case, "onlinesm", lambda: softmax(x))
        measure(case, "torch", lambda: torch.softmax(x, -1))
    for b, h, s, d, causal in ATTENTION_CASES:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        case = f"attention bf16 {b}x{h}x{s}x{d}{' causal' if causal else ''}"
        measure(case, "onlinesm", lambda: attention(q, k, v, causal=causal))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            measure(case, "cuDNN", lambda: F.scaled_dot_product_attention(
                q, k, v, is_causal=causal))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200, help="calls per figure (200)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="host and loop figures: the median of this many (3)")
    ap.add_argument("--only", default="", help="the cases whose name holds this text")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("host_overhead.py needs a CUDA device", file=sys.stderr)
        return 2
    rows = run(args.calls, args.repeat, args.only)
    table = markdown_table(
        ["case", "impl", "host µs", "loop µs", "kernel µs (do_bench)", "graph µs"],
        [[r["case"], r["impl"], f"{r['host']:.1f}", f"{r['loop']:.1f}", f"{r['kernel']:.1f}",
          f"{r['graph']:.1f}"] for r in rows])
    print(table)
    write_outputs("host_overhead", {"device": torch.cuda.get_device_name(),
                                    "torch": torch.__version__, "rows": rows}, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
