"""The kernel matrix: kernels declared in ``pyproject.toml`` (``[tool.onlinesm]``) or ``onlinesm.toml``.

What: :func:`find_config` looks for the configuration (``onlinesm.toml`` wins over
``pyproject.toml`` in the same folder) in a folder, then its parents, up to the filesystem root
or a folder holding ``.git``; :func:`load_config` reads and validates it into a :class:`Matrix`
of :class:`KernelEntry` (name, target, op, the keywords of :func:`onlinesm.check.check`).

Why one vocabulary: the keys are the command-line options of ``onlinesm check``
(:data:`onlinesm.options.OPTIONS`), spelled as flags (``fully-masked``, ``no-mask``) or as
keywords (``fully_masked``, ``allow_mask``), plus ``target`` and ``op``; values go through the
same parsers as the flags and the same records (:func:`onlinesm.declarations.split_keywords`),
so a table means exactly what the command line means. Keys of ``[tool.onlinesm]`` itself
(outside ``kernels``) are defaults for every kernel. A mistake is one line naming the file,
the table and the key (:class:`ConfigError`, a :class:`~onlinesm.errors.UsageError`: exit 2).

Example::

    [tool.onlinesm]
    profile = "ci"                       # a default for every kernel
    [tool.onlinesm.kernels.my_softmax]
    target = "mypkg.kernels:softmax"
    op = "softmax"
    fully-masked = "nan"
    dtypes = ["bfloat16", "float16"]

    >>> m = load_config("pyproject.toml")                     # doctest: +SKIP
    >>> m.entries["my_softmax"].keywords["fully_masked"]      # doctest: +SKIP
    'nan'
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from onlinesm.errors import UsageError, did_you_mean

__all__ = ["ConfigError", "KernelEntry", "Matrix", "find_config", "load_config", "CONFIG_NAMES"]

#: The files searched in each folder, the first found winning.
CONFIG_NAMES = ("onlinesm.toml", "pyproject.toml")

#: A flag spelled ``false`` sets nothing.
_UNSET = object()

#: Keywords of the check that are not command-line options but may be given in a table.
_EXTRA_KEYWORDS = ("mask_kind",)


class ConfigError(UsageError):
    """The configuration is wrong; the message names the file, the table and the key."""


@dataclasses.dataclass(frozen=True)
class KernelEntry:
    """One kernel of the matrix: its name in the table, where it lives, its op and keywords.

    ``keywords`` are those of :func:`onlinesm.check.check` (``{"fully_masked": "nan"}``);
    ``target`` is absolute for a ``file.py:function`` target (read relative to the file that
    declares it).
    """

    name: str
    target: str
    op: str
    keywords: dict[str, Any]
    path: Path

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes the check generates: declared, implied by the calling convention, or the defaults."""
        from onlinesm.declarations import DEFAULT_DTYPES, Domain

        if "dtypes" in self.keywords:
            return Domain(dtypes=self.keywords["dtypes"]).dtypes
        if self.keywords.get("convention") not in (None, "onlinesm"):
            from onlinesm.adapters import AdapterSpec

            spec = AdapterSpec(self.keywords["convention"], sdpa_backend=self.keywords.get("sdpa_backend"),
                               mask_kind=self.keywords.get("mask_kind"))
            implied = spec.implied.get("dtypes")
            if implied:
                return Domain(dtypes=implied).dtypes
        return DEFAULT_DTYPES

    def properties(self) -> list[str]:
        """The properties the check runs, as a single ``onlinesm check`` runs them: declared
        ``properties``, else the op's registry, then ``accuracy_statistical`` (unless
        ``statistical = false``) and ``regression`` (when a ``baseline`` is declared)."""
        from onlinesm.properties import ATTENTION_PROPERTIES, SOFTMAX_PROPERTIES

        registry = SOFTMAX_PROPERTIES if self.op == "softmax" else ATTENTION_PROPERTIES
        tiers = {"accuracy_statistical": self.keywords.get("statistical", True) is not False,
                 "regression": bool(self.keywords.get("baseline"))}
        known = list(registry) + [p for p, on in tiers.items() if on]
        chosen = self.keywords.get("properties")
        return known if not chosen else [p for p in chosen if p in known] or list(chosen)


@dataclasses.dataclass(frozen=True)
class Matrix:
    """The kernels of one configuration file, in the order they are declared."""

    path: Path
    entries: dict[str, KernelEntry]

    def select(self, names: list[str] | None) -> list[KernelEntry]:
        """The entries named (all when ``names`` is empty); ConfigError for an unknown name."""
        if not names:
            return list(self.entries.values())
        out = []
        for n in names:
            if n not in self.entries:
                hint = (did_you_mean(n, self.entries)
                        or f"; the kernels are: {', '.join(self.entries) or '(none)'}")
                raise ConfigError(f"{_shown(self.path)}: no kernel {n!r} in [tool.onlinesm.kernels]{hint}")
            out.append(self.entries[n])
        return out


def find_config(start: str | os.PathLike[str] | None = None) -> Path | None:
    """The configuration file for ``start`` (default: the current folder), or None.

    In each folder from ``start`` upwards: ``onlinesm.toml``, else a ``pyproject.toml`` holding
    a ``[tool.onlinesm]`` table. The search stops after the filesystem root or a folder that
    holds ``.git`` (the project's root).
    """
    folder = Path(start or os.getcwd()).resolve()
    if folder.is_file():
        folder = folder.parent
    while True:
        own = folder / "onlinesm.toml"
        if own.is_file():
            return own
        py = folder / "pyproject.toml"
        if py.is_file():
            try:
                if "onlinesm" in _read(py).get("tool", {}):
                    return py
            except ConfigError:
                pass  # a pyproject.toml we cannot read is not ours to judge here
        if (folder / ".git").exists() or folder.parent == folder:
            return None
        folder = folder.parent


def _read(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as err:
        raise ConfigError(f"{_shown(path)}: cannot read it ({err.strerror or err})") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{_shown(path)}: not valid TOML ({err})") from None


def _shown(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("..") else str(path)


def load_config(path: str | os.PathLike[str]) -> Matrix:
    """Read and validate the kernel matrix in ``path``; :class:`ConfigError` (one line) if wrong.

    In ``pyproject.toml`` the table is ``[tool.onlinesm]``; ``onlinesm.toml`` holds it at the
    top level (``[kernels.NAME]``) or under ``[tool.onlinesm]`` too.
    """
    path = Path(path)
    data = _read(path)
    if path.name == "pyproject.toml" or "tool" in data:
        table, prefix = data.get("tool", {}).get("onlinesm"), "tool.onlinesm"
        if table is None and path.name != "pyproject.toml":
            table, prefix = data, ""
    else:
        table, prefix = data, ""
    where = f"{_shown(path)}: [{prefix or 'onlinesm.toml'}]"
    if table is None:
        raise ConfigError(f"{_shown(path)}: no [tool.onlinesm] table; declare kernels under "
                          "[tool.onlinesm.kernels.NAME]")
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table, not a {type(table).__name__}")
    defaults_raw = {k: v for k, v in table.items() if k != "kernels"}
    for key in ("target", "op"):
        if key in defaults_raw:
            raise ConfigError(f"{where} key {key!r} belongs to one kernel; move it into "
                              f"[{_join(prefix, 'kernels.NAME')}]")
    defaults = _keywords(defaults_raw, where)
    kernels = table.get("kernels", {})
    if not isinstance(kernels, dict) or not all(isinstance(v, dict) for v in kernels.values()):
        raise ConfigError(f"{where} key 'kernels' must hold one table per kernel: "
                          f"[{_join(prefix, 'kernels.NAME')}] with target = \"pkg.mod:fn\"")
    entries: dict[str, KernelEntry] = {}
    for name, raw in kernels.items():
        entries[name] = _entry(name, raw, defaults, path, f"{_shown(path)}: [{_join(prefix, 'kernels.' + name)}]")
    return Matrix(path, entries)


def _join(prefix: str, rest: str) -> str:
    return f"{prefix}.{rest}" if prefix else rest


def _target(value: Any, key: str, path: Path, where: str) -> str:
    """A ``package.module:function`` or ``file.py:function`` value of ``key``; a file is read
    relative to the file that declares it."""
    module, sep, attr = value.rpartition(":") if isinstance(value, str) else ("", "", "")
    if not sep or not module or not attr:
        raise ConfigError(f"{where} key {key!r} = {value!r} must look like package.module:function "
                          "or path/to/file.py:function")
    if module.endswith(".py") or "/" in module:
        return f"{(path.parent / module).resolve()}:{attr}"
    return value


def _entry(name: str, raw: dict[str, Any], defaults: dict[str, Any], path: Path, where: str) -> KernelEntry:
    if ":" in name or not name.strip():
        raise ConfigError(f"{where}: the kernel name {name!r} must not contain ':' (that marks a "
                          "TARGET on the command line); rename the table")
    raw = dict(raw)
    target = raw.pop("target", None)
    op = raw.pop("op", None)
    kw = {**defaults, **_keywords(raw, where)}
    convention = kw.get("convention")
    for key, value in (("target", target), ("op", op)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where} key {key!r} = {value!r} must be a string")
    if op is None:
        if convention in (None, "onlinesm"):
            raise ConfigError(f"{where} key 'op' is missing; add op = \"softmax\" or op = \"attention\" "
                              "(a convention other than onlinesm implies attention)")
        op = "attention"
    if op not in ("softmax", "attention"):
        raise ConfigError(f"{where} key 'op' = {op!r} is not an op; use \"softmax\" or \"attention\"")
    if target is None:
        if convention == "sdpa":
            from onlinesm.adapters import SDPA_TARGET

            target = SDPA_TARGET
        else:
            raise ConfigError(f"{where} key 'target' is missing; add target = \"package.module:function\" "
                              "or \"path/to/file.py:function\"")
    target = _target(target, "target", path, where)
    if "baseline" in kw:  # regression mode: the older kernel, read like `target`
        kw["baseline"] = _target(kw["baseline"], "baseline", path, where)
    if convention not in (None, "onlinesm") and op != "attention":
        raise ConfigError(f"{where} key 'convention' = {convention!r} applies to attention kernels "
                          f"only, not op = {op!r}")
    _validate(kw, op, where)
    return KernelEntry(name, target, op, kw, path)


def _lookup() -> tuple[dict[str, Any], dict[str, Any]]:
    """(flag spellings -> Option, keyword spellings -> Option) of the check's options."""
    from onlinesm.options import OPTIONS

    flags: dict[str, Any] = {}
    keys: dict[str, Any] = {}
    for opt in OPTIONS:
        if "check" not in opt.commands:
            continue
        bare = opt.flag.lstrip("-")
        flags[bare] = opt
        flags[bare.replace("-", "_")] = opt
        keys[opt.key] = opt
    return flags, keys


def _record_fields() -> set[str]:
    from onlinesm.declarations import Conventions, Domain, Numerics, RunOptions

    return {f.name for cls in (Conventions, Domain, Numerics, RunOptions)
            for f in dataclasses.fields(cls)} - {"numerics"}


def _keywords(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The table's keys as keywords of the check, each value parsed as its flag's text is."""
    flags, keys = _lookup()
    fields = _record_fields()
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where} key {key!r} must be a string")
        opt, as_flag = flags.get(key), True
        if opt is not None and key.replace("-", "_") == opt.key:
            as_flag = False  # the flag and the keyword are spelled alike (fully-masked): a value
        if opt is None:
            opt, as_flag = keys.get(key), False
        if opt is None:
            if key in fields or key in _EXTRA_KEYWORDS:
                out[key] = value
                continue
            known = sorted(set(flags) | set(keys) | fields | set(_EXTRA_KEYWORDS) | {"target", "op"})
            hint = did_you_mean(key, known) or "; `onlinesm check --help` lists the options"
            raise ConfigError(f"{where} key {key!r} is unknown{hint}")
        parsed = _value(opt, key, value, as_flag, where)
        if parsed is not _UNSET:
            out[opt.key] = parsed
    if "mask_kinds" in out:
        kinds = out.pop("mask_kinds")
        if len(kinds) != 1:
            raise ConfigError(f"{where} key 'mask-kinds' = {kinds!r}: a kernel entry checks one mask "
                              "kind; declare one entry per kind (with mask-kind = \"...\")")
        out["mask_kind"] = kinds[0]
    return out


def _value(opt: Any, key: str, value: Any, as_flag: bool, where: str) -> Any:
    """``value`` of ``key`` parsed as the flag's text would be; ConfigError naming the key."""
    def wrong(expected: str) -> ConfigError:
        kind = _toml_type(value)
        return ConfigError(f"{where} key {key!r} = {value!r} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}; "
                           f"expected {expected}")

    if opt.kind == "flag":
        if not isinstance(value, bool):
            raise wrong("true or false")
        if as_flag:  # the flag's spelling (no-mask = true): true sets it, false leaves the default
            return opt.const if value else _UNSET
        return value
    if opt.kind == "map":
        if not isinstance(value, dict):
            raise wrong("a table, e.g. {accuracy = \"reason\"}" if opt.key == "skip" else "a table")
        if opt.key == "skip":
            bad = [k for k, v in value.items() if not isinstance(v, str) or not v.strip()]
            if bad:
                raise ConfigError(f"{where} key {key!r}: {bad[0]!r} needs a reason, e.g. "
                                  f"{{{bad[0]} = \"why it is waived\"}}")
        return dict(value)
    if opt.kind == "append":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise wrong("a string or a list of strings")
        return [_parse(opt, key, v, where) for v in items]
    if isinstance(value, list):
        if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
            raise wrong("a list of strings or numbers")
        text = ",".join(str(v) for v in value)
    elif isinstance(value, bool) or isinstance(value, (dict,)):
        raise wrong("a string or a number")
    elif isinstance(value, (int, float)):
        text = repr(value) if isinstance(value, float) else str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise wrong("a string or a number")
    return _parse(opt, key, text, where)


def _parse(opt: Any, key: str, text: str, where: str) -> Any:
    try:
        parsed = opt.parse(text) if opt.parse is not None else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
        raise ConfigError(f"{where} key {key!r}: {err}") from None
    if opt.choices is not None and parsed not in opt.choices:
        raise ConfigError(f"{where} key {key!r} = {text!r} is not one of {', '.join(opt.choices)}")
    return parsed


def _toml_type(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


#: Keywords that choose how the kernel is called, not what it declares (see onlinesm.check).
_ADAPTER_KEYS = ("convention", "layout", "fixed_kwargs", "mask_kind", "sdpa_backend")


def _validate(kw: dict[str, Any], op: str, where: str) -> None:
    """The records' own validation of the entry's keywords, as a ConfigError naming the table."""
    from onlinesm.declarations import split_keywords

    try:
        conv, _, _ = split_keywords({k: v for k, v in kw.items()
                                     if k not in _ADAPTER_KEYS and k != "baseline"})
        conv.numerics.exp_model()
    except ValueError as err:
        raise ConfigError(f"{where} {err}") from None
    # A softmax takes fixed keywords (`kwarg = { dim = -1 }`), but no attention convention.
    given = [k for k in _ADAPTER_KEYS if k in kw and k != "fixed_kwargs"]
    if op == "softmax" and given:
        raise ConfigError(f"{where} key {given[0]!r} applies to attention kernels only, not op = 'softmax'")
