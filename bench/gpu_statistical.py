"""False alarms of ``accuracy_statistical`` on correct GPU kernels, over many sample seeds.

What: for each seed, builds the statistical tier's baseline (the declared numerics of each
kernel) on a fresh sample and evaluates onlinesm's Triton kernels and torch SDPA with the
flash, efficient and cuDNN backends pinned, through the harness, as ``onlinesm check`` does.
Prints one line per seed and a table of alarms / runs per kernel; writes it to ``--out``.

    python bench/gpu_statistical.py --seeds 20 --out $OUT        # on a CUDA machine
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-statistical"))
    parser.add_argument("--budget", type=float, default=220.0, help="stop after this many seconds")
    args = parser.parse_args()

    from onlinesm import kernels

    kernels.use_interpreter(False)
    from onlinesm.adapters import adapt
    from onlinesm.harness import Kernel
    from onlinesm.statistical import DEFAULT, Baseline
    from onlinesm.statistical_check import numpy_face

    half = ("bfloat16", "float16")
    entries = [  # (name, op, fn, dtypes, exp)
        ("onlinesm softmax", "softmax", kernels.softmax, ("float32",) + half, "fast"),
        ("onlinesm attention", "attention", kernels.attention, ("float32",) + half, "fast"),
        *((f"SDPA {b}", "attention", adapt(convention="sdpa", sdpa_backend=b), half, "accurate")
          for b in ("flash", "efficient", "cudnn")),
    ]
    alarms = {name: [0, 0, 0.0, 0.0] for name, *_ in entries}  # alarms, runs, worst use, max ratio
    start = time.monotonic()
    for seed in range(args.seeds):
        if time.monotonic() - start > args.budget:
            print(f"stopped after {seed} seeds: the time budget", flush=True)
            break
        settings = dataclasses.replace(DEFAULT, seed=20261130 + seed)
        line = []
        for name, op, fn, dtypes, exp in entries:
            base = Baseline(op, dtypes=dtypes, exp=exp, p_dtype="input", settings=settings)
            res = base.evaluate(numpy_face(Kernel(fn, op=op, device="cuda", name=name), op), name)
            alarms[name][0] += 0 if res.ok else 1
            alarms[name][1] += 1
            alarms[name][2] = max(alarms[name][2], max(c.lower / c.threshold for c in res.cells))
            alarms[name][3] = max(alarms[name][3],
                                  max(c.ratio for c in res.cells if c.metric == "rmse"))
            line.append(f"{name}: {'ok' if res.ok else 'ALARM'}")
        print(f"seed {seed}: " + ", ".join(line), flush=True)
    rows = [f"| {n} | {a} / {r} | {w:.3g} | {m:.3g} |" for n, (a, r, w, m) in alarms.items()]
    text = "\n".join(["| kernel | false alarms / runs | worst lower bound / threshold "
                      "| largest RMSE ratio |", "|---|---|---|---|", *rows])
    print(text)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_statistical.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
