"""The exceptions that end a run before any verdict: the user's setup, not the kernel, is wrong.

:class:`UsageError` means nothing could be tested: a bad option, an environment that cannot run
the request (``device="cuda"`` without CUDA), a kernel that cannot be imported, or one that
fails on the simplest input. The CLI turns it into exit code 2 and one line; the API raises it,
never ``AssertionError`` (which is kept for a falsified property).

Example:
    >>> from onlinesm.errors import UsageError
    >>> raise UsageError("profile='fast' is unknown; use quick, ci or thorough")
    Traceback (most recent call last):
    ...
    onlinesm.errors.UsageError: profile='fast' is unknown; use quick, ci or thorough
"""

from __future__ import annotations

import sys

__all__ = ["UsageError", "print_usage_error"]


class UsageError(ValueError):
    """Nothing could be tested: a bad option or environment, or a kernel that fails at once.

    A ValueError, since most are a bad value given by the user (``fully_masked="zero"``).
    """


def print_usage_error(message: str) -> int:
    """Print ``message`` as the CLI's one line on stderr, ``onlinesm: error: ...``, with the API
    keywords it names given as the flags that set them; return the exit code, 2."""
    from onlinesm.options import as_flags

    print(f"onlinesm: error: {as_flags(message)}", file=sys.stderr)
    return 2
