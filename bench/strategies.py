"""How fast the strategies generate: 200 examples of 64 rows x 4096 (issue target: < 10 s).

    python bench/strategies.py [--out reports]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports")
    parser.add_argument("--examples", type=int, default=200)
    args = parser.parse_args()

    from onlinesm.strategies import attention_inputs, softmax_cases

    rows = []
    for dtype in ("float32", "bfloat16", "float16"):
        seen = {"n": 0, "elements": 0, "families": set()}

        @settings(max_examples=args.examples, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(softmax_cases(dtype=dtype, min_len=4096, max_len=4096, min_rows=64, max_rows=64))
        def draw(case) -> None:
            seen["n"] += 1
            seen["elements"] += case.x.size
            seen["families"].update(case.families)

        t = time.perf_counter()
        draw()
        rows.append((f"softmax_cases 64 x 4096, {dtype}", seen["n"], time.perf_counter() - t,
                     seen["elements"], len(seen["families"])))

    seen = {"n": 0, "families": set()}

    @settings(max_examples=args.examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(attention_inputs(dtype="bfloat16", max_seq_q=256, max_seq_k=1024, head_dims=(64, 128)))
    def draw_attention(case) -> None:
        seen["n"] += 1
        seen["families"].add(case.family)

    t = time.perf_counter()
    draw_attention()
    rows.append(("attention_inputs, Sq <= 256, Sk <= 1024, bf16", seen["n"], time.perf_counter() - t,
                 0, len(seen["families"])))

    lines = ["# Strategy generation speed", "",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"- machine: {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}",
             f"- command: `python bench/strategies.py --examples {args.examples}`", "",
             "| strategy | examples | seconds | elements | families seen | target |", "|---|---|---|---|---|---|"]
    for name, n, sec, elems, fams in rows:
        target = "< 10 s" if name.startswith("softmax") else ""
        lines.append(f"| {name} | {n} | {sec:.2f} | {elems:,} | {fams} | {target} |")
    text = "\n".join(lines)
    print(text)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "strategies.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
