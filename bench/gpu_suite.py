"""Run onlinesm's full property suites on its own Triton kernels, compiled on a GPU.

This is the "the suite passes on the real kernel" run of the kernel issues: softmax for
float32, bfloat16 and float16, at ordinary lengths and on long rows (past what fits on chip),
and attention in both causal alignments. It prints the properties x dtypes tables and writes
them (JSON + Markdown) to ``--out`` (default ``$OUT`` when set, else ``gpu-suite``).

    python bench/gpu_suite.py                 # on a CUDA machine
    python bench/gpu_suite.py --quick         # a CPU dry run under the interpreter (tiny)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny CPU dry run (interpreter)")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-suite"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from onlinesm import kernels

    kernels.use_interpreter(True if args.quick else None)
    import torch

    from onlinesm.check import check_attention, check_softmax
    from onlinesm.kernels import attention, softmax

    attention_mod = sys.modules["onlinesm.kernels.attention"]
    softmax_mod = sys.modules["onlinesm.kernels.softmax"]
    device = "cpu" if args.quick else "cuda"
    examples = 3 if args.quick else None  # None: the quick profile's 20
    scale = 8 if args.quick else 1
    common = dict(seed=args.seed, device=device, raise_on_failure=False, database=False,
                  max_examples=examples, progress=lambda m: print("  " + m, flush=True))
    runs = []

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {"date": time.strftime("%Y-%m-%d"),
           "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter)",
           "torch": torch.__version__, "triton": __import__("triton").__version__,
           "python": platform.python_version(),
           "attention_config": os.environ.get("ONLINESM_ATTENTION_CONFIG") or (
               "pinned tables (ONLINESM_PIN_CONFIGS)" if kernels.configs_pinned() else "autotuned"),
           "command": "python bench/gpu_suite.py" + (" --quick" if args.quick else "")}
    t0 = time.time()

    def record(title: str, result) -> None:
        print(f"\n## {title}\n\n{result.table()}\n", flush=True)
        for failure in result.failures:
            print(failure.text()[:3000], flush=True)
        runs.append({"title": title, "result": result.to_dict(), "table": result.table(),
                     "failures": [f.text() for f in result.failures]})
        write(out, {**env, "seconds": round(time.time() - t0, 1)}, runs)  # each suite as it ends

    record("softmax, rows up to 4096", check_softmax(
        softmax, name="onlinesm.kernels.softmax", exp=softmax_mod.EXP,
        accumulate=softmax_mod.ACCUMULATE, max_len=4096 // scale, **common))
    record("softmax, long rows (4,097 .. 300,000)", check_softmax(
        softmax, name="onlinesm.kernels.softmax[long]", exp=softmax_mod.EXP,
        accumulate=softmax_mod.ACCUMULATE, min_len=4097 // scale, max_len=300_000 // scale,
        max_rows=4, properties=["accuracy", "row_sum", "range", "masked_zero", "fully_masked",
                                "row_independence"],
        **{**common, "max_examples": 3 if args.quick else 8}))
    for align, props in (("top-left", None), ("bottom-right", ["accuracy", "fully_masked", "causal_mask"])):
        fn = functools.partial(attention, causal_align=align)
        functools.update_wrapper(fn, attention)
        record(f"attention, causal {align}", check_attention(
            fn, name=f"onlinesm.kernels.attention[{align}]", causal_align=align,
            exp=attention_mod.EXP, head_dims=(16, 40) if args.quick else (16, 40, 128),
            max_seq_q=32 if args.quick else 300, max_seq_k=80 if args.quick else 600,
            allow_gqa=True, properties=props, **{**common, "max_examples": 3 if args.quick else 12}))
    failed = [r["title"] for r in runs if not r["result"]["passed"]]
    print(f"\n{len(runs) - len(failed)}/{len(runs)} suites passed in {time.time() - t0:.0f} s; "
          f"failed: {failed or 'none'}")
    return 1 if failed else 0


def write(out: Path, env: dict, runs: list) -> None:
    """gpu_suite.json and gpu_suite.md: the environment and each suite's table and failures."""
    (out / "gpu_suite.json").write_text(json.dumps({"environment": env, "runs": runs}, indent=1, default=str))
    lines = [f"# Property suites on onlinesm's Triton kernels ({env['device']})", "",
             *(f"- {k}: {v}" for k, v in env.items()), ""]
    for run in runs:
        lines += [f"## {run['title']}", "", run["table"], ""]
        lines += ["```", *run["failures"], "```", ""] if run["failures"] else []
    (out / "gpu_suite.md").write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
