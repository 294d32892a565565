"""The compile counter, the kernels' do_not_specialize declarations and the pinned configs.

Runs on the CPU: Triton's interpreter compiles nothing, so the counter is checked on what it
can observe here (its API, the interpreter note, events fed through its recording path); the
real counts come from a GPU (bench/compile_time.py, reports/h200/compile_time.md).
"""

from __future__ import annotations

import os
import sys

import pytest

from onlinesm import compiles, kernels


def test_counter_api_under_the_interpreter() -> None:
    with compiles.counting() as c:
        kernels.softmax(__import__("torch").randn(3, 40))
    if kernels.interpreting():
        assert c.count == 0 and c.seconds == 0.0
        assert "interpreter" in c.note
    assert isinstance(c.summary(), str) and "Triton compilations" in c.summary()


def test_counter_records_into_every_open_block() -> None:
    with compiles.counting() as outer:
        compiles._record("k1", 0.5)
        with compiles.counting() as inner:
            compiles._record("k2", 0.25)
            compiles._record_tuning(2.0)
        compiles._record("k1", 0.25)
    compiles._record("k1", 9.0)  # no block open: counted nowhere
    assert outer.count == 3 and outer.seconds == pytest.approx(1.0)
    assert outer.by_kernel == {"k1": 2, "k2": 1}
    assert inner.count == 1 and inner.autotune_runs == 1 and inner.autotune_seconds == 2.0
    assert "autotuning" in inner.summary()


def test_counter_hooks_triton_compilation() -> None:
    """The hook is in place on the installed Triton (a GPU would compile through it)."""
    import triton.runtime.jit as jit

    with compiles.counting():
        pass
    assert compiles.mechanism() == "JITFunction._do_compile"
    assert hasattr(jit.JITFunction._do_compile, "__wrapped__")


def _do_not_specialize(fn: object) -> set[str]:
    """What a @triton.jit object declares, compiled (JITFunction) or interpreted."""
    names = getattr(fn, "do_not_specialize", None)
    if names is None:
        names = getattr(fn, "kwargs", {}).get("do_not_specialize")
    return set(names or ())


def test_attention_declares_do_not_specialize() -> None:
    kernels.attention  # noqa: B018 - import the module
    mod = sys.modules["onlinesm.kernels.attention"]
    declared = _do_not_specialize(mod._attn_fwd)
    per_shape = {"Sq", "Sk", "H", "GROUP", "causal_offset", "SEQ_BUCKET", "BH_BUCKET",
                 "stride_qb", "stride_qh", "stride_qm", "stride_kb", "stride_kn",
                 "stride_mm", "stride_ob"}
    assert per_shape <= declared
    assert declared == set(mod.ATTN_DO_NOT_SPECIALIZE)


def test_softmax_declares_do_not_specialize() -> None:
    kernels.softmax  # noqa: B018
    mod = sys.modules["onlinesm.kernels.softmax"]
    for fn in (mod._softmax_on_chip_kernel, mod._softmax_split_kernel):
        assert {"n_rows", "n_cols", "stride_xm", "stride_ym"} <= _do_not_specialize(fn)


def test_pinned_configs_select_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels.attention  # noqa: B018
    mod = sys.modules["onlinesm.kernels.attention"]
    monkeypatch.delenv(mod.CONFIG_ENV, raising=False)
    monkeypatch.delenv(kernels.PIN_ENV, raising=False)
    assert mod.launch_config(64, interpret=False) is None  # autotune
    with kernels.pinned_configs():
        assert kernels.configs_pinned()
        for block_d, cfg in mod.PINNED_CONFIGS.items():
            assert mod.launch_config(block_d, interpret=False) == cfg
            bm, bn, stages, _ = cfg
            assert mod._fits(bm, bn, stages, block_d, 4)  # fits fp32 too
        for block_d, cfg in mod.PINNED_CONFIGS_FP32.items():
            assert mod.launch_config(block_d, fp32=True, interpret=False) == cfg
            # the tiles fp32's unrolled FMA dots compile quickly in: at most 16 x 16
            assert cfg[0] * cfg[1] <= 16 * 16 and mod._fits(*cfg[:3], block_d, 4)
        monkeypatch.setenv(mod.CONFIG_ENV, "128,64,3,8")  # an explicit pin wins
        assert mod.launch_config(64, interpret=False) == (128, 64, 3, 8)
    assert os.environ.get(kernels.PIN_ENV) is None
    assert not kernels.configs_pinned()


def test_config_env_takes_a_register_cap_and_rejects_other_forms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kernels.attention  # noqa: B018
    mod = sys.modules["onlinesm.kernels.attention"]
    monkeypatch.setenv(mod.CONFIG_ENV, "128,64,2,8,128")
    assert mod.launch_config(128, interpret=False) == (128, 64, 2, 8, 128)
    for bad in ("128,64,2", "128,64,2,8,128,1", "128,x,2,8"):
        monkeypatch.setenv(mod.CONFIG_ENV, bad)
        with pytest.raises(ValueError, match=r"BLOCK_M,BLOCK_N,num_stages,num_warps\[,maxnreg\]"):
            mod.launch_config(128, interpret=False)
