"""The kernel matrix on 1 and on 2 GPUs: wall time, speed-up, and identical verdicts.

What: writes a small project (an ``onlinesm.toml`` declaring onlinesm's built-in kernels and
torch SDPA with its backends pinned), warms the Triton cache, then runs
``onlinesm check --workers 1`` and ``--workers 2`` (pytest-xdist, one GPU per worker) with the
same seed and examples, and compares the merged verdicts item by item. Writes ``scale.md`` to
``--out``.

    python bench/scale.py --out $OUT                       # thorough profile, 2 GPUs
    python bench/scale.py --out $OUT --profile quick       # a shorter run
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MATRIX = """
[kernels.triton_softmax]
target = "onlinesm.kernels:softmax"
op = "softmax"

[kernels.triton_attention]
target = "onlinesm.kernels:attention"
op = "attention"

[kernels.triton_attention_bottom_right]
target = "onlinesm.kernels:attention"
op = "attention"
kwarg = { causal_align = "bottom-right" }

[kernels.sdpa_math]
convention = "sdpa"
sdpa-backend = "math"
exp = "accurate"

[kernels.sdpa_efficient]
convention = "sdpa"
sdpa-backend = "efficient"
exp = "accurate"
unsupported = ["RuntimeError:No available kernel|No viable backend"]

[kernels.sdpa_flash]
convention = "sdpa"
sdpa-backend = "flash"
exp = "accurate"
unsupported = ["RuntimeError:No available kernel|No viable backend"]
"""


def _cells(text: str) -> dict[str, str]:
    """(kernel table row) -> cells, from the printed tables, to compare two runs."""
    cells, kernel = {}, ""
    for line in text.splitlines():
        m = re.match(r"onlinesm check \w+: (\S+)", line)
        if m:
            kernel = m.group(1)
        elif line.startswith("| ") and not line.startswith("| property"):
            cells[f"{kernel} {line.split('|')[1].strip()}"] = re.sub(r"\(\d+[^)]*\)", "", line)
    return cells


def _balance(project: Path) -> str:
    """The last --workers run's items per worker: busy seconds and counts, to tell load
    imbalance from per-process overhead (the items' own times, from their records)."""
    runs = sorted((project / ".onlinesm" / "runs").glob("*/items"))
    if not runs:
        return ""
    busy: dict[str, list[float]] = {}
    by_prop: dict[str, list[float]] = {}
    for path in runs[-1].glob("item-*.json"):
        rec = json.loads(path.read_text())
        seconds = float(rec.get("seconds") or 0.0)
        busy.setdefault(rec.get("worker", "?"), []).append(seconds)
        by_prop.setdefault(rec.get("property", "?"), []).append(seconds)
    parts = [f"{w}: {len(t)} items, {sum(t):.1f} s" for w, t in sorted(busy.items())]
    total = sum(sum(t) for t in busy.values())
    props = sorted(by_prop.items(), key=lambda kv: -sum(kv[1]) / len(kv[1]))
    means = ", ".join(f"{p} {sum(t) / len(t):.1f} s" for p, t in props[:6])
    return (f"items per worker (busy time): {'; '.join(parts)}; total {total:.1f} s; "
            f"mean item time, heaviest properties: {means}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "scale-out"))
    parser.add_argument("--max-examples", type=int, default=None,
                        help="examples per property (default: the --profile's)")
    parser.add_argument("--profile", default="thorough", help="quick, ci or thorough [thorough]")
    parser.add_argument("--no-statistical", action="store_true",
                        help="drop the accuracy_statistical items (statistical = false): the 145 "
                             "items of the 2026-12-01 measurement, for a run that must be shorter")
    parser.add_argument("--one-gpu-from", metavar="FILE",
                        help="skip the 1-GPU run: take its output from FILE (a scale_1_GPU.txt "
                             "of an earlier run of the same tree), its wall time from the first line")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    project = Path(tempfile.mkdtemp(prefix="onlinesm-scale-"))
    matrix = (re.sub(r"(\[kernels\.\w+\]\n)", r"\1statistical = false\n", MATRIX)
              if args.no_statistical else MATRIX)
    (project / "onlinesm.toml").write_text(matrix)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0,1")}
    runs = {}
    runs_per = ["--max-examples", str(args.max_examples)] if args.max_examples else []
    plan = [("warm-up", 2, ["--max-examples", "2"]), ("1 GPU", 1, runs_per), ("2 GPUs", 2, runs_per)]
    if args.one_gpu_from:
        text = Path(args.one_gpu_from).read_text()
        seconds = float(re.search(r"PASSED: .*, ([0-9.]+) s|FAILED: .*, ([0-9.]+) s", text).group(1))
        runs["1 GPU"] = (seconds, 0, text)
        plan = [p for p in plan if p[0] != "1 GPU"]
    for label, workers, budget in plan:
        cmd = [sys.executable, "-m", "onlinesm", "check", "--workers", str(workers), "--seed", "0",
               "--profile", args.profile, *budget, "-q"]
        run_env = dict(env, CUDA_VISIBLE_DEVICES="0") if workers == 1 else env
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=project, env=run_env, capture_output=True, text=True, timeout=1500)
        runs[label] = (time.monotonic() - start, proc.returncode, proc.stdout)
        (out / f"scale_{label.replace(' ', '_')}.txt").write_text(proc.stdout + "\n" + proc.stderr[-5000:])
        print(f"{label:<8} workers={workers} {' '.join(cmd[3:])}: {runs[label][0]:.1f} s, "
              f"exit {proc.returncode}", flush=True)
    balance = _balance(project)
    if balance:
        print(balance, flush=True)
    logs = sorted((project / ".onlinesm" / "runs").glob("*/pytest.log"))
    if logs:  # the last --workers run's pytest output: why items gave no result, if any did
        (out / "scale_pytest.log").write_text(logs[-1].read_text()[-200000:])
    t1, t2 = runs["1 GPU"][0], runs["2 GPUs"][0]
    a, b = _cells(runs["1 GPU"][2]), _cells(runs["2 GPUs"][2])
    same = a == b and bool(a)
    lines = [f"# The kernel matrix on 1 and 2 GPUs ({datetime.date.today()})", "",
             f"Matrix: {MATRIX.count('[kernels.')} kernels (onlinesm.toml below), `--seed 0 "
             f"--profile {args.profile} {' '.join(runs_per)}`, Triton cache warmed first.", "",
             "| run | wall | exit |", "|---|---|---|",
             *(f"| {k} | {v[0]:.1f} s | {v[1]} |" for k, v in runs.items()), "",
             *([f"The 1-GPU run is the one of an earlier lease of the same tree ({args.one_gpu_from}; "
                "its wall time is the run's own summary line).", ""] if args.one_gpu_from else []),
             f"Speed-up on 2 GPUs: **{t1 / t2:.2f}x**. Verdicts identical item by item: "
             f"**{same}** ({len(a)} table rows compared).", "",
             *([f"2-GPU run, {balance}.", ""] if balance else []),
             "```toml", matrix.strip(), "```"]
    (out / "scale.md").write_text("\n".join(lines) + "\n")
    print(f"speed-up {t1 / t2:.2f}x, identical verdicts: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
