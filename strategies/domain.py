"""The domain a kernel supports, read by duck typing, and the sequence lengths it allows.

What: :class:`DomainSpec` holds the fields of ``onlinesm.declarations.Domain`` (dtypes,
families, lengths, sizes, flags); :func:`read_domain` turns *any* object with those attributes
(a ``Domain``, a ``DomainSpec``, a ``types.SimpleNamespace``) into a validated ``DomainSpec``;
:func:`default_domain` is the recommended default (real tile sizes: D = 128, keys past two
128-key tiles plus a ragged tail, softmax rows past 8192). :func:`seq_bounds` and
:func:`fit_seq` answer "which sequence lengths lie inside the domain" (``min..max``, multiples
of ``seq_multiple``).

Why duck typing: the strategies must not import the declarations module (or torch); any object
with the right attributes works, and a missing attribute is named in the error.

Example:
    >>> d = default_domain(seq_multiple=64)
    >>> seq_bounds(d, "k"), fit_seq(d, "k", 300)
    ((64, 256), 256)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ._validate import InvalidArgument, check_dtype
from .lengths import tile_bounds

__all__ = ["DomainSpec", "RECOMMENDED_DOMAIN", "LEGACY_DOMAIN", "default_domain", "read_domain",
           "seq_bounds", "fit_seq", "len_bounds", "fit_len", "domain_families"]

#: The recommended defaults, field = value (the fields of ``onlinesm.declarations.Domain``).
#: Real attention kernels use D = 128 and key tiles of 64/128/256: Sk reaches 300 (two whole
#: 128-key tiles plus a ragged tail of 44; 4 x 64 + 44), so a leading masked run of 256 + 1
#: keys still leaves visible keys; Sq stays at 32 (the work grows with Sq x Sk: the Triton
#: interpreter's default check fits its budget). Softmax rows reach 8193 (two 4096 tiles plus one), so the
#: explicit rows at 1024 ± 1, 2049, 4097 and 8193 lie inside; 16 rows hold one row of every
#: softmax family (15 with nonfinite) in one explicit batch.
RECOMMENDED_DOMAIN: dict[str, Any] = dict(
    dtypes=("float32", "bfloat16", "float16"),
    families=None,
    allow_nonfinite=False,
    min_len=1,
    max_len=8193,
    max_rows=16,
    len_multiple=1,
    head_dims=(16, 64, 128),
    max_batch=2,
    max_heads=4,
    min_seq_q=1,
    max_seq_q=32,
    min_seq_k=1,
    max_seq_k=300,
    seq_multiple=1,
    allow_mask=True,
    allow_causal=True,
    allow_gqa=False,
    same_seq=False,
)

#: The defaults before real tile sizes (max_len 1024, 8 rows, Sk <= 96, D <= 64); the explicit
#: cases of this domain are pinned bit for bit (tests/test_explicit_pins.py).
LEGACY_DOMAIN: dict[str, Any] = dict(
    RECOMMENDED_DOMAIN, max_len=1024, max_rows=8, head_dims=(16, 32, 64), max_seq_q=64,
    max_seq_k=96)

_INT_FIELDS = ("min_len", "max_len", "max_rows", "len_multiple", "max_batch", "max_heads",
               "min_seq_q", "max_seq_q", "min_seq_k", "max_seq_k", "seq_multiple")
#: Fields added since the first release: an object without one reads as its default.
_OPTIONAL_FIELDS = {"len_multiple": 1}
_BOOL_FIELDS = ("allow_nonfinite", "allow_mask", "allow_causal", "allow_gqa", "same_seq")


@dataclasses.dataclass(frozen=True)
class DomainSpec:
    """The inputs a kernel supports, as the strategies read them (see module docstring).

    Same fields and meaning as ``onlinesm.declarations.Domain``; validated when built.

    >>> DomainSpec(**RECOMMENDED_DOMAIN).max_seq_k
    300
    """

    dtypes: tuple[str, ...] = RECOMMENDED_DOMAIN["dtypes"]
    families: tuple[str, ...] | None = None
    allow_nonfinite: bool = False
    min_len: int = RECOMMENDED_DOMAIN["min_len"]
    max_len: int = RECOMMENDED_DOMAIN["max_len"]
    max_rows: int = RECOMMENDED_DOMAIN["max_rows"]
    len_multiple: int = RECOMMENDED_DOMAIN["len_multiple"]
    head_dims: tuple[int, ...] = RECOMMENDED_DOMAIN["head_dims"]
    max_batch: int = RECOMMENDED_DOMAIN["max_batch"]
    max_heads: int = RECOMMENDED_DOMAIN["max_heads"]
    min_seq_q: int = RECOMMENDED_DOMAIN["min_seq_q"]
    max_seq_q: int = RECOMMENDED_DOMAIN["max_seq_q"]
    min_seq_k: int = RECOMMENDED_DOMAIN["min_seq_k"]
    max_seq_k: int = RECOMMENDED_DOMAIN["max_seq_k"]
    seq_multiple: int = RECOMMENDED_DOMAIN["seq_multiple"]
    allow_mask: bool = True
    allow_causal: bool = True
    allow_gqa: bool = False
    same_seq: bool = False

    def __post_init__(self) -> None:
        dtypes = tuple(check_dtype("domain.dtypes", d).name for d in self.dtypes)
        if not dtypes:
            raise InvalidArgument("domain.dtypes is empty; give at least one, e.g. ('float32',)")
        object.__setattr__(self, "dtypes", dtypes)
        if self.families is not None:
            if isinstance(self.families, str):
                raise InvalidArgument(f"domain.families={self.families!r} must be a list of "
                                      f"names, not one string; use ({self.families!r},)")
            object.__setattr__(self, "families", tuple(self.families))
        dims = tuple(self.head_dims)
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= 1024:
                raise InvalidArgument(f"domain.head_dims={dims!r} holds {d!r}; head dims are "
                                      "ints in [1, 1024], e.g. (64, 128)")
        if not dims:
            raise InvalidArgument("domain.head_dims is empty; give at least one, e.g. (128,)")
        object.__setattr__(self, "head_dims", dims)
        for name in _INT_FIELDS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(f"domain.{name}={v!r} must be an int >= 1")
        for lo, hi in (("min_len", "max_len"), ("min_seq_q", "max_seq_q"),
                       ("min_seq_k", "max_seq_k")):
            if getattr(self, lo) > getattr(self, hi):
                raise InvalidArgument(f"domain.{lo}={getattr(self, lo)} is above "
                                      f"{hi}={getattr(self, hi)}; need {lo} <= {hi}")
        for name in _BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgument(f"domain.{name}={getattr(self, name)!r} must be True or False")
        len_bounds(self)  # some row length is a multiple of len_multiple


_FIELDS = tuple(f.name for f in dataclasses.fields(DomainSpec))


def default_domain(**overrides: Any) -> DomainSpec:
    """The recommended default domain (:data:`RECOMMENDED_DOMAIN`), with ``overrides``.

    >>> default_domain(same_seq=True).same_seq
    True
    """
    unknown = sorted(set(overrides) - set(_FIELDS))
    if unknown:
        raise InvalidArgument(f"default_domain() got unknown field(s) {unknown}; the fields "
                              f"are: {', '.join(_FIELDS)}")
    return DomainSpec(**{**RECOMMENDED_DOMAIN, **overrides})


def read_domain(domain: Any) -> DomainSpec:
    """``domain`` (any object with the attributes of ``Domain``) as a validated DomainSpec.

    None means :func:`default_domain`. A missing attribute is an error naming it.
    """
    if domain is None:
        return default_domain()
    if isinstance(domain, DomainSpec):
        return domain
    missing = [f for f in _FIELDS if not hasattr(domain, f) and f not in _OPTIONAL_FIELDS]
    if missing:
        raise InvalidArgument(
            f"domain={domain!r} lacks the attribute(s) {missing}; pass an "
            "onlinesm.declarations.Domain, onlinesm.strategies.default_domain(...), or any "
            f"object with the attributes {', '.join(_FIELDS)}")
    values = {f: getattr(domain, f, _OPTIONAL_FIELDS.get(f)) for f in _FIELDS}
    for f in ("dtypes", "head_dims"):
        values[f] = tuple(values[f])
    return DomainSpec(**values)


def domain_families(domain: DomainSpec, registry: dict[str, Any]) -> tuple[str, ...] | None:
    """The domain's families that belong to ``registry`` (None: the domain names none, so all).

    Names of the other op are ignored; a name in neither is an error.
    """
    if domain.families is None:
        return None
    return tuple(f for f in domain.families if f in registry)


def seq_bounds(domain: DomainSpec, which: str) -> tuple[int, int] | None:
    """(smallest, largest) allowed Sq (``which="q"``) or Sk (``"k"``), or None when no length
    in ``min..max`` is a multiple of ``seq_multiple``. ``"both"``: a common Sq = Sk."""
    m = domain.seq_multiple
    if which == "q":
        lo, hi = domain.min_seq_q, domain.max_seq_q
    elif which == "k":
        lo, hi = domain.min_seq_k, domain.max_seq_k
    elif which == "both":
        lo = max(domain.min_seq_q, domain.min_seq_k)
        hi = min(domain.max_seq_q, domain.max_seq_k)
    else:
        raise InvalidArgument(f"which={which!r} must be 'q', 'k' or 'both'")
    lo, hi = math.ceil(lo / m) * m, hi // m * m
    return (lo, hi) if lo <= hi else None


def fit_seq(domain: DomainSpec, which: str, n: int, *, at_least: int = 1) -> int | None:
    """The allowed length nearest to ``n`` that is ``>= at_least`` (None: there is none).

    >>> fit_seq(default_domain(min_seq_k=8, seq_multiple=8), "k", 21)
    16
    """
    b = seq_bounds(domain, which)
    if b is None:
        return None
    lo, hi = b
    m = domain.seq_multiple
    lo = max(lo, math.ceil(at_least / m) * m)
    if lo > hi:
        return None
    return min(max(n // m * m, lo), hi)


def len_bounds(domain: DomainSpec) -> tuple[int, int]:
    """(shortest, longest) softmax row length: the multiples of ``len_multiple`` in
    ``min_len..max_len``; InvalidArgument when there is none.

    >>> len_bounds(default_domain(len_multiple=128))
    (128, 8192)
    """
    return tile_bounds(domain.min_len, domain.max_len, domain.len_multiple)


def fit_len(domain: DomainSpec, n: int) -> int:
    """The allowed row length at or just above ``n``, clipped into the domain: rounded up to a
    multiple of ``len_multiple``, so that a length one past a tile stays past one.

    >>> fit_len(default_domain(len_multiple=128), 1025), fit_len(default_domain(), 1025)
    (1152, 1025)
    """
    lo, hi = len_bounds(domain)
    m = domain.len_multiple
    return min(max(math.ceil(n / m) * m, lo), hi)
