"""interpreter_speed: a kernel's helpers no longer re-patch triton.language under the interpreter.

The work _patch_lang does is counted through ``_patch_lang_core``, which it calls once per
triton.language module it patches: once per launch with the patch in, once more per helper
call without it. (The session fixture in conftest.py holds the patch for every test.)
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from onlinesm import interpreter_speed

pytestmark = pytest.mark.skipif(interpreter_speed.installable() is not None,
                                reason=str(interpreter_speed.installable()))


@triton.jit
def _plus_one(x):
    return x + 1.0


@triton.jit
def _plus_two(x):
    return _plus_one(_plus_one(x))


@triton.jit
def _add_two_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, _plus_two(tl.load(x_ptr + offs)))


@triton.jit
def _bad_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, _plus_one(tl.zeros([BLOCK, 2], tl.float32)))  # shapes do not match


@pytest.fixture
def core_patches(monkeypatch):
    """How many times triton.language was really patched (see the module docstring)."""
    import triton.runtime.interpreter as interp

    calls = []
    original = interp._patch_lang_core
    monkeypatch.setattr(interp, "_patch_lang_core", lambda *a, **k: (calls.append(1), original(*a, **k))[1])
    return calls


def test_a_launch_patches_once_whatever_its_helpers(core_patches):
    x = torch.arange(32, dtype=torch.float32)
    y = torch.empty_like(x)
    with interpreter_speed.patch_once_per_launch() as active:
        assert active
        _add_two_kernel[(4,)](x, y, BLOCK=8)  # 4 programs, 3 helper calls each
        assert len(core_patches) == 1
        _add_two_kernel[(4,)](x, y, BLOCK=8)
        assert len(core_patches) == 2
    np.testing.assert_array_equal(y.numpy(), x.numpy() + 2.0)


def test_a_failed_launch_leaves_no_state_behind(core_patches):
    x = torch.zeros(8)
    with interpreter_speed.patch_once_per_launch():
        with pytest.raises(Exception):
            _bad_kernel[(1,)](x, BLOCK=8)
        del core_patches[:]
        _add_two_kernel[(1,)](x, torch.empty_like(x), BLOCK=8)
        assert len(core_patches) == 1


def test_without_the_patch_helpers_repatch_and_after_it_triton_is_restored():
    # In a fresh process (the test session holds the patch): the count without the patch, with
    # it, and Triton's own functions back once the last block closes.
    script = textwrap.dedent('''
        import torch, triton, triton.language as tl
        import triton.runtime.interpreter as interp
        from onlinesm import interpreter_speed
        calls = []
        core = interp._patch_lang_core
        interp._patch_lang_core = lambda *a, **k: (calls.append(1), core(*a, **k))[1]
        own = (interp._patch_lang, interp.GridExecutor.__call__)

        @triton.jit
        def one(x):
            return x + 1.0

        @triton.jit
        def kernel(x_ptr, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, one(tl.load(x_ptr + offs)))

        x = torch.zeros(32)
        kernel[(4,)](x, BLOCK=8)
        off = len(calls)
        with interpreter_speed.patch_once_per_launch():
            with interpreter_speed.patch_once_per_launch():
                pass
            kernel[(4,)](x, BLOCK=8)  # still in after the inner block closed
        on = len(calls) - off
        restored = (interp._patch_lang, interp.GridExecutor.__call__) == own
        print(off, on, restored, float(x.sum()))
    ''')
    env = {**__import__("os").environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["5", "1", "True", "64.0"]  # 1 + 4 helper calls, then 1
