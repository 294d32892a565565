"""The split softmax with its parts read (and written) by TMA: an experiment that lost.

A 16-bit row of N % 8 == 0 seen as [rows, N / 8, 8] (16-byte lines): a part of CHUNK columns
is one TMA box [1, CHUNK / 8, 8], fetched whole whatever 32-byte sector the row starts on and
clipped at the row's end (zero fill, masked to -inf here), through a host-side
TensorDescriptor. The idea was to take the sectors a warp's loads straddle on rows off a
sector (bf16 22,520: 89-90% of copy) out of the shipped split kernel's way; the exchange and
the merge are the shipped kernel's (_publish_packed, _wait_packed).

On the H200 (triton 3.6, twenty-eighth softmax round) every variant lost to the shipped launch by
18-23 points of copy at 21,000-65,536 (TMA loads 67-72%, TMA stores too 36-40%, against
90-92%): reports/h200/bench_softmax.md. Kept to reproduce that:

    python bench/softmax_tma.py --ns 22520,22008,21000,33000,65536   # on the GPU
    python bench/softmax_tma.py --offline [--json]                   # compile for sm_90a only
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onlinesm.kernels.softmax import NEG_INF, _publish_packed, _wait_packed  # noqa: E402
from onlinesm.kernels.softmax_plan import _register_cap  # noqa: E402

__all__ = ["tma_softmax", "VARIANTS", "main"]


@triton.jit
def _part(x_desc, row, start, cols, ok, CHUNK: tl.constexpr, LINE: tl.constexpr):
    """This program's part of ``row``: exps e (against the part's max), m_c, d_c."""
    xt = x_desc.load([row, start // LINE, 0])  # [1, CHUNK // LINE, LINE] by TMA
    x = tl.reshape(xt, [CHUNK]).to(tl.float32)
    x = tl.where(ok, x, NEG_INF)
    m_c = tl.max(x, axis=0)
    m_ref = tl.where(m_c == NEG_INF, 0.0, m_c)
    e = tl.exp2((x - m_ref) * 1.4426950408889634)
    return e, m_c, tl.sum(e, axis=0)


@triton.jit
def _finish(y_desc, y_ptr, row, n_cols, start, cols, ok, e, m_c, ms, ds, seen, lane_ok,
            SPLIT: tl.constexpr, CHUNK: tl.constexpr, LINE: tl.constexpr,
            TMA_STORE: tl.constexpr):
    ms = tl.where(lane_ok, ms, NEG_INF)
    ds = tl.where(lane_ok, ds, 0.0)
    m = tl.max(ms, axis=0)
    m_ref = tl.where(m == NEG_INF, 0.0, m)
    d = tl.sum(ds * tl.exp2((ms - m_ref) * 1.4426950408889634), axis=0)
    d = tl.where(seen < SPLIT, float("nan"), d)
    scale = tl.exp2((m_c - m_ref) * 1.4426950408889634) / d
    out = (e * scale).to(y_ptr.dtype.element_ty)
    if TMA_STORE:
        y_desc.store([row, start // LINE, 0], tl.reshape(out, [1, CHUNK // LINE, LINE]))
    else:
        n8 = n_cols // LINE * LINE  # rows are whole 16-byte lines: vector stores
        tl.store(y_ptr + row.to(tl.int64) * n8 + tl.multiple_of(start, LINE) + cols, out,
                 mask=ok)


@triton.jit
def tma_split_kernel(x_desc, y_desc, y_ptr, part_ptr, n_rows, n_cols, chunk_cols,
                     CHUNK: tl.constexpr, LINE: tl.constexpr, SPLIT: tl.constexpr,
                     LANES: tl.constexpr, MAX_SPIN: tl.constexpr, STAGES: tl.constexpr,
                     TMA_STORE: tl.constexpr, AHEAD: tl.constexpr):
    """The shipped split kernel's loop (SPLIT programs a row, a persistent grid, (m_c, d_c)
    exchanged as one word; AHEAD: the next row's part published before this row's wait) with
    each part read as one TMA box (and with TMA_STORE written as one)."""
    pid = tl.program_id(0)
    chunk = pid % SPLIT
    group = pid // SPLIT
    n_groups = tl.num_programs(0) // SPLIT
    chunk_cols = chunk_cols // LINE * LINE
    n_cols = n_cols // LINE * LINE
    start = chunk * chunk_cols
    cols = tl.arange(0, CHUNK)
    ok = (cols < chunk_cols) & (start + cols < n_cols)
    lanes = tl.arange(0, LANES)
    lane_ok = lanes < SPLIT
    if AHEAD:
        e, m_c, d_c = _part(x_desc, group, start, cols, ok & (group < n_rows), CHUNK, LINE)
        _publish_packed(part_ptr, group.to(tl.int64), chunk, m_c, d_c, SPLIT, group < n_rows)
        for row in tl.range(group, n_rows, n_groups, num_stages=STAGES):
            nxt = row + n_groups
            e_n, m_n, d_n = _part(x_desc, nxt, start, cols, ok & (nxt < n_rows), CHUNK, LINE)
            _publish_packed(part_ptr, nxt.to(tl.int64), chunk, m_n, d_n, SPLIT, nxt < n_rows)
            ms, ds, seen = _wait_packed(part_ptr, row.to(tl.int64), lanes, lane_ok, SPLIT,
                                        MAX_SPIN, True, True)
            _finish(y_desc, y_ptr, row, n_cols, start, cols, ok, e, m_c, ms, ds, seen, lane_ok,
                    SPLIT, CHUNK, LINE, TMA_STORE)
            e, m_c = e_n, m_n
    else:
        for row in tl.range(group, n_rows, n_groups, num_stages=STAGES):
            e, m_c, d_c = _part(x_desc, row, start, cols, ok, CHUNK, LINE)
            _publish_packed(part_ptr, row.to(tl.int64), chunk, m_c, d_c, SPLIT)
            ms, ds, seen = _wait_packed(part_ptr, row.to(tl.int64), lanes, lane_ok, SPLIT,
                                        MAX_SPIN, True, True)
            _finish(y_desc, y_ptr, row, n_cols, start, cols, ok, e, m_c, ms, ds, seen, lane_ok,
                    SPLIT, CHUNK, LINE, TMA_STORE)


def options(n_cols: int, chunk: int, stages: int, tma_store: bool, ahead: bool, warps: int,
            per_sm: int) -> dict:
    """The kernel's constexprs, warps and register cap (as the shipped plan caps them)."""
    split = -(-n_cols // chunk)
    return dict(CHUNK=chunk, LINE=8, SPLIT=split, LANES=max(32, triton.next_power_of_2(split)),
                MAX_SPIN=1 << 24, STAGES=stages, TMA_STORE=tma_store, AHEAD=ahead,
                num_warps=warps, maxnreg=_register_cap(per_sm, warps))


def tma_softmax(x: torch.Tensor, chunk: int = 2048, stages: int = 3, tma_store: bool = False,
                ahead: bool = False, warps: int = 2, per_sm: int = 10) -> torch.Tensor:
    """softmax over the last dim of contiguous 16-bit rows (N % 8 == 0) through TMA boxes of
    ``chunk`` columns, ``per_sm`` programs of ``warps`` warps per SM."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    rows, n = x.shape
    assert n % 8 == 0 and x.is_contiguous()
    y = torch.empty_like(x)
    o = options(n, chunk, stages, tma_store, ahead, warps, per_sm)
    box = [1, chunk // 8, 8]
    xd = TensorDescriptor(x, [rows, n // 8, 8], [n, 8, 1], box)
    yd = TensorDescriptor(y, [rows, n // 8, 8], [n, 8, 1], box)
    split = o["SPLIT"]
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    groups = min(rows, max(1, sms * per_sm // split))
    part = torch.full((rows * split,), -1, dtype=torch.int64, device=x.device)
    tma_split_kernel[(groups * split,)](xd, yd, y, part, rows, n, chunk, **o)
    return y


VARIANTS = {
    "tma st3": dict(stages=3),
    "tma st2": dict(stages=2),
    "tma st3 store": dict(stages=3, tma_store=True),
    "tma ahead st3": dict(stages=3, ahead=True),
    "tma ahead st2 store": dict(stages=2, ahead=True, tma_store=True),
    "tma ahead st3 store": dict(stages=3, ahead=True, tma_store=True),
    "tma st3 x8": dict(stages=3, per_sm=8),
    "tma ahead st3 c1024 w1": dict(stages=3, ahead=True, chunk=1024, warps=1, per_sm=16),
}


def offline(as_json: bool = False) -> None:
    """Each variant compiled for sm_90a (no GPU) on bf16 rows of 22,520: its registers,
    spills, shared memory and TMA copies in the PTX (loads global -> shared, stores back)."""
    from triton.backends.compiler import GPUTarget

    from _common import ptxas_sm90

    names = list(tma_split_kernel.arg_names)
    attrs = {(names.index(a),): [["tt.divisibility", 16]]
             for a in ("y_ptr", "part_ptr", "chunk_cols")}  # as the launch sees them
    for name, kw in VARIANTS.items():
        o = options(22520, kw.get("chunk", 2048), kw.get("stages", 3), kw.get("tma_store", False),
                    kw.get("ahead", False), kw.get("warps", 2), kw.get("per_sm", 10))
        warps, cap = o.pop("num_warps"), o.pop("maxnreg")
        box = f"[1,{o['CHUNK'] // 8},8]"
        sig = {"x_desc": f"tensordesc<bf16{box}>", "y_desc": f"tensordesc<bf16{box}>",
               "y_ptr": "*bf16", "part_ptr": "*i64", "n_rows": "i32", "n_cols": "i32",
               "chunk_cols": "i32", **{k: "constexpr" for k in o}}
        k = triton.compile(triton.compiler.ASTSource(tma_split_kernel, sig, constexprs=o,
                                                     attrs=attrs),
                           target=GPUTarget("cuda", 90, 128),
                           options=dict(num_warps=warps, maxnreg=cap))
        r = ptxas_sm90(k)
        ptx = k.asm["ptx"]
        row = dict(variant=name, registers=r["registers"], spill_bytes=r["spill_bytes"],
                   shared=r["shared"],
                   tma_loads=len(re.findall(r"cp\.async\.bulk\.tensor\.3d\.shared", ptx)),
                   tma_stores=len(re.findall(r"cp\.async\.bulk\.tensor\.3d\.global", ptx)))
        print(json.dumps(row) if as_json else "  ".join(f"{k} {v}" for k, v in row.items()),
              flush=True)


def main() -> None:
    """Time each variant against the shipped launch and copy (% of copy), or compile them."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="22520,22008,21000,33000")
    ap.add_argument("--gb", type=float, default=0.5)
    ap.add_argument("--offline", action="store_true", help="compile for sm_90a only")
    ap.add_argument("--json", action="store_true", help="with --offline: one JSON per variant")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    if args.offline:
        offline(args.json)
        return
    from _common import copy_gbps, gbps, time_ms
    from softmax import max_errors, plausible

    from onlinesm import kernels
    from onlinesm.kernels.softmax import softmax

    kernels.use_interpreter(False)
    triton.set_allocator(lambda size, alignment, stream: torch.empty(  # as timed (unneeded
        size, device="cuda", dtype=torch.int8))  # by host descriptors, harmless)
    out = os.environ.get("OUT", "/tmp/out")
    os.makedirs(out, exist_ok=True)
    results = []
    for n in (int(v) for v in args.ns.split(",")):
        m = int(args.gb * 1e9) // (n * 2)
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 4
        nbytes = 2 * m * n * 2
        _, cp = copy_gbps(x)
        row = {"N": n, "copy": cp}
        xs = x[:64]
        cands = [("ours", softmax, {})]
        cands += [(k, tma_softmax, kw) for k, kw in VARIANTS.items()
                  if not args.only or any(w in k for w in args.only.split(","))]
        for name, fn, kw in cands:
            try:
                y = fn(xs, **kw) if kw else fn(xs)
                err, _ = max_errors(y, xs)
                if not plausible(err, 2):
                    print(f"# N={n} {name}: WRONG {err:.3g}", flush=True)
                    continue
                ms = time_ms((lambda: fn(x, **kw)) if kw else (lambda: fn(x)))
                row[name] = 100 * gbps(nbytes, ms) / cp
            except Exception as e:  # noqa: BLE001
                print(f"# N={n} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
        results.append(row)
        print(f"N={n:6d} copy {cp:5.0f} GB/s  " + "  ".join(
            f"{k} {v:.1f}" for k, v in row.items() if k not in ("N", "copy")), flush=True)
        del x
        torch.cuda.empty_cache()
    with open(os.path.join(out, "tma_split.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
