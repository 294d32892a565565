"""What a kernel declares about itself, and how a run goes, as values.

:class:`Numerics` (its arithmetic: the bound's terms), :class:`Conventions` (what its special
rows give), :class:`Domain` (the inputs it supports: nothing outside is generated) and
:class:`RunOptions` (how hard and where to look). Adding a declaration is adding a field here,
a flag in :mod:`onlinesm.options`, and its use where it is checked (docs/INTERNALS.md).

What: frozen dataclasses. They validate when built (a wrong value raises ``ValueError``
with one line ``name=value ...`` that says the fix), round-trip through JSON
(``to_json()`` / ``from_json()``, as saved counterexamples and reports store them), and
resolve ``p_dtype="input"`` in one place (:meth:`Numerics.for_dtype`).

Why values: the bound a kernel is held to, and the conventions its special rows are checked
against, follow from these declarations only; check, report and replay must read the same
ones. See ``docs/conventions.md`` for the defaults and what each one means.

Example:
    >>> n = Numerics(exp="accurate", p_dtype="input")
    >>> n.for_dtype("bf16").p_dtype
    'bfloat16'
    >>> c = Conventions(fully_masked="nan", numerics=n)
    >>> Conventions.from_json(c.to_json()) == c
    True
"""

from __future__ import annotations

import dataclasses
import json
import re
import math
from typing import Any

from onlinesm.dtypes import FloatFormat, resolve
from onlinesm.errors import did_you_mean
from onlinesm.strategies.lengths import tile_bounds

__all__ = ["Numerics", "Conventions", "Domain", "RunOptions", "split_keywords", "EXP_CLASSES",
           "FULLY_MASKED", "NONFINITE", "DEFAULT_DTYPES"]

#: The dtypes a check generates unless the kernel declares others.
DEFAULT_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")

#: exp accuracy classes: (arg coefficient, exp's |z| coefficient, exp's constant, in units of
#: u of the working precision; division error in u; description).
EXP_CLASSES: dict[str, tuple[float, float, float, float, str]] = {
    "fast": (1.0, 1.25, 5.0, 4.0,
             "fast GPU exp (Triton tl.exp = ex2.approx(x·log2e)): (1.25|z| + 5)u"),
    "exp2": (2.25, 0.0, 4.2, 4.0, "ex2.approx on (x - m)·log2e: 2.05 ulp, argument 2.25u|z|"),
    "accurate": (1.0, 0.0, 4.0, 2.0, "accurate exp (libm, torch.exp): 2 ulp"),
    "exact": (1.0, 0.0, 1.0, 2.0, "correctly rounded exp: 0.5 ulp"),
}
_EXP_ALIASES = {
    "correctly_rounded": "exact", "tl.exp": "fast", "ex2.approx": "exp2", "libm": "accurate",
    "torch": "accurate",
}

#: The conventions for a fully masked row (no finite entry / no visible key).
FULLY_MASKED: tuple[str, ...] = ("zeros", "nan", "uniform", "any")
#: The conventions for a row holding NaN or +inf.
NONFINITE: tuple[str, ...] = ("nan", "any")


class _JsonRecord:
    """JSON for a declaration record: :meth:`to_json` writes its ``to_dict()``, and
    :meth:`_known_fields` reads JSON back, refusing names that are not fields."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self) -> str:
        """The record as a JSON object; ``from_json`` reads it back."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def _known_fields(cls, data: str | dict[str, Any]) -> dict[str, Any]:
        """``data`` (JSON text or its parsed dict) as a dict of this record's fields."""
        d = json.loads(data) if isinstance(data, str) else dict(data)
        fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        extra = sorted(set(d) - fields)
        if extra:
            raise ValueError(f"{cls.__name__} fields {extra} are unknown; use only {sorted(fields)}")
        return d


#: The bound tiers a check may use (:attr:`Numerics.tier`).
TIERS = ("worst-case", "probabilistic")


def format_delta(delta: float) -> str:
    """``1e-06`` written as ``1e-6``."""
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + m.group(1).replace("+", "") + m.group(2),
                  f"{delta:g}")


@dataclasses.dataclass(frozen=True)
class Numerics(_JsonRecord):
    """What a kernel declares about its arithmetic; it sets the bound's terms.

    - ``accumulate``: the working precision of max/exp/sum/division and of the P·V and
      denominator accumulation (default float32, what FlashAttention and the Triton tutorials
      do). A kernel that accumulates in bf16 while declaring float32 fails, as it should.
    - ``exp``: the exp's accuracy class: ``"fast"`` (default: Triton's ``tl.exp``, error growing
      like |z|·u), ``"exp2"`` (ex2.approx with log2 e folded into the argument), ``"accurate"``
      (libm / torch.exp, 2 ulp), ``"exact"`` (alias ``"correctly_rounded"``, 0.5 ulp), or a float:
      that many ulps of the working precision.
    - ``allow_tf32``: fp32 matmuls may round their operands to tf32 (u = 2^-11).
    - ``p_dtype``: attention only: P is rounded to this dtype before P·V (FlashAttention rounds
      it to the input dtype: ``"input"``, resolved by :meth:`for_dtype`); None = P·V in the
      working precision.
    - ``tier``: which bound decides pass/fail: ``"worst-case"`` (default: the rigorous bound,
      its summation terms growing like n·u) or ``"probabilistic"`` (the summation terms replaced
      by Higham & Mary's λ(δ)·sqrt(n)·u, which holds with probability at least 1 - ``delta``
      per summation when the rounding errors are mean-independent; see
      :mod:`onlinesm.tolerance`). ``delta`` [1e-6] is that per-summation failure probability.

      Why a ``Numerics`` field and not a ``RunOptions`` one: the tier is a model of the
      kernel's rounding errors (independent, not coherent), which is what ``Numerics``
      declares, and it sets the bound's terms exactly as ``accumulate`` does. Living here it
      reaches every bound through ``Conventions.numerics`` (the accuracy properties, the
      relations, the saved failures and their replays) with no second path, and a replayed
      failure is judged under the tier it failed under.

    >>> Numerics(accumulate="bf16", exp=3.0).describe()
    'accumulate=bfloat16, exp=3 ulp, allow_tf32=False, p_dtype=None'
    """

    accumulate: str = "float32"
    exp: str | float = "fast"
    allow_tf32: bool = False
    p_dtype: str | None = None
    tier: str = "worst-case"
    delta: float = 1e-6

    def __post_init__(self) -> None:
        object.__setattr__(self, "accumulate", _dtype_name("accumulate", self.accumulate))
        tier = str(self.tier).strip().lower().replace("_", "-")
        if tier not in TIERS:
            raise ValueError(f"tier={self.tier!r} is not a bound tier; use one of {', '.join(TIERS)}")
        object.__setattr__(self, "tier", tier)
        d = self.delta
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 < d < 1:
            raise ValueError(f"delta={d!r} must be a probability strictly between 0 and 1, "
                             "e.g. delta=1e-6")
        object.__setattr__(self, "delta", float(d))
        if self.p_dtype is not None and self.p_dtype != "input":
            object.__setattr__(self, "p_dtype", _dtype_name("p_dtype", self.p_dtype))
        if not isinstance(self.allow_tf32, bool):
            raise ValueError(f"allow_tf32={self.allow_tf32!r} must be True or False")
        e = self.exp
        if isinstance(e, str):
            key = _EXP_ALIASES.get(e.strip().lower(), e.strip().lower())
            if key not in EXP_CLASSES:
                raise ValueError(
                    f"exp={e!r} is not an exp accuracy class; use one of "
                    f"{', '.join(EXP_CLASSES)}, 'correctly_rounded', or a number of ulps "
                    "such as exp=4.0"
                )
            object.__setattr__(self, "exp", key)
        elif isinstance(e, (int, float)) and not isinstance(e, bool) and e >= 0.5:
            object.__setattr__(self, "exp", float(e))
        else:
            raise ValueError(f"exp={e!r} must be a class name or a number of ulps >= 0.5, "
                             "e.g. exp='accurate' or exp=3.0")

    @property
    def working(self) -> FloatFormat:
        """The working (accumulation) precision as a :class:`~onlinesm.dtypes.FloatFormat`."""
        return resolve(self.accumulate)

    def for_dtype(self, dtype: Any) -> "Numerics":
        """These numerics for inputs of ``dtype``: ``p_dtype="input"`` becomes that dtype.

        The one place where "input" is resolved; every bound is computed from the result.

        >>> Numerics(p_dtype="input").for_dtype("float16").p_dtype
        'float16'
        """
        if self.p_dtype != "input":
            return self
        return dataclasses.replace(self, p_dtype=resolve(dtype).name)

    def exp_model(self) -> tuple[float, float, float, float]:
        """(arg coefficient, exp |z| coefficient, exp constant, division), in units of u."""
        if isinstance(self.exp, float):
            return 1.0, 0.0, 2.0 * self.exp, 2.0
        a, c, b, div, _ = EXP_CLASSES[self.exp]
        return a, c, b, div

    def describe(self) -> str:
        """The declared numerics as one line, for reports and failure messages."""
        if isinstance(self.exp, float):
            exp = f"{self.exp:g} ulp"
        else:
            exp = f"{self.exp} ({EXP_CLASSES[self.exp][4]})"
        text = (f"accumulate={self.accumulate}, exp={exp}, allow_tf32={self.allow_tf32}, "
                f"p_dtype={self.p_dtype}")
        if self.tier != "worst-case":  # the default tier is left unsaid (messages unchanged)
            text += f", tier={self.tier_name()}"
        return text

    def tier_name(self) -> str:
        """``"worst-case bound"`` or ``"probabilistic bound (δ=1e-6)"``, for messages."""
        if self.tier == "worst-case":
            return "worst-case bound"
        return f"probabilistic bound (δ={format_delta(self.delta)})"

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: str | dict[str, Any]) -> "Numerics":
        """The inverse of :meth:`to_json` (also takes the parsed dict)."""
        return cls(**cls._known_fields(data))


@dataclasses.dataclass(frozen=True)
class Conventions(_JsonRecord):
    """What a kernel declares about itself; defaults in brackets.

    - ``fully_masked``: a row with no finite input / no visible key gives ``"zeros"`` (lse
      -inf), ``"nan"`` (torch.softmax), ``"uniform"`` (every key weighs the same: the mean of
      V, what a ``finfo.min`` mask gives in float arithmetic), or ``"any"`` ["zeros"];
    - ``nonfinite``: a softmax row holding NaN or +inf gives ``"nan"`` (NaN in, NaN out for
      that row) or ``"any"`` (anything goes for that row) ["nan"];
    - ``causal_align``: ``"top-left"`` (SDPA) or ``"bottom-right"`` (FlashAttention 2+) ["top-left"];
    - ``lse_base``: ``"e"`` or ``"2"`` ["e"]; ``empty_lse``: lse of a fully masked row,
      ``-inf`` or ``+inf`` [-inf];
    - ``batch_invariant`` [False]: a row's result is bitwise independent of the batch;
      ``deterministic`` [True]: two identical calls are bitwise equal;
    - ``numerics``: accumulation dtype, exp class, tf32, P's dtype: they set the bound's terms.

    >>> Conventions(fully_masked="none")
    Traceback (most recent call last):
    ValueError: fully_masked='none' is not a convention; use 'zeros', 'nan', 'uniform' or 'any'
    """

    fully_masked: str = "zeros"
    causal_align: str = "top-left"
    lse_base: str = "e"
    empty_lse: float = -math.inf
    batch_invariant: bool = False
    deterministic: bool = True
    numerics: Numerics = dataclasses.field(default_factory=Numerics)
    nonfinite: str = "nan"

    def __post_init__(self) -> None:
        if self.fully_masked not in FULLY_MASKED:
            raise ValueError(f"fully_masked={self.fully_masked!r} is not a convention; "
                             "use 'zeros', 'nan', 'uniform' or 'any'")
        if self.nonfinite not in NONFINITE:
            raise ValueError(f"nonfinite={self.nonfinite!r} is not a convention; "
                             "use 'nan' (NaN in, NaN out) or 'any'")
        if self.causal_align not in ("top-left", "bottom-right"):
            raise ValueError(f"causal_align={self.causal_align!r} is not supported; "
                             "use 'top-left' or 'bottom-right'")
        if self.lse_base not in ("e", "2"):
            raise ValueError(f"lse_base={self.lse_base!r} is not supported; use 'e' or '2'")
        try:
            empty = float(self.empty_lse)
        except (TypeError, ValueError):
            empty = math.nan
        if not math.isinf(empty):
            raise ValueError(f"empty_lse={self.empty_lse!r} must be -inf or +inf")
        for name in ("batch_invariant", "deterministic"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        if not isinstance(self.numerics, Numerics):
            raise ValueError(f"numerics={self.numerics!r} must be a Numerics, e.g. "
                             "numerics=Numerics(exp='accurate')")

    def for_dtype(self, dtype: Any) -> "Conventions":
        """These conventions with the numerics resolved for inputs of ``dtype``."""
        num = self.numerics.for_dtype(dtype)
        return self if num is self.numerics else dataclasses.replace(self, numerics=num)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (``empty_lse`` as ``"-inf"`` / ``"inf"``)."""
        d = dataclasses.asdict(self)
        d["empty_lse"] = "inf" if self.empty_lse > 0 else "-inf"
        d["numerics"] = self.numerics.to_dict()
        return d

    @classmethod
    def from_json(cls, data: str | dict[str, Any]) -> "Conventions":
        """The inverse of :meth:`to_json` (also takes the parsed dict)."""
        d = cls._known_fields(data)
        if "empty_lse" in d:
            d["empty_lse"] = float(d["empty_lse"])
        if isinstance(d.get("numerics"), (dict, str)):
            d["numerics"] = Numerics.from_json(d["numerics"])
        return cls(**d)


def _refusal(value: Any) -> tuple[str, str]:
    """A declared refusal as (exception type name, regex): from a pair or ``"Type:regex"``."""
    import re

    if isinstance(value, str):
        kind, sep, rx = value.partition(":")
        if not sep or not kind.strip():
            raise ValueError(f"unsupported={value!r} must look like ExceptionType:regex, e.g. "
                             "'RuntimeError:No available kernel'")
    else:
        try:
            kind, rx = value
        except (TypeError, ValueError):
            raise ValueError(f"unsupported={value!r} must be (ExceptionType, regex) or "
                             "'ExceptionType:regex'") from None
    if isinstance(kind, type):
        if not issubclass(kind, BaseException):
            raise ValueError(f"unsupported={value!r}: {kind.__name__} is not an exception type")
        kind = kind.__name__
    try:
        re.compile(str(rx))
    except re.error as err:
        raise ValueError(f"unsupported={value!r}: {rx!r} is not a regular expression ({err})") from None
    return str(kind).strip(), str(rx)


def _tuple(value: Any) -> tuple[Any, ...] | None:
    """A list/tuple/comma-separated string as a tuple (None stays None)."""
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class Domain(_JsonRecord):
    """The inputs a kernel supports: everything a check generates lies inside it.

    Softmax: ``min_len``..``max_len`` columns, multiples of ``len_multiple``, up to ``max_rows``
    rows. Attention: head dims
    ``head_dims``, up to ``max_batch`` x ``max_heads``, ``min_seq_q``..``max_seq_q`` queries
    and ``min_seq_k``..``max_seq_k`` keys, lengths a multiple of ``seq_multiple``,
    ``same_seq`` (Sq == Sk only), ``allow_mask``, ``allow_causal``, ``allow_gqa``. Both: the
    ``dtypes``, the strategy ``families`` (None: all), ``allow_nonfinite`` (rows holding NaN or
    +inf, opt-in), and ``unsupported``: declared refusals, ``(ExceptionType, "regex")`` or
    ``"ExceptionType:regex"``; a call that raises one is outside the domain (rejected and
    counted, never a failure), as with Hypothesis's ``reject()``.

    >>> Domain(dtypes="bf16,fp16").dtypes
    ('bfloat16', 'float16')
    >>> Domain(min_len=0)
    Traceback (most recent call last):
    ValueError: min_len=0 must be at least 1
    """

    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    families: tuple[str, ...] | None = None
    allow_nonfinite: bool = False
    # softmax
    # softmax: rows past 1024-, 2048-, 4096- and 8192-wide tiles (the explicit batches hold
    # lengths 1023, 1025, 2049, 4097, 8193 and a masked run of one whole 1024 tile)
    min_len: int = 1
    max_len: int = 8193
    max_rows: int = 16
    len_multiple: int = 1  # a kernel that tiles rows by 128 and refuses the rest: 128
    # attention: D = 128 (the most common head dim), keys past two 128-key tiles plus a ragged
    # tail (Sk up to 300: leading masked runs of 64, 128 and 256 keys, exactly and +-1)
    head_dims: tuple[int, ...] = (16, 64, 128)
    max_batch: int = 2
    max_heads: int = 4
    min_seq_q: int = 1
    max_seq_q: int = 32
    min_seq_k: int = 1
    max_seq_k: int = 300
    seq_multiple: int = 1
    allow_mask: bool = True
    allow_causal: bool = True
    allow_gqa: bool = False
    same_seq: bool = False
    # declared refusals: (exception type, regex of its message) meaning "outside the domain"
    unsupported: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "unsupported", tuple(_refusal(r) for r in (self.unsupported or ())))
        dtypes = tuple(_dtype_name("dtypes", d) for d in (_tuple(self.dtypes) or ()))
        if not dtypes:
            raise ValueError("dtypes is empty; give at least one of float32, bfloat16, float16")
        object.__setattr__(self, "dtypes", dtypes)
        object.__setattr__(self, "families", _tuple(self.families))
        try:
            dims = tuple(int(d) for d in (_tuple(self.head_dims) or ()))
        except ValueError:
            raise ValueError(f"head_dims={self.head_dims!r} must be integers, e.g. 64,128") from None
        if not dims or min(dims) < 1:
            raise ValueError(f"head_dims={self.head_dims!r} must be positive integers, e.g. 64,128")
        object.__setattr__(self, "head_dims", dims)
        for name in ("min_len", "max_len", "max_rows", "len_multiple", "max_batch", "max_heads",
                     "min_seq_q", "max_seq_q", "min_seq_k", "max_seq_k", "seq_multiple"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be at least 1")
        for lo, hi in (("min_len", "max_len"), ("min_seq_q", "max_seq_q"), ("min_seq_k", "max_seq_k")):
            if getattr(self, lo) > getattr(self, hi):
                raise ValueError(f"{lo}={getattr(self, lo)} is above {hi}={getattr(self, hi)}; "
                                 f"need {lo} <= {hi}")
        tile_bounds(self.min_len, self.max_len, self.len_multiple)  # some length is a multiple
        for name in ("allow_nonfinite", "allow_mask", "allow_causal", "allow_gqa", "same_seq"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (tuples as lists)."""
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
        d["unsupported"] = [list(r) for r in self.unsupported]
        return d

    @classmethod
    def from_json(cls, data: str | dict[str, Any]) -> "Domain":
        """The inverse of :meth:`to_json` (also takes the parsed dict)."""
        return cls(**cls._known_fields(data))


#: The settings profiles (examples per property and dtype), prefixed so they never collide
#: with a user's own Hypothesis profiles.
PROFILES: dict[str, int] = {"onlinesm-quick": 20, "onlinesm-ci": 10, "onlinesm-thorough": 200}


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a check runs: which properties, how many examples, where, and how patiently.

    ``profile`` is ``"quick"``, ``"ci"`` or ``"thorough"`` (``"onlinesm-quick"`` etc. too);
    ``deadline`` is the seconds one kernel call may take (None: from the device),
    ``compile_allowance`` the extra seconds of the first call of a compiled variant; ``strict``
    fails one-ulp bf16 misses that Triton's interpreter may cause; ``skip`` maps a property to
    the reason it is waived. ``statistical`` runs ``accuracy_statistical`` (the typical error
    against a simulated correct kernel, :mod:`onlinesm.statistical_check`) once per dtype;
    ``regression_factor`` is the RMSE ratio new/old that fails ``regression`` (with
    ``baseline=``) once its lower confidence bound exceeds it.

    >>> RunOptions(profile="ci").profile
    'onlinesm-ci'
    """

    profile: str = "onlinesm-quick"
    max_examples: int | None = None
    seed: int | None = None
    device: str | None = None
    backend: str | None = None
    deadline: float | None = None
    compile_allowance: float | None = None
    strict: bool = False
    properties: tuple[str, ...] | None = None
    skip: dict[str, str] = dataclasses.field(default_factory=dict)
    database: bool = True
    save_failures: bool = True
    statistical: bool = True
    regression_factor: float = 1.25

    def __post_init__(self) -> None:
        name = self.profile if self.profile.startswith("onlinesm-") else f"onlinesm-{self.profile}"
        if name not in PROFILES:
            short = ", ".join(p.removeprefix("onlinesm-") for p in PROFILES)
            raise ValueError(f"profile={self.profile!r} is unknown; use one of {short}")
        object.__setattr__(self, "profile", name)
        object.__setattr__(self, "properties", _tuple(self.properties))
        object.__setattr__(self, "skip", dict(self.skip or {}))
        if self.max_examples is not None and (not isinstance(self.max_examples, int) or self.max_examples < 1):
            raise ValueError(f"max_examples={self.max_examples!r} must be a positive integer")
        for name in ("deadline", "compile_allowance"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value >= 0
                                          and (value > 0 or name == "compile_allowance")):
                raise ValueError(f"{name}={value!r} must be a positive number of seconds")
        if self.device not in (None, "cpu", "cuda"):
            raise ValueError(f"device={self.device!r} is not supported; use 'cpu' or 'cuda'")
        if not (isinstance(self.regression_factor, (int, float)) and self.regression_factor >= 1):
            raise ValueError(f"regression_factor={self.regression_factor!r} must be a number >= 1 "
                             "(the RMSE ratio new/old that fails), e.g. 1.25")
        if self.backend not in (None, "torch", "numpy"):
            raise ValueError(f"backend={self.backend!r} is not supported; use 'torch' or 'numpy'")

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


#: Keywords that belong to Numerics, accepted flat by the check functions.
_NUMERICS_KEYS = frozenset(f.name for f in dataclasses.fields(Numerics))


def split_keywords(keywords: dict[str, Any]) -> tuple[Conventions, Domain, RunOptions]:
    """Flat keywords (``fully_masked=..., max_len=..., seed=...``) as the three records.

    Each keyword goes to the record that has a field of its name (Numerics' fields build the
    ``numerics`` of the conventions). An unknown keyword is a ValueError that lists the known
    ones, so a typo never passes silently.

    >>> conv, dom, opts = split_keywords({"fully_masked": "nan", "max_len": 64, "seed": 0})
    >>> conv.fully_masked, dom.max_len, opts.seed
    ('nan', 64, 0)
    """
    groups: dict[type, dict[str, Any]] = {Conventions: {}, Domain: {}, RunOptions: {}, Numerics: {}}
    names = {cls: {f.name for f in dataclasses.fields(cls)} for cls in groups}
    for key, value in keywords.items():
        owner = next((cls for cls in (Numerics, Conventions, Domain, RunOptions) if key in names[cls]), None)
        if owner is None:
            known = sorted(set().union(*names.values()) - {"numerics"})
            hint = did_you_mean(key, known) or f"; the keywords are: {', '.join(known)}"
            raise ValueError(f"{key}={value!r} is not a keyword onlinesm knows{hint}")
        groups[owner][key] = value
    conv_kw = groups[Conventions]
    if groups[Numerics]:
        if "numerics" in conv_kw:
            raise ValueError("give numerics=Numerics(...) or its fields (accumulate=, exp=, ...), not both")
        conv_kw["numerics"] = Numerics(**groups[Numerics])
    return Conventions(**conv_kw), Domain(**groups[Domain]), RunOptions(**groups[RunOptions])


def _dtype_name(name: str, value: Any) -> str:
    try:
        return resolve(value).name
    except (TypeError, ValueError, KeyError):
        raise ValueError(f"{name}={value!r} is not a floating-point dtype; use float32, "
                         "bfloat16, float16 or float64 (or bf16, fp32, fp16, fp64)") from None
