"""Adversarial attention inputs: q, k, v, an optional mask, causal and scale.

Shapes follow the kernel contract (docs/conventions.md): q ``[B, H, Sq, D]``, k and v
``[B, Hkv, Sk, D]`` (Hkv = H unless grouped-query), a bool ``mask`` broadcastable to
``[B, H, Sq, Sk]`` with True = the query may attend to the key, ``causal`` and ``scale``
(None = 1/sqrt(D)). A mask and ``causal=True`` are never combined (SDPA refuses the pair).
Causal cases do not choose an alignment: top-left and bottom-right are the kernel's declared
convention, and the same ``Sq != Sk`` input serves both.

As for softmax rows, Hypothesis draws a small recipe (family, shape, flags, a seed) and numpy
fills the tensors (:func:`generate_attention`), so shrinking goes towards batch 1, one head,
short sequences, the first head dim, no mask, not causal, default scale and seed 0.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from onlinesm.dtypes import FloatFormat

from ._validate import InvalidArgument, check_bool, check_dtype, check_families, check_int
from .domain import DomainSpec, read_domain, seq_bounds
from .lengths import row_lengths
from .shapes import LEADING_TILE, SHAPE_RULES, family_excluded, shape_violation

__all__ = [
    "ATTENTION_FAMILIES",
    "ALL_HEAD_DIMS",
    "AttentionCase",
    "attention_inputs",
    "attention_strategy",
    "generate_attention",
]

#: Family name -> what it generates and which bug class it exposes.
ATTENTION_FAMILIES: dict[str, str] = {
    "gaussian": "q, k, v ~ N(0, 1), sometimes with a random mask (every query sees a key) or "
                "causal: the baseline",
    "outliers": "FlashAttention-3's protocol, N(0,1) + N(0,100)*Bernoulli(0.001) (std-10 "
                "outliers, at least one in q and in k): catches low-precision P and scores",
    "huge_logits": "q, k ~ N(0, L) so that the logits have std L in {100, 1000, 10000}: "
                   "catches exp without the running max and overflow in the scores",
    "key_padding": "per-batch key lengths (one batch with none when B > 1) and some queries "
                   "with no visible key: catches NaN / garbage on fully masked queries",
    "causal": "causal=True with Sq != Sk: catches an off-by-(Sk - Sq) diagonal and the "
              "alignment convention (top-left vs bottom-right)",
    "decode": "Sq = 1 with a long Sk: the decode shape (FlashDecoding, split-KV)",
    "gqa": "grouped-query heads, Hkv < H dividing H: catches a wrong head -> kv-head map",
    "masked_leading_tiles": "the mask hides the first >= 64 keys for some queries: catches "
                            "exp(-inf - -inf) = NaN on fully masked leading KV tiles",
    "one_key": "Sk = 1: the output is exactly v (or the masked convention)",
    "huge_v_cancel": "v_j = ±1e4 alternating over keys, plus N(0,1), with near-uniform p: "
                     "catches accumulating P·V in low precision (cancellation)",
}

#: Head dims worth testing, powers of two and not (pass a subset as ``head_dims``).
ALL_HEAD_DIMS: tuple[int, ...] = (16, 24, 32, 40, 48, 64, 72, 80, 96, 128, 160, 192, 256)

_LEADING_TILE = LEADING_TILE
_MAX_SEQ = 2**20


@dataclasses.dataclass(frozen=True, eq=False)
class AttentionCase:
    """One attention call's inputs, with the family that made it.

    ``fn(case.q, case.k, case.v, mask=case.mask, causal=case.causal, scale=case.scale)``;
    ``recipe`` holds the arguments of :func:`generate_attention` (and the seed) that rebuild it.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None
    causal: bool
    scale: float | None
    family: str
    dtype: str = "float32"
    recipe: tuple[tuple[str, Any], ...] = ()

    def torch_args(self, device: Any = "cpu") -> tuple[tuple[Any, Any, Any], dict[str, Any]]:
        """``(q, k, v), {"mask", "causal", "scale"}`` as torch tensors on ``device``
        (imports torch): ``fn(*args, **kwargs)``."""
        import torch

        from onlinesm.dtypes import to_torch

        mask = None if self.mask is None else torch.from_numpy(self.mask.copy()).to(device)
        tensors = tuple(to_torch(a, device) for a in (self.q, self.k, self.v))
        return tensors, {"mask": mask, "causal": self.causal, "scale": self.scale}  # type: ignore[return-value]

    def __repr__(self) -> str:
        mask = None if self.mask is None else tuple(self.mask.shape)
        return (f"AttentionCase(family={self.family!r}, dtype={self.dtype!r}, "
                f"q={tuple(self.q.shape)}, k={tuple(self.k.shape)}, mask={mask}, "
                f"causal={self.causal}, scale={self.scale!r}, recipe={self.recipe!r})")


# --------------------------------------------------------------------------------------------
# numpy generation


def _round(x: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    return fmt.round(np.clip(x, -fmt.max, fmt.max))


def _random_mask(rng: np.random.Generator, b: int, h: int, sq: int, sk: int) -> np.ndarray:
    """A random mask of a random broadcastable shape in which every query sees a key."""
    shape = [(b, h, sq, sk), (b, 1, sq, sk), (1, 1, sq, sk), (b, 1, 1, sk)][rng.integers(0, 4)]
    mask = rng.random(shape) < rng.uniform(0.3, 0.9)
    keep = rng.integers(0, sk, size=shape[:-1])
    np.put_along_axis(mask, keep[..., None], True, axis=-1)
    return mask


def generate_attention(
    family: str,
    dtype: Any,
    rng: np.random.Generator,
    *,
    batch: int,
    heads: int,
    seq_q: int,
    seq_k: int,
    head_dim: int,
    kv_heads: int | None = None,
    causal: bool | None = None,
    scale: float | None = None,
    masked: bool | None = None,
    hidden: int | Sequence[int] | None = None,
) -> AttentionCase:
    """One :class:`AttentionCase` of ``family``, filled from ``rng`` (no Hypothesis needed).

    ``kv_heads`` defaults to ``heads`` (gqa: a random proper divisor). ``causal`` defaults to
    True for the causal family and False otherwise; ``masked`` (whether the gaussian-like
    families add a random mask) defaults to a coin flip. Families constrain the shape: decode
    needs ``seq_q=1``, one_key ``seq_k=1``, masked_leading_tiles ``seq_k >= 65``, gqa
    ``heads >= 2`` (the table :data:`onlinesm.strategies.shapes.SHAPE_RULES`); key_padding and
    masked_leading_tiles always carry a mask, causal never does. ``hidden`` (masked_leading_tiles
    only) pins the leading masked run: an int hides that many keys from a random half of the
    queries (as drawn), a sequence hides ``hidden[i % len(hidden)]`` keys from query i (every
    query; 0 hides none), e.g. ``hidden=(64, 128, 256)``.

    >>> case = generate_attention("decode", "bf16", np.random.default_rng(0), batch=1,
    ...                           heads=2, seq_q=1, seq_k=300, head_dim=64)
    >>> case.q.shape, case.k.dtype.name
    ((1, 2, 1, 64), 'bfloat16')
    """
    if family not in ATTENTION_FAMILIES:
        raise InvalidArgument(f"family={family!r} is not an attention family; choose from: "
                              f"{', '.join(ATTENTION_FAMILIES)}")
    fmt = check_dtype("dtype", dtype)
    b = check_int("batch", batch, min_value=1)
    h = check_int("heads", heads, min_value=1)
    sq = check_int("seq_q", seq_q, min_value=1, max_value=_MAX_SEQ)
    sk = check_int("seq_k", seq_k, min_value=1, max_value=_MAX_SEQ)
    d = check_int("head_dim", head_dim, min_value=1, max_value=1024)
    broken = shape_violation(family, seq_q=sq, seq_k=sk, heads=h)
    if broken:
        raise InvalidArgument(broken)
    if hidden is not None:
        if family != "masked_leading_tiles":
            raise InvalidArgument(f"hidden={hidden!r} is for family 'masked_leading_tiles' "
                                  f"only, not {family!r}; leave it None")
        runs = (hidden,) if isinstance(hidden, (int, np.integer)) else tuple(hidden)
        if not runs or any(isinstance(r, bool) or not 0 <= int(r) < sk for r in runs):
            raise InvalidArgument(f"hidden={hidden!r} must be run lengths in [0, seq_k - 1] = "
                                  f"[0, {sk - 1}] (one key stays visible), e.g. hidden=(64, 128)")
    if family == "gqa":
        if kv_heads is None:
            divisors = [g for g in range(1, h) if h % g == 0]
            kv_heads = divisors[rng.integers(0, len(divisors))]
    hkv = check_int("kv_heads", h if kv_heads is None else kv_heads, min_value=1, max_value=h)
    if h % hkv:
        raise InvalidArgument(f"kv_heads={hkv} must divide heads={h}")
    if family == "gqa" and hkv == h:
        raise InvalidArgument(f"kv_heads={hkv} equals heads={h}; family 'gqa' needs fewer")
    if causal is None:
        causal = family == "causal"
    causal = check_bool("causal", causal)
    if family == "causal" and not causal:
        raise InvalidArgument("causal=False contradicts family 'causal'; leave causal=None")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)
                                  and scale > 0):
        raise InvalidArgument(f"scale={scale!r} must be a positive finite number, or None")

    def normal(*shape: int, std: float = 1.0) -> np.ndarray:
        return rng.standard_normal(shape) * std

    q_shape, kv_shape = (b, h, sq, d), (b, hkv, sk, d)
    q, k, v = normal(*q_shape), normal(*kv_shape), normal(*kv_shape)
    mask: np.ndarray | None = None

    if family == "outliers":
        # FlashAttention-3: N(0,1) + N(0,100) * Bernoulli(0.001); at least one outlier in q, k
        for t in (q, k, v):
            hit = rng.random(t.shape) < 0.001
            t += normal(*t.shape, std=10.0) * hit
        for t in (q, k):
            # set, not added: added to an outlier of the other sign it could cancel (a k of
            # -10.26 became -0.05)
            flat = t.reshape(-1)
            flat[rng.integers(0, flat.size)] = 10.0 * rng.choice((-1.0, 1.0)) * (
                1.0 + abs(rng.standard_normal()))
    elif family == "huge_logits":
        logit_std = float(10.0 ** rng.integers(2, 5))  # 1e2, 1e3, 1e4
        std = math.sqrt(logit_std)  # s = q.k / sqrt(D) has std ~ std**2
        q, k = normal(*q_shape, std=std), normal(*kv_shape, std=std)
    elif family == "huge_v_cancel":
        magnitude = 1e4
        signs = np.where(np.arange(sk) % 2 == 0, 1.0, -1.0)[:, None]
        v = magnitude * signs + normal(*kv_shape)
        q, k = normal(*q_shape, std=0.1), normal(*kv_shape, std=0.1)  # p near uniform
    elif family == "key_padding":
        lengths = rng.integers(0, sk + 1, size=b)
        if b > 1:
            lengths[rng.integers(0, b)] = 0  # a whole batch with no key
        mask = np.broadcast_to(np.arange(sk) < lengths[:, None, None, None],
                               (b, 1, sq, sk)).copy()
        blank = rng.random(sq) < 0.25
        blank[rng.integers(0, sq)] = True  # at least one query sees nothing in every batch
        mask[:, :, blank, :] = False
    elif family == "masked_leading_tiles":
        mask = np.ones((b, 1, sq, sk), dtype=bool)
        if hidden is None or isinstance(hidden, (int, np.integer)):
            if hidden is None:
                hidden_options = [p for p in (64, 65, 127, 128, 129, 255, 256, 257) if p < sk]
                hidden = hidden_options[rng.integers(0, len(hidden_options))]
            rows = rng.random(sq) < 0.5
            rows[rng.integers(0, sq)] = True
            mask[:, :, rows, :int(hidden)] = False
        else:  # one run per query, cycling through the given lengths
            for i in range(sq):
                mask[:, :, i, :int(hidden[i % len(hidden)])] = False

    if family in ("gaussian", "outliers", "huge_logits", "gqa", "decode", "one_key",
                  "huge_v_cancel"):
        if masked is None:
            masked = (not causal) and rng.random() < 1 / 3
        if masked and causal:
            raise InvalidArgument("masked=True with causal=True: pass one of them, not both")
        if masked:
            mask = _random_mask(rng, b, h, sq, sk)
    elif masked is not None and masked != (mask is not None):
        raise InvalidArgument(f"masked={masked!r} contradicts family {family!r}; leave it None")
    if mask is not None and causal:
        raise InvalidArgument(f"causal=True with family {family!r}, which carries a mask; "
                              "pass causal=False")

    recipe = (("batch", b), ("heads", h), ("kv_heads", hkv), ("seq_q", sq), ("seq_k", sk),
              ("head_dim", d))
    return AttentionCase(q=_round(q, fmt), k=_round(k, fmt), v=_round(v, fmt), mask=mask,
                         causal=causal, scale=None if scale is None else float(scale),
                         family=family, dtype=fmt.name, recipe=recipe)


# --------------------------------------------------------------------------------------------
# the Hypothesis strategy


def _seqs(lo: int, hi: int, m: int) -> st.SearchStrategy[int]:
    """Lengths in [lo, hi] that are multiples of ``m`` (lo, hi multiples of m), clustered at
    tile sizes: for m = 1 exactly :func:`row_lengths`, else m x row_lengths(lo/m, hi/m)."""
    if m == 1:
        return row_lengths(min_len=lo, max_len=hi)
    return row_lengths(min_len=lo // m, max_len=hi // m).map(lambda k: k * m)


#: Above this many query-key pairs per example (B·H·Sq·Sk), batch and heads drop to 1
#: (grouped heads keep theirs): long keys at small batch, so a default check stays in budget.
#: The old largest shape (2 x 4 x 64 x 96) is below it, so its draws are unchanged.
WORK_CAP: int = 2 * 4 * 64 * 96


def _strategy(fmt: FloatFormat, d: DomainSpec, fams: tuple[str, ...]) -> st.SearchStrategy[AttentionCase]:
    """The Hypothesis strategy proper: every draw lies inside ``d`` (already validated)."""
    m = d.seq_multiple
    q_lo, q_hi = seq_bounds(d, "q")  # type: ignore[misc]  # families were checked
    k_lo, k_hi = seq_bounds(d, "k")  # type: ignore[misc]
    both = seq_bounds(d, "both") if d.same_seq else None
    dims = d.head_dims
    scales = st.sampled_from((None, 1.0, 0.5, 0.125))

    @st.composite
    def _cases(draw: st.DrawFn) -> AttentionCase:
        family = draw(st.sampled_from(fams))
        rule = SHAPE_RULES[family]
        b = draw(st.integers(1, d.max_batch))
        if family == "gqa":
            h = draw(st.integers(2, d.max_heads))
            hkv: int | None = draw(st.sampled_from([g for g in range(1, h) if h % g == 0]))
        else:
            h, hkv = draw(st.integers(1, d.max_heads)), None
        # sequence lengths, as the family's rule and the domain require
        if family == "decode":  # Sq = 1 (seq_multiple = 1, not same_seq: else excluded)
            sq = 1
            lo = max(2, k_lo)
            sk = draw(st.one_of(st.just(k_hi), row_lengths(min_len=lo, max_len=k_hi)))
        elif family == "one_key":
            sq, sk = (1 if d.same_seq else draw(_seqs(q_lo, q_hi, m))), 1
        elif d.same_seq:
            lo, hi = both  # type: ignore[misc]
            lo = max(lo, -(-rule.min_seq_k // m) * m)
            sq = sk = draw(_seqs(lo, hi, m))
        elif family == "masked_leading_tiles":
            sk = draw(_seqs(max(k_lo, -(-rule.min_seq_k // m) * m), k_hi, m))
            sq = draw(_seqs(q_lo, q_hi, m))
        else:
            sq = draw(_seqs(q_lo, q_hi, m))
            sk = draw(_seqs(k_lo, k_hi, m))
            if family == "causal" and sq == sk:  # Sq != Sk where the domain allows it
                if sk + m <= k_hi:
                    sk += m
                elif sk - m >= k_lo:
                    sk -= m
                elif sq + m <= q_hi:
                    sq += m
                elif sq - m >= q_lo:
                    sq -= m
        if b * h * sq * sk > WORK_CAP:
            b = 1
            if family != "gqa":
                h = 1
        d_ = draw(st.sampled_from(dims))
        causal: bool | None = None
        masked: bool | None = None
        if rule.mask == "maybe":
            causal = d.allow_causal and draw(st.booleans())
            masked = d.allow_mask and not causal and draw(st.booleans())
        scale = draw(scales)
        seed = draw(st.integers(0, 2**32 - 1))
        case = generate_attention(family, fmt, np.random.default_rng(seed), batch=b, heads=h,
                                  seq_q=sq, seq_k=sk, head_dim=d_, kv_heads=hkv, causal=causal,
                                  scale=scale, masked=masked)
        return dataclasses.replace(case, recipe=case.recipe + (("causal", case.causal),
                                                                ("masked", masked),
                                                                ("scale", scale),
                                                                ("seed", seed)))

    return _cases()


def _families_in(d: DomainSpec, families: Sequence[str] | None) -> tuple[str, ...]:
    """The families to draw: ``families`` (None: every family the domain admits); naming one
    the domain rules out is an error that says why and what to change."""
    why = {f: family_excluded(f, dataclasses.replace(d, families=None)) for f in ATTENTION_FAMILIES}
    fams = check_families("families", families, ATTENTION_FAMILIES,
                          default=[f for f, reason in why.items() if not reason])
    if not fams:
        raise InvalidArgument("no attention family can be generated inside this domain: "
                              + "; ".join(f"{f}: {r}" for f, r in why.items()))
    for f in fams:
        if why[f]:
            raise InvalidArgument(f"families={list(fams)!r} includes {f!r}, but {why[f]}; "
                                  f"change that setting or drop {f!r}")
    return fams


def attention_strategy(dtype: Any, domain: Any) -> st.SearchStrategy[AttentionCase]:
    """:class:`AttentionCase` examples of ``dtype``, every one inside ``domain``.

    ``domain``: any object with the attributes of ``onlinesm.declarations.Domain`` (or
    :func:`onlinesm.strategies.default_domain`); its ``families`` (attention names only; None:
    every family the domain admits, see :func:`onlinesm.strategies.family_excluded`), head
    dims, batch, heads, ``min_seq_*..max_seq_*`` in multiples of ``seq_multiple``,
    ``same_seq``, ``allow_mask`` / ``allow_causal`` / ``allow_gqa`` bound every draw.

    >>> from onlinesm.strategies import default_domain
    >>> case = attention_strategy("bf16", default_domain(seq_multiple=64, max_seq_q=64)).example()
    >>> case.q.shape[2] % 64, case.k.shape[2] % 64
    (0, 0)
    """
    fmt = check_dtype("dtype", dtype)
    d = read_domain(domain)
    names = None if d.families is None else [f for f in d.families if f in ATTENTION_FAMILIES]
    if names is not None and not names:
        raise InvalidArgument(f"domain.families={list(d.families or ())!r} names no attention "
                              f"family; add some of: {', '.join(ATTENTION_FAMILIES)}")
    return _strategy(fmt, d, _families_in(d, names))


def attention_inputs(
    *,
    dtype: Any = "float32",
    max_batch: int = 2,
    max_heads: int = 2,
    max_seq_q: int = 64,
    max_seq_k: int = 64,
    head_dims: Sequence[int] = (16, 32, 64),
    families: Sequence[str] | None = None,
    allow_mask: bool = True,
    allow_causal: bool = True,
    allow_gqa: bool = False,
    same_seq: bool = False,
    min_seq_q: int = 1,
    min_seq_k: int = 1,
    seq_multiple: int = 1,
) -> st.SearchStrategy[AttentionCase]:
    """:class:`AttentionCase` examples from the families of :data:`ATTENTION_FAMILIES`.

    ``families=None`` draws every family these arguments allow (key_padding and
    masked_leading_tiles need ``allow_mask``, the latter also Sk >= 65; causal needs
    ``allow_causal``; gqa needs ``allow_gqa`` and ``max_heads >= 2``; decode needs
    ``same_seq=False`` and Sq = 1 allowed; one_key Sk = 1 allowed: the table
    :data:`onlinesm.strategies.shapes.SHAPE_RULES`). Naming a family the arguments rule out
    is an error. ``same_seq=True`` keeps Sq == Sk (for kernels that only support that);
    Sq and Sk lie in ``min_seq_*..max_seq_*`` and are multiples of ``seq_multiple``;
    ``head_dims`` lists the head dims to draw from (see :data:`ALL_HEAD_DIMS` for 16..256
    including non-powers of two). :func:`attention_strategy` takes the same limits as one
    domain object.

    Why: gaussian q, k, v never produce a fully masked query, a masked leading KV tile, logits
    big enough to overflow exp, or V whose terms cancel; kernels break on exactly those.

    Example::

        @given(attention_inputs(dtype="bf16", allow_gqa=True, max_heads=4))
        def test_attention(case):
            o = my_attention(case.q, case.k, case.v, mask=case.mask, causal=case.causal,
                             scale=case.scale)
            ...

    Shrinks towards batch 1, one head, short sequences, the first head dim, the first family
    allowed, no mask, not causal, scale None and seed 0.
    """
    fmt = check_dtype("dtype", dtype)
    ints = dict(max_batch=(max_batch, 1024), max_heads=(max_heads, 1024),
                max_seq_q=(max_seq_q, _MAX_SEQ), max_seq_k=(max_seq_k, _MAX_SEQ),
                min_seq_q=(min_seq_q, _MAX_SEQ), min_seq_k=(min_seq_k, _MAX_SEQ),
                seq_multiple=(seq_multiple, _MAX_SEQ))
    for name, (value, top) in ints.items():
        check_int(name, value, min_value=1, max_value=top)
    flags = dict(allow_mask=allow_mask, allow_causal=allow_causal, allow_gqa=allow_gqa,
                 same_seq=same_seq)
    for name, value in flags.items():
        check_bool(name, value)
    if isinstance(head_dims, (int, str)) or not isinstance(head_dims, Sequence) or not head_dims:
        raise InvalidArgument(f"head_dims={head_dims!r} must be a non-empty sequence of ints, "
                              f"e.g. head_dims=(64,) or head_dims={ALL_HEAD_DIMS}")
    dims = tuple(check_int(f"head_dims[{i}]", d, min_value=1, max_value=1024)
                 for i, d in enumerate(head_dims))
    for lo, hi in (("min_seq_q", "max_seq_q"), ("min_seq_k", "max_seq_k")):
        if locals()[lo] > locals()[hi]:
            raise InvalidArgument(f"{lo}={locals()[lo]} is greater than {hi}={locals()[hi]}, "
                                  f"so there is nothing to draw; raise {hi} or lower {lo}")
    d = DomainSpec(dtypes=(fmt.name,), head_dims=dims, max_batch=max_batch,
                   max_heads=max_heads, min_seq_q=min_seq_q, max_seq_q=max_seq_q,
                   min_seq_k=min_seq_k, max_seq_k=max_seq_k, seq_multiple=seq_multiple, **flags)
    return _strategy(fmt, d, _families_in(d, families))
