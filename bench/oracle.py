"""The oracle's fast path against mpmath: throughput ratio and accuracy audit (issue target).

Target: the float64 fast path at least 100x the throughput of pure mpmath on 4096-long rows,
and within 2**-40 of mpmath (relative for outputs above float32's smallest subnormal; absolute,
relative to the row's largest output, below it; attention: relative to sum_j p_j |v_j|).

    python bench/oracle.py [--rows 24] [--out reports]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=24, help="audit rows per dtype (each 4096 long)")
    parser.add_argument("--out", default="reports")
    args = parser.parse_args()

    from onlinesm import oracle
    from onlinesm.strategies import ATTENTION_FAMILIES, DEFAULT_FAMILIES, generate_attention, generate_row

    n = 4096
    rng = np.random.default_rng(0)
    # throughput: the fast path on a batch, mpmath on two rows (it is ~1e5 times slower)
    batch = rng.standard_normal((256, n)).astype(np.float32)
    t = time.perf_counter()
    reps = 0
    while time.perf_counter() - t < 1.0:
        oracle.softmax(batch)
        reps += 1
    fast_rate = reps * batch.size / (time.perf_counter() - t)
    t = time.perf_counter()
    oracle.softmax(batch[:2], exact=True)
    exact_rate = 2 * n / (time.perf_counter() - t)

    # audit: every default family in each dtype, rows of 4096
    audit = {}
    for dtype in ("float32", "bfloat16", "float16"):
        fams = [DEFAULT_FAMILIES[i % len(DEFAULT_FAMILIES)] for i in range(args.rows)]
        rows = np.stack([generate_row(f, n, dtype, rng) for f in fams])
        audit[dtype] = oracle.audit_softmax(rows)
    att = 0.0
    for fam in ATTENTION_FAMILIES:
        if fam == "gqa":
            continue
        sq, sk = (1, 64) if fam == "decode" else (4, 1 if fam == "one_key" else 96)
        case = generate_attention(fam, "bfloat16", rng, batch=2, heads=1, seq_q=sq, seq_k=sk, head_dim=32)
        att = max(att, oracle.audit_attention(case.q, case.k, case.v, mask=case.mask,
                                              causal=case.causal, scale=case.scale))
    audit["attention (bf16, every family)"] = att

    ratio = fast_rate / exact_rate
    ok = ratio >= 100 and max(audit.values()) <= oracle.AUDIT_TOLERANCE
    lines = [
        "# The oracle's fast path vs mpmath",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}, numpy {np.__version__}",
        f"- command: `python bench/oracle.py --rows {args.rows}`",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| fast path (float64), elements/s, rows of 4096 | {fast_rate:.3g} | |",
        f"| mpmath (correctly rounded, 40+ digits), elements/s | {exact_rate:.3g} | |",
        f"| throughput ratio | {ratio:.3g}x | >= 100x |",
    ]
    for k, v in audit.items():
        lines.append(f"| audit: worst error, {k} | {v:.3g} | <= 2^-40 = {oracle.AUDIT_TOLERANCE:.3g} |")
    lines += ["", f"Verdict: {'both targets met' if ok else 'TARGET MISSED'}."]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "oracle.md").write_text(text + "\n")
    (out / "oracle.json").write_text(json.dumps({"fast_rate": fast_rate, "exact_rate": exact_rate,
                                                 "ratio": ratio, "audit": audit, "ok": ok}, indent=1))


if __name__ == "__main__":
    main()
