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

import difflib
import sys
from typing import Any

__all__ = ["UsageError", "print_usage_error", "did_you_mean"]


class UsageError(ValueError):
    """Nothing could be tested: a bad option or environment, or a kernel that fails at once.

    A ValueError, since most are a bad value given by the user (``fully_masked="zero"``).
    """


def did_you_mean(word: str, choices: Any, *, cutoff: float = 0.6, quote: bool = True) -> str:
    """``"; did you mean 'x'?"`` for the choice closest to a misspelt ``word``, or ``""`` when
    none is close: the tail every "unknown name" message shares.

    >>> did_you_mean("acuracy", ["accuracy", "range"])
    "; did you mean 'accuracy'?"
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    if not close:
        return ""
    return f"; did you mean {close[0]!r}?" if quote else f"; did you mean {close[0]}?"


def print_usage_error(message: str) -> int:
    """Print ``message`` as the CLI's one line on stderr, ``onlinesm: error: ...``, with the API
    keywords it names given as the flags that set them; return the exit code, 2."""
    from onlinesm.options import as_flags

    print(f"onlinesm: error: {as_flags(message)}", file=sys.stderr)
    return 2
