"""check and report are two views of the same measurements: identical bounds and verdicts.

For every gallery kernel and the built-in ones, the stored snapshot inputs go through the
raising properties (as ``onlinesm check`` calls them) and through report's aggregation
(``report.collect``); the verdicts, the worst bound use and the bound arrays must agree.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def test_check_and_report_agree_on_every_kernel() -> None:
    import verdict_snapshot as vs

    from onlinesm import oracle
    from onlinesm.harness import Kernel, KernelError
    from onlinesm.kernels import use_interpreter
    from onlinesm.properties import (SOFTMAX_MEASURES, ATTENTION_MEASURES, PropertyFailure, Untested,
                                     ATTENTION_PROPERTIES, SOFTMAX_PROPERTIES)
    from onlinesm.report import collect as C
    from onlinesm.report.builtin import ReportKernel

    use_interpreter(True)
    inputs = vs.load_inputs()
    checked = 0
    for name, op, fn, spec, backend, small in vs.kernels():
        if small:
            continue
        kernel = Kernel(fn, op=op, backend=backend, device="cpu", name=name)
        for key, inp in inputs.items():
            if not key.startswith("sm/" if op == "softmax" else "at/") or "/1000" in key:
                continue
            dtype = key.split("/")[1]
            conv = vs._conv_for(spec, dtype)
            rk = ReportKernel(name, op, fn, conv)
            coll = C.Collection(C.Settings(), [rk], [], [], {}, {})
            rng = np.random.default_rng(0)
            torch.manual_seed(0)  # the gallery's nondeterministic kernel draws noise
            with np.errstate(all="ignore"):
                if op == "softmax":
                    exact = oracle.softmax(inp)
                    res = C._softmax_case(kernel, rk, dtype, "f", inp.shape[-1], 0, inp, exact,
                                          coll, {}, rng)
                else:
                    exact = oracle.attention(inp.q, inp.k, inp.v, mask=inp.mask,
                                             causal=inp.causal, scale=inp.scale)
                    res = C._attention_case(kernel, rk, dtype, "f", 0, 0, inp, exact, coll, rng)
            props = SOFTMAX_PROPERTIES if op == "softmax" else ATTENTION_PROPERTIES
            measures = SOFTMAX_MEASURES if op == "softmax" else ATTENTION_MEASURES
            verdicts = {}
            for prop in ("accuracy", "fully_masked"):
                torch.manual_seed(0)
                try:
                    props[prop](kernel, inp, conv)
                    verdicts[prop] = (True, None)
                except Untested:  # nothing to test here: report counts it as held
                    verdicts[prop] = (True, None)
                except PropertyFailure as err:
                    verdicts[prop] = (False, err.bound_use)
                except KernelError:
                    verdicts[prop] = (False, None)
                if res.error is None:
                    assert measures[prop](kernel, inp, conv).ok == verdicts[prop][0], (name, key, prop)
            assert (res.failed == 0 and res.error is None) == verdicts["accuracy"][0], (name, key)
            if res.error is None:
                assert res.convention_ok == verdicts["fully_masked"][0], (name, key)
                if not verdicts["accuracy"][0] and op == "softmax":
                    assert res.max_bound_use == verdicts["accuracy"][1], (name, key)
            checked += 1
    assert checked > 100
