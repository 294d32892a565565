"""Registers, spills and shared memory of the softmax kernels' launches, compiled for sm_90 offline.

What: for each dtype and row length, takes the launch the launcher would make on a GPU (its
plan, knobs and, for split rows, ``_split_options``: constexprs, warps, register cap),
compiles the split or on-chip kernel for sm_90a with Triton (no device needed) and runs
``ptxas -v`` on the PTX; ``ptx_sha`` (with ``--json``) hashes its instructions without the
debug lines, so a refactor that must not change the code can be checked on any machine.

Why: split rows are latency-bound, so a spill under the register cap is expensive: bf16
131,072 pipelined with 16 merge lanes spilled 36 bytes (Nsight Compute: 1.6 M local-memory
requests) and ran at 70% of copy bandwidth, 90% without the spill. On chip, a row's tail
thinner than a 16-byte vector per thread is laid out again through shared memory (bf16
17,000: 8 KB, 66% of copy against 90%). This finds both on any machine
(tests/test_kernel_softmax.py runs it on the shipped plan).

    python bench/split_ptxas.py                                   # the shipped long rows
    python bench/split_ptxas.py --dtypes bfloat16 --ns 131072 --tuning '{"split_min_lanes": 1}'
    python bench/split_ptxas.py --sass --dtypes bfloat16 --ns 21000,65536  # + SASS instructions

Needs torch and triton (any machine: CPU builds do); not under TRITON_INTERPRET.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ptxas_sm90  # noqa: E402

__all__ = ["compile_launch", "main"]

#: row lengths that cover the shipped split plan: aligned and windowed (odd), few and many chunks
NS = (65536, 100001, 262144, 1048576)

_POINTERS = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}
_ITEMSIZES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _launch(dtype: str, n: int, tuning: dict[str, Any] | None, path: str,
            sms: int) -> tuple[Any, Any, dict[str, Any], int, int]:
    """(the softmax module, plan, knobs, ALIGN, SHIFT) of the launch for contiguous rows of
    ``n`` in ``dtype`` on a GPU of ``sms`` SMs (an H200's 132)."""
    import torch

    sm = importlib.import_module("onlinesm.kernels.softmax")
    # two contiguous rows on a 128-byte boundary, as the caching allocator hands them out on
    # the GPU (the row stride decides the split rows' windows: split_window_bytes), with the
    # slack of its 512-byte blocks past them (streamed windows read whole vectors:
    # _window_fits; split ones stop at x_reach, a multiple of 16 there)
    size = _ITEMSIZES[dtype]
    buf = torch.empty(2 * n + (128 + 512) // size, dtype=getattr(torch, dtype))
    skip = -buf.data_ptr() % 128 // size
    x = buf[skip:skip + 2 * n].view(2, n)
    # the GPU this plans for (also where this process runs kernels under the interpreter)
    sm_count, sm._sm_count = sm._sm_count, lambda device: sms
    interpreted, sm.INTERPRETED = sm.INTERPRETED, False
    try:
        return (sm, *sm._launch_plan(x, x, path, None, None, tuning))
    finally:
        sm._sm_count, sm.INTERPRETED = sm_count, interpreted


def compile_launch(dtype: str, n: int, tuning: dict[str, Any] | None = None,
                   nan_if_empty: bool = False, sms: int = 132,
                   path: str = "auto", sass: bool = False,
                   reach: bool = False) -> dict[str, Any]:
    """The launch for rows of ``n`` in ``dtype`` (contiguous) on a GPU of ``sms`` SMs,
    split or on chip as planned, compiled for sm_90a: ``{"path", "options", "registers",
    "spill_bytes", "shared"}`` (spill_bytes: ptxas's spill stores; options: the split
    kernel's constexprs, warps and register cap, or the on-chip block, chunks and tail).
    ``reach``: a split launch's loads bounded by x's memory, as where x ends within a
    window of the last row's end (REACH).

    >>> r = compile_launch("bfloat16", 131072)  # doctest: +SKIP
    >>> r["path"], r["spill_bytes"], r["options"]["STAGES"]  # doctest: +SKIP
    ('split', 0, 3)
    """
    sm, p, t, align, shift = _launch(dtype, n, tuning, path, sms)
    pointers = {"x_ptr": _POINTERS[dtype], "y_ptr": _POINTERS[dtype]}
    if p.path == "split":
        options = sm._split_options(p, t, align, shift, nan_if_empty, _ITEMSIZES[dtype])
        options["REACH"] = reach and shift > 1
        packed = options["PACKED"]
        pointers.update(part_ptr="*i64" if packed else "*fp32",
                        count_ptr="*i64" if packed else "*i32")
        return dict(path="split", **_compile(sm._softmax_split_specialised, n, options,
                                             pointers, ["chunk_cols", "x_reach"], sass))
    if p.path != "on_chip":
        raise ValueError(f"rows of {n} in {dtype} are planned as {p.path!r}, which runs no "
                         "register-bound kernel; ask for path='split' or 'on_chip'")
    options = sm._on_chip_options(p, t, align, shift, nan_if_empty)
    return dict(path="on_chip", **_compile(sm._softmax_on_chip_specialised, n, options,
                                           pointers, [], sass))


def _compile(fn: Any, n: int, options: dict[str, Any], pointers: dict[str, str],
             aligned_ints: list[str], sass: bool = False) -> dict[str, Any]:
    """``fn`` compiled for sm_90a as the launcher would launch it on rows of ``n``:
    ``{"options", "registers", "spill_bytes", "shared", "ptx_sha", "sass_instructions",
    "widened_pairs", "cvt_bf16"}`` (spill_bytes: ptxas's spill stores; widened_pairs: pairs of
    bf16 widened on their bits by ``_widen``; cvt_bf16: bf16 converted one by one instead)."""
    import triton
    from triton.backends.compiler import GPUTarget

    names = list(fn.arg_names)
    constexprs = {k: v for k, v in options.items() if k in names}
    signature = {a: pointers.get(a, "constexpr" if a in constexprs else "i32") for a in names}
    # what the JIT sees at launch: 16-byte aligned pointers, and the integers that are
    # multiples of 16 (a split program's columns; the row length and the contiguous strides)
    aligned = list(pointers) + aligned_ints + (
        ["n_cols", "stride_xm", "stride_ym"] if n % 16 == 0 else [])
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in aligned}
    compiled = triton.compile(
        triton.compiler.ASTSource(fn, signature, constexprs=constexprs, attrs=attrs),
        target=GPUTarget("cuda", 90, 128),
        options={k: v for k, v in options.items() if k in ("num_warps", "maxnreg")})
    r = ptxas_sm90(compiled, sass)
    ptx = compiled.asm["ptx"]
    return dict(options=options, registers=r["registers"], spill_bytes=r["spill_bytes"],
                shared=r["shared"], ptx_sha=_code_hash(ptx),
                sass_instructions=r["sass_instructions"],
                widened_pairs=len(re.findall(r"and\.b32 \S+, \S+, 0xffff0000;", ptx)),
                cvt_bf16=len(re.findall(r"cvt\.f32\.bf16", ptx)))


def _code_hash(ptx: str) -> str:
    """A short hash of the PTX's instructions, without its debug lines (``.loc``, ``.file``,
    the ``$L__tmp`` labels only they use, the ``.debug_*`` sections) and comments: the same for
    a kernel refactored into helpers that compiles to the same code, whatever the source lines
    moved."""
    body = ptx.split(".section\t.debug", 1)[0].split(".section .debug", 1)[0]
    keep = [line.split("//", 1)[0].strip() for line in body.splitlines()]
    keep = [line for line in keep if line and not line.startswith((".loc", ".file", "$L__tmp"))]
    return hashlib.sha256("\n".join(keep).encode()).hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float16,float32")
    ap.add_argument("--ns", default=",".join(str(n) for n in NS))
    ap.add_argument("--tuning", default="", help="knobs over the plan's, as JSON")
    ap.add_argument("--path", default="auto",
                    help="'split' or 'on_chip' forces that kernel; 'auto': the plan's")
    ap.add_argument("--json", action="store_true", help="one JSON object per launch instead")
    ap.add_argument("--sass", action="store_true",
                    help="also count SASS instructions (nvdisasm; about a second per launch)")
    ap.add_argument("--reach", action="store_true",
                    help="split windows' loads bounded by x's memory (REACH), as where x ends "
                    "within a window of the last row's end")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("bench/split_ptxas.py compiles for a GPU: run it without TRITON_INTERPRET")
    from onlinesm.kernels.softmax_plan import SplitExchange

    tuning = json.loads(args.tuning) if args.tuning else None
    if not args.json:
        print("| dtype | N | launch | warps | cap | exchange | registers | spill bytes | shared "
              "| SASS |")
        print("|---|---|---|---|---|---|---|---|---|---|")
    for dtype in args.dtypes.split(","):
        for n in (int(v) for v in args.ns.split(",")):
            r = compile_launch(dtype, n, tuning, path=args.path, sass=args.sass,
                               reach=args.reach)
            o = r["options"]
            if args.json:
                print(json.dumps(dict(dtype=dtype, n=n, **r)), flush=True)
                continue
            if r["path"] == "split":
                launch = f"{o['SPLIT']} x {o['CHUNK']}"
                exchange = str(SplitExchange(o["PACKED"], o["STAGES"], o["POLL_IN_ASM"],
                                             o["POLL_LOADS"], o["LANES"], o["AHEAD"]))
            else:
                launch = (f"on chip {o['CHUNKS']} x {o['BLOCK_N']}"
                          + (f" + {o['TAIL']}" if o["TAIL"] else ""))
                exchange = f"st{o['STAGES']}"
            exchange += f" win{o['SHIFT']}" if o["SHIFT"] > 1 else ""
            exchange += " reach" if o.get("REACH") else ""
            print(f"| {dtype} | {n:,} | {launch} | {o['num_warps']} | "
                  f"{o.get('maxnreg', '-')} | {exchange} | {r['registers']} | {r['spill_bytes']} "
                  f"| {r['shared']:,} | {r['sass_instructions'] or '-'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
