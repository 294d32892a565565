"""Shared helpers for the benchmarks: timing, the copy ceiling, tables, ptxas. Not a test.

Timing is ``triton.testing.do_bench``'s median (it flushes L2 between repetitions), so every
kernel and its peers are measured the same way, in the same process, on the same tensors.

    >>> ms = time_ms(lambda: y.copy_(x))
    >>> print(markdown_table(["N", "GB/s"], [[1024, 3900.0]]))
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import tempfile
from typing import Any, Callable, Sequence

__all__ = ["time_ms", "copy_gbps", "gbps", "markdown_table", "write_outputs", "ptxas_sm90"]


def time_ms(fn: Callable[[], Any], *, warmup: int = 25, rep: int = 100) -> float:
    """Median time of ``fn()`` in milliseconds (triton.testing.do_bench)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def gbps(n_bytes: float, ms: float) -> float:
    """Bandwidth in GB/s (1e9 bytes per second) for ``n_bytes`` moved in ``ms`` milliseconds."""
    return n_bytes / (ms * 1e-3) / 1e9


def copy_gbps(x: Any) -> tuple[float, float]:
    """The device-to-device copy ceiling on ``x``'s size: (ms, GB/s counting read + write)."""
    import torch

    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x))
    return ms, gbps(2 * x.numel() * x.element_size(), ms)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats with one decimal unless already formatted."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.2f}" if abs(v) < 10 else f"{v:.0f}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_outputs(stem: str, data: Any, markdown: str) -> None:
    """Write ``stem.json`` and ``stem.md`` into $OUT when that variable is set."""
    out = os.environ.get("OUT")
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{stem}.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write(markdown + "\n")


def ptxas_sm90(compiled: Any, sass: bool = False, wgmma_blocks: bool = True) -> dict[str, Any]:
    """What ``ptxas -v`` says of a kernel compiled for sm_90 (``triton.compile`` with
    ``GPUTarget("cuda", 90, 128)``, no GPU needed): ``{"registers", "spill_bytes", "shared",
    "sass_instructions", "softmax_blocks", "report"}`` (spill_bytes: spill stores;
    sass_instructions and softmax_blocks: with ``sass``, see _sass_instructions and
    sass_softmax_blocks (``wgmma_blocks``, its ``wgmma``), else None (it costs a second per
    kernel), and None where nvdisasm is not beside ptxas; report: ptxas's whole output,
    warnings included)."""
    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = get_ptxas(90).path
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "kernel.ptx"), os.path.join(tmp, "kernel.cubin")
        with open(ptx, "w") as f:
            f.write(compiled.asm["ptx"])
        out = subprocess.run([ptxas, "-arch=sm_90a", "-v", ptx, "-o", cubin],
                             capture_output=True, text=True)
        report = out.stdout + out.stderr
        if out.returncode != 0:
            raise RuntimeError(f"ptxas failed: {report.strip()[-300:]}")
        text = (_disassemble(os.path.join(os.path.dirname(ptxas), "nvdisasm"), cubin)
                if sass else None)
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores", report)
    return dict(registers=int(registers.group(1)) if registers else None,
                spill_bytes=int(spills.group(1)) if spills else 0,
                shared=int(getattr(compiled.metadata, "shared", 0)),
                sass_instructions=_sass_instructions(text) if text is not None else None,
                softmax_blocks=(sass_softmax_blocks(text, wgmma=wgmma_blocks)
                                if text is not None else None),
                report=report)


def _disassemble(nvdisasm: str, cubin: str) -> str | None:
    """nvdisasm's text of ``cubin``; None where nvdisasm is not beside ptxas or fails."""
    if not os.path.exists(nvdisasm):
        return None
    out = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else None


def _sass_instructions(text: str) -> int:
    """The SASS instructions in nvdisasm's ``text`` (its lines with an address), a rough
    measure of a latency-bound kernel's work per row."""
    return len(re.findall(r"/\*[0-9a-f]{4,}\*/", text))  # addresses: 4 hex digits or more


def sass_softmax_blocks(text: str, min_exp2: int = 16,
                        wgmma: bool = True) -> list[dict[str, Any]]:
    """The basic blocks of nvdisasm's ``text`` that issue wgmma (``HGMMA``) and at least
    ``min_exp2`` exp2 (``MUFU``): an attention kernel's turns, each one key tile's matmuls
    and softmax; per block ``{"label", "instructions", "ops"}`` (ops: opcode, without its
    modifiers, -> count), each instruction issued once per thread and key tile. At D = 64
    these counts beside the tile's tensor cycles are what bounds the softmax. ``wgmma``
    False: every block of at least ``min_exp2`` exp2, for kernels whose turn branches
    between its matmuls and its softmax (the Gluon kernel's compact consumer).

    >>> text = ".L_x_1:\\n /*0010*/ HGMMA.64x64x16.F32 R0, gdesc[UR4], R0 ;\\n" + (
    ...     " /*0020*/ MUFU.EX2 R1, R1 ;\\n" * 16) + " /*0030*/ @P0 FFMA R2, R2, R3, R4 ;\\n"
    >>> sass_softmax_blocks(text)
    [{'label': '.L_x_1', 'instructions': 18, 'ops': {'MUFU': 16, 'HGMMA': 1, 'FFMA': 1}}]
    >>> apart = text.replace("HGMMA.64x64x16.F32", "IADD")  # the matmuls in another block
    >>> len(sass_softmax_blocks(apart)), len(sass_softmax_blocks(apart, wgmma=False))
    (0, 1)
    """
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        label = re.match(r"^(\.L_x_\d+):", line)
        if label:
            blocks.append((label.group(1), []))
            continue
        op = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if op and blocks:
            blocks[-1][1].append(op.group(1))
    return [dict(label=label, instructions=len(ops),
                 ops=dict(collections.Counter(ops).most_common()))
            for label, ops in blocks
            if ("HGMMA" in ops or not wgmma) and ops.count("MUFU") >= min_exp2]
