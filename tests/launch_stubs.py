"""Stand-ins for a ``@triton.jit`` kernel and the kernel Triton compiles, recording their
launches: the direct-launch path (``onlinesm.kernels.launching.launch_kernel``) tested
without a GPU."""

from __future__ import annotations

from typing import Any, Callable


class Compiled:
    """Stands for a kernel Triton compiled: records its direct launches, (grid, args)."""

    def __init__(self, launches: list) -> None:
        self.launches = launches

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        return lambda *args: self.launches.append((grid, args))


class Jit:
    """Stands for a ``@triton.jit`` kernel of ``fn``: records its launches through the JIT,
    (grid, args, options), each returning what ``result`` makes (a compiled kernel, None as
    the interpreter does)."""

    def __init__(self, fn: Callable[..., Any], result: Callable[[], Any]) -> None:
        self.fn, self.result, self.launches = fn, result, []

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., Any]:
        return lambda *args, **options: self.launches.append((grid, args, options)) or \
            self.result()
