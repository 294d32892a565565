"""The property suite on kernels people use, one ``onlinesm check`` command each.

What: runs ``onlinesm check`` as a user would (a fresh process per kernel, default profile,
``--seed 0``) on torch.softmax, Liger's Triton softmax, torch SDPA with each backend pinned
(math, efficient, flash, cuDNN) with boolean and additive masks, and onlinesm's own Triton
kernels in both causal alignments. It records each command, its exit code, wall time and the
properties x dtypes table, and writes ``third_party.md`` (and the raw outputs) to ``--out``.

Why: the suite must work on real kernels with one command and no wrapper, and what it finds on
widely used kernels is a finding to report as it is.

    python bench/third_party.py --out $OUT          # on a CUDA machine (Liger installed)
    python bench/third_party.py --dry-run           # print the commands only
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REFUSALS = "RuntimeError:No available kernel|No viable backend|not supported"

#: (label, arguments after `onlinesm check`)
KERNELS: list[tuple[str, list[str]]] = [
    ("torch.softmax", ["torch:softmax", "--op", "softmax", "--kwarg", "dim=-1",
                       "--fully-masked", "nan", "--exp", "accurate"]),
    ("Liger softmax", ["liger_kernel.ops.softmax:LigerSoftmaxFunction.apply", "--op", "softmax",
                       "--fully-masked", "nan",
                       "--unsupported", "RuntimeError:Cannot launch Triton kernel"]),
    ("onlinesm softmax", ["onlinesm.kernels:softmax", "--op", "softmax"]),
    ("onlinesm attention (top-left)", ["onlinesm.kernels:attention", "--op", "attention"]),
    ("onlinesm attention (bottom-right)", ["onlinesm.kernels:attention", "--op", "attention",
                                           "--kwarg", "causal_align=bottom-right"]),
]
for backend in ("math", "efficient", "flash", "cudnn"):
    KERNELS.append((f"SDPA {backend}", ["--convention", "sdpa", "--sdpa-backend", backend,
                                        "--mask-kinds", "bool,additive", "--exp", "accurate",
                                        "--unsupported", REFUSALS]))


def _table(text: str) -> str:
    return "\n".join(line for line in text.splitlines()
                     if line.startswith("|") or line.startswith("== ") or line.startswith("onlinesm check"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "third-party"))
    parser.add_argument("--only", help="run only kernels whose label contains this text")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--extra", default="", help="extra flags for every command")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, details = [], []
    for label, argv in KERNELS:
        if args.only and args.only.lower() not in label.lower():
            continue
        cmd = ["onlinesm", "check", *argv, "--seed", "0", "-q", *shlex.split(args.extra)]
        shown = " ".join(shlex.quote(a) for a in cmd)
        if args.dry_run:
            print(shown)
            continue
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "onlinesm", *cmd[1:]], capture_output=True,
                              text=True, timeout=900)
        seconds = time.monotonic() - start
        verdict = {0: "pass", 1: "FAIL", 2: "nothing tested / usage"}.get(proc.returncode, f"exit {proc.returncode}")
        rows.append(f"| {label} | {verdict} | {seconds:.0f} s | `{shown}` |")
        details.append(f"## {label}\n\n`{shown}` -> exit {proc.returncode} in {seconds:.1f} s\n\n"
                       f"```text\n{proc.stdout.strip()}\n{proc.stderr.strip()[-3000:]}\n```\n")
        (out / "third_party_raw.txt").open("a").write(f"### {label}\n{shown}\n{proc.stdout}\n{proc.stderr}\n")
        print(f"{label:<36} {verdict:<24} {seconds:6.1f} s", flush=True)
        print(_table(proc.stdout), flush=True)
    if args.dry_run:
        return 0
    try:
        import torch
        import triton

        env = (f"torch {torch.__version__}, triton {triton.__version__}, "
               f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU'}")
    except Exception as err:  # noqa: BLE001 - the environment line is informative only
        env = f"unknown ({err})"
    doc = [f"# The property suite on widely used kernels ({datetime.date.today()})", "",
           f"Machine: {env}; Python {platform.python_version()}. Each row is one command, run in a "
           "fresh process with the default profile and `--seed 0`.", "",
           "| kernel | verdict | wall | command |", "|---|---|---|---|", *rows, "", *details]
    (out / "third_party.md").write_text("\n".join(doc))
    print(f"\nwritten {out / 'third_party.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
