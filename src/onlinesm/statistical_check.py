"""The statistical tier inside a check: the ``accuracy_statistical`` and ``regression`` properties.

:mod:`onlinesm.statistical` judges a numpy kernel on a fixed, seeded sample of long inputs.
This module runs it from the engine, once per dtype after the Hypothesis runs of that dtype:

- the sample is fitted to the declared :class:`~onlinesm.declarations.Domain` (row length,
  Sq, Sk, head dim, heads, batch, ``seq_multiple``, ``same_seq``; families needing masks,
  causal or grouped-query heads are dropped when the domain rules them out). The record's own
  default limits (max_len 1024, max_seq_q 64, max_seq_k 96) are sizes for the worst-case
  draws, not a declaration of the kernel, so they do not shorten the sample; any other value
  does. A sample too short to tell typical from worst-case error (rows under 256, Sk under
  128) makes the property n/a with the reason;
- the kernel is called through the engine's :class:`~onlinesm.harness.Kernel`, so declared
  refusals (n/a), hangs, the call contract and the deadline apply as to every property;
- the baseline uses the declared numerics of that dtype (``conventions.for_dtype(dtype)``).
  The run's false-alarm budget (``Settings.alpha``) is split over the dtypes (Bonferroni).

Example:
    >>> from onlinesm.declarations import Domain
    >>> fit_settings("softmax", Domain(max_len=512), thorough=False).softmax_length
    512
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from onlinesm.declarations import Conventions, Domain, RunOptions
from onlinesm.harness import AttentionInputs, Kernel, KernelError
from onlinesm.results import Failure, PropertyOutcome
from onlinesm.statistical import DEFAULT, THOROUGH, Baseline, Settings, compare_kernels

__all__ = ["fit_settings", "numpy_face", "statistical_outcome", "regression_outcome",
           "MIN_SOFTMAX_LENGTH", "MIN_SEQ_K"]

#: Below these lengths typical and worst-case errors are too close to tell apart (√n vs n).
MIN_SOFTMAX_LENGTH = 256
MIN_SEQ_K = 128

_RECORD = Domain()


def _limit(domain: Domain, field: str) -> int | None:
    """The domain's limit ``field``, or None when it is the record's default (not declared)."""
    value = getattr(domain, field)
    return None if value == getattr(_RECORD, field) else int(value)


def fit_settings(op: str, domain: Domain, *, thorough: bool) -> Settings | str:
    """The statistical sample fitted to ``domain``; a str (the n/a reason) when it cannot be.

    >>> fit_settings("attention", Domain(max_seq_k=64), thorough=False)
    'the domain allows Sk <= 64; the statistical tier needs Sk >= 128 (declare --max-seq-k)'
    """
    base = THOROUGH if thorough else DEFAULT
    if op == "softmax":
        n = base.softmax_length
        cap = _limit(domain, "max_len")
        n = min(n, cap) if cap is not None else n
        m = domain.len_multiple
        n = max(n // m * m, -(-domain.min_len // m) * m)  # inside min_len..max_len, a multiple
        if n < MIN_SOFTMAX_LENGTH:
            return (f"the domain allows rows of <= {n} columns; the statistical tier needs "
                    f">= {MIN_SOFTMAX_LENGTH} (declare --max-len)")
        fams = tuple(f for f in base.softmax_families
                     if domain.families is None or f in domain.families) or base.softmax_families
        return dataclasses.replace(base, softmax_length=n, softmax_families=fams)
    b, h, sq, sk, d = base.attention_shape
    m = domain.seq_multiple
    cap_q, cap_k = _limit(domain, "max_seq_q"), _limit(domain, "max_seq_k")
    sq = min(sq, cap_q) if cap_q is not None else sq
    sk = min(sk, cap_k) if cap_k is not None else sk
    if domain.same_seq:  # Sq == Sk: every key is also a query; cap the cost at 512 queries
        sq = sk = min(sk, cap_q if cap_q is not None else 512)
    # the multiple of m at or below each length; m itself where that is 0 and the caps allow it
    # (a kernel of 128-row tiles gets Sq = 128 where the sample holds 64 queries)
    sq, sk = (n // m * m or (m if cap is None or m <= cap else 0)
              for n, cap in ((sq, cap_q), (sk, cap_k)))
    if sk < MIN_SEQ_K:
        return (f"the domain allows Sk <= {sk}; the statistical tier needs Sk >= {MIN_SEQ_K} "
                "(declare --max-seq-k)")
    if sq < max(domain.min_seq_q, 1) or sk < domain.min_seq_k:
        return f"no Sq, Sk pair fits the domain (Sq {sq}, Sk {sk} after its limits)"
    dims = sorted(domain.head_dims)
    d = d if d in dims else min(dims, key=lambda x: (abs(x - d), x))
    shape = (min(b, domain.max_batch), min(h, domain.max_heads), sq, sk, d)
    drop = {"causal": not domain.allow_causal, "gqa": not domain.allow_gqa or shape[1] < 2,
            "key_padding": not domain.allow_mask, "masked_leading_tiles": not domain.allow_mask}
    fams = tuple(f for f in base.attention_families if not drop.get(f, False)
                 and (domain.families is None or f in domain.families)) or ("gaussian",)
    return dataclasses.replace(base, attention_shape=shape, attention_families=fams)


def numpy_face(kernel: Kernel, op: str) -> Callable[..., np.ndarray]:
    """``kernel`` as the numpy function :mod:`onlinesm.statistical` takes (through the harness)."""
    if op == "softmax":
        return lambda x: kernel.softmax(np.ascontiguousarray(x))

    def attention(q: Any, k: Any, v: Any, mask: Any, causal: bool, scale: Any) -> np.ndarray:
        inp = AttentionInputs(q=q, k=k, v=v, mask=mask, causal=bool(causal), scale=scale)
        return kernel.attention(inp, want_lse=False)[0]
    return attention


def _baseline(op: str, dtype: str, conv: Conventions, settings: Settings,
              dtypes: int) -> Baseline:
    num = conv.for_dtype(dtype).numerics
    s = dataclasses.replace(settings, alpha=settings.alpha / max(dtypes, 1))
    return Baseline(op, dtypes=(dtype,), accumulate=num.accumulate, exp=num.exp,
                    allow_tf32=num.allow_tf32, p_dtype=num.p_dtype, settings=s)


def _error_outcome(prop: str, dtype: str, err: KernelError, seconds: float) -> PropertyOutcome:
    if err.kind == "refused":
        return PropertyOutcome(prop, dtype, "na", seconds=seconds,
                               reason=f"the kernel refused the statistical sample: {err}")
    out = PropertyOutcome(prop, dtype, "failed", 0, seconds)
    out.failure = Failure(prop, dtype, f"on the statistical sample: {err}", {},
                          breach=err.breach)
    return out


def statistical_outcome(kernel: Kernel, op: str, dtype: str, conventions: Conventions,
                        domain: Domain, options: RunOptions) -> PropertyOutcome:
    """``accuracy_statistical`` on one dtype: passed, failed (message and table) or n/a."""
    prop = "accuracy_statistical"
    fitted = fit_settings(op, domain, thorough=options.profile == "onlinesm-thorough")
    if isinstance(fitted, str):
        return PropertyOutcome(prop, dtype, "na", reason=fitted)
    start = time.monotonic()
    base = _baseline(op, dtype, conventions, fitted, len(domain.dtypes))
    try:
        res = base.evaluate(numpy_face(kernel, op), kernel.name)
    except KernelError as err:
        return _error_outcome(prop, dtype, err, time.monotonic() - start)
    out = PropertyOutcome(prop, dtype, "passed" if res.ok else "failed", len(res.cells),
                          time.monotonic() - start)
    if not res.ok:
        fam = res.failures[0].family
        out.failure = Failure(prop, dtype, res.message() + "\n" + res.table(), {}, fam)
    return out


def _short(name: str) -> str:
    """A target's function name (``path/to/file.py:attention_v2`` -> ``attention_v2``)."""
    return name.rsplit(":", 1)[-1]


def regression_outcome(kernel: Kernel, old: Kernel, op: str, dtype: str, domain: Domain,
                       options: RunOptions) -> tuple[PropertyOutcome, str]:
    """``regression`` on one dtype: NEW (``kernel``) vs OLD on the statistical sample.

    Returns the outcome and the RMSE table (FlashAttention-3's layout) for the report.
    """
    prop = "regression"
    fitted = fit_settings(op, domain, thorough=options.profile == "onlinesm-thorough")
    if isinstance(fitted, str):
        return PropertyOutcome(prop, dtype, "na", reason=fitted), ""
    start = time.monotonic()
    confidence = 1.0 - fitted.alpha / max(len(domain.dtypes), 1)
    try:
        res = compare_kernels(numpy_face(kernel, op), numpy_face(old, op), op=op,
                              dtypes=(dtype,), settings=fitted,
                              factor=options.regression_factor, confidence=confidence,
                              names=(_short(kernel.name), _short(old.name)))
    except KernelError as err:
        return _error_outcome(prop, dtype, err, time.monotonic() - start), ""
    out = PropertyOutcome(prop, dtype, "passed" if res.ok else "failed", len(res.rows),
                          time.monotonic() - start)
    if not res.ok:
        bad = next(r for r in res.rows if not r.ok)
        out.failure = Failure(prop, dtype, res.message() + "\n(the RMSE table is above)", {},
                              bad.family)
    return out, res.table()
