"""Attention forward for Hopper in Gluon: a TMA producer warp, consumer warpgroups in ping-pong.

What: FlashAttention-3's schedule written in Gluon (Triton's explicit-layout dialect), for the
inputs it covers: 16-bit q, k, v of one shape [B, H, S, D] (no GQA, Sq == Sk), S a multiple
of 128, D of 64 or 128, no mask, causal or not, on an sm_90 GPU. One warp only loads (a query
block's Q, then K and V tiles through a ring of shared-memory buffers, by TMA), and two
warpgroups of 4 warps each (at D = 64 three, mostly four below S = 2048; causal two below
4096, four below 8192) own 64 query rows and take turns at the tensor cores: one issues its
Q K^T and the previous tile's P V, hands the turn over, and does its softmax while the
others' matmuls run; causal, a warpgroup hands on the turns of key tiles past its own
diagonal. Without causal the launch is persistent: one program per SM walks query blocks,
the producer loading the next block's tiles during the last one's epilogue; causal below
S = 16k (D = 128) or 8k (D = 64) too, taking each next block from a counter in global memory
(blocks differ in length there), and otherwise one program per block. Each block's o leaves
by one TMA store: through a shared buffer of its own where shared memory has room (D = 64),
else through the block's last K tile, free once every warpgroup's last Q K^T is done
(D = 128, whose three K/V buffers of 128 keys and Q fill 224 of the 227 KB).

Why: the Triton kernel (attention.py) cannot overlap a tile's softmax with matmuls (Triton
waits for a wgmma at once when its result feeds anything but another wgmma), which held it at
0.72-0.86 of cuDNN at D = 128. This one reaches 0.97-1.10 there on an H200 (medians of 2-4,
S >= 4096, bf16 and fp16), and 0.98-1.11 at D = 64 (S >= 2048 without causal, 4k causal;
1.01-1.02 at S = 1024 without causal, causal 0.94 at 1024 and 0.97-0.99 at 2048;
reports/h200/bench_attention.md).

Status: on by default. ``attention()`` runs it for the calls it covers (:func:`fits`) where it
is the faster kernel (:func:`pays`: from S = 256), unless
``ONLINESM_ATTENTION_GLUON=0`` (``use_gluon(False)``) or a pinned Triton config
(``ONLINESM_ATTENTION_CONFIG``) says otherwise. Its oracle tests and ``onlinesm check``
through ``attention()`` pass on the H200.

    >>> from onlinesm.kernels import attention_gluon as ag
    >>> ag.fits(q, k, v)  # None, or why not  # doctest: +SKIP
    >>> o = ag.forward(q, k, v, causal=True)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from onlinesm.kernels.launching import SMEM_BYTES, capability, launch_kernel, on_device, sm_count

try:  # triton's own record of the allocator in this context (_use_scratch_allocator)
    from triton.runtime._allocation import NullAllocator, _allocator
except ImportError:  # not where this triton keeps it: the allocator is set on every call
    NullAllocator, _allocator = None, None

__all__ = ["fits", "pays", "forward", "forward_fitted", "WS_BLOCK_M"]

#: TMA from global to shared memory (renamed async_load after triton 3.6)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
#: TMA from shared to global memory (renamed async_store after triton 3.6)
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
#: A barrier of the partition's warps (renamed barrier after triton 3.6)
_partition_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

#: How a launch walks its query blocks (the kernel's PERSISTENT): one program per block; one
#: program per SM taking blocks i, i + P, i + 2P, ... of P programs; or one per SM taking the
#: next block from a counter in global memory, so that a program that finishes early takes
#: more (FlashAttention-3's dynamic tile scheduler, for causal blocks of unequal length).
_ONE_PER_BLOCK = gl.constexpr(0)
_STATIC = gl.constexpr(1)
_DYNAMIC = gl.constexpr(2)
#: And the static walk with each block's last P V issued beside the next block's first
#: Q K^T, in one turn (``_ws_consume_chain``: two warpgroups without causal).
_CHAINED = gl.constexpr(3)


@gluon.jit
def _softmax_tile(s, m_i, l_i, j, offs_m, qk_scale_log2,
                  BLOCK_N: gl.constexpr, MASK: gl.constexpr, S_LAYOUT: gl.constexpr):
    """One step of the online softmax on the score tile s of key tile j: (p, alpha, m, l).
    qk_scale_log2 is a normal positive float (``forward`` folds a negative scale's sign into
    q; ``fits`` leaves scales below 1e-30 in magnitude to the Triton kernel)."""
    if MASK:  # causal: key n visible to query m when n <= m (Sq == Sk: both alignments agree)
        s = _hide_past_diagonal(s, offs_m - j * BLOCK_N, BLOCK_N, S_LAYOUT)
    # The row max of the raw scores, scaled once per row: max(s) * c == max(s * c) exactly
    # for c > 0 (rounding is monotone), and the scale then rides in p's FMA, s * c - m (c:
    # the scale folded into log2(e), exp(x * scale) = exp2(x * c)). One multiply per score
    # fewer: at D = 64 the SM's softmax, not its tensor cores, is the bound (242 SASS
    # instructions per thread and key tile where there were 272).
    # Every row sees key 0 in tile 0, so m is finite from the first tile on, and
    # alpha = exp2(-inf - m) = 0 there: no exp(-inf - -inf); a hidden key's -inf * c = -inf
    # makes its p exactly 0.
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale_log2)
    p = gl.exp2(s * qk_scale_log2 - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)  # rescales what was summed under the old max
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _hide_past_diagonal(s, last, BLOCK_N: gl.constexpr, S_LAYOUT: gl.constexpr):
    """The score tile s with each row's keys past column ``last`` (per row) set to -inf.
    Compared as the tile's column against the row's last visible column, a per-row scalar:
    each score then costs one compare and one select. (Written key n <= query m, the
    compiler packed the 2-D compare's bits through integer registers: 788 SASS instructions
    per thread in a D = 128 diagonal tile where this takes 558.)"""
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT))
    return gl.where(cols[None, :] <= last[:, None], s, -float("inf"))


@gluon.jit
def _hide_if_diagonal(s, diag, last, BLOCK_N: gl.constexpr, S_LAYOUT: gl.constexpr):
    """s as :func:`_hide_past_diagonal` leaves it where the runtime flag ``diag`` is set (the
    tile meets the diagonal), else s: the branch lets one copy of the softmax serve every
    tile, where constant masks compile one copy for masked tiles and one for the rest."""
    if diag:
        s = _hide_past_diagonal(s, last, BLOCK_N, S_LAYOUT)
    return s


# FlashAttention-3's schedule: one warp only loads (each query block's Q, then K and V tiles
# through a ring of shared-memory buffers with TMA, each buffer guarded by a "ready" mbarrier
# the copy completes and an "empty" one every consumer releases), and two warpgroups of 4
# warps each (three at D = 64) own 64 query rows. They take turns at the tensor cores (one
# "turn" mbarrier each): a warpgroup issues its Q K^T and the previous tile's P V, hands the
# turn over, and does its softmax while the others' matmuls run. Registers move to the
# consumers (the producer keeps 24 per thread).
WS_ROWS = 64  # query rows per consumer warpgroup
WS_BLOCK_M = 2 * WS_ROWS  # query rows per block of two warpgroups: S must be a multiple of it
WS_NUM_BUF = 3  # K/V buffers in the ring (D = 128: 3 x 64 KB + Q's 32 KB of the 227 KB)
WS_MAXNREG = 168  # 12 warps (3 warpgroups) x 168 = the SM's 64k registers for one program
# _attn_fwd_ws asks for 240 per thread for the second consumer warpgroup and 24 for the
# producer's (setmaxnreg: the USETMAXREG instructions are in the SASS of triton 3.6's
# cubin too, by nvdisasm).


@gluon.jit
def _ws_block(work, seq, n_blocks, n_work, ROWS: gl.constexpr, BLOCK_N: gl.constexpr,
              CAUSAL: gl.constexpr, NUM_WG: gl.constexpr, PERSISTENT: gl.constexpr):
    """Query block number ``work`` (blocks of NUM_WG * ROWS rows): (first row of its (batch,
    head) in the [B * H * S, D] view, first query, key tiles). One (batch, head) after
    another, its blocks in a row, so programs that run together share K and V in L2; causal,
    a head's longest blocks (the last queries) first. Causal and persistent, the longest
    blocks of every head first: a program takes every P-th block, and in a head's own order
    some programs would take only long blocks and others only short ones; and every other
    round of P blocks in reverse (program p takes the p-th longest of one round, then the
    p-th shortest of the next), so that no program takes the longest of every round. Handed
    out by the counter (``PERSISTENT == _DYNAMIC``), blocks keep the first order: the one the
    GPU's own scheduler gives one program per block, whose balance the counter keeps."""
    n_heads = n_work // n_blocks
    head = work // n_blocks
    block = work % n_blocks
    if CAUSAL and PERSISTENT == _STATIC:
        programs = gl.num_programs(0)
        rnd = work // programs
        # odd rounds reversed, all but a last partial one (work -> a permutation of 0..n-1)
        flip = ((rnd % 2) == 1) & ((rnd + 1) * programs <= n_work)
        work = gl.where(flip, rnd * programs + (rnd + 1) * programs - 1 - work, work)
        head = work % n_heads
        block = work // n_heads
    if CAUSAL:
        block = n_blocks - 1 - block
    start_m = block * (NUM_WG * ROWS)
    # Every warpgroup takes a turn per key tile (causal: up to the block's last row; a
    # warpgroup hands on the turns of tiles past its own diagonal), so their turns stay in
    # step.
    hi = seq
    if CAUSAL:
        hi = gl.minimum(seq, start_m + NUM_WG * ROWS)
    return head * seq, start_m, gl.cdiv(hi, BLOCK_N)


@gluon.jit
def _ws_producer(smem, bars, ptrs, seq, n_blocks, n_work, WG: gl.constexpr,
                 ROWS: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr,
                 NUM_BUF: gl.constexpr, SMEM: gl.constexpr, S_LAYOUT: gl.constexpr,
                 O_LAYOUT: gl.constexpr, P_LAYOUT: gl.constexpr, CAUSAL: gl.constexpr,
                 PV_OVERLAP: gl.constexpr, NUM_WG: gl.constexpr,
                 PERSISTENT: gl.constexpr, COMPACT: gl.constexpr):
    """The load warp: for each of the program's query blocks, Q of every consumer warpgroup,
    then K and V of every key tile, by TMA."""
    q_bar, q_empty, ready, empty, turn = bars
    q_ptr, k_ptr, v_ptr, o_ptr, qk_scale_log2, counter_ptr = ptrs
    # Descriptors of the [B * H * S, D] views, made once on the device (they need the global
    # scratch that triton.set_allocator provides). Key tiles never cross a head (S % 128 ==
    # 0); Q rows past S (a last block of 3 x 64 rows) read the next head's or zeros, and
    # their outputs are not stored.
    rows = seq * (n_work // n_blocks)  # B * H * S
    q_desc = tma.make_tensor_descriptor(q_ptr, [rows, HEAD_D], [HEAD_D, 1], [ROWS, HEAD_D],
                                        SMEM)
    k_desc = tma.make_tensor_descriptor(k_ptr, [rows, HEAD_D], [HEAD_D, 1], [BLOCK_N, HEAD_D],
                                        SMEM)
    v_desc = tma.make_tensor_descriptor(v_ptr, [rows, HEAD_D], [HEAD_D, 1], [BLOCK_N, HEAD_D],
                                        SMEM)
    if PERSISTENT == _DYNAMIC:  # blocks from the counter, until it passes n_work
        g = 0  # K/V tiles loaded so far: the ring's position
        it = 0  # query blocks so far: Q's phase
        work = _ws_lane0(_ws_take_work(counter_ptr))
        while work < n_work:
            # The next block is taken now, and its number read only after this block's loads
            # are issued: the atomic's round trip hides under them (FlashAttention-3's
            # scheduler prefetches the same way).
            taken = _ws_take_work(counter_ptr)
            n_tiles = _ws_produce_block(work, g, it, q_desc, k_desc, v_desc, smem, bars, seq,
                                        n_blocks, n_work, ROWS, BLOCK_N, NUM_BUF, CAUSAL,
                                        NUM_WG, PERSISTENT)
            g += n_tiles
            it += 1
            work = _ws_lane0(taken)
        # Every take of this program is answered: count it out, and the last program out
        # sets the counter back to zero for the next launch (no fill before each launch).
        _ws_count_out(counter_ptr)
        # No block left: tell the consumers through the next Q slot (a plain arrive completes
        # its phase, as no copy is expected), with n_work for the block number.
        q_smem, k_smem, v_smem, work_smem, o_smem = smem
        Q_BUFS: gl.constexpr = q_smem.shape[0] // NUM_WG
        slot = it % Q_BUFS
        mbarrier.wait(q_empty.index(slot), ((it // Q_BUFS) & 1) ^ 1)
        _ws_publish_work(work_smem, slot, n_work)
        mbarrier.arrive(q_bar.index(slot), count=1)
    elif PERSISTENT:  # blocks i, i + P, ...: the ring and Q's phase run on across blocks
        g = 0  # K/V tiles loaded so far: the ring's position
        it = 0  # query blocks so far: Q's phase
        for work in range(gl.program_id(0), n_work, gl.num_programs(0)):
            n_tiles = _ws_produce_block(work, g, it, q_desc, k_desc, v_desc, smem, bars, seq,
                                        n_blocks, n_work, ROWS, BLOCK_N, NUM_BUF, CAUSAL,
                                        NUM_WG, PERSISTENT)
            g += n_tiles
            it += 1
    else:
        _ws_produce_block(gl.program_id(0), 0, 0, q_desc, k_desc, v_desc, smem, bars, seq,
                          n_blocks, n_work, ROWS, BLOCK_N, NUM_BUF, CAUSAL, NUM_WG, PERSISTENT)


@gluon.jit
def _ws_produce_block(work, g, it, q_desc, k_desc, v_desc, smem, bars, seq, n_blocks, n_work,
                      ROWS: gl.constexpr, BLOCK_N: gl.constexpr, NUM_BUF: gl.constexpr,
                      CAUSAL: gl.constexpr, NUM_WG: gl.constexpr, PERSISTENT: gl.constexpr):
    """Loads of query block ``work``, the program's block number ``it``, whose first key
    tile takes the ring's place ``g``; returns its key tiles."""
    q_smem, k_smem, v_smem, work_smem, o_smem = smem
    q_bar, q_empty, ready, empty, turn = bars
    Q_BUFS: gl.constexpr = q_smem.shape[0] // NUM_WG  # Q of one block, or of two in turn
    slot = it % Q_BUFS
    head_row, start_m, n_tiles = _ws_block(work, seq, n_blocks, n_work, ROWS, BLOCK_N, CAUSAL,
                                           NUM_WG, PERSISTENT)
    # Q's buffers are free once every consumer has the last scores of the block that used
    # them before (mbarriers start with phase 1 complete, so the first pass does not wait).
    mbarrier.wait(q_empty.index(slot), ((it // Q_BUFS) & 1) ^ 1)
    if PERSISTENT == _DYNAMIC:  # the consumers learn the block number with its Q
        _ws_publish_work(work_smem, slot, work)
    mbarrier.expect(q_bar.index(slot), NUM_WG * q_desc.block_type.nbytes)
    for w in gl.static_range(NUM_WG):
        _tma_load(q_desc, [head_row + start_m + w * ROWS, 0], q_bar.index(slot),
                  q_smem.index(slot * NUM_WG + w))
    for j in range(n_tiles):
        b = (g + j) % NUM_BUF
        # Wait until every consumer released this buffer (its previous tile's P V is done).
        mbarrier.wait(empty.index(b), (((g + j) // NUM_BUF) & 1) ^ 1)
        mbarrier.expect(ready.index(b), k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        _tma_load(k_desc, [head_row + j * BLOCK_N, 0], ready.index(b), k_smem.index(b))
        _tma_load(v_desc, [head_row + j * BLOCK_N, 0], ready.index(b), v_smem.index(b))
    return n_tiles


@gluon.jit
def _ws_take_work(counter_ptr):
    """The next query block of a launch scheduled by the counter (PERSISTENT == _DYNAMIC):
    one atomic add by lane 0 of the load warp (relaxed: the counter orders nothing else),
    returned in flight, as lane 0's element of a warp's vector (see _ws_lane0)."""
    LANES: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    lane = gl.arange(0, 32, layout=LANES)
    return gl.atomic_add(counter_ptr + lane * 0, gl.full([32], 1, gl.int32, LANES),
                         mask=lane == 0, sem="relaxed")


@gluon.jit
def _ws_count_out(counter_ptr):
    """A program of a launch scheduled by the counter is done taking blocks: lane 0 adds one
    to the count of such programs, the word after the counter. The last one out (the count
    was programs - 1) zeroes both words, so the next launch on this stream finds them as
    the first did. Acquire-release: that last add follows every other program's add, each
    after its program's last take, so no take can land after the zeroing."""
    LANES: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    lane = gl.arange(0, 32, layout=LANES)
    out = gl.atomic_add(counter_ptr + 1 + lane * 0, gl.full([32], 1, gl.int32, LANES),
                        mask=lane == 0, sem="acq_rel")
    last = _ws_lane0(out) == gl.num_programs(0) - 1
    # zeroed by atomic exchanges, in the L2 where the adds land (o alone leaves by stores)
    gl.atomic_xchg(counter_ptr + lane, gl.zeros([32], gl.int32, LANES), mask=(lane < 2) & last,
                   sem="relaxed")


@gluon.jit
def _ws_lane0(taken):
    """_ws_take_work's block number, in every lane (waits for the atomic's answer)."""
    lane = gl.arange(0, 32, layout=taken.type.layout)
    return gl.max(gl.where(lane == 0, taken, 0), axis=0)


@gluon.jit
def _ws_publish_work(work_smem, slot, work):
    """The load warp writes the block number of Q slot ``slot`` where the consumers read it
    (_ws_read_work), before the arrive on that slot's barrier that orders the write."""
    WORDS: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    work_smem.index(slot).store(gl.full([32], work, gl.int32, WORDS))
    _partition_barrier()  # every lane's write is done before lane 0 arrives


@gluon.jit
def _ws_read_work(work_smem, q_bar, it, Q_BUFS: gl.constexpr):
    """A consumer warpgroup's next block number (the program's block ``it``; n_work once
    none is left), once its Q slot's barrier has completed."""
    # Every warp of the warpgroup reads all 32 words (the layout's 4 warps repeat the
    # vector): the max that makes the scalar then stays within each warp, where 128 words
    # spread over the 4 warps needed a reduction through shared memory and two barriers.
    WORDS: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    slot = it % Q_BUFS
    mbarrier.wait(q_bar.index(slot), (it // Q_BUFS) & 1)
    return gl.max(work_smem.index(slot).load(WORDS), axis=0)


@gluon.jit
def _ws_step(c, t, q, k_smem, v_smem, ready, empty, turn, p_op, acc, m_i, l_i, zeros_s,
             diag_last, diag, has_prev, qk_scale_log2, WG: gl.constexpr, NEXT: gl.constexpr,
             BLOCK_N: gl.constexpr, NUM_BUF: gl.constexpr, MASK: gl.constexpr,
             MASK_IF: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
             P_LAYOUT: gl.constexpr, PV_OVERLAP: gl.constexpr, PREV_IF: gl.constexpr = False):
    """Turn j of a consumer warpgroup in its block: tile j's scores and tile j - 1's P V on
    the tensor cores, then tile j's softmax while the other warpgroups' matmuls run
    (``PV_OVERLAP``: and while this warpgroup's own P V still runs). c is tile j's place in
    the ring (tiles since the program began), t the warpgroup's turns since then, NEXT the
    warpgroup whose turn follows; with ``MASK`` tile j meets the warpgroup's diagonal, each
    row's last visible column there in ``diag_last``; with ``MASK_IF`` it does where the
    runtime flag ``diag`` is set (one copy of the step for every tile: ``COMPACT``). With
    ``PREV_IF`` the step serves tile 0 too: there (``has_prev`` false) no P V is issued and
    no buffer released, so that the first tile's softmax is no second copy."""
    b = c % NUM_BUF
    b_prev = (c - 1) % NUM_BUF
    mbarrier.wait(ready.index(b), (c // NUM_BUF) & 1)  # K and V of tile j landed
    mbarrier.wait(turn.index(WG), t & 1)  # my turn at the tensor cores
    s = warpgroup_mma(q, k_smem.index(b).permute((1, 0)), zeros_s, use_acc=False,
                      is_async=True)
    if PREV_IF:  # (not with PV_OVERLAP: an async P V cannot leave the branch unwaited)
        if has_prev:  # tile 0 has no P V before it
            acc = warpgroup_mma(p_op, v_smem.index(b_prev), acc, is_async=True)
            mbarrier.arrive(turn.index(NEXT), count=1)  # the next warpgroup's turn
            acc = warpgroup_mma_wait(0, deps=[acc])
        else:
            mbarrier.arrive(turn.index(NEXT), count=1)
    else:
        acc = warpgroup_mma(p_op, v_smem.index(b_prev), acc, is_async=True)
        mbarrier.arrive(turn.index(NEXT), count=1)  # the next warpgroup's turn
    if PV_OVERLAP:
        # wgmma groups complete in order: one left outstanding is P V, the scores are done.
        s = warpgroup_mma_wait(1, deps=[s])
        if MASK_IF:
            s = _hide_if_diagonal(s, diag, diag_last, BLOCK_N, S_LAYOUT)
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, 0, diag_last, qk_scale_log2,
                                           BLOCK_N, MASK, S_LAYOUT)
        acc = warpgroup_mma_wait(0, deps=[acc])
        mbarrier.arrive(empty.index(b_prev), count=1)  # tile j - 1's buffers are free
    else:
        if PREV_IF:
            s = warpgroup_mma_wait(0, deps=[s])
            mbarrier.arrive(empty.index(b_prev), count=1, pred=has_prev)  # tile j - 1's
        else:
            s, acc = warpgroup_mma_wait(0, deps=[s, acc])
            mbarrier.arrive(empty.index(b_prev), count=1)  # tile j - 1's buffers are free
        # This tile's softmax.
        if MASK_IF:
            s = _hide_if_diagonal(s, diag, diag_last, BLOCK_N, S_LAYOUT)
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, 0, diag_last, qk_scale_log2,
                                           BLOCK_N, MASK, S_LAYOUT)
    # The rescale of o under the new max, before the next P V adds to it.
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]
    p_op = gl.convert_layout(p.to(p_op.dtype), P_LAYOUT)
    return p_op, acc, m_i, l_i


@gluon.jit
def _ws_consumer(smem, bars, ptrs, seq, n_blocks, n_work, WG: gl.constexpr,
                 ROWS: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr,
                 NUM_BUF: gl.constexpr, SMEM: gl.constexpr, S_LAYOUT: gl.constexpr,
                 O_LAYOUT: gl.constexpr, P_LAYOUT: gl.constexpr, CAUSAL: gl.constexpr,
                 PV_OVERLAP: gl.constexpr, NUM_WG: gl.constexpr,
                 PERSISTENT: gl.constexpr, COMPACT: gl.constexpr):
    """One warpgroup's ROWS query rows (WG 0 .. NUM_WG - 1) of each of the program's blocks:
    the online softmax over every key tile, its matmuls issued in turn with the other
    warpgroups'. In a block of n_tiles key tiles each warpgroup takes n_tiles + 1 turns: tile
    0's scores; tile j's scores with tile j - 1's P V; the last P V (causal: the turns of
    tiles past its own diagonal are handed on without a matmul). The NUM_WG warpgroups
    take their turns round-robin, and the ring and the turns run on from block to block.
    Where shared memory has room for it (``_ws_o_tma``), each block's o leaves through a
    shared buffer of the warpgroup's by one TMA store; where it has not (D = 128 in key
    tiles of 128), through the block's last K buffer (``_ws_o_in_k``)."""
    q_smem, k_smem, v_smem, work_smem, o_smem = smem
    q_ptr, k_ptr, v_ptr, o_ptr, qk_scale_log2, counter_ptr = ptrs
    O_TMA: gl.constexpr = o_smem.shape[1] == ROWS  # else a stub of 8 rows, unused
    O_IN_K: gl.constexpr = _ws_o_in_k(o_smem, k_smem, ROWS, NUM_WG, PERSISTENT)
    if O_TMA or O_IN_K:  # the [B * H * S, D] view of o, as the load warp's q, k, v
        o_out = tma.make_tensor_descriptor(o_ptr, [seq * (n_work // n_blocks), HEAD_D],
                                           [HEAD_D, 1], [ROWS, HEAD_D], SMEM)
    else:
        o_out = o_ptr
    if PERSISTENT == _DYNAMIC:  # the blocks the load warp took from the counter
        q_bar, q_empty, ready, empty, turn = bars
        Q_BUFS: gl.constexpr = q_smem.shape[0] // NUM_WG
        g = 0  # K/V tiles consumed so far: the ring's position
        it = 0  # query blocks so far; this warpgroup's turns so far are g + it
        work = _ws_read_work(work_smem, q_bar, it, Q_BUFS)
        while work < n_work:
            n_tiles = _ws_consume_block(work, g, it, smem, bars, ptrs, o_out, seq, n_blocks,
                                        n_work, WG, ROWS, HEAD_D, BLOCK_N, NUM_BUF, S_LAYOUT,
                                        O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP, NUM_WG,
                                        PERSISTENT, COMPACT)
            g += n_tiles
            it += 1
            work = _ws_read_work(work_smem, q_bar, it, Q_BUFS)
    elif PERSISTENT == _CHAINED:  # blocks i, i + P, ..., each last P V beside the next Q K^T
        _ws_consume_chain(smem, bars, ptrs, o_out, seq, n_blocks, n_work, WG, ROWS, HEAD_D,
                          BLOCK_N, NUM_BUF, S_LAYOUT, O_LAYOUT, P_LAYOUT, PV_OVERLAP, NUM_WG,
                          PERSISTENT)
    elif PERSISTENT:  # blocks i, i + P, ...: the ring and the turns run on across blocks
        g = 0  # K/V tiles consumed so far: the ring's position
        it = 0  # query blocks so far; this warpgroup's turns so far are g + it
        for work in range(gl.program_id(0), n_work, gl.num_programs(0)):
            n_tiles = _ws_consume_block(work, g, it, smem, bars, ptrs, o_out, seq, n_blocks,
                                        n_work, WG, ROWS, HEAD_D, BLOCK_N, NUM_BUF, S_LAYOUT,
                                        O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP, NUM_WG,
                                        PERSISTENT, COMPACT)
            g += n_tiles
            it += 1
    else:
        _ws_consume_block(gl.program_id(0), 0, 0, smem, bars, ptrs, o_out, seq, n_blocks,
                          n_work, WG, ROWS, HEAD_D, BLOCK_N, NUM_BUF, S_LAYOUT, O_LAYOUT,
                          P_LAYOUT, CAUSAL, PV_OVERLAP, NUM_WG, PERSISTENT, COMPACT)
    if O_TMA:  # the shared buffer must outlive the last store's read of it
        tma.store_wait(0)


@gluon.constexpr_function
def _ws_o_in_k(o_smem, k_smem, ROWS, NUM_WG, PERSISTENT):
    """Whether o leaves through the block's last K buffer (``_ws_store_o_in_k``): where no
    buffer of its own fits (o_smem a stub: D = 128 in key tiles of 128) and a K tile holds
    every warpgroup's rows (two warpgroups of 64 rows, tiles of 128 keys); not in chained
    blocks (``_ws_consume_chain`` stores o itself)."""
    return (o_smem.shape[1] != ROWS and k_smem.shape[1] == NUM_WG * ROWS
            and PERSISTENT != _CHAINED.value)


@gluon.jit
def _ws_scores_alone(q, k_smem, ready, turn, zeros_s, c, it, WG: gl.constexpr,
                     NEXT: gl.constexpr, NUM_BUF: gl.constexpr):
    """Turn c + it (c: key tiles of the program so far, it: its blocks so far): tile c's
    scores q k^T alone (a block's first tile: no P V yet to issue beside them), waited for
    at once."""
    mbarrier.wait(ready.index(c % NUM_BUF), (c // NUM_BUF) & 1)  # K of tile c landed
    mbarrier.wait(turn.index(WG), (c + it) & 1)  # my turn at the tensor cores
    s = warpgroup_mma(q, k_smem.index(c % NUM_BUF).permute((1, 0)), zeros_s, use_acc=False,
                      is_async=True)
    mbarrier.arrive(turn.index(NEXT), count=1)  # the next warpgroup's turn
    return warpgroup_mma_wait(0, deps=[s])


@gluon.jit
def _ws_last_pv(p_op, acc, v_smem, empty, turn, b, t, WG: gl.constexpr, NEXT: gl.constexpr,
                RELEASE: gl.constexpr = True):
    """Turn t: a block's last P V alone (its V in ring buffer b), then buffer b released
    (``RELEASE``; else o leaves through it first: ``_ws_store_o_in_k``)."""
    mbarrier.wait(turn.index(WG), t & 1)
    acc = warpgroup_mma(p_op, v_smem.index(b), acc, is_async=True)
    mbarrier.arrive(turn.index(NEXT), count=1)
    acc = warpgroup_mma_wait(0, deps=[acc])
    if RELEASE:
        mbarrier.arrive(empty.index(b), count=1)  # the block's last tile is free
    return acc


@gluon.jit
def _ws_consume_block(work, g, it, smem, bars, ptrs, o_out, seq, n_blocks, n_work,
                      WG: gl.constexpr, ROWS: gl.constexpr, HEAD_D: gl.constexpr,
                      BLOCK_N: gl.constexpr, NUM_BUF: gl.constexpr, S_LAYOUT: gl.constexpr,
                      O_LAYOUT: gl.constexpr, P_LAYOUT: gl.constexpr, CAUSAL: gl.constexpr,
                      PV_OVERLAP: gl.constexpr, NUM_WG: gl.constexpr, PERSISTENT: gl.constexpr,
                      COMPACT: gl.constexpr):
    """Warpgroup WG's rows of query block ``work``, the program's block number ``it``, whose
    first key tile sits at the ring's place ``g`` (the warpgroup's turns before it: g + it);
    returns its key tiles. o_out: o's TMA descriptor where o leaves through shared memory,
    else its pointer. ``COMPACT``: one copy of the step for every tile, tile 0 (no P V
    before it) and, causal, the diagonal tile (its mask behind a branch) too
    (:func:`_ws_compact`)."""
    q_smem, k_smem, v_smem, work_smem, o_smem = smem
    q_bar, q_empty, ready, empty, turn = bars
    q_ptr, k_ptr, v_ptr, o_ptr, qk_scale_log2, counter_ptr = ptrs
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    zeros_s = gl.zeros([ROWS, BLOCK_N], gl.float32, S_LAYOUT)
    Q_BUFS: gl.constexpr = q_smem.shape[0] // NUM_WG  # Q of one block, or of two in turn
    slot = it % Q_BUFS
    q = q_smem.index(slot * NUM_WG + WG)
    NEXT: gl.constexpr = (WG + 1) % NUM_WG  # whose turn follows mine
    head_row, start_m, n_tiles = _ws_block(work, seq, n_blocks, n_work, ROWS, BLOCK_N, CAUSAL,
                                           NUM_WG, PERSISTENT)
    row0 = start_m + WG * ROWS
    # A last block of 3 or 4 x 64 rows may end past S, and a warpgroup's rows (not the
    # first's) all lie past it: nothing to compute. Without causal it hands on every turn;
    # causal, where this branch spilled under triton 3.9 (264 bytes), it computes key tile 0
    # alone and hands on the rest (n_own below).
    # (Blocks of 128 rows are whole, S being a multiple of 128; blocks of 192 or 256 are not.)
    WHOLE: gl.constexpr = 128 % (NUM_WG * ROWS) == 0
    if not WHOLE and WG > 0 and not CAUSAL:
        if row0 >= seq:
            _ws_pass_block(g, it, slot, ready, empty, turn, q_empty, n_tiles, WG, NEXT,
                           NUM_BUF)
            return n_tiles
    # Causal: the block walks its key tiles up to its last row (n_tiles), but this
    # warpgroup's rows see keys up to row0 + ROWS - 1 only: its own tiles are the first
    # n_own, and only the last of them meets its diagonal (64 rows starting at a multiple of
    # 64 never span two tiles of 64 or 128 keys), so it alone is masked. The block's later
    # tiles lie wholly past this warpgroup's diagonal: it hands their turns on without a
    # matmul (in a 256-row block of 64-key tiles, 3 / 2 / 1 / 0 turns of warpgroups 0-3).
    # Without causal every warpgroup owns every tile (the second loop below takes the last,
    # unmasked); nor does any own fewer where the block fits in one key tile (two warpgroups
    # in tiles of 128 keys: the launch at D = 128).
    PASSES: gl.constexpr = CAUSAL and NUM_WG * ROWS > BLOCK_N
    n_own = n_tiles
    if PASSES:
        n_own = gl.where(row0 < seq, gl.minimum(n_tiles, gl.cdiv(row0 + ROWS, BLOCK_N)), 1)
    # Each row's last visible column in the key tile that meets this warpgroup's diagonal
    # (tile row0 // BLOCK_N; 64 rows never span two tiles): row0 % BLOCK_N plus the row.
    # Where blocks are whole key tiles, that place is a constant of the warpgroup, and the
    # compiler drops the compares of the columns wholly before or past the diagonal (two
    # warpgroups in tiles of 128: half of each thread's).
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, S_LAYOUT))
    if (NUM_WG * ROWS) % BLOCK_N == 0:
        diag_last = (WG * ROWS) % BLOCK_N + rows
    else:  # three warpgroups in tiles of 128: the place alternates from block to block
        diag_last = row0 % BLOCK_N + rows
    l_i = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, S_LAYOUT))
    acc = gl.zeros([ROWS, HEAD_D], gl.float32, O_LAYOUT)
    mbarrier.wait(q_bar.index(slot), (it // Q_BUFS) & 1)  # this block's Q landed

    if COMPACT:  # one copy of the step for every tile, tile 0's (no P V before it) too
        m_i = gl.full([ROWS], -float("inf"), gl.float32, gl.SliceLayout(1, S_LAYOUT))
        p_op = gl.zeros([ROWS, BLOCK_N], dtype, P_LAYOUT)
        # Tile j meets this warpgroup's diagonal where j == n_own - 1 (causal).
        for j in range(0, n_own):
            p_op, acc, m_i, l_i = _ws_step(g + j, g + it + j, q, k_smem, v_smem, ready,
                                           empty, turn, p_op, acc, m_i, l_i, zeros_s,
                                           diag_last, j == n_own - 1, j > 0, qk_scale_log2,
                                           WG, NEXT, BLOCK_N, NUM_BUF, False, CAUSAL,
                                           S_LAYOUT, O_LAYOUT, P_LAYOUT, PV_OVERLAP, True)
    else:
        # Turn 0: tile 0's scores.
        s = _ws_scores_alone(q, k_smem, ready, turn, zeros_s, g, it, WG, NEXT, NUM_BUF)
        m_i = gl.full([ROWS], -float("inf"), gl.float32, gl.SliceLayout(1, S_LAYOUT))
        # Tile j meets this warpgroup's diagonal where j == n_own - 1 (tile 0: where row0 <
        # BLOCK_N); every key of an earlier tile lies before its first row.
        if CAUSAL and row0 < BLOCK_N:  # tile 0 meets this warpgroup's diagonal: masked
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, 0, diag_last, qk_scale_log2,
                                               BLOCK_N, True, S_LAYOUT)
        else:
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, 0, diag_last, qk_scale_log2,
                                               BLOCK_N, False, S_LAYOUT)
        p_op = gl.convert_layout(p.to(dtype), P_LAYOUT)
        # the tiles before the diagonal, then the one that meets it (masked if causal)
        for j in range(1, n_own - 1):
            p_op, acc, m_i, l_i = _ws_step(g + j, g + it + j, q, k_smem, v_smem, ready,
                                           empty, turn, p_op, acc, m_i, l_i, zeros_s,
                                           diag_last, False, True, qk_scale_log2, WG, NEXT,
                                           BLOCK_N, NUM_BUF, False, False, S_LAYOUT,
                                           O_LAYOUT, P_LAYOUT, PV_OVERLAP)
        for j in range(gl.maximum(n_own - 1, 1), n_own):
            p_op, acc, m_i, l_i = _ws_step(g + j, g + it + j, q, k_smem, v_smem, ready,
                                           empty, turn, p_op, acc, m_i, l_i, zeros_s,
                                           diag_last, False, True, qk_scale_log2, WG, NEXT,
                                           BLOCK_N, NUM_BUF, CAUSAL, False, S_LAYOUT,
                                           O_LAYOUT, P_LAYOUT, PV_OVERLAP)
    # Every score of the block is in: the producer may load the next block's Q.
    mbarrier.arrive(q_empty.index(slot), count=1)

    # Turn n_own: its last tile's P V.
    O_IN_K: gl.constexpr = _ws_o_in_k(o_smem, k_smem, ROWS, NUM_WG, PERSISTENT)
    b_last = (g + n_own - 1) % NUM_BUF
    acc = _ws_last_pv(p_op, acc, v_smem, empty, turn, b_last, g + it + n_own, WG, NEXT,
                      not O_IN_K)
    if PASSES:  # the turns of the block's tiles past this warpgroup's diagonal, handed on
        for j in range(n_own, n_tiles):
            _ws_pass_turn(g + j, g + it + j + 1, ready, empty, turn, WG, NEXT, NUM_BUF)
    if O_IN_K:
        _ws_store_o_in_k(acc, l_i, k_smem.index(b_last), q_empty.index(slot),
                         (it // Q_BUFS) & 1, empty.index(b_last), o_out, head_row, row0, WG,
                         ROWS, O_LAYOUT)
    else:
        _ws_store_o(acc, l_i, o_smem, o_out, head_row, row0, seq, WG, ROWS, HEAD_D, O_LAYOUT,
                    WHOLE)
    return n_tiles


@gluon.jit
def _ws_consume_chain(smem, bars, ptrs, o_out, seq, n_blocks, n_work, WG: gl.constexpr,
                      ROWS: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr,
                      NUM_BUF: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                      P_LAYOUT: gl.constexpr, PV_OVERLAP: gl.constexpr, NUM_WG: gl.constexpr,
                      PERSISTENT: gl.constexpr):
    """Warpgroup WG's rows of blocks i, i + P, ... (``PERSISTENT == _CHAINED``: without
    causal, blocks of two warpgroups, whole), the blocks chained: a block's last P V is
    issued in the same turn as the next block's first Q K^T, and its o leaves while the
    other warpgroup's matmuls run. Each warpgroup takes one turn per key tile of the
    program's blocks, and one more at the end (the last P V).

    Why: a block of n key tiles otherwise takes n + 1 turns, two of them half empty (the
    first, Q K^T alone, waited for at once; the last, P V alone, then o's epilogue). In
    short blocks (S = 1280 in tiles of 64: 20 turns, 1536 in tiles of 128: 12) that is
    what keeps the tensor cores idle at the block's edges."""
    q_smem, k_smem, v_smem, work_smem, o_smem = smem
    q_bar, q_empty, ready, empty, turn = bars
    q_ptr, k_ptr, v_ptr, o_ptr, qk_scale_log2, counter_ptr = ptrs
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    Q_BUFS: gl.constexpr = q_smem.shape[0] // NUM_WG  # Q of one block, or of two in turn
    NEXT: gl.constexpr = (WG + 1) % NUM_WG  # whose turn follows mine
    zeros_s = gl.zeros([ROWS, BLOCK_N], gl.float32, S_LAYOUT)
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, S_LAYOUT))  # (no diagonal: unused)
    programs = gl.num_programs(0)
    # The first block's turn 0: its first tile's scores, alone (programs <= n_work: every
    # program has a block). Key tile t of the program (its blocks' tiles in a row) is the
    # ring's place t and this warpgroup's turn t.
    mbarrier.wait(q_bar.index(0), 0)
    s = _ws_scores_alone(q_smem.index(WG), k_smem, ready, turn, zeros_s, 0, 0, WG, NEXT,
                         NUM_BUF)
    m_i = gl.full([ROWS], -float("inf"), gl.float32, gl.SliceLayout(1, S_LAYOUT))
    l_i = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, S_LAYOUT))
    p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, 0, rows, qk_scale_log2, BLOCK_N, False,
                                       S_LAYOUT)
    p_op = gl.convert_layout(p.to(dtype), P_LAYOUT)
    acc = gl.zeros([ROWS, HEAD_D], gl.float32, O_LAYOUT)
    g = 0  # key tiles of the program's earlier blocks: the ring's place of this block's first
    it = 0  # the program's blocks so far: Q's slot and phase
    for work in range(gl.program_id(0), n_work, programs):
        head_row, start_m, n_tiles = _ws_block(work, seq, n_blocks, n_work, ROWS, BLOCK_N,
                                               False, NUM_WG, PERSISTENT)
        slot = it % Q_BUFS
        q = q_smem.index(slot * NUM_WG + WG)
        # Turns 1 .. n - 1: tile j's scores with tile j - 1's P V (tile 0's scores are in).
        for j in range(1, n_tiles):
            p_op, acc, m_i, l_i = _ws_step(g + j, g + j, q, k_smem, v_smem, ready, empty,
                                           turn, p_op, acc, m_i, l_i, zeros_s, rows, False,
                                           True, qk_scale_log2, WG, NEXT, BLOCK_N, NUM_BUF, False,
                                           False, S_LAYOUT, O_LAYOUT, P_LAYOUT, PV_OVERLAP)
        mbarrier.arrive(q_empty.index(slot), count=1)  # every score of the block is in
        b_last = (g + n_tiles - 1) % NUM_BUF  # the block's last V
        g += n_tiles
        it += 1
        row0 = start_m + WG * ROWS
        if work + programs < n_work:
            # Turn g: this block's last P V and the next block's first scores, issued
            # together; the scores' softmax runs while P V does, and o leaves while the other
            # warpgroup's turn runs.
            nslot = it % Q_BUFS
            mbarrier.wait(q_bar.index(nslot), (it // Q_BUFS) & 1)  # the next block's Q
            mbarrier.wait(ready.index(g % NUM_BUF), (g // NUM_BUF) & 1)
            mbarrier.wait(turn.index(WG), g & 1)
            s = warpgroup_mma(q_smem.index(nslot * NUM_WG + WG),
                              k_smem.index(g % NUM_BUF).permute((1, 0)), zeros_s,
                              use_acc=False, is_async=True)
            acc = warpgroup_mma(p_op, v_smem.index(b_last), acc, is_async=True)
            mbarrier.arrive(turn.index(NEXT), count=1)
            # wgmma groups complete in order: one left outstanding is P V, the scores are in.
            s = warpgroup_mma_wait(1, deps=[s])
            m_next = gl.full([ROWS], -float("inf"), gl.float32, gl.SliceLayout(1, S_LAYOUT))
            l_next = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, S_LAYOUT))
            p, alpha, m_next, l_next = _softmax_tile(s, m_next, l_next, 0, rows,
                                                     qk_scale_log2, BLOCK_N, False, S_LAYOUT)
            acc = warpgroup_mma_wait(0, deps=[acc])
            mbarrier.arrive(empty.index(b_last), count=1)  # the block's last tile is free
            _ws_store_o(acc, l_i, o_smem, o_out, head_row, row0, seq, WG, ROWS, HEAD_D,
                        O_LAYOUT, True)
            p_op = gl.convert_layout(p.to(dtype), P_LAYOUT)
            acc = gl.zeros([ROWS, HEAD_D], gl.float32, O_LAYOUT)
            m_i = m_next
            l_i = l_next
        else:  # the program's last block: its last P V alone, then o
            acc = _ws_last_pv(p_op, acc, v_smem, empty, turn, b_last, g, WG, NEXT)
            _ws_store_o(acc, l_i, o_smem, o_out, head_row, row0, seq, WG, ROWS, HEAD_D,
                        O_LAYOUT, True)


@gluon.jit
def _ws_store_o(acc, l_i, o_smem, o_out, head_row, row0, seq, WG: gl.constexpr,
                ROWS: gl.constexpr, HEAD_D: gl.constexpr, O_LAYOUT: gl.constexpr,
                WHOLE: gl.constexpr):
    """A warpgroup's rows of a block's output, o = acc / l, stored at rows row0.. of its
    (batch, head) (first row head_row of the [B * H * S, D] view); rows past S are not."""
    dtype: gl.constexpr = o_smem.dtype
    o = acc / gl.convert_layout(l_i, gl.SliceLayout(1, O_LAYOUT))[:, None]
    O_TMA: gl.constexpr = o_smem.shape[1] == ROWS  # else a stub of 8 rows, unused
    if O_TMA:  # o through shared memory and one TMA store
        # The store's 128-byte lines replace 4-byte stores per thread that fill half of
        # each 32-byte sector they touch, and the warps go on without waiting for it: only
        # the next block's epilogue waits, for this store to have read the buffer.
        o_buf = o_smem.index(WG)
        tma.store_wait(0)  # the last block's store has read the buffer (then a barrier)
        o_buf.store(o.to(dtype))
        fence_async_shared()  # the writes, visible to the TMA unit's reads
        if WHOLE or row0 < seq:  # rows past S would land on the next head's
            _tma_store(o_out, [head_row + row0, 0], o_buf)
    else:
        o_rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, O_LAYOUT))
        o_cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, O_LAYOUT))
        o_ptrs = (o_out + head_row.to(gl.int64) * HEAD_D  # this (batch, head)'s [S, D]
                  + (o_rows[:, None] * HEAD_D + o_cols[None, :]))
        if WHOLE:  # S is a multiple of 128: every block is whole
            gl.store(o_ptrs, o.to(dtype))
        else:  # the last block may end past S
            gl.store(o_ptrs, o.to(dtype), mask=(o_rows < seq)[:, None])


@gluon.jit
def _ws_store_o_in_k(acc, l_i, k_buf, q_done, q_phase, k_empty, o_out, head_row, row0,
                     WG: gl.constexpr, ROWS: gl.constexpr, O_LAYOUT: gl.constexpr):
    """A warpgroup's rows of a block's output, o = acc / l, out through the block's last K
    buffer ``k_buf`` (its rows WG * ROWS ..) by one TMA store, then that ring buffer
    released (``k_empty``). For launches with no room for o's own buffer (D = 128 in key
    tiles of 128: three K/V stages and Q take 224 of the 227 KB), in place of each thread's
    4-byte stores, which fill half of each 32-byte sector they touch.

    Why the K tile is free: every warpgroup's last Q K^T, its only reader, is done once the
    block's ``q_done`` phase ``q_phase`` completes (each warpgroup arrives there after its
    last scores); the V beside it may still feed another warpgroup's last P V, and is not
    touched; and the load warp refills the buffer only after every warpgroup's release."""
    o = acc / gl.convert_layout(l_i, gl.SliceLayout(1, O_LAYOUT))[:, None]
    mbarrier.wait(q_done, q_phase)  # every warpgroup's last scores are in: K is unread
    o_buf = k_buf.slice(WG * ROWS, ROWS)
    o_buf.store(o.to(o_buf.dtype))
    fence_async_shared()  # the writes, visible to the TMA unit's reads
    _tma_store(o_out, [head_row + row0, 0], o_buf)  # blocks of 128 rows: none past S
    tma.store_wait(0)  # the store has read the buffer
    _partition_barrier()  # every thread past the wait before the one arrive
    mbarrier.arrive(k_empty, count=1)  # the block's last tile is free


@gluon.jit
def _ws_pass_block(g, it, slot, ready, empty, turn, q_empty, n_tiles, WG: gl.constexpr,
                   NEXT: gl.constexpr, NUM_BUF: gl.constexpr):
    """A warpgroup whose rows of the block all lie past S (S = 1024 in blocks of 192 rows:
    the last block's second and third warpgroups) keeps the block's barriers in step without
    a matmul: each of its n_tiles + 1 turns handed on at once, each key tile released once
    it has landed (releasing a buffer the load warp has not yet filled would count towards
    the wrong phase), its Q slot released. Its share of the tensor cores goes to the others:
    at S = 1024 an eighth of the work (on the H200, D = 64, bf16: 0.83 -> 0.87 of cuDNN)."""
    for j in range(0, n_tiles):
        _ws_pass_turn(g + j, g + it + j, ready, empty, turn, WG, NEXT, NUM_BUF)
    mbarrier.arrive(q_empty.index(slot), count=1)
    mbarrier.wait(turn.index(WG), (g + it + n_tiles) & 1)  # the turn of the last P V
    mbarrier.arrive(turn.index(NEXT), count=1)


@gluon.jit
def _ws_pass_turn(c, t, ready, empty, turn, WG: gl.constexpr, NEXT: gl.constexpr,
                  NUM_BUF: gl.constexpr):
    """A turn without a matmul: the warpgroup's turn t handed on at once, and the key tile
    at the ring's place c released once it has landed (releasing a buffer the load warp has
    not yet filled would count towards the wrong phase)."""
    mbarrier.wait(ready.index(c % NUM_BUF), (c // NUM_BUF) & 1)
    mbarrier.wait(turn.index(WG), t & 1)
    mbarrier.arrive(turn.index(NEXT), count=1)
    mbarrier.arrive(empty.index(c % NUM_BUF), count=1)


@gluon.jit
def _attn_fwd_ws(q_ptr, k_ptr, v_ptr, o_ptr, counter_ptr, seq, n_blocks, n_work,
                 qk_scale_log2,
                 ROWS: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr,
                 NUM_BUF: gl.constexpr, SMEM: gl.constexpr, S_LAYOUT: gl.constexpr,
                 O_LAYOUT: gl.constexpr, P_LAYOUT: gl.constexpr, CAUSAL: gl.constexpr,
                 PV_OVERLAP: gl.constexpr, NUM_WG: gl.constexpr,
                 PERSISTENT: gl.constexpr, Q_BUFS: gl.constexpr, O_TMA: gl.constexpr,
                 COMPACT: gl.constexpr):
    """n_work query blocks (n_blocks per (batch, head)), program i taking blocks i, i + P,
    i + 2P, ... of P programs: one block each when launched with one program per block, or
    persistent, one program per SM walking many (Q_BUFS = 2: the next block's Q loads into
    the other buffer while this block runs); or (PERSISTENT == _DYNAMIC) one program per SM
    taking the next block from the first of the two int32 at counter_ptr (both zero at
    launch, and zero again when the last program is done: ``_ws_count_out``). O_TMA: o leaves
    through shared memory by TMA (``_ws_o_tma``); COMPACT: the consumers' step in one copy
    for every key tile (``_ws_compact``)."""
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    q_smem = gl.allocate_shared_memory(dtype, [Q_BUFS * NUM_WG, ROWS, HEAD_D], SMEM)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_D], SMEM)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_D], SMEM)
    # The block number of each Q slot, for launches that take blocks from the counter: one
    # word repeated 32 times, so that the load warp writes it in one instruction and each
    # consumer warp reads it in one.
    work_smem = gl.allocate_shared_memory(
        gl.int32, [Q_BUFS, 32], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    # Each consumer warpgroup's o on its way out by TMA; where it does not fit (O_TMA
    # false), a stub of 8 rows that no one uses, so that every launch has the same buffers.
    o_smem = gl.allocate_shared_memory(
        dtype, [NUM_WG, ROWS, HEAD_D] if O_TMA else [1, 8, HEAD_D], SMEM)
    q_bar = gl.allocate_shared_memory(gl.int64, [Q_BUFS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFS, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(Q_BUFS):
        mbarrier.init(q_bar.index(i), count=1)  # the TMA transaction completes it
        mbarrier.init(q_empty.index(i), count=NUM_WG)  # every consumer is done with this Q
    for i in gl.static_range(NUM_BUF):
        mbarrier.init(ready.index(i), count=1)  # the TMA transaction completes it
        mbarrier.init(empty.index(i), count=NUM_WG)  # every consumer releases it
    for i in gl.static_range(NUM_WG):
        mbarrier.init(turn.index(i), count=1)
    mbarrier.arrive(turn.index(0), count=1)  # warpgroup 0 goes first
    smem = (q_smem, k_smem, v_smem, work_smem, o_smem)
    bars = (q_bar, q_empty, ready, empty, turn)
    ptrs = (q_ptr, k_ptr, v_ptr, o_ptr, qk_scale_log2, counter_ptr)
    # One signature for every partition: (shared buffers, barriers, pointers, scalars, which
    # warpgroup, constants); the default partition is consumer 0. Written out per count of
    # consumers: a tuple held in a variable cannot carry the layouts (Gluon converts its
    # items to tensors), only the literal in the call can.
    if NUM_WG == 2:
        gl.warp_specialize([
            (_ws_consumer, (smem, bars, ptrs, seq, n_blocks, n_work, 0, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
            (_ws_consumer, (smem, bars, ptrs, seq, n_blocks, n_work, 1, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
            (_ws_producer, (smem, bars, ptrs, seq, n_blocks, n_work, 0, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
        ], [4, 1], [240, 24])
    elif NUM_WG == 3:  # three consumers (192 query rows): FlashAttention-3's shape for D = 64
        gl.warp_specialize([
            (_ws_consumer, (smem, bars, ptrs, seq, n_blocks, n_work, 0, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
            (_ws_consumer, (smem, bars, ptrs, seq, n_blocks, n_work, 1, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
            (_ws_consumer, (smem, bars, ptrs, seq, n_blocks, n_work, 2, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
            (_ws_producer, (smem, bars, ptrs, seq, n_blocks, n_work, 0, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
        ], [4, 4, 1], [160, 160, 24])
    else:  # four consumers (256 query rows, key tiles of 64): D = 64, mostly below S = 2048
        gl.warp_specialize([
            (_ws_consumer, (smem, bars, ptrs, seq, n_blocks, n_work, 0, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
            (_ws_consumer, (smem, bars, ptrs, seq, n_blocks, n_work, 1, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
            (_ws_consumer, (smem, bars, ptrs, seq, n_blocks, n_work, 2, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
            (_ws_consumer, (smem, bars, ptrs, seq, n_blocks, n_work, 3, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
            (_ws_producer, (smem, bars, ptrs, seq, n_blocks, n_work, 0, ROWS, HEAD_D, BLOCK_N,
                            NUM_BUF, SMEM, S_LAYOUT, O_LAYOUT, P_LAYOUT, CAUSAL, PV_OVERLAP,
                            NUM_WG, PERSISTENT, COMPACT)),
        ], [4, 4, 4, 1], [112, 112, 112, 24])


@functools.lru_cache(maxsize=None)  # the layouts are built once per launch shape, not per call
def _ws_constexprs(head_d: int, block_n: int, causal: bool, num_buf: int = WS_NUM_BUF,
                   pv_overlap: bool = False, warpgroups: int = 2,
                   persistent: bool = False, q_buffers: int = 1,
                   dynamic: bool = False, chained: bool = False,
                   compact: bool = False) -> dict[str, Any]:
    """The warp-specialized kernel's compile-time arguments (4-warp consumer layouts;
    ``warpgroups`` consumers of 64 query rows each, 2, 3 or 4; ``persistent``: one program per
    SM walking the query blocks, ``dynamic``: taking them from a counter, ``chained``: each
    block's last P V beside the next one's first Q K^T; ``q_buffers``: 2 lets it load the
    next block's Q during this one; o leaves through shared memory by TMA where it fits,
    :func:`_ws_o_tma`; ``compact``: the consumers' step in one copy for every key tile,
    :func:`_ws_compact`, where P V waits at once: no ``pv_overlap``)."""
    schedule = (_DYNAMIC if dynamic else _CHAINED if chained else _STATIC if persistent
                else _ONE_PER_BLOCK)
    o_layout = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                         instr_shape=[16, head_d, 16])
    return dict(
        ROWS=WS_ROWS, HEAD_D=head_d, BLOCK_N=block_n, NUM_BUF=num_buf, CAUSAL=causal,
        PV_OVERLAP=pv_overlap and not compact, NUM_WG=warpgroups,
        PERSISTENT=schedule.value, Q_BUFS=q_buffers,
        O_TMA=_ws_o_tma(head_d, warpgroups, block_n, num_buf, q_buffers),
        COMPACT=compact,
        SMEM=gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2),
        S_LAYOUT=gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                           instr_shape=[16, block_n, 16]),
        O_LAYOUT=o_layout,
        P_LAYOUT=gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2),
    )


def _ws_o_tma(head_d: int, warpgroups: int, block_n: int, num_buf: int,
              q_buffers: int) -> bool:
    """Whether o leaves through a shared buffer per consumer and one TMA store per block:
    where the buffers fit beside Q's and the K/V ring (every launch at D = 64; at D = 128
    three K/V buffers of 128 keys and Q take 224 of the 227 KB, and o goes out through the
    block's last K buffer instead: ``_ws_o_in_k``). On the H200 at D = 64,
    S = 1024 causal, the threads' own stores of o held the warps 4% of their time (ncu's
    warp-state samples) and wrote each 32-byte sector half full."""
    return _ws_smem_bytes(head_d, warpgroups, block_n, num_buf, q_buffers, True) <= SMEM_BYTES


def _ws_smem_bytes(head_d: int, warpgroups: int, block_n: int, num_buf: int, q_buffers: int,
                   o_tma: bool) -> int:
    """Shared memory of a launch: Q's buffers, the K/V ring, o's buffers (``o_tma``) and 1 KB
    for the barriers and block numbers."""
    elem = 2  # bytes of a 16-bit element
    q = q_buffers * warpgroups * WS_ROWS * head_d * elem
    kv = 2 * num_buf * block_n * head_d * elem
    o = warpgroups * WS_ROWS * head_d * elem if o_tma else 0
    return q + kv + o + 1024


def _ws_maxnreg(warpgroups: int) -> int:
    """Registers per thread that fit one program per SM: the 64k over the consumer warpgroups
    and the producer's (a warpgroup's worth), 168 for two consumers, 128 for three, 96 for
    four (20 warps; the partitions then take 120 / 112 / 112 / 112 and the producer 24)."""
    return {2: WS_MAXNREG, 3: 128}.get(warpgroups, 96)


def _ws_pv_overlap(head_d: int) -> bool:
    """Whether P V runs on through the warpgroup's own softmax (FlashAttention-3's
    intra-warpgroup overlap): at D = 128, where it measured 1-4% faster on the H200 (S = 4096
    and 16,384, causal or not); at D = 64 it changed nothing beyond the noise."""
    return head_d == 128


def _ws_warpgroups(head_d: int, seq: int = 4096, causal: bool = False) -> int:
    """Consumer warpgroups of the shipped launch (64 query rows each). D = 128: two (a 64 x 128
    float32 accumulator per warpgroup needs the 168 registers). D = 64, causal: two below
    S = 4096, four from 4096, three from 8192. D = 64 without causal: three from S = 2048
    (192-row blocks, as FlashAttention-3 runs it), and below that four, unless three leave
    fewer rows past S in the last block (rows past S cost each warpgroup a turn for
    nothing). Each choice won where it is taken: docs/performance.md, "The Gluon launch's
    shape", gives the runs."""
    if head_d != 64:
        return 2
    if causal:
        return 2 if seq < 4096 else 4 if seq < 8192 else 3
    if seq >= 2048:
        return 3
    # rows of the last block past S, in blocks of three and of four warpgroups
    return 3 if -seq % (3 * WS_ROWS) < -seq % (4 * WS_ROWS) else 4


def _ws_persistent(head_d: int, causal: bool, seq: int) -> bool:
    """Whether the shipped launch is persistent (one program per SM walking query blocks):
    without causal, blocks i, i + SMs, ... at D = 128 (at D = 64 from the counter:
    :func:`_ws_dynamic`), where on the H200 (bf16, of cuDNN, one run) it
    ran 0.85-0.87 against 0.71-0.76 at S = 1024, 1.01 against 0.94 at D = 64, S = 4096, and
    1.08 against 0.98 at 16,384 (no loss at D = 128 from 4096); causal, where the blocks
    come from the counter (:func:`_ws_dynamic`). Causal blocks differ in length, and in a
    fixed share they balanced worse than the GPU's own scheduling of one program per block
    (S = 16,384: 0.95 against 1.05 at D = 128)."""
    return not causal or _ws_dynamic(head_d, causal, seq)


def _ws_dynamic(head_d: int, causal: bool, seq: int) -> bool:
    """Whether the shipped launch is persistent with its blocks taken from a counter, in the
    order one program per block runs them (as FlashAttention-3's tile scheduler): at D = 64
    without causal at every length, and causal at D = 128 below S = 16,384 and at D = 64
    below 8192. Why: the next block's loads (and at D = 64 its Q, :func:`_ws_q_buffers`)
    start during this block's last tiles, where a new program would start cold, and a
    program that finishes early takes the next block. The runs behind each bound:
    docs/performance.md, "The Gluon launch's shape"."""
    if head_d == 64 and not causal:
        return True
    return causal and seq < (16384 if head_d == 128 else 8192)


def _ws_chainable(causal: bool, warpgroups: int, persistent: bool, dynamic: bool) -> bool:
    """Whether a launch can chain its blocks (``_ws_consume_chain``: a block's last P V in
    the same turn as the next block's first Q K^T): persistent blocks i, i + P, ... of two
    warpgroups (whole blocks of 128 rows: no rows past S) without causal."""
    return not causal and warpgroups == 2 and persistent and not dynamic


#: Whether the shipped launch chains its blocks where it can at D = 128: off, as chained
#: launches ran 2-7 points of cuDNN slower at S = 1024-4096 on an H100
#: (reports/h200/bench_attention.md, twenty-fifth round); ``forward(chain=True)`` runs one.
WS_CHAIN = False


def _ws_chained(head_d: int, causal: bool, warpgroups: int, persistent: bool,
                dynamic: bool) -> bool:
    """Whether the shipped launch chains its blocks: with :data:`WS_CHAIN`, where it can at
    D = 128."""
    return WS_CHAIN and head_d == 128 and _ws_chainable(causal, warpgroups, persistent, dynamic)


#: Causal launches at D = 64 below this length run the compact consumer (:func:`_ws_compact`).
WS_COMPACT_BELOW = 2048


def _ws_compact(head_d: int, causal: bool, seq: int) -> bool:
    """Whether the shipped launch compiles its consumers compact: one copy of the step for
    every key tile, where the split consumer has a second copy of the softmax for tile 0
    (no P V before it) and, causal, a third for the diagonal tile (constant masks). Compact,
    tile 0 skips its P V behind a branch and the diagonal's mask is behind another.
    Why: short blocks walk the whole of the consumer's code once per block, and each
    consumer warpgroup has its own copy (warp_specialize's partitions): at D = 64, causal,
    S = 512 (H100, ncu's warp-state samples) 25% of the consumers' samples waited for
    instructions to be fetched (``no_inst``), against cuDNN's 1.5% from a kernel a quarter
    the size (1,264 SASS instructions against 4,664; compact, 2,920; without causal at
    S = 256, four consumers, 5,648 -> 3,976).
    Taken at D = 64: without causal at every length, causal below :data:`WS_COMPACT_BELOW`.
    On an H100 (bf16, B x S = 16k, H x D = 2048, five interleaved runs in one process,
    ``python bench/gluon_attention.py --bench-compact --dims 64,128 --seqs
    256,512,1024,2048``), x cuDNN split -> compact: without causal S = 256 0.932 -> **1.043**,
    512-16,384 +1 to +4%; causal S = 256 0.959 -> 0.980, 512 0.877 -> **1.009**, 1024
    0.995 -> 0.990, 2048 1.028 -> 0.992 (not taken). At D = 128, where compact also gives
    up P V's overlap with the softmax (an async P V cannot leave the branch), level or
    slower (0.922-1.053 -> 0.914-1.012): not taken (reports/h200/bench_attention.md,
    fifty-sixth round)."""
    return head_d == 64 and (not causal or seq < WS_COMPACT_BELOW)


def _ws_default_compact(head_d: int, causal: bool, seq: int, chain: bool,
                        pv_overlap: bool | None) -> bool:
    """Whether a launch that does not name ``compact`` compiles it: the shipped rule
    (:func:`_ws_compact`), unless the launch chains its blocks or asks for P V's overlap,
    which the compact consumer cannot do."""
    return _ws_compact(head_d, causal, seq) and not chain and not pv_overlap


def _ws_q_buffers(head_d: int, causal: bool, seq: int) -> int:
    """Q buffers of the shipped launch: two where the consumers take blocks from the
    counter at D = 64 (causal below S = 8192, in two or four warpgroups; without causal at
    every length), so that the next block's Q loads while this block's last tiles run; one
    elsewhere. Causal on the H200 (bf16, of cuDNN, three runs in one call, four warpgroups:
    ``python bench/gluon_attention.py --bench-ws --dims 64 --seqs 1024,2048,4096 --causal yes
    --candidates 8 --schedules 3,4``) two ran 281 / 367-370 / 414-424 TFLOP/s against one's
    272-274 / 359-361 / 409-415 at S = 1024 / 2048 / 4096. At D = 128 two Q buffers do not
    fit beside three K/V buffers of 128 x 128 (they do beside four of 64, which D = 128
    ran below S = 2560 until tiles of 128 won there: :func:`_ws_block_n`); the other
    launches are not persistent or were not measured faster with two. Three (the load warp
    issuing the next block's Q before this block's key tiles) ran 0.92 of cuDNN at S = 1024
    in two warpgroups against two's 0.94 (three runs, twenty-second attention round): not
    kept."""
    return 2 if head_d == 64 and _ws_dynamic(head_d, causal, seq) else 1


def _ws_default_q_buffers(head_d: int, causal: bool, seq: int, persistent: bool,
                          dynamic: bool, warpgroups: int, block_n: int, num_buf: int) -> int:
    """Q buffers of a launch that names none: the shipped launch's (:func:`_ws_q_buffers`)
    where it runs the shipped schedule (``persistent`` and ``dynamic`` as shipped), but one
    where a second would not fit beside the ring the caller chose (at D = 64, eight K/V
    buffers of 128 keys)."""
    shipped = (persistent == _ws_persistent(head_d, causal, seq)
               and dynamic == _ws_dynamic(head_d, causal, seq))
    n = _ws_q_buffers(head_d, causal, seq) if shipped and persistent else 1
    if n > 1 and _ws_smem_bytes(head_d, warpgroups, block_n, num_buf, n, False) > SMEM_BYTES:
        return 1
    return n


def _ws_block_n(warpgroups: int = 2) -> int:
    """Key tile of the warp-specialized kernel: 128 (64 query rows per warpgroup leave the
    registers for it), 64 with four consumer warpgroups (112-120 registers each: tiles of
    128 spill 6.4-8.7 KB).

    D = 128 ran key tiles of 64 in four K/V buffers with two Q buffers below S = 2560
    (causal) and 1536 (not), while tiles of 128 had no room for o to leave by TMA. Since o
    leaves through the block's last K tile (:func:`_ws_o_in_k`), tiles of 128 won at every
    length: on an H100 (three runs in one call, medians of x cuDNN, ``AB_RUNS=3
    ATTN_ARGS="--dtypes bfloat16,float16 --dims 128 --seqs 1024,1280,2048 --causal no,yes"
    bash bench/gpu_run.sh attention_ab``) 0.99-1.05 at S = 1024-2048 against 0.92-1.01,
    causal 1.00-1.03 against 0.96-0.99 (reports/h200/bench_attention.md, twenty-eighth
    round)."""
    return 64 if warpgroups == 4 else 128


def _ws_num_buf(warpgroups: int) -> int:
    """K/V buffers in the ring: WS_NUM_BUF, four in key tiles of 64 (four consumers): their
    tiles take half the room (four consumers at S = 1024: 0.93 of cuDNN against 0.91 with
    three, one run)."""
    return 4 if _ws_block_n(warpgroups) == 64 else WS_NUM_BUF


#: The smallest |scale| the kernel takes: its scores' scale, folded into log2(e), must stay a
#: normal float (flushed to 0, a hidden key's -inf * 0 would be NaN).
MIN_SCALE = 1e-30


def fits(q: Any, k: Any, v: Any, *, mask: Any = None, return_lse: bool = False,
         scale: float | None = None) -> str | None:
    """None when this kernel covers the call, else what rules it out (one line).

    >>> fits(q, k, v, mask=m)  # doctest: +SKIP
    'no mask (got one)'
    """
    import torch

    if mask is not None:
        return "no mask (got one)"
    if scale is not None and not abs(scale) >= MIN_SCALE:
        return f"a scale of magnitude at least {MIN_SCALE:g} (got {scale:g})"
    if return_lse:
        return "no logsumexp output (return_lse=True)"
    if q.dtype not in (torch.bfloat16, torch.float16) or not (q.dtype == k.dtype == v.dtype):
        return f"bf16 or fp16 q, k, v of one dtype (got {q.dtype}, {k.dtype}, {v.dtype})"
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        return f"q, k, v of one shape [B, H, S, D] (got {tuple(q.shape)}, {tuple(k.shape)})"
    s, d = q.shape[2], q.shape[3]
    if s % WS_BLOCK_M or d not in (64, 128):
        return f"S a multiple of {WS_BLOCK_M} and D of 64 or 128 (got S = {s}, D = {d})"
    if q.numel() == 0:
        return f"a non-empty q (got shape {tuple(q.shape)})"
    if not q.is_cuda:
        return f"a CUDA device (got {q.device})"
    # TMA reads from 16-byte aligned addresses only. forward copies a strided tensor to a
    # fresh (aligned) one first, so only a contiguous tensor's own address counts.
    offsets = [t.data_ptr() % 16 if t.is_contiguous() else 0 for t in (q, k, v)]
    if any(offsets):
        return f"contiguous q, k, v at 16-byte aligned addresses (got offsets {offsets} bytes)"
    major, minor = capability(q.device)
    if (major, minor) != (9, 0):
        return f"an sm_90 GPU (Hopper; got sm_{major}{minor})"
    return None


def pays(q: Any, causal: bool = False) -> bool:
    """Whether the kernel beats the Triton one for q's shape: from S = 256, causal or not, at
    D = 64 and 128 (measured against the Triton kernel in the same calls on an H100 and the
    H200: docs/performance.md, "The Gluon launch's shape").

    >>> pays(torch.empty(1, 16, 4096, 128))  # doctest: +SKIP
    True"""
    return q.shape[-2] >= 256


class _WsLaunch(NamedTuple):
    """One launch of the warp-specialized kernel: its programs, its blocks of query rows
    (per head, and in all) and its compile-time arguments."""

    programs: int
    n_blocks: int
    n_work: int
    dynamic: bool
    maxnreg: int
    constexprs: dict[str, Any]
    #: the compiled kernel of each specialisation launched so far (:func:`_launch_ws`)
    compiled: dict[Any, Any]


@functools.lru_cache(maxsize=1024)
def _ws_launch(b: int, h: int, s: int, d: int, device: Any, causal: bool,
               block_n: int | None, num_buf: int | None, maxnreg: int | None,
               pv_overlap: bool | None, warpgroups: int | None, persistent: bool | None,
               programs: int | None, q_buffers: int | None, dynamic: bool | None,
               chain: bool | None, compact: bool | None = None) -> _WsLaunch:
    """The launch :func:`forward` runs for q of shape ``[b, h, s, d]`` on ``device`` and its
    overrides (None: the shipped choice), planned once per key, with the kernels compiled
    for it (:func:`_launch_ws`): on small calls the host's time is the call's. Together,
    71-73 → 43-44 µs of host time per call on an H100's host (``bench/host_overhead.py``).
    Raises ValueError for overrides that do not go together."""
    wg = warpgroups or _ws_warpgroups(d, s, causal)
    if wg not in (2, 3, 4):
        raise ValueError(f"warpgroups={warpgroups} is not supported; use 2, 3 or 4")
    n_blocks = -(-s // (WS_ROWS * wg))  # blocks of 64 x wg query rows per (batch, head)
    n_work = n_blocks * b * h
    if dynamic and persistent is False:
        raise ValueError("dynamic=True needs persistent programs (one program per block "
                         "takes its own block); leave persistent unset or True")
    if persistent is None:
        persistent = bool(dynamic) or _ws_persistent(d, causal, s)
    if dynamic is None:
        dynamic = persistent and _ws_dynamic(d, causal, s)
    dynamic = bool(dynamic)
    block_n = block_n or _ws_block_n(wg)
    num_buf = num_buf or _ws_num_buf(wg)
    if q_buffers is None:  # the shipped launch's, where it is the shipped schedule and fits
        q_buffers = _ws_default_q_buffers(d, causal, s, persistent, dynamic, wg, block_n,
                                          num_buf)
    if q_buffers not in (1, 2) or (q_buffers == 2 and not persistent):
        raise ValueError(f"q_buffers={q_buffers} is not supported; use 1, or 2 with "
                         "persistent=True (one block per program loads one Q)")
    if chain and not _ws_chainable(causal, wg, persistent, dynamic):
        raise ValueError("chain=True needs persistent blocks of two warpgroups without causal "
                         f"or the counter (got warpgroups={wg}, causal={causal}, "
                         f"persistent={persistent}, dynamic={dynamic}); leave chain unset")
    if chain is None:
        chain = _ws_chained(d, causal, wg, persistent, dynamic)
    if compact and pv_overlap:
        raise ValueError("compact=True waits for each P V at once, so it cannot overlap P V "
                         "with the softmax; leave pv_overlap unset or False")
    if compact and chain:
        raise ValueError("compact=True is a consumer of one block at a time, and chain=True "
                         "chains blocks; leave one of them unset")
    if compact is None:
        compact = _ws_default_compact(d, causal, s, chain, pv_overlap)
    if not persistent:
        programs = n_work
    elif programs is None:
        programs = min(n_work, sm_count(device))
    constexprs = _ws_constexprs(d, block_n, causal, num_buf,
                                _ws_pv_overlap(d) if pv_overlap is None else bool(pv_overlap),
                                wg, persistent, q_buffers, dynamic, bool(chain),
                                bool(compact))
    return _WsLaunch(programs, n_blocks, n_work, dynamic, maxnreg or _ws_maxnreg(wg),
                     constexprs, {})


def _launch_ws(launch: _WsLaunch, args: tuple[Any, ...]) -> None:
    """Launch ``_attn_fwd_ws`` on ``args`` (its nine runtime arguments) as ``launch`` plans,
    on the current device and stream: through Triton's JIT the first time for each dtype,
    then its compiled kernel directly (:func:`~onlinesm.kernels.launching.launch_kernel`).
    Of what the JIT specialises the runtime arguments on, the plan fixes the integers and
    :func:`fits` the pointers' alignment (16 bytes, as TMA needs; o is a fresh allocation,
    the counter one :func:`_counter` keeps): the dtype is left, the key."""
    launch_kernel(_attn_fwd_ws, (launch.programs,), args,
                  dict(launch.constexprs, num_warps=4, maxnreg=launch.maxnreg),
                  launch.compiled, args[0].dtype)


def forward(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
            block_n: int | None = None, num_buf: int | None = None,
            maxnreg: int | None = None, pv_overlap: bool | None = None,
            warpgroups: int | None = None, persistent: bool | None = None,
            programs: int | None = None, q_buffers: int | None = None,
            dynamic: bool | None = None, chain: bool | None = None,
            compact: bool | None = None) -> Any:
    """softmax(q k^T * scale) v for inputs :func:`fits` accepts (it raises ValueError with the
    reason otherwise); causal hides keys after the query (Sq == Sk: both alignments agree).
    ``block_n`` (key tile), ``num_buf`` (K/V buffers), ``maxnreg`` (registers per thread;
    the SM's 64k over 12 warps, 168, runs one program per SM) and ``pv_overlap`` (a
    warpgroup's P V left running through its own softmax: FlashAttention-3's intra-warpgroup
    overlap, on at D = 128) and ``warpgroups`` (consumers of 64 query rows: 2, or 3 with 128
    registers each, the launch at D = 64 from S = 2048, or 4 in key tiles of 64, the launch
    below it unless 3 leave fewer rows past S, and causal below 8192: ``_ws_warpgroups``) and
    ``persistent`` (one program per SM walking the query blocks, instead of one program per
    block; ``programs`` of them instead, for tests; ``q_buffers=2``: the next block's Q loads
    during this one, shipped where causal blocks come from the counter at D = 64:
    ``_ws_q_buffers``; left unset, a launch that names its own
    ``block_n`` / ``num_buf`` takes a second Q buffer only where it fits beside that ring;
    ``dynamic``: persistent programs take the next block from a counter, as
    FlashAttention-3's tile scheduler, instead of every P-th; ``chain``: each block's last
    P V issued beside the next block's first Q K^T, :func:`_ws_chained`, for persistent
    blocks of two warpgroups without causal or the counter; ``compact``: the consumers' step
    in one copy for every key tile, P V waited for at once, :func:`_ws_compact`) override
    the measured launch
    (for the bench's candidates: ``bench/gluon_attention.py --bench-ws``).

    >>> o = forward(q, k, v, causal=True)  # doctest: +SKIP
    """
    why = fits(q, k, v, scale=scale)
    if why is not None:
        raise ValueError(f"the Gluon attention kernel needs {why}")
    b, h, s, d = q.shape
    launch = _ws_launch(b, h, s, d, q.device, bool(causal), block_n, num_buf, maxnreg,
                        pv_overlap, warpgroups, persistent, programs, q_buffers, dynamic, chain,
                        compact)
    return _run(launch, q, k, v, scale)


def forward_fitted(q: Any, k: Any, v: Any, causal: bool, scale: float | None) -> Any:
    """:func:`forward` with the measured launch, for a call :func:`fits` has already
    accepted (``attention`` asks it first, to choose this kernel): it skips that check's
    second pass over q, k and v, a few µs of a short call's host time.

    >>> o = forward_fitted(q, k, v, True, None)  # doctest: +SKIP
    """
    b, h, s, d = q.shape
    launch = _ws_launch(b, h, s, d, q.device, bool(causal), None, None, None, None, None,
                        None, None, None, None, None)
    return _run(launch, q, k, v, scale)


def _run(launch: _WsLaunch, q: Any, k: Any, v: Any, scale: float | None) -> Any:
    """o of the call ``launch`` plans, on q, k, v that :func:`fits` accepts."""
    import torch

    d = q.shape[3]
    q, k, v = (t.contiguous() for t in (q, k, v))
    o = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if scale < 0:  # the kernel takes a positive scale (its row max is of the raw scores):
        q, scale = -q, -scale  # q k^T c == (-q) k^T (-c), and negating a 16-bit q is exact
    _use_scratch_allocator()
    with on_device(q.device):
        # The counter the programs take blocks from (dynamic), zero at launch; else unused.
        counter = _counter(q.device) if launch.dynamic else o
        _launch_ws(launch, (q, k, v, o, counter, q.shape[2], launch.n_blocks, launch.n_work,
                            scale * 1.4426950408889634))  # log2(e)
    return o


#: the counter of each (device, stream) that launches take their blocks from (_counter)
_COUNTERS: dict[tuple[Any, int], Any] = {}


def _counter(device: Any) -> Any:
    """The two int32 (the next block, the programs done) that a launch scheduled by the
    counter takes its blocks from: zeroed once per device and stream, since the kernel's
    last program zeroes them again (``_ws_count_out``). Launches on one stream run in
    turn, so they can share the words; another stream gets its own. A launch captured in
    a CUDA graph gets fresh words, which the graph's memory pool keeps for its replays
    (another graph may replay on another stream at the same time)."""
    import torch

    if torch.cuda.is_current_stream_capturing():
        return torch.zeros(2, dtype=torch.int32, device=device)
    key = (device, _current_stream(device))
    counter = _COUNTERS.get(key)
    if counter is None:
        counter = _COUNTERS[key] = torch.zeros(2, dtype=torch.int32, device=device)
    return counter


def _current_stream(device: Any) -> int:
    """The handle of ``device``'s current CUDA stream, read as Triton's launcher reads it
    (torch's raw-stream getter: no ``torch.cuda.Stream`` object built per call), or through
    ``torch.cuda.current_stream`` where a torch build lacks that getter."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return torch.cuda.current_stream(device).cuda_stream
    return raw(torch.cuda.current_device() if device.index is None else device.index)


def _use_scratch_allocator() -> None:
    """TMA descriptors made on the device live in global scratch that Triton asks an
    allocator for: a buffer per stream (``_StreamScratch``), unless the caller set one (kept:
    it is theirs). Checked on every call: Triton keeps it in a context variable, so one set in
    another thread (onlinesm check runs kernels in a worker thread) is not seen here."""
    import triton

    if _allocator is not None and not isinstance(_allocator.get(), NullAllocator):
        return
    triton.set_allocator(_SCRATCH)


#: the largest scratch (bytes) that _StreamScratch keeps per stream; larger goes to torch
SCRATCH_KEPT = 1 << 20


class _StreamScratch:
    """Triton's allocator of global scratch (the kernel's device-made TMA descriptors, 128
    bytes each per program: kilobytes a launch): one buffer per device and stream, handed
    to every launch on that stream. Launches on one stream run in turn, as the blocks torch's
    caching allocator hands back would (a block freed on a stream is reused on it at
    once), but without a tensor made per launch. A launch captured in a CUDA graph, or one
    that asks for more than ``SCRATCH_KEPT``, gets a fresh tensor from torch."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[int, int], Any] = {}

    def __call__(self, size: int, alignment: int, stream: int) -> Any:
        import torch

        if size > SCRATCH_KEPT or torch.cuda.is_current_stream_capturing():
            return torch.empty(size, dtype=torch.int8, device="cuda")
        key = (torch.cuda.current_device(), stream)  # stream 0 is each device's own
        buffer = self.buffers.get(key)
        if buffer is None or buffer.numel() < size:
            # torch's blocks start on 512-byte boundaries: any alignment Triton asks for
            buffer = self.buffers[key] = torch.empty(size, dtype=torch.int8, device="cuda")
        return buffer


_SCRATCH = _StreamScratch()
