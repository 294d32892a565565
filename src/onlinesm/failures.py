"""From a failing input to a minimal, saved counterexample: the one shrink-and-save.

``check`` and ``report`` both end a failure the same way: reduce the input while the property
keeps failing (:func:`onlinesm.minimize.minimise_rows` for softmax rows; an attention input is
kept as Hypothesis shrank it), re-run the property on the reduced input for the final message,
and save it as JSON for ``onlinesm replay``. A hung kernel is never called again: its input is
saved as it is.

Example:
    >>> small, message, path = shrink_and_save(kernel, "softmax", "accuracy", conv,
    ...                                        {"x": x}, err, directory=Path(".onlinesm/failures"))
    ... # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from onlinesm import counterexample
from onlinesm.harness import AttentionInputs, Kernel, KernelError
from onlinesm.minimize import minimise_rows
from onlinesm.properties import ATTENTION_PROPERTIES, SOFTMAX_PROPERTIES, Conventions, PropertyFailure

__all__ = ["shrink_and_save"]


def shrink_and_save(kernel: Kernel, op: str, prop: str, conv: Conventions, inputs: dict[str, Any],
                    err: BaseException | None, *, directory: Path | None,
                    budget: dict[str, Any] | None = None,
                    domain: Any = None) -> tuple[dict[str, Any], str, str | None]:
    """(the reduced inputs, the failure message on them, the saved file or None).

    ``inputs`` is ``{"x": rows}`` for softmax, or the fields of an
    :class:`~onlinesm.harness.AttentionInputs` for attention; ``err`` the failure seen on them
    (its ``worst_row`` guides the minimiser). ``directory=None`` saves nothing; ``budget``
    passes ``max_calls`` / ``max_seconds`` to the minimiser; ``domain`` (its ``min_len`` and
    ``len_multiple``) keeps every reduced row one the kernel takes.

    A reduced input still fails only the way ``err`` did: a property failure by a property
    failure, a broken call contract by the same breach (a kernel that refuses rows shorter
    than it takes is not the bug being reduced); ``err=None`` takes either.
    """
    check = (SOFTMAX_PROPERTIES if op == "softmax" else ATTENTION_PROPERTIES)[prop]
    message = str(err) if err is not None else ""
    hung = isinstance(err, KernelError) and err.kind == "hung"
    if op == "softmax" and not hung:
        x = inputs["x"]

        def fails(candidate: np.ndarray) -> bool:
            if kernel.hung is not None:
                return False  # the kernel can no longer be called: keep what we have
            try:
                check(kernel, candidate, conv)
            except PropertyFailure:
                return kernel.hung is None and not isinstance(err, KernelError)
            except KernelError as now:
                return kernel.hung is None and (err is None or (isinstance(err, KernelError)
                                                                and _same_breach(now, err)))
            return False

        lengths = {} if domain is None else {"min_len": domain.min_len,
                                             "len_multiple": domain.len_multiple}
        small = minimise_rows(x, fails, worst_row=getattr(err, "worst_row", None),
                              **(budget or {}), **lengths)
        if kernel.hung is None:
            try:
                check(kernel, small, conv)
            except (PropertyFailure, KernelError) as final:
                message = str(final)
            else:  # the minimiser ran out of budget in a state that passes: keep the original
                small = x
        inputs = {"x": small}
    elif op == "attention" and not hung and kernel.hung is None:
        try:
            check(kernel, AttentionInputs(**inputs), conv)
        except (PropertyFailure, KernelError) as final:
            message = str(final)
    path = None
    if directory is not None:
        path = counterexample.save(op=op, prop=prop, kernel=kernel, conventions=conv, inputs=inputs,
                                   message=message, directory=directory)
    return inputs, message, path


def _same_breach(now: KernelError, then: KernelError) -> bool:
    """The same kind of broken contract; for a raise, the same exception type (a kernel that
    also refuses short rows with a ValueError is not the IndexError being reduced)."""
    if now.kind != then.kind:
        return False
    return now.kind != "raised" or now.detail.partition(":")[0] == then.detail.partition(":")[0]
