"""Count the compiled variants an ``onlinesm check`` run would ask Triton for, on the CPU.

What: runs ``onlinesm check`` under Triton's interpreter and records, for every kernel launch,
the key Triton's JIT would compile under on a GPU: the constexpr values, num_warps /
num_stages, each tensor's dtype and 16-byte alignment, and each integer argument's
specialisation (``== 1``, ``% 16 == 0`` or neither, unless the kernel lists it in
``do_not_specialize``). Distinct keys = compilations on a GPU (one per key per process).

Why: on a GPU each compilation costs about a second, so the number of distinct keys, not the
kernels' run time, decides how long a check takes there. This counts them at no GPU cost, so a
kernel's specialisation choices can be judged before a GPU run.

    python bench/compile_variants.py softmax          # the default softmax check, seed 0
    python bench/compile_variants.py attention -v     # + every key
    python bench/compile_variants.py attention -- --max-examples 5   # extra `check` flags

The interpreter's launch parameters differ from the GPU's (attention's tile sizes, softmax's
bf16 rounding flag), but one-for-one, so the count is the same.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import os
import sys
import time
from typing import Any

__all__ = ["main", "launch_key"]


def launch_key(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
               do_not_specialize: set[str]) -> tuple[Any, ...]:
    """The specialisation key Triton's JIT computes for ``fn[grid](*args, **kwargs)``."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    sig = inspect.signature(fn)
    options = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k not in options})
    key: list[Any] = [fn.__name__, tuple(sorted(options.items()))]
    for name, param in sig.parameters.items():
        value = bound.arguments.get(name)
        if "constexpr" in str(param.annotation):
            key.append((name, repr(value)))
        else:
            spec = name not in do_not_specialize
            key.append((name, native_specialize_impl(BaseBackend, value, False, spec, spec)))
    return tuple(key)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op", choices=["softmax", "attention"])
    ap.add_argument("-v", "--verbose", action="store_true", help="print every distinct key")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("check_args", nargs="*", help="extra `onlinesm check` flags (after --)")
    a = ap.parse_args(argv)

    from onlinesm import kernels

    kernels.use_interpreter(True)
    import triton.runtime.interpreter as interp

    from onlinesm import cli

    launches: collections.Counter[tuple[Any, ...]] = collections.Counter()
    original = interp.InterpretedFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
        dns = set(self.kwargs.get("do_not_specialize") or ())
        launches[launch_key(self.fn, args, kwargs, dns)] += 1
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    interp.InterpretedFunction.run = run  # type: ignore[method-assign]
    t0 = time.time()
    try:
        rc = cli.main(["check", f"onlinesm.kernels:{a.op}", "--op", a.op, "--seed", str(a.seed),
                       "-q", *a.check_args])
    finally:
        interp.InterpretedFunction.run = original  # type: ignore[method-assign]
    per_kernel = collections.Counter(k[0] for k in launches)
    print(f"\ncheck exit {rc} in {time.time() - t0:.0f} s (interpreter); "
          f"{sum(launches.values())} launches, {len(launches)} distinct compile keys:")
    for name, n in sorted(per_kernel.items()):
        print(f"  {name}: {n} keys")
    if a.verbose:
        for k, n in sorted(launches.items(), key=str):
            print(n, k)
    return rc


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    sys.exit(main())
