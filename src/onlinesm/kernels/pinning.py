"""One switch: pinned tile configurations instead of autotuning, for property checks.

What: ``configs_pinned()`` tells a kernel launcher to use a fixed configuration table (one
configuration per compile-relevant case, e.g. per head dim) instead of running Triton's
autotuner; ``pinned_configs()`` turns it on for a ``with`` block. The switch is the
environment variable ``ONLINESM_PIN_CONFIGS`` (``1`` = pinned), so a user's own launcher can
read it without importing onlinesm, and a child process inherits it.

Why: autotuning compiles and benchmarks every candidate configuration for every new tuning
key. A property check feeds a kernel dozens of small shapes whose speed nobody measures, so
there the tuning is pure compile time (minutes on a GPU). Benchmarks and normal use keep
autotuning: nothing changes unless the switch is on.

    >>> with pinned_configs():
    ...     configs_pinned()
    True
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

__all__ = ["PIN_ENV", "configs_pinned", "pinned_configs"]

#: ``1`` / ``true`` / ``on`` / ``yes``: launchers use their pinned configuration table.
PIN_ENV = "ONLINESM_PIN_CONFIGS"


def configs_pinned() -> bool:
    """Whether launchers should use their pinned configuration table (read at every launch)."""
    return os.environ.get(PIN_ENV, "0").strip().lower() in ("1", "true", "on", "yes")


@contextlib.contextmanager
def pinned_configs(flag: bool = True) -> Iterator[None]:
    """Set ``ONLINESM_PIN_CONFIGS`` for the block (``flag=False`` clears it), then restore it."""
    before = os.environ.get(PIN_ENV)
    os.environ[PIN_ENV] = "1" if flag else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PIN_ENV, None)
        else:
            os.environ[PIN_ENV] = before
