"""Portable counterexamples: save a failing input as JSON, replay it later.

JSON cannot hold NaN, inf or bf16, so arrays are stored as the hex of their bits (exact for
every dtype), and bool masks as a string of 0/1. A file records the op, the property, the
kernel's target (when it was loaded by name), its declared conventions and the message.
Schema ``onlinesm.counterexample/1``::

    {"schema": "onlinesm.counterexample/1", "op": "softmax", "property": "accuracy",
     "kernel": "...", "target": "pkg.mod:fn" | null, "backend": "torch" | "numpy",
     "conventions": {...},
     "inputs": {"x": {"dtype": "bfloat16", "shape": [1, 3], "hex": ["3f80", ...]}},
     "message": "..."}

Example:
    >>> from onlinesm.counterexample import replay
    >>> ok, message = replay(".onlinesm/failures/x.json", fn=my_softmax)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from onlinesm.dtypes import from_hex, resolve, to_hex

__all__ = ["SCHEMA", "save", "load", "replay", "encode_array", "decode_array"]

SCHEMA = "onlinesm.counterexample/1"


def encode_array(a: Any) -> Any:
    """An array as JSON: hex bits for floats, a 0/1 string for bools; None and scalars pass."""
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return {"dtype": "bool", "shape": list(a.shape), "bits": "".join("1" if b else "0" for b in a.ravel())}
    return {"dtype": resolve(a.dtype).name, "shape": list(a.shape), "hex": to_hex(a)}


def decode_array(d: Any) -> Any:
    """Inverse of :func:`encode_array`."""
    if not isinstance(d, dict):
        return d
    shape = [int(n) for n in d["shape"]]
    if d["dtype"] == "bool":
        bits = d["bits"]
        if set(bits) - {"0", "1"}:
            raise ValueError("a mask's bits must be 0s and 1s")
        flat = np.array([c == "1" for c in bits], dtype=bool)
    else:
        try:
            flat = from_hex(d["hex"], d["dtype"])
        except ValueError as err:
            raise ValueError(f"bad hex ({err})") from None
    if flat.size != int(np.prod(shape)):
        raise ValueError(f"{flat.size} values do not fill the shape {shape}")
    return flat.reshape(shape)


def save(*, op: str, prop: str, kernel: Any, conventions: Any, inputs: dict[str, Any],
         message: str, directory: Path) -> str:
    """Write one counterexample; return its path (named by a digest of its content)."""
    record = {
        "schema": SCHEMA,
        "op": op,
        "property": prop,
        "kernel": kernel.name,
        "target": getattr(kernel, "target", None),
        "backend": getattr(kernel, "backend", None),
        # how the kernel is called (convention, layout, fixed kwargs, mask kind), so that a
        # replay calls it the same way
        "adapter": spec.to_dict() if (spec := getattr(kernel.fn, "spec", None)) is not None
        and hasattr(spec, "to_dict") else None,
        "conventions": conventions.to_dict(),
        "inputs": {k: encode_array(v) for k, v in inputs.items()},
        "message": message,
    }
    text = json.dumps(record, indent=1)
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() else "_" for c in kernel.name)[:40]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{op}-{prop}-{safe}-{digest}.json"
    # written whole, then renamed: several processes (xdist workers) may save the same file
    tmp = directory / f".{path.name}.{os.getpid()}.tmp"
    tmp.write_text(text)
    os.replace(tmp, path)
    return str(path)


#: The fields every counterexample holds, with their JSON types.
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "op": str, "property": str, "kernel": str, "conventions": dict, "inputs": dict, "message": str,
}
#: The inputs each op needs.
_INPUTS = {"softmax": ("x",), "attention": ("q", "k", "v")}


def load(path: str | Path) -> dict[str, Any]:
    """Read and validate a counterexample file; a one-line ValueError naming the file and the
    field when it is not one (missing key, unknown property, bad hex, bad shape)."""
    try:
        record = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"no counterexample file at {path}") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a folder; replay one counterexample file in it "
                         "(onlinesm replay FOLDER/NAME.json)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not an onlinesm counterexample (expected schema {SCHEMA!r})")
    for field, kind in _FIELDS.items():
        if field not in record:
            raise ValueError(f"{path}: the field {field!r} is missing; the file is damaged "
                             "(re-run onlinesm check to write a new one)")
        if not isinstance(record[field], kind):
            raise ValueError(f"{path}: the field {field!r} is a {type(record[field]).__name__}, "
                             f"expected a {getattr(kind, '__name__', 'value')}")
    op = record["op"]
    if op not in _INPUTS:
        raise ValueError(f"{path}: op={op!r} is not an op; expected softmax or attention")
    from onlinesm.properties import ATTENTION_PROPERTIES, SOFTMAX_PROPERTIES

    registry = SOFTMAX_PROPERTIES if op == "softmax" else ATTENTION_PROPERTIES
    if record["property"] not in registry:
        raise ValueError(f"{path}: property={record['property']!r} is not a {op} property; "
                         f"expected one of {', '.join(registry)}")
    for name in _INPUTS[op]:
        if name not in record["inputs"]:
            raise ValueError(f"{path}: inputs.{name} is missing; a {op} counterexample needs "
                             f"{', '.join(_INPUTS[op])}")
    return record


def _decode_field(path: str | Path, name: str, value: Any) -> Any:
    """decode_array, with a failure that names the file and the field."""
    try:
        return decode_array(value)
    except (KeyError, TypeError) as err:
        raise ValueError(f"{path}: inputs.{name} lacks {err}; expected dtype, shape and hex "
                         "(or bits for a mask)") from None
    except ValueError as err:
        raise ValueError(f"{path}: inputs.{name} cannot be decoded: {err}") from None


def replay(path: str | Path, fn: Callable[..., Any] | None = None, *, device: str | None = None,
           backend: str | None = None, deadline: float | None = None,
           name: str | None = None) -> tuple[bool, str]:
    """Re-run the saved property on the saved input: (holds now, message).

    ``fn`` defaults to the kernel named by the file's target (a kernel that cannot be imported
    by name is passed here instead). ``name``: what the message calls the kernel (the saved
    kernel's name by default; ``onlinesm replay FILE --target T`` passes T).
    """
    from onlinesm.harness import AttentionInputs, Kernel, KernelError
    from onlinesm.properties import (ATTENTION_PROPERTIES, SOFTMAX_PROPERTIES, Conventions,
                                     PropertyFailure, Untested)

    record = load(path)
    if fn is None and not (record.get("adapter") or {}).get("target"):
        if not record.get("target"):
            raise ValueError(f"{path} names no importable target; pass the kernel: replay(path, fn=...)")
        from onlinesm.targets import load_target

        fn = load_target(record["target"])
    try:
        conv = Conventions.from_json(record["conventions"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: the field 'conventions' is damaged ({type(err).__name__}: {err})") from None
    inputs = {k: _decode_field(path, k, v) for k, v in record["inputs"].items()}
    if record.get("adapter"):
        from onlinesm.adapters import Adapted

        try:
            fn = Adapted.from_json(record["adapter"], fn=fn)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{path}: the field 'adapter' is damaged ({err})") from None
    backend = backend or record.get("backend")  # the kernel is called as it was when it failed
    if backend not in (None, "torch", "numpy"):
        raise ValueError(f"{path}: backend={backend!r} is not a backend; expected torch or numpy")
    kernel = Kernel(fn, op=record["op"], device=device, backend=backend,
                    name=name or record["kernel"], deadline=deadline)
    try:
        if record["op"] == "softmax":
            SOFTMAX_PROPERTIES[record["property"]](kernel, inputs["x"], conv)
        else:
            try:
                inp = AttentionInputs(**inputs)
            except TypeError as err:
                raise ValueError(f"{path}: the field 'inputs' is damaged ({err})") from None
            ATTENTION_PROPERTIES[record["property"]](kernel, inp, conv)
    except (PropertyFailure, KernelError) as err:
        return False, str(err)
    except Untested as err:
        return True, f"{record['property']} has nothing to test on the saved input ({err})"
    return True, f"{record['property']} now holds on the saved input"
