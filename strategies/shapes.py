"""The shape rules of the attention families: one table, used everywhere shapes are chosen.

What: :data:`SHAPE_RULES` says, per attention family, which Sq / Sk / heads / flags it needs
(decode: Sq = 1 < Sk; one_key: Sk = 1; masked_leading_tiles: a mask and Sk >= 65; gqa:
grouped heads; ...). From it:

- :func:`shape_violation`: why a concrete shape breaks the family's rule (the generator's
  validation, :func:`onlinesm.strategies.generate_attention`);
- :func:`family_excluded`: why the family cannot be generated inside a domain at all;
- :func:`family_shape`: a shape dict for ``generate_attention(**shape)`` inside the domain,
  at a nominal size (reports) or drawn from a numpy ``Generator`` (calibration).

Why one table: the check's explicit cases, the Hypothesis strategy, the report grid and the
calibration bench all need the same rules; a rule written twice drifts (a family silently
generating a shape outside the domain, or something other than its promise).

Example:
    >>> from onlinesm.strategies import default_domain
    >>> family_excluded("decode", default_domain(same_seq=True))
    'decode needs Sq = 1 < Sk, but the domain has same_seq=True (set same_seq=False)'
    >>> family_shape("decode", default_domain(), 256)["seq_q"]
    1
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .domain import DomainSpec, fit_seq, read_domain, seq_bounds
from .lengths import random_length

__all__ = ["ShapeRule", "SHAPE_RULES", "LEADING_TILE", "LEADING_RUNS", "shape_violation",
           "family_excluded", "family_shape"]

#: The smallest key tile a leading masked run must cover (masked_leading_tiles: Sk >= 65).
LEADING_TILE: int = 64
#: Leading masked runs worth hiding: whole tiles of 64, 128 and 256 keys, and one either side.
LEADING_RUNS: tuple[int, ...] = (63, 64, 65, 127, 128, 129, 255, 256, 257)


@dataclasses.dataclass(frozen=True)
class ShapeRule:
    """What an attention family needs of its shape and flags.

    ``seq_q`` / ``seq_k``: a fixed length (None: any); ``min_seq_k``: the shortest Sk;
    ``sq_below_sk``: Sq < Sk (decode); ``min_heads``: grouped heads need two; ``needs``: the
    domain flags that must be True; ``mask``: "always" (carries a mask), "never" or "maybe".
    ``sizes``: (Sq, Sk) at a nominal size n for reports (see :func:`family_shape`).
    """

    seq_q: int | None = None
    seq_k: int | None = None
    min_seq_k: int = 1
    sq_below_sk: bool = False
    min_heads: int = 1
    needs: tuple[str, ...] = ()
    mask: str = "maybe"
    sizes: str = "square"


#: Family -> its rule. Families not listed here have no rule of their own.
SHAPE_RULES: dict[str, ShapeRule] = {
    "gaussian": ShapeRule(),
    "outliers": ShapeRule(),
    "huge_logits": ShapeRule(),
    "key_padding": ShapeRule(needs=("allow_mask",), mask="always"),
    "causal": ShapeRule(needs=("allow_causal",), mask="never", sizes="causal"),
    "decode": ShapeRule(seq_q=1, min_seq_k=2, sq_below_sk=True, sizes="decode"),
    "gqa": ShapeRule(min_heads=2, needs=("allow_gqa",)),
    "masked_leading_tiles": ShapeRule(min_seq_k=LEADING_TILE + 1, needs=("allow_mask",),
                                      mask="always", sizes="leading"),
    "one_key": ShapeRule(seq_k=1, sizes="one_key"),
    "huge_v_cancel": ShapeRule(),
}


def _rule(family: str) -> ShapeRule:
    if family not in SHAPE_RULES:
        from ._validate import InvalidArgument

        raise InvalidArgument(f"family={family!r} is not an attention family; choose from: "
                              f"{', '.join(SHAPE_RULES)}")
    return SHAPE_RULES[family]


def shape_violation(family: str, *, seq_q: int, seq_k: int, heads: int) -> str | None:
    """Why (seq_q, seq_k, heads) breaks ``family``'s rule, as 'name=value but ...' (None: it
    keeps it). The generator raises this message."""
    r = _rule(family)
    if r.seq_q is not None and seq_q != r.seq_q:
        return f"seq_q={seq_q} but family {family!r} needs seq_q={r.seq_q}"
    if r.seq_k is not None and seq_k != r.seq_k:
        return f"seq_k={seq_k} but family {family!r} needs seq_k={r.seq_k}"
    if seq_k < r.min_seq_k:
        what = " (a hidden tile plus a visible key)" if family == "masked_leading_tiles" else ""
        return f"seq_k={seq_k} but family {family!r} needs seq_k >= {r.min_seq_k}{what}"
    if heads < r.min_heads:
        return f"heads={heads} but family {family!r} needs heads >= {r.min_heads}"
    return None


def _excluded(family: str, d: DomainSpec) -> str | None:
    r = _rule(family)
    if d.families is not None and family not in d.families:
        return f"{family} is not among the domain's families {list(d.families)}"
    for flag in r.needs:
        if not getattr(d, flag):
            what = {"allow_mask": "a mask", "allow_causal": "causal=True",
                    "allow_gqa": "grouped-query heads (Hkv < H)"}[flag]
            return f"{family} needs {what}, but the domain has {flag}=False (set {flag}=True)"
    if r.min_heads > d.max_heads:
        return (f"{family} needs heads >= {r.min_heads}, but the domain has "
                f"max_heads={d.max_heads} (raise max_heads to {r.min_heads})")
    m = d.seq_multiple
    if r.sq_below_sk and d.same_seq:
        return f"{family} needs Sq = 1 < Sk, but the domain has same_seq=True (set same_seq=False)"
    for axis, fixed in (("q", r.seq_q), ("k", r.seq_k)):
        if fixed is None:
            continue
        lo, hi = (d.min_seq_q, d.max_seq_q) if axis == "q" else (d.min_seq_k, d.max_seq_k)
        if fixed % m or not lo <= fixed <= hi:
            return (f"{family} needs S{axis}={fixed}, but the domain has min_seq_{axis}={lo}, "
                    f"max_seq_{axis}={hi}, seq_multiple={m}")
    if d.same_seq and r.seq_k is not None:  # Sq = Sk = the fixed length
        lo, hi = d.min_seq_q, d.max_seq_q
        if not lo <= r.seq_k <= hi:
            return (f"{family} needs Sq = Sk = {r.seq_k} under same_seq, but the domain has "
                    f"min_seq_q={lo}")
    which = "both" if d.same_seq else "k"
    if seq_bounds(d, "q") is None or seq_bounds(d, "k") is None or seq_bounds(d, which) is None:
        return (f"{family} needs some Sq and Sk inside the domain, but none is a multiple of "
                f"seq_multiple={m} within min..max (or Sq = Sk under same_seq)")
    if fit_seq(d, which, r.min_seq_k, at_least=r.min_seq_k) is None:
        cap = "max_seq_q and max_seq_k" if d.same_seq else "max_seq_k"
        largest = seq_bounds(d, which)[1]  # type: ignore[index]
        return (f"{family} needs Sk >= {r.min_seq_k}, but the domain's largest Sk is {largest} "
                f"({cap}, seq_multiple={m}); raise {cap} to {r.min_seq_k} or more")
    return None


def family_excluded(family: str, domain: Any) -> str | None:
    """Why ``family`` cannot be generated inside ``domain`` (None: it can).

    ``domain``: any object with the attributes of ``onlinesm.declarations.Domain``. Softmax
    families are excluded only by ``families`` and, for nonfinite, ``allow_nonfinite``.

    >>> from onlinesm.strategies import default_domain
    >>> family_excluded("masked_leading_tiles", default_domain(max_seq_k=64))
    "masked_leading_tiles needs Sk >= 65, but the domain's largest Sk is 64 (max_seq_k, seq_multiple=1); raise max_seq_k to 65 or more"
    """
    d = read_domain(domain)
    if family in SHAPE_RULES:
        return _excluded(family, d)
    from .families import OPT_IN_FAMILIES, SOFTMAX_FAMILIES

    if family not in SOFTMAX_FAMILIES:
        from ._validate import InvalidArgument

        raise InvalidArgument(f"family={family!r} is neither a softmax nor an attention family")
    if d.families is not None and family not in d.families:
        return f"{family} is not among the domain's families {list(d.families)}"
    if family in OPT_IN_FAMILIES and not d.allow_nonfinite and d.families is None:
        return f"{family} is opt-in, but the domain has allow_nonfinite=False"
    return None


def _sizes(rule: ShapeRule, n: int, same_seq: bool) -> tuple[int, int] | None:
    """(Sq, Sk) of a family at nominal size n (reports), before fitting into the domain."""
    if rule.sizes == "one_key":
        return (min(n, 16), 1) if n <= 16 else None  # Sk = 1 whatever n: once, at small n
    if rule.sizes == "decode":
        return (1, max(n, 2))
    if rule.sizes == "leading":  # a few queries over enough keys to hide a whole tile
        return (min(n, 16), max(n, 80)) if n >= 40 else None
    if rule.sizes == "causal" and not same_seq:
        return (max(1, n // 2), n) if n > 1 else None
    return (n, n)


def family_shape(family: str, domain: Any, rng_or_size: np.random.Generator | int
                 ) -> dict[str, Any] | None:
    """Keyword arguments of ``generate_attention`` for ``family`` inside ``domain``, or None
    when the family is excluded (see :func:`family_excluded`) or has no case at this size.

    ``rng_or_size``: an int n gives the family's case at nominal size n (reports: Sq = Sk = n,
    causal Sq = n/2, decode Sq = 1, ...; batch 1, heads = max_heads, the largest head dim),
    fitted into the domain; a ``numpy.random.Generator`` draws batch, heads, lengths (clustered
    at tile sizes) and head dim inside the domain.

    >>> from onlinesm.strategies import default_domain
    >>> s = family_shape("masked_leading_tiles", default_domain(), 40)
    >>> s["seq_q"], s["seq_k"], s["head_dim"]
    (16, 80, 128)
    """
    d = read_domain(domain)
    if _excluded(family, d) is not None:
        return None
    r = SHAPE_RULES[family]
    which_k = "both" if d.same_seq else "k"
    if isinstance(rng_or_size, np.random.Generator):
        rng = rng_or_size
        batch = int(rng.integers(1, d.max_batch + 1))
        heads = int(rng.integers(r.min_heads, d.max_heads + 1))
        sk = _random_seq(rng, d, which_k, r.seq_k or None, r.min_seq_k)
        if d.same_seq:
            sq = sk
        else:
            sq = r.seq_q if r.seq_q is not None else _random_seq(rng, d, "q", None, 1)
        head_dim = int(d.head_dims[int(rng.integers(0, len(d.head_dims)))])
    else:
        n = int(rng_or_size)
        if n < 1:
            from ._validate import InvalidArgument

            raise InvalidArgument(f"size={n} must be >= 1 (a nominal sequence length)")
        sizes = _sizes(r, n, d.same_seq)
        if sizes is None:
            return None
        sq0, sk0 = sizes
        batch, heads, head_dim = 1, d.max_heads, d.head_dims[-1]
        sk = r.seq_k if r.seq_k is not None else fit_seq(d, which_k, sk0, at_least=r.min_seq_k)
        if sk is None:
            return None
        sq = sk if d.same_seq else (r.seq_q if r.seq_q is not None else fit_seq(d, "q", sq0))
        if sq is None:
            return None
    kv_heads = None  # grouped at a nominal size: the generator draws a proper divisor
    if r.min_heads >= 2 and isinstance(rng_or_size, np.random.Generator):
        divisors = [g for g in range(1, heads) if heads % g == 0]
        kv_heads = divisors[int(rng_or_size.integers(0, len(divisors)))]
    return dict(batch=batch, heads=heads, kv_heads=kv_heads, seq_q=int(sq), seq_k=int(sk),
                head_dim=int(head_dim))


def _random_seq(rng: np.random.Generator, d: DomainSpec, which: str, fixed: int | None,
                at_least: int) -> int:
    if fixed is not None:
        return fixed
    lo, hi = seq_bounds(d, which)  # type: ignore[misc]  # not excluded: bounds exist
    m = d.seq_multiple
    lo = max(lo, -(-at_least // m) * m)  # lo and hi are multiples of m, lo >= m
    return random_length(rng, lo // m, hi // m) * m
