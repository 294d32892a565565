"""The kernel launches to profile with Nsight Compute, one case per run (a benchmark helper).

What: builds the inputs of one case of the speed tables, calls the kernel three times, and
exits; ``ncu`` (run by ``bash bench/gpu_run.sh ncu``) profiles the third call, made inside the
NVTX range ``onlinesm_profile``, after the compilation, any autotuning and a warm-up. The
cases are the rows where the built-in kernels miss their targets
(reports/h200/bench_softmax.md, bench_attention.md), so the profile names the bound.

    python bench/ncu_targets.py --list
    ncu --clock-control none -k regex:softmax --nvtx --nvtx-include onlinesm_profile/ \\
        --launch-count 1 python bench/ncu_targets.py softmax_bf16_12288

Needs a CUDA device. ``attention_bf16_d128_s4096`` pins the Triton kernel's tile config
``64,64,3,4`` (the one the bench's autotuner picked at D = 128, S = 4096); the other attention
cases take the bench's rows (B * S = 16k, H * D = 2048, from the name's ``_d<D>_s<S>``) and
run as routed, or cuDNN's kernel for the ``cudnn_`` ones.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Callable

#: case -> (description, ncu kernel-name regex)
CASES: dict[str, tuple[str, str]] = {
    "softmax_bf16_12288": ("softmax, bf16, 20,345 rows x 12,288 (81% of copy)", "softmax"),
    "softmax_bf16_1001": ("softmax, bf16, 249,750 rows x 1001 (84% of copy: two rows per "
                          "program, loaded element by element)", "softmax"),
    "softmax_bf16_1024": ("softmax, bf16, 244,140 rows x 1024 (97-101% of copy: the aligned "
                          "neighbour of softmax_bf16_1001)", "softmax"),
    "softmax_bf16_9001": ("softmax, bf16, 27,774 rows x 9001 (86% of copy: on chip, one row "
                          "per program as a window of 8192 and a tail of 1024 in 4 warps)",
                          "softmax"),
    "softmax_bf16_8191": ("softmax, bf16, 30,521 rows x 8191 (96.5% of copy: the launch of "
                          "softmax_bf16_9001, whose tail here holds no whole vector)", "softmax"),
    "softmax_bf16_50257": ("softmax, bf16, 4,974 rows x 50,257 (87.5% of copy, split as "
                           "128-byte windows in chunks of 8192)", "softmax"),
    "softmax_bf16_21000": ("softmax, bf16, 11,904 rows x 21,000 (88.6% of copy, off a sector: "
                           "read unwindowed, the exchange a row ahead in chunks of 2048)",
                           "softmax"),
    "softmax_bf16_100001": ("softmax, bf16, 2,499 rows x 100,001 (88% of copy, split as "
                            "128-byte windows in chunks of 8192)", "softmax"),
    "softmax_bf16_36000": ("softmax, bf16, 6,944 rows x 36,000 (92% of copy, split with the "
                           "exchange a row ahead in chunks of 2048)", "softmax"),
    "softmax_bf16_36008": ("softmax, bf16, 6,942 rows x 36,008 (90% of copy, off a sector: "
                           "read unwindowed, the exchange a row ahead in chunks of 2048)",
                           "softmax"),
    "softmax_bf16_36008_win128": ("as softmax_bf16_36008 read as 128-byte windows (75% of "
                                  "copy: why the exchange a row ahead loses on windows)",
                                  "softmax"),
    "softmax_bf16_65536": ("softmax, bf16, 3,814 rows x 65,536 (87% of copy, split)", "softmax"),
    "softmax_bf16_65536_st3": ("as softmax_bf16_65536, the row loop pipelined in 3 stages "
                               "(67-75% of copy)", "softmax"),
    "softmax_bf16_131072": ("softmax, bf16, 1,907 rows x 131,072 (86% of copy, split)", "softmax"),
    "softmax_bf16_131072_st3": ("as softmax_bf16_131072, the row loop pipelined in 3 stages "
                                "(69-70% of copy)", "softmax"),
    "softmax_bf16_163840": ("softmax, bf16, 1,525 rows x 163,840 (90% of copy, split, the row "
                            "loop pipelined in 3 stages)", "softmax"),
    "softmax_bf16_262144": ("softmax, bf16, 953 rows x 262,144 (88% of copy, split, pipelined)",
                            "softmax"),
    # aligned bf16 rows of 1,064-1,136 run at 88-90% of copy where fp16 rows run the same
    # launch (1024 + a tail of 256, two rows a program in 2 warps; offline 56 and 63
    # registers, 504 and 488 SASS instructions, no spill) at 99% and bf16 1,048 at 97%
    "softmax_bf16_1104": ("softmax, bf16, 226,449 rows x 1104 (88-89% of copy; fp16 99%)",
                          "softmax"),
    "softmax_fp16_1104": ("softmax, fp16, 226,449 rows x 1104 (99% of copy: the launch of "
                          "softmax_bf16_1104)", "softmax"),
    "softmax_bf16_1048": ("softmax, bf16, 238,549 rows x 1048 (97% of copy: the launch and "
                          "code of softmax_bf16_1104)", "softmax"),
    "attention_bf16_d128_s4096": ("attention forward, bf16, B=4 H=16 S=4096 D=128, not causal "
                                  "(0.72 of cuDNN)", "attn"),
    "attention_gluon_bf16_d64_s4096_causal": ("the Gluon kernel's launch, bf16, B=4 H=32 "
                                              "S=4096 D=64, causal (0.73 of cuDNN; the Triton "
                                              "kernel 0.89)", "_attn_fwd_ws"),
    "attention_gluon_bf16_d64_s4096_causal_persistent": (
        "as attention_gluon_bf16_d64_s4096_causal, persistent (0.80-0.88)", "_attn_fwd_ws"),
    "attention_gluon_bf16_d64_s1024": ("the Gluon kernel's launch, bf16, B=16 H=32 S=1024 "
                                       "D=64, not causal, persistent (0.83-0.85)", "_attn_fwd_ws"),
    "attention_bf16_d64_s1024_causal": ("attention() as routed (the Gluon kernel in two "
                                        "warpgroups since the twenty-first round; the Triton "
                                        "kernel, autotuned, before), bf16, B=16 H=32 S=1024 "
                                        "D=64, causal (0.98-0.99; the Triton kernel 0.84-0.88)",
                                        "attn"),
    "attention_bf16_d64_s1024": ("attention() as routed (the Triton kernel, autotuned), bf16, "
                                 "B=16 H=32 S=1024 D=64, not causal (0.87)", "attn"),
    # The peer itself, and the Gluon kernel in the peer's shape: cuDNN's kernel at D = 64 is
    # 64 x 128 tiles in two consumer warpgroups and a load warpgroup (384 threads, 168
    # registers, 134 KB of shared memory, one persistent program per SM), the shape of our
    # _2wg launch, which ran 15% slower at S = 1024 causal (bench_attention.md, twentieth
    # round), 6% since its o leaves by TMA (twenty-first round), 1-2% since the masked
    # tile's bounds are constants (twenty-second round: 209 against 205 us under ncu)
    "cudnn_bf16_d64_s1024_causal": ("SDPA's cuDNN backend, bf16, B=16 H=32 S=1024 D=64, "
                                    "causal (the peer of attention_bf16_d64_s1024_causal)",
                                    "sdpa|fprop"),
    "cudnn_bf16_d64_s2048_causal": ("SDPA's cuDNN backend, bf16, B=8 H=32 S=2048 D=64, causal",
                                    "sdpa|fprop"),
    "attention_gluon_bf16_d64_s1024_causal_2wg": (
        "the Gluon kernel in cuDNN's shape: two warpgroups, 128-key tiles, three K/V buffers, "
        "blocks from the counter, two Q buffers; bf16, B=16 H=32 S=1024 D=64, causal "
        "(0.98-0.99; 0.94 before the masked tile's bounds were constants, 0.85 before o left "
        "by TMA)",
        "_attn_fwd_ws"),
    # What was the moonshot's last gap: D = 128 without causal at S = 1280 (0.93-0.94 of
    # cuDNN in key tiles of 64, persistent, two Q buffers; 1.00-1.01 on an H100 in tiles of
    # 128 since o leaves through a K tile), beside S = 1024 and the peer at both
    "attention_bf16_d128_s1280": ("attention() as routed (the Gluon kernel), bf16, B=12 H=16 "
                                  "S=1280 D=128, not causal", "attn"),
    "cudnn_bf16_d128_s1280": ("SDPA's cuDNN backend, bf16, B=12 H=16 S=1280 D=128",
                              "sdpa|fprop"),
    # The moonshot's causal gap at short rows: D = 64 causal at S = 512 (0.87 of cuDNN; every
    # other launch shape ran 0.58-0.86), beside its peer. Profiled in the fifty-fifth round:
    # instruction fetch (25% of the consumers' samples no_inst, cuDNN's 1.5%); 1.00 since
    # the compact consumer (attention_gluon._ws_compact)
    "attention_bf16_d64_s512_causal": ("attention() as routed (the Gluon kernel, compact), "
                                       "bf16, B=32 H=32 S=512 D=64, causal (1.00; 0.87 "
                                       "before the compact consumer)", "attn"),
    "cudnn_bf16_d64_s512_causal": ("SDPA's cuDNN backend, bf16, B=32 H=32 S=512 D=64, causal",
                                   "sdpa|fprop"),
    # What is left of it: D = 128 causal at S = 512 (0.92-0.93 of cuDNN on an H100, compact
    # or not), beside its peer
    "attention_bf16_d128_s512_causal": ("attention() as routed (the Gluon kernel), bf16, B=32 "
                                        "H=16 S=512 D=128, causal (0.92-0.93)", "attn"),
    "cudnn_bf16_d128_s512_causal": ("SDPA's cuDNN backend, bf16, B=32 H=16 S=512 D=128, "
                                    "causal", "sdpa|fprop"),
    "attention_bf16_d128_s1024": ("attention() as routed (the Gluon kernel), bf16, B=16 H=16 "
                                  "S=1024 D=128, not causal", "attn"),
    "cudnn_bf16_d128_s1024": ("SDPA's cuDNN backend, bf16, B=16 H=16 S=1024 D=128",
                              "sdpa|fprop"),
}

#: The NVTX range around the profiled call: ``ncu --nvtx --nvtx-include "onlinesm_profile/"``
#: skips the compilation's and the autotuner's launches, however many there are.
PROFILE_RANGE = "onlinesm_profile"

#: a softmax case's dtype, as its name spells it (softmax_<dtype>_<N>[_<variant>])
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

#: case-name suffix -> the softmax tuning it adds
VARIANTS: dict[str, dict[str, Any]] = {
    "st3": dict(split_stages=3, split_poll_loads=True),
    "win128": dict(split_window_bytes=128),
}


def _case(name: str) -> Callable[[], Any]:
    """The call to profile, inputs built (the call itself not yet made)."""
    import torch

    from onlinesm import kernels

    kernels.use_interpreter(False)
    torch.manual_seed(0)
    if name.startswith("softmax"):
        _, dtype_text, n_text, *variant = name.split("_")
        n, tuning = int(n_text), VARIANTS[variant[0]] if variant else None
        dtype = getattr(torch, DTYPES[dtype_text])
        x = torch.randn(int(0.5e9 / (n * dtype.itemsize)), n, device="cuda", dtype=dtype)
        return lambda: kernels.softmax(x, tuning=tuning)
    if name != "attention_bf16_d128_s4096":  # the bench's rows: B * S = 16k, H * D = 2048
        d, s = (int(x) for x in re.search(r"_d(\d+)_s(\d+)", name).groups())
        q, k, v = (torch.randn(16384 // s, 2048 // d, s, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        causal = "_causal" in name
        if name.startswith("cudnn"):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def cudnn() -> Any:
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, is_causal=causal)
            return cudnn
        if name.startswith("attention_gluon"):  # the kernel itself, not attention()'s routing
            from onlinesm.kernels import attention_gluon

            persistent = True if name.endswith("_persistent") else None  # None: the launch's
            shape: dict[str, Any] = {}
            if name.endswith("_2wg"):  # cuDNN's shape
                shape = dict(warpgroups=2, block_n=128, num_buf=3, maxnreg=168, dynamic=True,
                             q_buffers=2)
            return lambda: attention_gluon.forward(q, k, v, causal=causal, persistent=persistent,
                                                   **shape)
        return lambda: kernels.attention(q, k, v, causal=causal)  # as routed, autotuned
    os.environ.setdefault("ONLINESM_ATTENTION_CONFIG", "64,64,3,4")
    q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    return lambda: kernels.attention(q, k, v)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", choices=sorted(CASES))
    parser.add_argument("--list", action="store_true", help="print 'case regex' lines and exit")
    args = parser.parse_args(argv)
    if args.list or args.case is None:
        for name, (_, regex) in CASES.items():
            print(name, regex)
        return 0
    import torch

    call = _case(args.case)
    for _ in range(2):  # compile (and autotune), then warm
        call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(PROFILE_RANGE)  # the launch ncu profiles: --nvtx-include
    call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    print(f"{args.case}: {CASES[args.case][0]}: 3 calls done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
