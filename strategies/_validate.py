"""Eager argument checks with Hypothesis-style messages: name=value, what is wrong, the fix.

Every public strategy calls these at construction time, so a bad argument fails where the
strategy is built (in the decorator), not somewhere inside the first draw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hypothesis.errors import InvalidArgument as _HypothesisInvalidArgument

from onlinesm.dtypes import FloatFormat, resolve

__all__ = ["InvalidArgument", "check_dtype", "check_int", "check_bool", "check_families", "check_int_range"]


class InvalidArgument(_HypothesisInvalidArgument, ValueError):
    """A bad argument to a strategy or generator.

    A ``hypothesis.errors.InvalidArgument`` (so Hypothesis reports it as a usage error) and a
    ``ValueError`` (so the numpy generators, used without Hypothesis, raise what callers expect).
    """


def check_dtype(name: str, value: Any) -> FloatFormat:
    """The :class:`FloatFormat` for ``value``, or InvalidArgument naming ``name``."""
    try:
        return resolve(value)
    except (ValueError, TypeError) as err:
        raise InvalidArgument(
            f"{name}={value!r} is not a supported floating-point format; use one of "
            "'float64', 'float32', 'float16', 'bfloat16' (or fp64, fp32, fp16, bf16, or the "
            "matching numpy / ml_dtypes / torch dtype)"
        ) from err


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be a bool (True or False)")
    return value


def check_int(name: str, value: Any, *, min_value: int | None = None,
              max_value: int | None = None) -> int:
    """``value`` as an int in [min_value, max_value]; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(
            f"{name}={value!r} must be an int, not {type(value).__name__}"
            + (f"; use {name}={int(value)}" if isinstance(value, float) and value.is_integer()
               else "")
        )
    if min_value is not None and value < min_value:
        raise InvalidArgument(f"{name}={value!r} must be at least {min_value}; "
                              f"use {name}={min_value} or more")
    if max_value is not None and value > max_value:
        raise InvalidArgument(f"{name}={value!r} must be at most {max_value}; "
                              f"use {name}={max_value} or less")
    return value


def check_int_range(min_name: str, min_value: int, max_name: str, max_value: int) -> None:
    """Refuse an empty range ``min_value > max_value``."""
    if min_value > max_value:
        raise InvalidArgument(
            f"{min_name}={min_value!r} is greater than {max_name}={max_value!r}, so there is "
            f"nothing to draw; raise {max_name} or lower {min_name}"
        )


def check_families(name: str, value: Any, registry: Mapping[str, str], *,
                   default: Iterable[str]) -> tuple[str, ...]:
    """A tuple of family names from ``registry``; None means ``default``.

    A single string is refused (``families="ties"`` is almost always a typo for
    ``families=["ties"]``), as are unknown names, duplicates and an empty selection.
    """
    if value is None:
        return tuple(default)
    if isinstance(value, str):
        raise InvalidArgument(
            f"{name}={value!r} must be a list of family names, not one string; "
            f"use {name}=[{value!r}]"
        )
    try:
        names = tuple(value)
    except TypeError:
        raise InvalidArgument(
            f"{name}={value!r} must be a list of family names from: {', '.join(registry)}"
        ) from None
    if not names:
        raise InvalidArgument(
            f"{name}={value!r} is empty; pass None for every family, or some of: "
            f"{', '.join(registry)}"
        )
    for fam in names:
        if not isinstance(fam, str) or fam not in registry:
            raise InvalidArgument(
                f"{name}={value!r} contains {fam!r}, which is not a family; choose from: "
                f"{', '.join(registry)}"
            )
    if len(set(names)) != len(names):
        raise InvalidArgument(f"{name}={value!r} names a family twice; list each once")
    return names
