"""Attention forward in Gluon for Hopper: the candidates, their bench and offline audit.

What: two FlashAttention forwards in Gluon (Triton's explicit-layout dialect), measured on
the H200 (reports/h200/bench_attention.md):

* ``attention(..., ws=True)`` / ``attention_ws``: the warp-specialized kernel of
  ``onlinesm.kernels.attention_gluon`` (a TMA producer warp, two or three consumer
  warpgroups taking turns at the tensor cores, persistent without causal, and causal at
  D = 128 below 16k and D = 64 below 8k with blocks taken from a counter): 0.97-1.10 of
  cuDNN at D = 128, S >= 4096 (medians of 2-4), 0.81-0.94 causal at 1024-2048, 0.99-1.11 at
  D = 64 from 2048 (4k causal), 0.94 causal at 1024, run by ``onlinesm.kernels.attention``
  there (``ONLINESM_ATTENTION_GLUON=0`` turns it off).
* ``attention(...)``: one partition of two warpgroups (8 warps) owning 128 query rows, the
  next tile's Q K^T issued before this tile's softmax (FlashAttention-3's intra-warpgroup
  overlap), K and V through three buffers with cp.async: 0.69-0.82 of cuDNN, slower than
  the Triton kernel except at D = 128 without a mask; kept as the baseline the first beats.

    python bench/gluon_attention.py --bench              # vs SDPA cuDNN / flash and onlinesm
    python bench/gluon_attention.py --offline [--ws]     # sm_90a compile: registers, spills
    python bench/gluon_attention.py --offline --ws --seq 1024   # the launch shipped at 1024
    python bench/gluon_attention.py --offline --ws --sass   # + each turn's SASS by opcode
    python bench/gluon_attention.py --offline --ws --chain --seq 1280   # chained blocks
    python bench/gluon_attention.py --bench-ws           # the ws kernel's launch candidates
    python bench/gluon_attention.py --bench-compact --dims 64 --seqs 256,512,1024,2048 \
        --causal both                                    # the compact consumer, A/B
    onlinesm check bench/gluon_attention.py:attention_ws --op attention --dtypes \
        bfloat16,float16 --head-dims 64,128 --seq-multiple 128 --same-seq --no-mask \
        --max-seq-q 512 --max-seq-k 512 --unsupported "ValueError:gluon candidate"

The domain is narrow on purpose (``attention_gluon.fits``): 16-bit q, k, v of one shape
[B, H, S, D] (no GQA, Sq == Sk), S a multiple of 128, D of 64 or 128, no mask, causal or not.
Anything else raises ValueError ("gluon candidate: ..."), a refusal `onlinesm check` counts
instead of failing.

In the one-partition kernel P V is not overlapped: keeping its accumulator in flight across
the loop's back edge makes ptxas serialize every wgmma (warning C7514), which --offline
reports (--overlap-pv).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ptxas_sm90, time_ms  # noqa: E402

from onlinesm.kernels import attention_gluon  # noqa: E402  (the warp-specialized kernel)
from onlinesm.kernels.attention_gluon import _softmax_tile  # noqa: E402

__all__ = ["attention", "attention_ws", "compile_offline"]

#: cp.async from global to shared memory (renamed async_load after triton 3.6)
_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared

BLOCK_M = 128  # query rows per program: two warpgroups of 64
NUM_WARPS = 8
NUM_BUF = 3  # K/V buffers: tile j (P V), tile j + 1 (Q K^T in flight), tile j + 2 (loading)


@gluon.jit
def _load_kv(k_ptr, v_ptr, base, j, hi, k_smem, v_smem, rows_n, cols,
             BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, NUM_BUF: gl.constexpr):
    """Start copying K and V of key tile j into buffer j % NUM_BUF (one commit group); rows
    at or past hi are not read (zero-filled), so a tile past the end costs nothing."""
    b = j % NUM_BUF
    rows = j * BLOCK_N + rows_n
    offs = base + rows.to(gl.int64)[:, None] * HEAD_D + cols[None, :]
    ok = (rows < hi)[:, None]
    _async_load(k_smem.index(b), k_ptr + offs, mask=ok)
    _async_load(v_smem.index(b), v_ptr + offs, mask=ok)
    async_copy.commit_group()


@gluon.jit
def _attn_fwd_gluon(q_ptr, k_ptr, v_ptr, o_ptr, seq, qk_scale_log2,
                    HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                    CAUSAL: gl.constexpr, NUM_BUF: gl.constexpr, LOAD: gl.constexpr,
                    S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr, P_LAYOUT: gl.constexpr,
                    SMEM: gl.constexpr, OVERLAP_PV: gl.constexpr = False):
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    start_m = gl.program_id(0) * BLOCK_M
    base = gl.program_id(1).to(gl.int64) * seq * HEAD_D  # this (batch, head): [S, D]
    rows_m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LOAD))
    rows_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LOAD))
    cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, LOAD))
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], SMEM)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_D], SMEM)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_D], SMEM)

    hi = seq  # keys this block of queries can see
    if CAUSAL:
        hi = gl.minimum(seq, start_m + BLOCK_M)
    n_tiles = gl.cdiv(hi, BLOCK_N)

    # Q and the first two K/V tiles into shared memory; cp.async writes must be fenced before
    # wgmma (the async proxy) reads them.
    q_offs = base + (start_m + rows_m).to(gl.int64)[:, None] * HEAD_D + cols[None, :]
    _async_load(q_smem, q_ptr + q_offs)
    async_copy.commit_group()
    _load_kv(k_ptr, v_ptr, base, 0, hi, k_smem, v_smem, rows_n, cols, BLOCK_N, HEAD_D, NUM_BUF)
    _load_kv(k_ptr, v_ptr, base, 1, hi, k_smem, v_smem, rows_n, cols, BLOCK_N, HEAD_D, NUM_BUF)
    async_copy.wait_group(0)
    fence_async_shared()

    # The scores of tile 0 (use_acc=False: the accumulator starts at zero).
    offs_m = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, S_LAYOUT))
    zeros_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_LAYOUT)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), zeros_s, use_acc=False,
                      is_async=True)
    s = warpgroup_mma_wait(0, deps=[s])
    m_i = gl.full([BLOCK_M], -float("inf"), gl.float32, gl.SliceLayout(1, S_LAYOUT))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, S_LAYOUT))
    acc = warpgroup_mma_init(gl.zeros([BLOCK_M, HEAD_D], gl.float32, O_LAYOUT))

    for j in range(0, n_tiles - 1):
        # Tile j + 1 landed (its copy started an iteration ago): issue its scores now, so the
        # tensor cores compute them while these warps do tile j's softmax.
        async_copy.wait_group(0)
        fence_async_shared()
        s_next = warpgroup_mma(q_smem, k_smem.index((j + 1) % NUM_BUF).permute((1, 0)),
                               zeros_s, use_acc=False, is_async=True)
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, j, offs_m, qk_scale_log2,
                                           BLOCK_N, CAUSAL, S_LAYOUT)
        # o of tile j - 1 (complete since the last iteration's wait; the wait hands it over)
        acc = warpgroup_mma_wait(1, deps=[acc])
        # Tile j - 1's buffers are free (its Q K^T and P V are done): tile j + 2 goes there.
        _load_kv(k_ptr, v_ptr, base, j + 2, hi, k_smem, v_smem, rows_n, cols, BLOCK_N, HEAD_D,
                 NUM_BUF)
        # o = o * alpha + P V: rescale under the new max, then accumulate this tile.
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]
        p_op = gl.convert_layout(p.to(dtype), P_LAYOUT)  # P from registers (wgmma operand A)
        acc = warpgroup_mma(p_op, v_smem.index(j % NUM_BUF), acc, is_async=True)
        if OVERLAP_PV:  # the next scores only: P V runs on into the next iteration
            s = warpgroup_mma_wait(1, deps=[s_next])
        else:  # the next scores, and P V with them: P V left in flight across the back edge
            # makes ptxas serialise every wgmma (see the module docstring)
            s = warpgroup_mma_wait(0, deps=[s_next])

    # The last tile: nothing left to overlap with.
    j_last = n_tiles - 1
    p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, j_last, offs_m, qk_scale_log2,
                                       BLOCK_N, CAUSAL, S_LAYOUT)
    acc = warpgroup_mma_wait(0, deps=[acc])
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]
    p_op = gl.convert_layout(p.to(dtype), P_LAYOUT)
    acc = warpgroup_mma(p_op, v_smem.index(j_last % NUM_BUF), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    async_copy.wait_group(0)  # the prefetches past the end (masked) drain before exit

    o = acc / gl.convert_layout(l_i, gl.SliceLayout(1, O_LAYOUT))[:, None]
    o_rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, O_LAYOUT))
    o_cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, O_LAYOUT))
    gl.store(o_ptr + base + o_rows.to(gl.int64)[:, None] * HEAD_D + o_cols[None, :], o.to(dtype))


def _constexprs(head_d: int, block_n: int, causal: bool, overlap_pv: bool = False
                ) -> dict[str, Any]:
    """The kernel's compile-time arguments: tile sizes and the layouts that go with them."""
    o_layout = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                         instr_shape=[16, head_d, 16])
    return dict(
        HEAD_D=head_d, BLOCK_M=BLOCK_M, BLOCK_N=block_n, CAUSAL=causal, NUM_BUF=NUM_BUF,
        OVERLAP_PV=overlap_pv,
        # 16-byte vectors along D, a warp over whole rows
        LOAD=gl.BlockedLayout([1, 8], [32 // (head_d // 8), head_d // 8], [NUM_WARPS, 1], [1, 0]),
        S_LAYOUT=gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                           instr_shape=[16, block_n, 16]),
        O_LAYOUT=o_layout,
        P_LAYOUT=gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2),
        SMEM=gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2),
    )


def _block_n(head_d: int) -> int:
    """Key tile: 64 at D = 128 (164-182 registers; 128 needs 252), 128 at D = 64 (221-251;
    64 would take 128, two programs per SM: --bench times both)."""
    return 64 if head_d == 128 else 128


def attention(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
              scale: float | None = None, block_n: int | None = None,
              overlap_pv: bool = False, ws: bool = False) -> Any:
    """softmax(q k^T * scale) v for q, k, v of one shape [B, H, S, D] (onlinesm's attention
    contract, narrowed: see the module docstring; anything outside raises ValueError).
    ``ws``: the warp-specialized kernel (a TMA producer warp, two consumer warpgroups in
    ping-pong) instead of the one-partition kernel.

    >>> o = attention(q, k, v, causal=True)  # doctest: +SKIP
    """
    import torch

    why = attention_gluon.fits(q, k, v, mask=mask)  # one domain for both kernels
    if why is not None:
        raise ValueError(f"gluon candidate: {why}")
    if ws:
        return attention_gluon.forward(q, k, v, causal=causal, scale=scale)
    b, h, s, d = q.shape
    q, k, v = (t.contiguous() for t in (q, k, v))
    o = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    _attn_fwd_gluon[(s // BLOCK_M, b * h)](
        q, k, v, o, s, scale * 1.4426950408889634,  # log2(e)
        **_constexprs(d, block_n or _block_n(d), bool(causal), overlap_pv), num_warps=NUM_WARPS)
    return o


def attention_ws(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
                 scale: float | None = None) -> Any:
    """The warp-specialized kernel under onlinesm's attention contract (for ``onlinesm
    check bench/gluon_attention.py:attention_ws``)."""
    return attention(q, k, v, mask=mask, causal=causal, scale=scale, ws=True)


#: Launches of the warp-specialized kernel to time beside the shipped one (--bench-ws), as
#: (D, key tile, K/V buffers, registers per thread, P V overlapping the warpgroup's own
#: softmax, consumer warpgroups), all spill-free under triton 3.6 and 3.9 (--offline
#: --ws-candidates). Three consumers (192 query rows, 128 registers), FlashAttention-3's
#: shape for D = 64, are the launch there since the tenth round (two, kept here, ran 5-12%
#: slower). Timed and dropped (ninth round,
#: reports/h200/bench_attention.md): key tiles of 64 and two buffers with two consumers
#: (8-20% slower), four buffers at D = 64 (no gain). Two programs per SM do not fit: at 80
#: registers D = 64 spills 2.9-3.5 KB with key tiles of 64, and ptxas refuses tiles of 128.
WS_CANDIDATES = (
    (128, 128, 3, 168, False, 2), (128, 128, 2, 168, True, 2), (64, 128, 3, 168, True, 2),
    (64, 128, 3, 168, False, 2), (64, 128, 3, 128, True, 3), (64, 64, 4, 128, False, 3),
    (128, 64, 2, 128, False, 3),
    # four consumers (256 query rows) in key tiles of 64: the 64k registers over 20 warps
    # (96 at launch; consumers at 112-120) compile spill-free without causal (triton 3.6 and
    # 3.9; causal spills 244 bytes under 3.9); tiles of 128 spill 6.4-8.7 KB. The second
    # (four buffers) is the launch at D = 64 below S = 2048 since the fourteenth round.
    (64, 64, 3, 96, False, 4), (64, 64, 4, 96, False, 4),
    # two consumers in key tiles of 64: causal, the first warpgroup hands on the block's
    # last tile (past its diagonal), and each masks one tile
    (64, 64, 4, 168, False, 2),
    # the same at D = 128 (four buffers of 64 keys take what three of 128 took)
    (128, 64, 4, 168, True, 2),
    # four consumers and eight K/V buffers (with two Q buffers, 198 KB of shared memory):
    # causal, S = 1024-4096, within 1% of four buffers but at S = 1024 (285 against 281
    # TFLOP/s, still below the Triton kernel's 291)
    (64, 64, 8, 96, False, 4),
    # the D = 128 launch at every length since the twenty-eighth round: key tiles of 128,
    # P V overlap, o through the block's last K tile (``--candidates 12 --schedules 1,3``
    # timed it against the key tiles of 64 shipped below S = 1536 / 2560 until then)
    (128, 128, 3, 168, True, 2),
)
#: How --bench-ws runs each launch, as (persistent, Q buffers, dynamic): one program per query
#: block; persistent (one per SM walking blocks; causal: every head's longest blocks first,
#: every other round reversed); persistent with the next block's Q loaded during this one
#: (D = 128 fits two Q buffers only beside two K/V buffers); persistent taking the next block
#: from a counter (in the order of one program per block), with one or two Q buffers.
WS_SCHEDULES = ((False, 1, False), (True, 1, False), (True, 2, False), (True, 1, True),
                (True, 2, True))


def compile_offline(head_d: int, causal: bool, block_n: int | None = None,
                    overlap_pv: bool | None = None, ws: bool = False, num_buf: int | None = None,
                    maxnreg: int | None = None, warpgroups: int | None = None,
                    persistent: bool | None = None, q_buffers: int | None = None,
                    dynamic: bool | None = None, seq: int = 4096,
                    sass: bool = False, chain: bool | None = None,
                    compact: bool | None = None) -> dict[str, Any]:
    """Compile for sm_90a without a GPU; ``{"registers", "spill_bytes", "shared",
    "serialized"}`` from ``ptxas -v`` (serialized: ptxas's C7514, wgmma run one by one), and
    with ``sass`` ``"turns"``: the SASS of each turn's block, matmuls and one key tile's
    softmax (``_common.sass_softmax_blocks``: instructions per thread and tile, by opcode),
    and ``"sass_instructions"``, the kernel's (None where nvdisasm is missing).
    ``ws``: the warp-specialized kernel (``num_buf``, ``maxnreg`` and ``overlap_pv``, its
    ``pv_overlap``: as its ``forward``, None the shipped launch's; ``warpgroups``: its
    consumers, 2, 3 or 4, and ``persistent`` and ``dynamic``: None the shipped launch's at
    sequence length ``seq``; ``q_buffers`` and ``chain``: as its ``forward``, None the
    shipped launch's; ``compact``: as its ``forward``, None the shipped launch's at ``seq``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    ag = attention_gluon
    fn = ag._attn_fwd_ws if ws else _attn_fwd_gluon
    if ws:
        warpgroups = warpgroups or ag._ws_warpgroups(head_d, seq, causal)
        if persistent is None and dynamic is None:  # the shipped launch at length seq
            persistent = ag._ws_persistent(head_d, causal, seq)
            dynamic = ag._ws_dynamic(head_d, causal, seq)
        dynamic = bool(dynamic)
        persistent = bool(persistent) or dynamic
        block_n = block_n or ag._ws_block_n(warpgroups)
        num_buf = num_buf or ag._ws_num_buf(warpgroups)
        if q_buffers is None:  # as forward: the shipped launch's where it is its schedule
            q_buffers = ag._ws_default_q_buffers(head_d, causal, seq, persistent, dynamic,
                                                 warpgroups, block_n, num_buf)
        if chain is None:
            chain = ag._ws_chained(head_d, causal, warpgroups, persistent, dynamic)
        const = ag._ws_constexprs(head_d, block_n, causal, num_buf,
                                  ag._ws_pv_overlap(head_d) if overlap_pv is None else overlap_pv,
                                  warpgroups, persistent, q_buffers, dynamic, chain,
                                  ag._ws_default_compact(head_d, causal, seq, chain,
                                                         overlap_pv)
                                  if compact is None else compact)
        options = dict(num_warps=4, maxnreg=maxnreg or ag._ws_maxnreg(warpgroups))
    else:
        const = _constexprs(head_d, block_n or _block_n(head_d), causal, bool(overlap_pv))
        options = dict(num_warps=NUM_WARPS)
    names = list(fn.arg_names)
    signature = {n: ("*i32" if n == "counter_ptr" else "*bf16" if n.endswith("_ptr")
                     else "constexpr" if n in const
                     else "fp32" if n == "qk_scale_log2" else "i32") for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]]
             for n in names if n.endswith("_ptr") or n == "seq"}
    compiled = triton.compile(GluonASTSource(fn, signature, constexprs=const, attrs=attrs),
                              target=GPUTarget("cuda", 90, 128), options=options)
    # the compact consumer's turn branches between its matmuls and its softmax
    r = ptxas_sm90(compiled, sass, wgmma_blocks=not const.get("COMPACT"))
    ptx = compiled.asm["ptx"]
    return dict(head_d=head_d, causal=causal, block_n=const["BLOCK_N"],
                num_buf=const["NUM_BUF"], maxnreg=options.get("maxnreg"),
                warpgroups=const.get("NUM_WG", 2), persistent=bool(const.get("PERSISTENT")),
                dynamic=const.get("PERSISTENT") == ag._DYNAMIC.value,
                chained=const.get("PERSISTENT") == ag._CHAINED.value,
                compact=bool(const.get("COMPACT")),
                q_buffers=const.get("Q_BUFS", 1),
                pv_overlap=bool(const.get("PV_OVERLAP", const.get("OVERLAP_PV"))),
                registers=r["registers"], spill_bytes=r["spill_bytes"], shared=r["shared"],
                serialized="C7514" in r["report"],
                # how o leaves: TMA stores from shared memory, or the threads' own stores
                tma_stores=ptx.count("cp.async.bulk.tensor.2d.global.shared"),
                global_stores=len(re.findall(r"\bst\.global", ptx)),
                **({"turns": r["softmax_blocks"], "sass_instructions": r["sass_instructions"]}
                   if sass else {}))


def _bench(seqs: list[int], dims: list[int]) -> None:
    """Time against SDPA (cuDNN, flash) and onlinesm's Triton kernel, bf16, B*S = 16k tokens,
    H*D = 2048; check against SDPA math in float32 first."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from onlinesm import kernels

    kernels.use_interpreter(False)
    from onlinesm.kernels import attention as onlinesm_attention

    sdpa = torch.nn.functional.scaled_dot_product_attention
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    print("| D | S | causal | gluon (best BLOCK_N) | gluon ws | onlinesm | cudnn | flash "
          "| gluon / cuDNN | ws / cuDNN | max err gluon | max err ws | max err flash |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in dims:
        for causal in (False, True):
            for s in seqs:
                b, h = 16384 // s, 2048 // d
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                           for _ in range(3))
                ref = sdpa(q[:1].float(), k[:1].float(), v[:1].float(), is_causal=causal)
                err = max(float((attention(q[:1], k[:1], v[:1], causal=causal, block_n=bn)
                                 .float() - ref).abs().max()) for bn in (64, 128))
                with sdpa_kernel(backends["flash"]):
                    err_flash = float((sdpa(q[:1], k[:1], v[:1], is_causal=causal).float() - ref)
                                      .abs().max())
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                gluon = max((flops / time_ms(lambda: attention(q, k, v, causal=causal,
                                                               block_n=bn)) * 1e-9, bn)
                            for bn in (64, 128))
                err_ws = float((attention(q[:1], k[:1], v[:1], causal=causal, ws=True).float()
                                - ref).abs().max())
                ws = flops / time_ms(lambda: attention(q, k, v, causal=causal, ws=True)) * 1e-9
                tf = {"onlinesm": flops / time_ms(
                    lambda: onlinesm_attention(q, k, v, causal=causal)) * 1e-9}
                for name, backend in backends.items():
                    with sdpa_kernel(backend):
                        tf[name] = flops / time_ms(
                            lambda: sdpa(q, k, v, is_causal=causal)) * 1e-9
                print(f"| {d} | {s} | {'yes' if causal else 'no'} | {gluon[0]:.0f} ({gluon[1]}) | "
                      f"{ws:.0f} | {tf['onlinesm']:.0f} | {tf['cudnn']:.0f} | {tf['flash']:.0f} | "
                      f"{gluon[0] / tf['cudnn']:.2f} | {ws / tf['cudnn']:.2f} | {err:.3g} | "
                      f"{err_ws:.3g} | {err_flash:.3g} |", flush=True)


def _bench_ws(seqs: list[int], dims: list[int],
              candidates: tuple[tuple[Any, ...], ...] = WS_CANDIDATES,
              causals: tuple[bool, ...] = (False, True),
              schedules: tuple[tuple[bool, int, bool], ...] = WS_SCHEDULES) -> None:
    """Time the warp-specialized kernel's launch ``candidates`` (rows of WS_CANDIDATES; those
    of each D in ``dims``) beside its shipped launch and cuDNN, bf16, B*S = 16k, H*D = 2048,
    each in every one of ``schedules``, for each of ``causals``; each checked against SDPA
    math in float32 (max |error|) first."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa = torch.nn.functional.scaled_dot_product_attention
    print("| D | S | causal | launch (key tile, buffers, registers[, P V overlap][, 3 "
          "warpgroups][, persistent][, 2 Q buffers]) | TFLOP/s "
          "| of cuDNN "
          "| max err |\n|---|---|---|---|---|---|---|")
    for d in dims:
        launches = [(None,) * 5] + [c[1:] for c in candidates if c[0] == d]
        for causal in causals:
            for s in seqs:
                b, h = 16384 // s, 2048 // d
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                           for _ in range(3))
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                ref = sdpa(q[:1].float(), k[:1].float(), v[:1].float(), is_causal=causal)
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    cudnn = flops / time_ms(lambda: sdpa(q, k, v, is_causal=causal)) * 1e-9
                for (bn, nb, reg, overlap, wg), (persistent, qb, dyn) in itertools.product(
                        launches, schedules):
                    kw = dict(causal=causal, block_n=bn, num_buf=nb, maxnreg=reg,
                              pv_overlap=overlap, warpgroups=wg, persistent=persistent,
                              q_buffers=qb, dynamic=dyn)
                    name = ("shipped" if bn is None else (
                        f"{bn}, {nb}, {reg}" + (", P V overlap" if overlap else "")
                        + (f", {wg} warpgroups" if wg != 2 else ""))) + (
                        ", persistent" if persistent else "") + (
                        ", counter" if dyn else "") + (", 2 Q" if qb == 2 else "")
                    try:
                        err = float((attention_gluon.forward(q[:1], k[:1], v[:1], **kw).float()
                                     - ref).abs().max())
                    except Exception as e:  # e.g. 2 Q buffers beside 3 K/V buffers at D = 128
                        why = (str(e).strip().splitlines() or [""])[0][:120]
                        print(f"| {d} | {s} | {'yes' if causal else 'no'} | {name} | "
                              f"n/a: {type(e).__name__}: {why} | | |", flush=True)
                        continue
                    tf = flops / time_ms(lambda: attention_gluon.forward(q, k, v, **kw)) * 1e-9
                    print(f"| {d} | {s} | {'yes' if causal else 'no'} | {name} | {tf:.0f} | "
                          f"{tf / cudnn:.2f} | {err:.3g} |", flush=True)


def _bench_compact(seqs: list[int], dims: list[int], causals: tuple[bool, ...] = (True,),
                   runs: int = 5) -> None:
    """The compact consumer (``forward(compact=True)``) against the split one and cuDNN in
    one process, ``runs`` interleaved medians of do_bench each (bf16, B*S = 16k,
    H*D = 2048, causal or not); first the two consumers' outputs against each other (the
    same arithmetic: bitwise equal) and against SDPA math in float32, bf16 and fp16."""
    import statistics

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa = torch.nn.functional.scaled_dot_product_attention
    for d, s, causal, dtype in itertools.product(dims, seqs, causals,
                                                 (torch.bfloat16, torch.float16)):
        q, k, v = (torch.randn(2, 3, s, d, device="cuda", dtype=dtype) for _ in range(3))
        split, compact = (attention_gluon.forward(q, k, v, causal=causal, compact=c)
                          for c in (False, True))
        ref = sdpa(q.float(), k.float(), v.float(), is_causal=causal)
        print(f"check D={d} S={s} causal={causal} {dtype}: max|compact - split| "
              f"{float((compact - split).abs().max()):.3g}, max|compact - math| "
              f"{float((compact.float() - ref).abs().max()):.4f}, max|split - math| "
              f"{float((split.float() - ref).abs().max()):.4f}", flush=True)
    print("| D | S | causal | split TFLOP/s | compact TFLOP/s | cuDNN TFLOP/s | split x cuDNN | "
          f"compact x cuDNN | compact / split µs ({runs} runs) |\n" + "|---" * 9 + "|")
    for d, s, causal in itertools.product(dims, seqs, causals):
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        flops = 4 * b * h * s * s * d / (2 if causal else 1)

        def cudnn() -> Any:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return sdpa(q, k, v, is_causal=causal)

        fns = {"split": lambda: attention_gluon.forward(q, k, v, causal=causal, compact=False),
               "compact": lambda: attention_gluon.forward(q, k, v, causal=causal, compact=True),
               "cudnn": cudnn}
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(runs):
            for name, fn in fns.items():
                times[name].append(time_ms(fn, warmup=10, rep=60))
        med = {name: statistics.median(t) for name, t in times.items()}
        tf = {name: flops / med[name] * 1e-9 for name in fns}
        print(f"| {d} | {s} | {'yes' if causal else 'no'} | {tf['split']:.0f} | "
              f"{tf['compact']:.0f} | {tf['cudnn']:.0f} | "
              f"{med['cudnn'] / med['split']:.3f} | {med['cudnn'] / med['compact']:.3f} | "
              f"{min(times['compact']) * 1e3:.1f}-{max(times['compact']) * 1e3:.1f} / "
              f"{min(times['split']) * 1e3:.1f}-{max(times['split']) * 1e3:.1f} |", flush=True)


def _pick(ap: argparse.ArgumentParser, flag: str, text: str | None, name: str,
          table: tuple[Any, ...]) -> tuple[Any, ...]:
    """The rows of ``table`` (called ``name``) that ``text`` names by position ("0,3"); ()
    for None; a bad position ends the command with one line (argparse's error)."""
    picked = [] if text is None else text.split(",")
    if any(not p.isdigit() or int(p) >= len(table) for p in picked):
        ap.error(f"{flag} {text!r}: give positions in {name}, 0 to {len(table) - 1}, "
                 "e.g. 0,3")
    return tuple(table[int(p)] for p in picked)


def _print_compiled(r: dict[str, Any], label: str, as_json: bool) -> None:
    """One line of --offline's output: ``compile_offline``'s result, as JSON or as text."""
    turns = "".join(f"\n  turn {t['label']}: {t['instructions']} SASS instructions per thread "
                    f"and key tile, {t['ops']}" for t in r.get("turns") or ())
    print(json.dumps(r) if as_json else
          f"{label}: {r['registers']} registers, {r['spill_bytes']} bytes spilled, "
          f"{r['shared']:,} B shared, wgmma serialised: {r['serialized']}{turns}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offline", action="store_true",
                    help="compile for sm_90a without a GPU: registers, spills, serialisation")
    ap.add_argument("--json", action="store_true", help="with --offline: one JSON line each")
    ap.add_argument("--overlap-pv", action="store_true",
                    help="with --offline: P V left in flight across iterations (FA3's order)")
    ap.add_argument("--ws", action="store_true",
                    help="with --offline: the warp-specialized kernel")
    ap.add_argument("--sass", action="store_true",
                    help="with --offline --ws: each turn's SASS instructions per thread and "
                         "key tile, by opcode (nvdisasm)")
    ap.add_argument("--ws-candidates", action="store_true",
                    help="with --offline: the warp-specialized kernel's WS_CANDIDATES")
    ap.add_argument("--bench", action="store_true", help="time it on the GPU (needs CUDA)")
    ap.add_argument("--bench-ws", action="store_true",
                    help="time the warp-specialized kernel's WS_CANDIDATES (needs CUDA)")
    ap.add_argument("--shipped-only", action="store_true",
                    help="with --bench-ws: the shipped launch only, in every schedule")
    ap.add_argument("--causal", choices=("both", "yes", "no"), default="both",
                    help="with --bench-ws and --bench-compact: causal calls, calls without a "
                         "mask, or both")
    ap.add_argument("--candidates", default=None,
                    help="with --bench-ws: which of WS_CANDIDATES beside the shipped launch, "
                         "by position (e.g. 1,4)")
    ap.add_argument("--schedules", default=None,
                    help="with --bench-ws: which of WS_SCHEDULES, by position (e.g. 0,3,4)")
    ap.add_argument("--dynamic", action="store_true",
                    help="with --offline --ws: the persistent launch taking blocks from a "
                         "counter, causal or not")
    ap.add_argument("--chain", action="store_true",
                    help="with --offline --ws: chained blocks without causal (forward's chain)")
    ap.add_argument("--compact", choices=("yes", "no"), default=None,
                    help="with --offline --ws: the consumers' step in one copy for every key "
                         "tile, or not (forward's compact; the shipped launch's by default)")
    ap.add_argument("--bench-compact", action="store_true",
                    help="time the compact consumer against the split one and cuDNN, in one "
                         "process (needs CUDA; --seqs, --dims, --causal)")
    ap.add_argument("--seqs", default="1024,4096,16384")
    ap.add_argument("--seq", type=int, default=4096,
                    help="with --offline --ws: the sequence length whose shipped launch to "
                         "compile (its warpgroups, key tile and schedule)")
    ap.add_argument("--dims", default="64,128")
    args = ap.parse_args(argv)
    dims = [int(d) for d in args.dims.split(",")]
    # the launch tables' positions first: a bad one ends the command before any work
    schedules = (_pick(ap, "--schedules", args.schedules, "WS_SCHEDULES", WS_SCHEDULES)
                 or WS_SCHEDULES)
    candidates = (() if args.shipped_only else _pick(
        ap, "--candidates", args.candidates, "WS_CANDIDATES", WS_CANDIDATES) or WS_CANDIDATES)
    timed = [f for f, on in (("--bench", args.bench), ("--bench-ws", args.bench_ws),
                             ("--bench-compact", args.bench_compact)) if on]
    if timed:
        import torch

        if not torch.cuda.is_available():
            ap.error(f"{' '.join(timed)} times kernels on a GPU and this machine has no CUDA "
                     "device; --offline compiles without one")
    if args.offline and args.ws_candidates:
        for d, bn, nb, reg, overlap, wg in (c for c in WS_CANDIDATES if c[0] in dims):
            r = compile_offline(d, False, bn, overlap_pv=overlap, ws=True, num_buf=nb,
                                maxnreg=reg, warpgroups=wg)
            _print_compiled(r, f"ws D={d} BLOCK_N={bn} buffers={nb} maxnreg={reg} "
                               f"P V overlap={overlap} warpgroups={wg}", args.json)
    elif args.offline:
        for d in dims:
            for causal in (False, True):
                r = compile_offline(d, causal, overlap_pv=args.overlap_pv or None, ws=args.ws,
                                    dynamic=True if args.dynamic else None,
                                    chain=True if args.chain and not causal else None,
                                    seq=args.seq, sass=args.sass and args.ws,
                                    compact=None if args.compact is None
                                    else args.compact == "yes")
                _print_compiled(r, f"{'ws ' if args.ws else ''}D={d} causal={causal} "
                                   f"BLOCK_N={r['block_n']}", args.json)
    if args.bench:
        _bench([int(s) for s in args.seqs.split(",")], dims)
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    if args.bench_ws:
        _bench_ws([int(s) for s in args.seqs.split(",")], dims, candidates, causals, schedules)
    if args.bench_compact:
        _bench_compact([int(s) for s in args.seqs.split(",")], dims, causals)
    if not (args.offline or args.bench or args.bench_ws or args.bench_compact):
        ap.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
