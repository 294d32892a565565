"""Loading a kernel named on the command line: ``package.module:function`` or ``file.py:function``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable

from onlinesm.errors import did_you_mean

__all__ = ["load_target", "TargetError"]


class TargetError(ValueError):
    """The target could not be loaded; the message says why and how to write it."""


def load_target(target: str) -> Callable[..., Any]:
    """The callable named by ``target``.

    >>> load_target("onlinesm.reference:softmax_offline").__name__
    'softmax_offline'
    """
    module_part, sep, attr = target.rpartition(":")
    if not sep or not module_part or not attr:
        raise TargetError(f"target {target!r} must look like package.module:function or path/to/file.py:function")
    if ":" in module_part and not Path(module_part).is_file():
        raise TargetError(f"target {target!r} has {target.count(':')} colons; name one function: "
                          "package.module:function or path/to/file.py:function (a method as "
                          "module:Class.method)")
    try:
        if module_part.endswith(".py") or "/" in module_part:
            path = Path(module_part)
            if not path.is_file():
                raise TargetError(f"target {target!r}: no file {path}")
            name = f"onlinesm_target_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            sys.path.insert(0, str(path.resolve().parent))
            spec.loader.exec_module(module)
        else:
            _with_current_folder()
            module = importlib.import_module(module_part)
    except TargetError:
        raise
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if module_part == missing or module_part.startswith(missing + "."):  # the target itself
            raise TargetError(f"target {target!r}: no module {missing} in the current folder or on "
                              "sys.path; name a file as path/to/file.py:function, or install the "
                              "package that holds it") from None
        raise TargetError(f"target {target!r}: importing {module_part} failed: "
                          f"ModuleNotFoundError: {err}") from None
    except SystemExit as err:  # an exit at import time: nothing could be tested
        raise TargetError(f"target {target!r}: importing {module_part} called sys.exit({err.code!r}); "
                          "nothing could be tested") from None
    except Exception as err:  # noqa: BLE001 - any import error is the user's to see, in one line
        raise TargetError(f"target {target!r}: importing {module_part} failed: "
                          f"{type(err).__name__}: {err}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            hint = did_you_mean(part, [n for n in dir(obj) if not n.startswith("_")])
            raise TargetError(f"target {target!r}: the module has no attribute {attr!r}{hint}")
        obj = getattr(obj, part)
    last = attr.split(".")[-1]
    if isinstance(obj, types.ModuleType) and callable(getattr(obj, last, None)):
        # a submodule named like its function (onlinesm.kernels:attention once
        # onlinesm.kernels.attention was imported): the function it is named after
        obj = getattr(obj, last)
    if not callable(obj):
        raise TargetError(f"target {target!r}: {attr} is not a function but a value of type "
                          f"{type(obj).__name__}; name the kernel function")
    return obj


def _with_current_folder() -> None:
    """Put the current folder first on sys.path, as ``python -m`` does, so that
    ``onlinesm check mymodule:fn`` finds ./mymodule.py whichever way onlinesm was started."""
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)
