"""The family registry: one record per softmax and attention family, and the explicit cases.

What: :data:`FAMILIES` maps a family name to a :class:`Family` (name, op, description, the bug
class it catches, its generator, its shape rule). From the registry and a *domain* (any object
with the attributes of ``onlinesm.declarations.Domain``; :func:`default_domain` gives the
recommended one):

- :func:`explicit_softmax_batches`, :func:`explicit_attention_cases`: the explicit examples
  every property sees first (a row / a case of every family the domain admits, at shapes as
  large as real tiles where the domain allows);
- :func:`softmax_strategy`, :func:`attention_strategy`: the Hypothesis strategies, every draw
  inside the domain;
- :func:`family_excluded` (why a family cannot be generated inside the domain) and
  :func:`family_shape` (a shape for it), re-exported from :mod:`.shapes`, where the one table
  of shape rules lives.

Why: random draws may miss a family (and Hypothesis's draws change with the code it has
loaded), so each property first sees every family once; and a kernel that only breaks when a
whole 128-key or 1024-column tile is masked is only caught if such an input is certain.

Example:
    >>> from onlinesm.strategies import default_domain
    >>> FAMILIES["decode"].op, FAMILIES["masked_prefix"].op
    ('attention', 'softmax')
    >>> [c.family for c in explicit_attention_cases("float32", default_domain())][:3]
    ['gaussian', 'outliers', 'huge_logits']
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ._validate import InvalidArgument, check_dtype
from .attention import ATTENTION_FAMILIES, AttentionCase, attention_strategy, generate_attention
from .domain import DomainSpec, fit_len, fit_seq, read_domain
from .families import DEFAULT_FAMILIES, OPT_IN_FAMILIES, SOFTMAX_FAMILIES, generate_row
from .shapes import LEADING_RUNS, SHAPE_RULES, ShapeRule, family_excluded, family_shape
from .softmax import SoftmaxCase, softmax_cases

__all__ = ["Family", "FAMILIES", "REGISTRY", "explicit_softmax_batches", "explicit_attention_cases",
           "softmax_strategy", "attention_strategy", "family_excluded", "family_shape",
           "SOFTMAX_BASE_LENGTHS", "SOFTMAX_TILE_LENGTHS", "ATTENTION_TILE_SEQ_K"]

#: The bug class each family catches (the description says what it generates).
_CATCHES: dict[str, str] = {
    # softmax
    "gaussian": "baseline accuracy; a missing max subtraction at huge scales",
    "huge_max": "exp(x) without the shift; x - m overflow",
    "huge_spread": "low-precision accumulation; small terms lost in long rows",
    "below_sentinel": "a running max initialised to a finite sentinel (-1e30, dtype min)",
    "masked_prefix": "exp(-inf - -inf) = NaN on a fully masked first tile",
    "masked_suffix": "NaN or a wrong rescale from a fully masked last tile",
    "masked_scattered": "masks on the wrong lanes; -inf leaking into sums",
    "fully_masked": "garbage instead of the declared fully-masked convention",
    "one_finite": "anything but an exact one-hot answer",
    "ties": "argmax-style shortcuts; the max counted twice",
    "constant": "anything but an exactly uniform answer",
    "monotone": "a missing or misordered rescale exp(m_old - m_new)",
    "tiny_diff": "cancellation in x - m in low precision; a max taken after rounding",
    "subnormal": "flush-to-zero; denormal-unsafe comparisons",
    "nonfinite": "a silent finite value where NaN / +inf must give NaN",
    # attention
    "outliers": "low-precision P and scores (FlashAttention-3's outlier protocol)",
    "huge_logits": "exp without the running max; overflow in the scores",
    "key_padding": "NaN / garbage on queries with no visible key",
    "causal": "an off-by-(Sk - Sq) diagonal; the causal alignment convention",
    "decode": "the Sq = 1 decode path (FlashDecoding, split-KV)",
    "gqa": "a wrong query-head -> kv-head map",
    "masked_leading_tiles": "exp(-inf - -inf) = NaN on fully masked leading KV tiles",
    "one_key": "anything but exactly v (Sk = 1)",
    "huge_v_cancel": "P·V accumulated in low precision (cancellation)",
}
_ATTENTION_CATCHES = {"gaussian": "baseline accuracy of o and lse, random masks and causal"}

#: Softmax row lengths of the explicit batches: just past a 128 tile, and many tiles.
SOFTMAX_BASE_LENGTHS: tuple[int, ...] = (130, 1000)
#: Longer explicit rows around 1024-8192-wide tiles, when the domain reaches past 1024.
SOFTMAX_TILE_LENGTHS: tuple[int, ...] = (1023, 1025, 2049, 4097, 8193)
_WIDE_TILES: tuple[int, ...] = (1024, 2048, 4096, 8192)
#: The key length of the tile-sized explicit attention cases (two 128 tiles + a tail of 44).
ATTENTION_TILE_SEQ_K: int = 300


@dataclasses.dataclass(frozen=True)
class Family:
    """One strategy family: what it generates, what it catches, how to make it.

    ``generator``: for softmax ``generator(length, dtype, rng, **params)`` (``generate_row``
    with the family bound), for attention ``generator(dtype, rng, **shape)``
    (``generate_attention``); ``rule``: the attention shape rule (None for softmax).

    >>> FAMILIES["one_key"].rule.seq_k
    1
    """

    name: str
    op: str
    description: str
    catches: str
    generator: Callable[..., Any]
    rule: ShapeRule | None = None
    opt_in: bool = False

    def excluded(self, domain: Any) -> str | None:
        """Why this family cannot be generated inside ``domain`` (None: it can)."""
        return family_excluded(self.name, domain)


def _build() -> dict[tuple[str, str], Family]:
    table: dict[tuple[str, str], Family] = {}
    for name, text in SOFTMAX_FAMILIES.items():
        table["softmax", name] = Family(name, "softmax", text, _CATCHES[name],
                                        functools.partial(generate_row, name),
                                        opt_in=name in OPT_IN_FAMILIES)
    for name, text in ATTENTION_FAMILIES.items():
        table["attention", name] = Family(name, "attention", text,
                                          _ATTENTION_CATCHES.get(name, _CATCHES[name]),
                                          functools.partial(generate_attention, name),
                                          rule=SHAPE_RULES[name])
    return table


#: (op, name) -> Family: every family of both ops ("gaussian" is in both).
REGISTRY: dict[tuple[str, str], Family] = _build()
#: name -> Family; "gaussian" is the attention record here (``REGISTRY`` holds both).
FAMILIES: dict[str, Family] = {name: fam for (_, name), fam in REGISTRY.items()}
assert set(SHAPE_RULES) == set(ATTENTION_FAMILIES), "every attention family needs a shape rule"


# --------------------------------------------------------------------------------------------
# softmax


def _softmax_names(d: DomainSpec) -> list[str]:
    if d.families is None:
        return list(DEFAULT_FAMILIES) + (list(OPT_IN_FAMILIES) if d.allow_nonfinite else [])
    return [f for f in d.families if f in SOFTMAX_FAMILIES]


def _batches(rows: list[np.ndarray], names: list[str], dtype: str, max_rows: int
             ) -> list[SoftmaxCase]:
    """Rows (in order) as batches of at most ``max_rows`` rows."""
    return [SoftmaxCase(x=np.stack(rows[i:i + max_rows]), families=tuple(names[i:i + max_rows]),
                        dtype=dtype) for i in range(0, len(rows), max_rows)]


def explicit_softmax_batches(dtype: Any, domain: Any) -> list[SoftmaxCase]:
    """The explicit softmax examples: every selected family's row in batches, at lengths where
    tiled kernels branch, every batch inside ``domain`` (lengths, ``max_rows``, families).

    - rows of 130 and 1000 columns (clipped into ``min_len..max_len``): one row per family;
    - when the domain reaches past 1024 columns, also rows of 1023, 1025, 2049, 4097 and 8193
      (those in ``min_len..max_len``): one row per family, plus masked prefix and suffix rows
      whose masked run is exactly one 1024 tile and the largest whole tile below the length
      (a kernel whose 1024-wide tile goes NaN when fully masked is caught).

    Under ``len_multiple`` each length is rounded up to a multiple of it (1025 -> 1152 for
    128: one tile past 1024) and clipped into the domain; a length met twice is kept once.
    Rows are generated in order from ``numpy.random.default_rng(0)``; a batch holds at most
    ``max_rows`` rows (more rows: several batches, the same rows in the same order).

    >>> from onlinesm.strategies import default_domain
    >>> [b.x.shape for b in explicit_softmax_batches("bf16", default_domain(max_len=1024))]
    [(14, 130), (14, 1000)]
    """
    fmt = check_dtype("dtype", dtype)
    d = read_domain(domain)
    names = _softmax_names(d)
    if not names:
        return []
    rng = np.random.default_rng(0)
    out: list[SoftmaxCase] = []
    base = sorted({fit_len(d, n) for n in SOFTMAX_BASE_LENGTHS})
    wide = list(dict.fromkeys(fit_len(d, n) for n in SOFTMAX_TILE_LENGTHS  # in order, once
                              if d.max_len > 1024 and d.min_len <= n <= d.max_len))
    wide = [n for n in wide if n not in base]
    for length in base + wide:
        # the gaussian row at scale 1, the typical row: the random draws cover other scales
        rows = [generate_row(f, length, fmt, rng, scale=1.0 if f == "gaussian" else None)
                for f in names]
        fams = list(names)
        if length in wide:
            below = [t for t in _WIDE_TILES if t < length]  # whole tiles that fit, 1 finite left
            runs = sorted({below[0], below[-1]}) if below else []
            for fam, key in (("masked_prefix", "prefix"), ("masked_suffix", "suffix")):
                if fam in names:
                    for run in runs:
                        rows.append(generate_row(fam, length, fmt, rng, **{key: run}))
                        fams.append(fam)
        out += _batches(rows, fams, fmt.name, d.max_rows)
    return out


def softmax_strategy(dtype: Any, domain: Any) -> st.SearchStrategy[SoftmaxCase]:
    """:func:`softmax_cases` of ``dtype`` inside ``domain``: ``min_len..max_len`` columns
    (multiples of ``len_multiple``), up to ``max_rows`` rows, the domain's softmax families (None: the defaults, plus
    nonfinite when ``allow_nonfinite``).

    >>> from onlinesm.strategies import default_domain
    >>> case = softmax_strategy("fp16", default_domain(min_len=70, max_len=90)).example()
    >>> 70 <= case.x.shape[1] <= 90
    True
    """
    d = read_domain(domain)
    names = None if d.families is None else _softmax_names(d)
    if names is not None and not names:
        raise InvalidArgument(f"domain.families={list(d.families or ())!r} names no softmax "
                              f"family; add some of: {', '.join(SOFTMAX_FAMILIES)}")
    return softmax_cases(dtype=dtype, min_len=d.min_len, max_len=d.max_len,
                         max_rows=d.max_rows, families=names, len_multiple=d.len_multiple,
                         allow_nonfinite=d.allow_nonfinite or bool(names and "nonfinite" in names))


# --------------------------------------------------------------------------------------------
# attention


def _legacy_case(fam: str, fmt: Any, d: DomainSpec, rng: np.random.Generator) -> AttentionCase | None:
    """The first explicit case of ``fam``: Sq 20 (decode 1), Sk 80 (one_key 1), fitted into
    the domain; one head (gqa: 4 over 2), batch 1 (key_padding 2), the largest head dim."""
    r = SHAPE_RULES[fam]
    which_k = "both" if d.same_seq else "k"
    sk = r.seq_k if r.seq_k is not None else fit_seq(d, which_k, min(d.max_seq_k, 80),
                                                     at_least=r.min_seq_k)
    if d.same_seq:
        sq = sk
    else:
        sq = r.seq_q if r.seq_q is not None else fit_seq(d, "q", min(d.max_seq_q, 20))
    if sq is None or sk is None:
        return None
    heads = (4 if d.max_heads >= 4 else 2) if fam == "gqa" else 1
    return generate_attention(fam, fmt, rng, batch=min(2, d.max_batch) if fam == "key_padding" else 1,
                              heads=heads, kv_heads=heads // 2 if fam == "gqa" else None,
                              seq_q=sq, seq_k=sk, head_dim=int(d.head_dims[-1]),
                              masked=None if r.mask == "always" else False)


def _tile_cases(names: list[str], fmt: Any, d: DomainSpec) -> list[AttentionCase]:
    """Cases at real tile sizes: Sk near 300 (past two 128-key tiles, a ragged tail), the
    largest head dim, batch 1, one head: leading masked runs of 64, 128, 256 keys ± 1 (one
    query each), decode over the long Sk, and a plain gaussian case."""
    which_k = "both" if d.same_seq else "k"
    sk = fit_seq(d, which_k, min(ATTENTION_TILE_SEQ_K, d.max_seq_k))
    if sk is None or sk <= 129:  # no room for a hidden 128-key tile plus a visible key
        return []
    rng = np.random.default_rng(1)
    dim = int(d.head_dims[-1])
    out = []
    if "masked_leading_tiles" in names:
        runs = tuple(r for r in LEADING_RUNS if r < sk) + (0,)
        sq = sk if d.same_seq else fit_seq(d, "q", len(runs))
        if sq is not None:
            out.append(generate_attention("masked_leading_tiles", fmt, rng, batch=1, heads=1,
                                          seq_q=sq, seq_k=sk, head_dim=dim, hidden=runs))
    if "decode" in names:
        out.append(generate_attention("decode", fmt, rng, batch=1, heads=1, seq_q=1, seq_k=sk,
                                      head_dim=dim, masked=False))
    if "gaussian" in names:
        sq = sk if d.same_seq else fit_seq(d, "q", 16)
        if sq is not None:
            out.append(generate_attention("gaussian", fmt, rng, batch=1, heads=1, seq_q=sq,
                                          seq_k=sk, head_dim=dim, masked=False))
    return out


def explicit_attention_cases(dtype: Any, domain: Any) -> list[AttentionCase]:
    """The explicit attention examples: one case per family the domain admits, then cases at
    real tile sizes, every one inside ``domain``.

    - per family (in :data:`ATTENTION_FAMILIES` order, from ``default_rng(0)``): Sq = 20
      (decode 1), Sk = 80 (one_key 1), fitted into the domain; batch 1 (key_padding 2), one
      head (gqa 4 over 2 kv heads), the largest head dim, no random mask;
    - when the domain allows Sk > 129: Sk = 300 fitted into the domain (from
      ``default_rng(1)``): a masked_leading_tiles case whose query i hides the first
      63, 64, 65, 127, 128, 129, 255, 256, 257 keys (those < Sk; the last query hides
      none), a decode case and a gaussian case (Sq = 16).

    Families the domain excludes (:func:`family_excluded`) are left out, never replaced.

    >>> from onlinesm.strategies import default_domain
    >>> c = explicit_attention_cases("bf16", default_domain())[-3]
    >>> c.family, c.q.shape, c.k.shape
    ('masked_leading_tiles', (1, 1, 10, 128), (1, 1, 300, 128))
    """
    fmt = check_dtype("dtype", dtype)
    d = read_domain(domain)
    names = [f for f in (d.families or ATTENTION_FAMILIES) if f in ATTENTION_FAMILIES]
    names = [f for f in names if family_excluded(f, d) is None]
    rng = np.random.default_rng(0)
    cases = []
    for fam in names:
        case = _legacy_case(fam, fmt, d, rng)
        if case is not None:
            cases.append(case)
    return cases + _tile_cases(names, fmt, d)
