"""Candidate (not shipped, not yet run on a GPU): attention forward in Gluon for Hopper.

What: a FlashAttention forward written in Gluon (Triton's explicit-layout dialect) so that the
tensor cores compute the next tile's scores Q K^T while the warps do this tile's softmax:
FlashAttention-3's intra-warpgroup overlap, which the Triton kernel cannot express (Triton
waits for a `wgmma` at once when its result feeds anything but another `wgmma`;
reports/h200/bench_attention.md, third round). Two warpgroups (8 warps) own 128 query rows;
K and V tiles stream through three shared-memory buffers with cp.async.

Status: compiled offline for sm_90a with triton 3.6 (the H200's) and 3.9, without spills
(`python bench/gluon_attention.py --offline`; tests/test_kernel_attention.py keeps it so).
Its numbers and its speed are unknown until a GPU run:

    python bench/gluon_attention.py --bench              # vs SDPA cuDNN / flash and onlinesm
    onlinesm check bench/gluon_attention.py:attention --op attention --dtypes bfloat16,float16 \\
        --head-dims 64,128 --seq-multiple 128 --same-seq --no-mask --max-seq-q 512 \\
        --max-seq-k 512 --unsupported "ValueError:gluon candidate"

The domain is narrow on purpose: 16-bit q, k, v of one shape [B, H, S, D] (no GQA, Sq == Sk),
S a multiple of 128, D of 64 or 128, no mask, causal or not. Anything else raises ValueError
("gluon candidate: ..."), a refusal `onlinesm check` counts instead of failing.

P V is not overlapped: keeping its accumulator in flight across the loop's back edge makes
ptxas serialize every wgmma (warning C7514), which --offline reports.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ptxas_sm90, time_ms  # noqa: E402

__all__ = ["attention", "attention_ws", "compile_offline"]

#: cp.async from global to shared memory (renamed async_load after triton 3.6)
_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
#: TMA from global to shared memory (likewise renamed async_load after triton 3.6)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

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
def _softmax_tile(s, m_i, l_i, j, offs_m, qk_scale_log2,
                  BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, S_LAYOUT: gl.constexpr):
    """One step of the online softmax on the score tile s of key tile j: (p, alpha, m, l)."""
    s = s * qk_scale_log2  # the scale folded into log2(e): exp(x * scale) = exp2(s)
    if CAUSAL:  # key n visible to query m when n <= m (Sq == Sk: both alignments agree)
        offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT))
        s = gl.where(offs_n[None, :] <= offs_m[:, None], s, -float("inf"))
    # Every row sees key 0 in tile 0 (no mask), so m is finite from the first tile on, and
    # alpha = exp2(-inf - m) = 0 there: no exp(-inf - -inf).
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    alpha = gl.exp2(m_i - m_new)  # rescales what was summed under the old max
    p = gl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


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


# ---- Warp-specialized: a producer warp (TMA) and two consumer warpgroups in ping-pong ----
#
# FlashAttention-3's schedule: one warp only loads (Q once, then K and V tiles through a ring
# of shared-memory buffers with TMA, each buffer guarded by a "ready" mbarrier the copy
# completes and an "empty" one both consumers release), and two warpgroups of 4 warps each own
# 64 query rows. The two take turns at the tensor cores (two mbarriers, "turn"): a warpgroup
# issues its Q K^T and the previous tile's P V, hands the turn over, and does its softmax
# while the other warpgroup's matmuls run. Registers move to the consumers (the producer keeps
# 24 per thread).
WS_ROWS = 64  # query rows per consumer warpgroup
WS_BLOCK_M = 2 * WS_ROWS  # query rows per program
WS_NUM_BUF = 3  # K/V buffers in the ring (D = 128: 3 x 64 KB + Q's 32 KB of the 227 KB)
WS_MAXNREG = 168  # 12 warps (3 warpgroups) x 168 = the SM's 64k registers for one program
# (per thread: 240 for each consumer warpgroup, 24 for the producer's, set in _attn_fwd_ws)


@gluon.jit
def _ws_producer(smem, bars, ptrs, seq, start_m, n_tiles, WG: gl.constexpr,
                 ROWS: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr,
                 NUM_BUF: gl.constexpr, SMEM: gl.constexpr, S_LAYOUT: gl.constexpr,
                 O_LAYOUT: gl.constexpr, P_LAYOUT: gl.constexpr, CAUSAL: gl.constexpr):
    """The load warp: Q of both warpgroups, then K and V of every key tile, by TMA."""
    q_smem, k_smem, v_smem = smem
    q_bar, ready, empty, turn = bars
    q_ptr, k_ptr, v_ptr, o_ptr, base, qk_scale_log2 = ptrs
    # Descriptors of this (batch, head)'s [S, D] slices, made on the device (they need the
    # global scratch that triton.set_allocator provides).
    q_desc = tma.make_tensor_descriptor(q_ptr + base, [seq, HEAD_D], [HEAD_D, 1],
                                        [ROWS, HEAD_D], SMEM)
    k_desc = tma.make_tensor_descriptor(k_ptr + base, [seq, HEAD_D], [HEAD_D, 1],
                                        [BLOCK_N, HEAD_D], SMEM)
    v_desc = tma.make_tensor_descriptor(v_ptr + base, [seq, HEAD_D], [HEAD_D, 1],
                                        [BLOCK_N, HEAD_D], SMEM)
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    _tma_load(q_desc, [start_m, 0], q_bar, q_smem.index(0))
    _tma_load(q_desc, [start_m + ROWS, 0], q_bar, q_smem.index(1))
    for j in range(n_tiles):
        b = j % NUM_BUF
        # Wait until both consumers released this buffer (its previous tile's P V is done).
        # mbarriers start with phase 1 complete, so the first pass does not wait.
        mbarrier.wait(empty.index(b), ((j // NUM_BUF) & 1) ^ 1)
        mbarrier.expect(ready.index(b), k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        _tma_load(k_desc, [j * BLOCK_N, 0], ready.index(b), k_smem.index(b))
        _tma_load(v_desc, [j * BLOCK_N, 0], ready.index(b), v_smem.index(b))


@gluon.jit
def _ws_step(j, q, k_smem, v_smem, ready, empty, turn, p_op, acc, m_i, l_i, zeros_s, offs_m,
             qk_scale_log2, WG: gl.constexpr, BLOCK_N: gl.constexpr, NUM_BUF: gl.constexpr,
             MASK: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
             P_LAYOUT: gl.constexpr):
    """Turn j of a consumer warpgroup: tile j's scores and tile j - 1's P V on the tensor
    cores, then tile j's softmax while the other warpgroup's matmuls run."""
    b = j % NUM_BUF
    b_prev = (j - 1) % NUM_BUF
    mbarrier.wait(ready.index(b), (j // NUM_BUF) & 1)  # K and V of tile j landed
    mbarrier.wait(turn.index(WG), j & 1)  # my turn at the tensor cores
    s = warpgroup_mma(q, k_smem.index(b).permute((1, 0)), zeros_s, use_acc=False,
                      is_async=True)
    acc = warpgroup_mma(p_op, v_smem.index(b_prev), acc, is_async=True)
    mbarrier.arrive(turn.index(1 - WG), count=1)  # the other warpgroup's turn
    s, acc = warpgroup_mma_wait(0, deps=[s, acc])
    mbarrier.arrive(empty.index(b_prev), count=1)  # tile j - 1's buffers are free
    # This tile's softmax, and the rescale of o under the new max before the next P V.
    p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, j, offs_m, qk_scale_log2, BLOCK_N, MASK,
                                       S_LAYOUT)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]
    p_op = gl.convert_layout(p.to(p_op.dtype), P_LAYOUT)
    return p_op, acc, m_i, l_i


@gluon.jit
def _ws_consumer(smem, bars, ptrs, seq, start_m, n_tiles, WG: gl.constexpr,
                 ROWS: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr,
                 NUM_BUF: gl.constexpr, SMEM: gl.constexpr, S_LAYOUT: gl.constexpr,
                 O_LAYOUT: gl.constexpr, P_LAYOUT: gl.constexpr, CAUSAL: gl.constexpr):
    """One warpgroup's ROWS query rows (WG 0 or 1): the online softmax over every key tile,
    its matmuls issued in turn with the other warpgroup's. Each warpgroup takes n_tiles + 1
    turns: tile 0's scores; tile j's scores with tile j - 1's P V; the last P V."""
    q_smem, k_smem, v_smem = smem
    q_bar, ready, empty, turn = bars
    q_ptr, k_ptr, v_ptr, o_ptr, base, qk_scale_log2 = ptrs
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    row0 = start_m + WG * ROWS
    offs_m = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, S_LAYOUT))
    zeros_s = gl.zeros([ROWS, BLOCK_N], gl.float32, S_LAYOUT)
    l_i = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, S_LAYOUT))
    acc = gl.zeros([ROWS, HEAD_D], gl.float32, O_LAYOUT)
    q = q_smem.index(WG)
    mbarrier.wait(q_bar, 0)

    # Turn 0: tile 0's scores.
    mbarrier.wait(ready.index(0), 0)
    mbarrier.wait(turn.index(WG), 0)
    s = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), zeros_s, use_acc=False,
                      is_async=True)
    mbarrier.arrive(turn.index(1 - WG), count=1)  # the other warpgroup's turn
    s = warpgroup_mma_wait(0, deps=[s])
    m_i = gl.full([ROWS], -float("inf"), gl.float32, gl.SliceLayout(1, S_LAYOUT))
    p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, 0, offs_m, qk_scale_log2, BLOCK_N, CAUSAL,
                                       S_LAYOUT)
    p_op = gl.convert_layout(p.to(dtype), P_LAYOUT)

    # Tiles 1 .. n_tiles - 2 need no mask (causal: they lie below both warpgroups' diagonals);
    # the last one does.
    for j in range(1, n_tiles - 1):
        p_op, acc, m_i, l_i = _ws_step(j, q, k_smem, v_smem, ready, empty, turn, p_op, acc, m_i,
                                       l_i, zeros_s, offs_m, qk_scale_log2, WG, BLOCK_N,
                                       NUM_BUF, False, S_LAYOUT, O_LAYOUT, P_LAYOUT)
    if n_tiles > 1:
        p_op, acc, m_i, l_i = _ws_step(n_tiles - 1, q, k_smem, v_smem, ready, empty, turn, p_op,
                                       acc, m_i, l_i, zeros_s, offs_m, qk_scale_log2, WG,
                                       BLOCK_N, NUM_BUF, CAUSAL, S_LAYOUT, O_LAYOUT, P_LAYOUT)

    # Turn n_tiles: the last tile's P V.
    b_last = (n_tiles - 1) % NUM_BUF
    mbarrier.wait(turn.index(WG), n_tiles & 1)
    acc = warpgroup_mma(p_op, v_smem.index(b_last), acc, is_async=True)
    mbarrier.arrive(turn.index(1 - WG), count=1)
    acc = warpgroup_mma_wait(0, deps=[acc])
    mbarrier.arrive(empty.index(b_last), count=1)
    o = acc / gl.convert_layout(l_i, gl.SliceLayout(1, O_LAYOUT))[:, None]
    o_rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, O_LAYOUT))
    o_cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, O_LAYOUT))
    gl.store(o_ptr + base + o_rows.to(gl.int64)[:, None] * HEAD_D + o_cols[None, :], o.to(dtype))


@gluon.jit
def _attn_fwd_ws(q_ptr, k_ptr, v_ptr, o_ptr, seq, qk_scale_log2,
                 ROWS: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr,
                 NUM_BUF: gl.constexpr, SMEM: gl.constexpr, S_LAYOUT: gl.constexpr,
                 O_LAYOUT: gl.constexpr, P_LAYOUT: gl.constexpr, CAUSAL: gl.constexpr):
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    block = gl.program_id(0)
    if CAUSAL:  # the blocks with the most key tiles (the last queries) start first
        block = gl.num_programs(0) - 1 - block
    start_m = block * (2 * ROWS)
    base = gl.program_id(1).to(gl.int64) * seq * HEAD_D  # this (batch, head): [S, D]
    q_smem = gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_D], SMEM)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_D], SMEM)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_D], SMEM)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(NUM_BUF):
        mbarrier.init(ready.index(i), count=1)  # the TMA transaction completes it
        mbarrier.init(empty.index(i), count=2)  # both consumers release it
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)
    mbarrier.arrive(turn.index(0), count=1)  # warpgroup 0 goes first
    # Both warpgroups walk the same key tiles (causal: up to the block's last row; the tiles
    # past warpgroup 0's diagonal are masked out for it), so their turns stay in step.
    hi = seq
    if CAUSAL:
        hi = gl.minimum(seq, start_m + 2 * ROWS)
    n_tiles = gl.cdiv(hi, BLOCK_N)
    smem = (q_smem, k_smem, v_smem)
    bars = (q_bar, ready, empty, turn)
    ptrs = (q_ptr, k_ptr, v_ptr, o_ptr, base, qk_scale_log2)
    # One signature for every partition: (shared buffers, barriers, pointers, scalars, which
    # warpgroup, constants); the default partition is consumer 0.
    gl.warp_specialize([
        (_ws_consumer, (smem, bars, ptrs, seq, start_m, n_tiles, 0, ROWS, HEAD_D, BLOCK_N,
                        NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL)),
        (_ws_consumer, (smem, bars, ptrs, seq, start_m, n_tiles, 1, ROWS, HEAD_D, BLOCK_N,
                        NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL)),
        (_ws_producer, (smem, bars, ptrs, seq, start_m, n_tiles, 0, ROWS, HEAD_D, BLOCK_N,
                        NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL)),
    ], [4, 1], [240, 24])


def _ws_constexprs(head_d: int, block_n: int, causal: bool) -> dict[str, Any]:
    """The warp-specialized kernel's compile-time arguments (4-warp consumer layouts)."""
    o_layout = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                         instr_shape=[16, head_d, 16])
    return dict(
        ROWS=WS_ROWS, HEAD_D=head_d, BLOCK_N=block_n, NUM_BUF=WS_NUM_BUF, CAUSAL=causal,
        SMEM=gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2),
        S_LAYOUT=gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                           instr_shape=[16, block_n, 16]),
        O_LAYOUT=o_layout,
        P_LAYOUT=gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2),
    )


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


def _ws_block_n(head_d: int) -> int:
    """Key tile of the warp-specialized kernel: 128 (64 query rows per warpgroup leave the
    registers for it)."""
    return 128


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

    def refuse(why: str) -> None:
        raise ValueError(f"gluon candidate: {why}")

    if mask is not None:
        refuse("no mask (got one)")
    if q.dtype not in (torch.bfloat16, torch.float16) or not (q.dtype == k.dtype == v.dtype):
        refuse(f"bf16 or fp16 q, k, v of one dtype (got {q.dtype}, {k.dtype}, {v.dtype})")
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        refuse(f"q, k, v of one shape [B, H, S, D] (got {tuple(q.shape)}, {tuple(k.shape)})")
    b, h, s, d = q.shape
    if s % BLOCK_M or d not in (64, 128):
        refuse(f"S a multiple of {BLOCK_M} and D of 64 or 128 (got S = {s}, D = {d})")
    if not q.is_cuda:
        refuse(f"a CUDA device (got {q.device})")
    q, k, v = (t.contiguous() for t in (q, k, v))
    o = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if ws:
        _use_torch_allocator()
        _attn_fwd_ws[(s // WS_BLOCK_M, b * h)](
            q, k, v, o, s, scale * 1.4426950408889634,  # log2(e)
            **_ws_constexprs(d, block_n or _ws_block_n(d), bool(causal)), num_warps=4,
            maxnreg=WS_MAXNREG)
        return o
    _attn_fwd_gluon[(s // BLOCK_M, b * h)](
        q, k, v, o, s, scale * 1.4426950408889634,  # log2(e)
        **_constexprs(d, block_n or _block_n(d), bool(causal), overlap_pv), num_warps=NUM_WARPS)
    return o


def attention_ws(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
                 scale: float | None = None) -> Any:
    """The warp-specialized kernel under onlinesm's attention contract (for ``onlinesm
    check bench/gluon_attention.py:attention_ws``)."""
    return attention(q, k, v, mask=mask, causal=causal, scale=scale, ws=True)


def _use_torch_allocator() -> None:
    """TMA descriptors made on the device live in global scratch that Triton asks an
    allocator for: torch's CUDA caching allocator. Set on every call: Triton keeps it in a
    context variable, so one set in another thread (onlinesm check runs kernels in a worker
    thread) is not seen here."""
    import torch
    import triton

    triton.set_allocator(lambda size, alignment, stream: torch.empty(
        size, dtype=torch.int8, device="cuda"))


def compile_offline(head_d: int, causal: bool, block_n: int | None = None,
                    overlap_pv: bool = False, ws: bool = False) -> dict[str, Any]:
    """Compile for sm_90a without a GPU; ``{"registers", "spill_bytes", "shared",
    "serialized"}`` from ``ptxas -v`` (serialized: ptxas's C7514, wgmma run one by one).
    ``ws``: the warp-specialized kernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    fn = _attn_fwd_ws if ws else _attn_fwd_gluon
    if ws:
        const = _ws_constexprs(head_d, block_n or _ws_block_n(head_d), causal)
        options = dict(num_warps=4, maxnreg=WS_MAXNREG)
    else:
        const = _constexprs(head_d, block_n or _block_n(head_d), causal, overlap_pv)
        options = dict(num_warps=NUM_WARPS)
    names = list(fn.arg_names)
    signature = {n: ("*bf16" if n.endswith("_ptr") else "constexpr" if n in const
                     else "fp32" if n == "qk_scale_log2" else "i32") for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]]
             for n in names if n.endswith("_ptr") or n == "seq"}
    compiled = triton.compile(GluonASTSource(fn, signature, constexprs=const, attrs=attrs),
                              target=GPUTarget("cuda", 90, 128), options=options)
    r = ptxas_sm90(compiled)
    return dict(head_d=head_d, causal=causal, block_n=const["BLOCK_N"],
                registers=r["registers"], spill_bytes=r["spill_bytes"], shared=r["shared"],
                serialized="C7514" in r["report"])


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offline", action="store_true",
                    help="compile for sm_90a without a GPU: registers, spills, serialisation")
    ap.add_argument("--json", action="store_true", help="with --offline: one JSON line each")
    ap.add_argument("--overlap-pv", action="store_true",
                    help="with --offline: P V left in flight across iterations (FA3's order)")
    ap.add_argument("--ws", action="store_true",
                    help="with --offline: the warp-specialized kernel")
    ap.add_argument("--bench", action="store_true", help="time it on the GPU (needs CUDA)")
    ap.add_argument("--seqs", default="1024,4096,16384")
    ap.add_argument("--dims", default="64,128")
    args = ap.parse_args(argv)
    dims = [int(d) for d in args.dims.split(",")]
    if args.offline:
        for d in dims:
            for causal in (False, True):
                r = compile_offline(d, causal, overlap_pv=args.overlap_pv, ws=args.ws)
                print(json.dumps(r) if args.json else
                      f"{'ws ' if args.ws else ''}D={d} causal={causal} BLOCK_N={r['block_n']}: "
                      f"{r['registers']} registers, "
                      f"{r['spill_bytes']} bytes spilled, {r['shared']:,} B shared, "
                      f"wgmma serialised: {r['serialized']}", flush=True)
    if args.bench:
        _bench([int(s) for s in args.seqs.split(",")], dims)
    if not (args.offline or args.bench):
        ap.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
