"""The property suite finds bugs: every kernel of the gallery is caught, every correct one passes.

A false alarm on a correct kernel is as serious as a missed bug, so both halves are here. The
runs are seeded (reproducible) and targeted at the property that should see each bug, to keep CI
fast; ``test_default_suite_catches_the_sentinel_bug`` also runs one bug through the whole suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gallery  # noqa: E402  (conftest puts tests/ on sys.path)

from onlinesm import reference  # noqa: E402
from onlinesm.check import UsageError, check_attention, check_softmax  # noqa: E402
from onlinesm.cli import main  # noqa: E402
from onlinesm.counterexample import decode_array, encode_array, replay  # noqa: E402

GALLERY = Path(gallery.__file__)
FAST = dict(seed=0, database=False, save_failures=False, raise_on_failure=False, max_examples=15)

# (buggy kernel, the property that must see it, dtype, words the message must contain)
SOFTMAX_BUGS = [
    ("bug_sentinel_max", "accuracy", "float32", "below_sentinel"),
    ("bug_unguarded_masked_tile", "range", "float32", "nan"),
    ("bug_missing_rescale", "accuracy", "float32", "Mismatched elements"),
    ("bug_bf16_accumulation", "accuracy", "float32", "Mismatched elements"),
    ("bug_drops_tail", "row_sum", "float32", "sums to"),
    ("bug_no_max_subtraction", "range", "float32", "not a finite value"),
    ("bug_coarse_exp", "accuracy", "float32", "ulp"),
    ("bug_fully_masked_nan", "fully_masked", "float32", "expected zeros"),
    ("bug_batch_max", "row_independence", "float32", "alone"),
    ("bug_mutates_input", "accuracy", "float32", "modified its input x in place"),
    ("bug_wrong_dtype", "accuracy", "bfloat16", "expected bfloat16"),
    ("bug_nondeterministic", "deterministic", "float32", "two identical calls differ"),
    ("bug_refuses_long_rows", "accuracy", "float32", "raised ValueError: row too long"),
    ("bug_approx_exp_1e4", "accuracy", "float32", "Mismatched elements"),
    ("bug_pad_zero_tail", "row_sum", "float32", "sums to"),
    ("bug_inverted_rescale", "accuracy", "float32", "Mismatched elements"),
    ("bug_ignores_strides", "strided", "float32", "strided (non-contiguous) input"),
]


@pytest.mark.parametrize("name,prop,dtype,words", SOFTMAX_BUGS, ids=[b[0] for b in SOFTMAX_BUGS])
def test_every_softmax_bug_is_caught(name: str, prop: str, dtype: str, words: str) -> None:
    result = check_softmax(getattr(gallery, name), dtypes=[dtype], properties=[prop], **FAST)
    assert not result.passed
    (failure,) = result.failures
    assert failure.property == prop
    text = failure.message + " " + failure.family
    assert words.lower() in text.lower(), text


def test_a_batch_variant_kernel_passes_by_default_and_fails_when_batch_invariance_is_declared() -> None:
    kw = dict(dtypes=["float32"], properties=["row_independence"], **{**FAST, "seed": 0, "max_examples": 20})
    # the two reduction orders differ only on some rows longer than one tile: rows past 64
    assert check_softmax(gallery.bug_batch_variant, **kw).passed  # accurate: within the bound
    result = check_softmax(gallery.bug_batch_variant, batch_invariant=True, **kw)
    (failure,) = result.failures
    assert failure.property == "row_independence"
    assert "differs bitwise" in failure.message and "batch_invariant=True" in failure.message


def test_the_batch_variant_kernel_passes_the_default_suite() -> None:
    result = check_softmax(gallery.bug_batch_variant, **{**FAST, "max_examples": 6}, max_len=256)
    assert result.passed, result.report()


def test_failures_are_minimised_to_one_short_row() -> None:
    result = check_softmax(gallery.bug_sentinel_max, dtypes=["float32"], properties=["accuracy"], **FAST)
    (failure,) = result.failures
    x = failure.inputs["x"]
    assert x.shape[0] == 1 and x.shape[1] <= 8  # from a batch of rows of up to 1024
    assert np.all(x.astype(np.float64) < -1e30)  # the entries that trigger the bug are kept


def test_default_suite_catches_the_sentinel_bug() -> None:
    result = check_softmax(gallery.bug_sentinel_max, dtypes=["bfloat16"], seed=1, database=False,
                           save_failures=False, raise_on_failure=False, max_examples=10, max_len=256)
    assert "accuracy" in {f.property for f in result.failures}


CORRECT_SOFTMAX = [
    (gallery.correct_online, {}),
    (gallery.torch_softmax, {"fully_masked": "nan"}),
    (reference.softmax_offline, {"backend": "numpy", "exp": "accurate"}),
    (reference.softmax_online_scalar, {"backend": "numpy", "exp": "accurate"}),
    (lambda x: reference.softmax_online_tiled(x, 16), {"backend": "numpy", "exp": "accurate"}),
]


@pytest.mark.parametrize("fn,conventions", CORRECT_SOFTMAX, ids=["online", "torch", "offline", "scalar", "tiled"])
def test_correct_softmax_kernels_pass_every_property(fn, conventions) -> None:
    result = check_softmax(fn, **{**FAST, "max_examples": 6}, max_len=256, **conventions)
    assert result.passed, result.report()
    assert {o.status for o in result.outcomes} == {"passed"}
    assert len(result.outcomes) == (11 + 1) * 3 and all(o.examples > 0 for o in result.outcomes)  # + accuracy_statistical


ATTENTION_BUGS = [
    ("bug_attn_unguarded", "accuracy", "nan"),
    ("bug_attn_causal_bottom_right", "causal_mask", "top-left"),
    ("bug_attn_scale_1_over_d", "default_scale", "scale=None"),
    ("bug_attn_bf16_pv", "accuracy", "Mismatched elements"),
    ("bug_attn_finite_mask", "fully_masked", "expected zeros"),
    ("bug_attn_o_not_rescaled", "accuracy", "attention o: output not within the bound"),
    ("bug_attn_causal_off_by_one", "causal_mask", "causal=True vs the explicit top-left mask"),
    ("bug_attn_lse_base2", "accuracy", "attention lse: output not within the bound"),
    ("bug_attn_mask_first_query", "causal_mask", "causal=True vs the explicit top-left mask"),
]


@pytest.mark.parametrize("name,prop,words", ATTENTION_BUGS, ids=[b[0] for b in ATTENTION_BUGS])
def test_every_attention_bug_is_caught(name: str, prop: str, words: str) -> None:
    result = check_attention(getattr(gallery, name), dtypes=["float32"], properties=[prop], **FAST)
    assert not result.passed
    (failure,) = result.failures
    assert words.lower() in failure.message.lower(), failure.message


def test_a_wrong_grouped_query_head_map_is_caught() -> None:
    # H = 4, Hkv = 2 is the smallest shape where h % Hkv and h // (H // Hkv) differ: the default
    # domain (max_heads=4) and the explicit gqa example include it.
    result = check_attention(gallery.bug_attn_gqa_modulo, dtypes=["float32"], properties=["accuracy"],
                             allow_gqa=True, **FAST)  # default sizes: H = 4 over Hkv = 2 is tried
    (failure,) = result.failures
    assert failure.family == "gqa" and "attention o: output not within the bound" in failure.message
    assert check_attention(gallery.correct_attention, dtypes=["float32"], properties=["accuracy"],
                           allow_gqa=True, max_heads=4, families=["gqa"], **FAST).passed


@pytest.mark.parametrize("fn,conventions", [(gallery.correct_attention, {}),
                                            (gallery.sdpa_math, {"fully_masked": "any", "exp": "accurate"})],
                         ids=["online", "sdpa_math"])
def test_correct_attention_kernels_pass_every_property(fn, conventions) -> None:
    result = check_attention(fn, **{**FAST, "max_examples": 6}, **conventions)
    assert result.passed, result.report()
    assert len(result.outcomes) == (8 + 1) * 3


@pytest.mark.interpreter
def test_builtin_triton_kernels_pass_under_the_interpreter() -> None:
    from onlinesm.kernels import attention, softmax

    kw = {**FAST, "max_examples": 4}
    r = check_softmax(softmax, max_len=200, max_rows=3, **kw)
    assert r.passed, r.report()
    r = check_attention(attention, head_dims=(16, 40), max_seq_q=24, max_seq_k=80, allow_gqa=True, **kw)
    assert r.passed, r.report()


# ---------------------------------------------------------------------------------------------
# The call contract and nothing-testable cases


def test_a_kernel_failing_on_the_simplest_input_is_a_usage_error() -> None:
    def broken(x):
        raise RuntimeError("not implemented")

    with pytest.raises(UsageError, match="nothing could be tested: broken raised RuntimeError: not implemented"):
        check_softmax(broken, **FAST)


def test_a_kernel_for_some_dtypes_only_is_told_how_to_check_those() -> None:
    # A 16-bit-only kernel under the default dtypes (float32 first): the error names the dtypes
    # it runs on and the refusal to declare, and that refusal then makes float32 n/a.
    def half_only(x):
        if x.dtype == torch.float32:
            raise TypeError("only 16-bit (got x.dtype=float32)")
        return torch.softmax(x.float(), -1).to(x.dtype)

    with pytest.raises(UsageError) as err:
        check_softmax(half_only, dtypes=("float32", "bfloat16", "float16"), **FAST)
    msg = str(err.value)
    assert "it runs on bfloat16,float16: check only those with --dtypes bfloat16,float16" in msg
    refusal = msg.split("--unsupported '")[1].split("'")[0]
    assert refusal == r"TypeError:only 16-bit \(got x\.dtype=float32\)"
    r = check_softmax(half_only, dtypes=("float32", "bfloat16"), unsupported=[refusal],
                      fully_masked="nan", **FAST)
    assert r.passed, r.report()
    assert all(o.status == "na" for o in r.outcomes if o.dtype == "float32")
    # a kernel broken on every dtype gets no such hint
    with pytest.raises(UsageError) as err:
        check_softmax(lambda x: 1 / 0, dtypes=("float32", "bfloat16"), **FAST)
    assert "it runs on" not in str(err.value)


def test_wrong_shape_and_wrong_type_are_usage_errors_on_the_first_input() -> None:
    with pytest.raises(UsageError, match=r"shape \[1\], expected \[1, 4\]"):
        check_softmax(lambda x: x[0, :1], **FAST)
    with pytest.raises(UsageError, match="returned list"):
        check_softmax(lambda x: [1.0], **FAST)


def test_a_hanging_kernel_is_reported_not_waited_for() -> None:
    from onlinesm.harness import Kernel, KernelError

    def slow(x):
        import time

        time.sleep(5)
        return x

    k = Kernel(slow, op="softmax", deadline=0.2)
    with pytest.raises(KernelError, match=r"did not return within 0\.2 s"):
        k.softmax(np.zeros((1, 2), np.float32))


def test_raise_on_failure_gives_an_assertion_error_with_the_report() -> None:
    with pytest.raises(AssertionError, match="FAILED fully_masked"):
        check_softmax(gallery.torch_softmax, dtypes=["float32"], properties=["fully_masked"],
                      seed=0, database=False, save_failures=False, max_examples=15)


def test_a_failure_the_other_convention_explains_gives_that_one_hint_only() -> None:
    # torch.softmax gives NaN on a fully masked row: the report names fully_masked='nan'
    # once, not beside the property's generic "declare 'nan' or 'any'" as well
    result = check_softmax(gallery.torch_softmax, dtypes=["float32"], properties=["fully_masked"],
                           seed=0, database=False, save_failures=False, max_examples=15,
                           raise_on_failure=False)
    (failure,) = result.failures
    assert "The output matches fully_masked='nan'" in failure.message, failure.message
    assert "if that is the kernel's convention" not in failure.message, failure.message


def test_waived_properties_are_reported_with_their_reason() -> None:
    result = check_softmax(gallery.torch_softmax, dtypes=["float32"], properties=["fully_masked"],
                           skip={"fully_masked": "torch gives NaN by design"}, **FAST)
    assert result.passed and result.outcomes[0].status == "waived"
    assert "torch gives NaN by design" in result.report()


def test_bad_options_are_usage_errors_naming_the_value() -> None:
    with pytest.raises(UsageError, match="unknown property 'acuracy'"):
        check_softmax(gallery.correct_online, properties=["acuracy"], **FAST)
    with pytest.raises(ValueError, match="fully_masked='zero'"):
        check_softmax(gallery.correct_online, fully_masked="zero", **FAST)
    with pytest.raises(ValueError, match="dtypes='int8' is not a floating-point dtype"):
        check_softmax(gallery.correct_online, dtypes=["int8"], **FAST)


# ---------------------------------------------------------------------------------------------
# Counterexample files, the CLI and the pytest plugin


def test_counterexample_encoding_is_exact_for_bf16_nan_and_masks() -> None:
    import ml_dtypes

    a = np.array([1.0, -np.inf, np.nan, 3e38, 1e-40], dtype=ml_dtypes.bfloat16)
    back = decode_array(json.loads(json.dumps(encode_array(a))))
    assert back.dtype == a.dtype and np.array_equal(back.view(np.uint16), a.view(np.uint16))
    m = np.array([[True, False, True]])
    assert np.array_equal(decode_array(json.loads(json.dumps(encode_array(m)))), m)


def test_cli_check_fails_with_a_replayable_counterexample(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["check", f"{GALLERY}:bug_sentinel_max", "--op", "softmax", "--dtypes", "float32",
                 "--properties", "accuracy,range", "--max-examples", "15", "--seed", "0", "-q"])
    out = capsys.readouterr().out
    assert code == 1
    assert "| accuracy | **FAIL** |" in out and "| range | pass" in out
    replay_file = out.split("replay: onlinesm replay ")[1].split()[0]
    assert main(["replay", replay_file]) == 1  # still fails on the saved input
    assert main(["replay", replay_file, "--target", f"{GALLERY}:correct_online"]) == 0
    holds, message = replay(replay_file, gallery.correct_online)
    assert holds and "now holds" in message


def test_cli_check_passes_a_correct_kernel(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["check", f"{GALLERY}:torch_softmax", "--op", "softmax", "--fully-masked", "nan",
                 "--dtypes", "bfloat16", "--max-examples", "4", "--seed", "0", "-q"])
    assert code == 0
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("argv,words", [
    (["check", "no_such_module_xyz:f", "--op", "softmax"], "no module no_such_module_xyz in the current folder"),
    (["check", f"{GALLERY}:nope", "--op", "softmax"], "the module has no attribute 'nope'"),
    (["check", f"{GALLERY}:torch_softmx", "--op", "softmax"],
     "has no attribute 'torch_softmx'; did you mean 'torch_softmax'?"),
    (["check", "missing_colon", "--op", "softmax"], "must look like package.module:function"),
    (["check", f"{GALLERY}:correct_online", "--op", "softmax", "--skip", "accuracy"], "needs a reason"),
    (["check", f"{GALLERY}:correct_online", "--op", "softmax", "--require", "fast"], "--require fast"),
    (["replay", "/no/such/file.json"], "no counterexample file"),
    (["replay", "/"], "/ is a folder; replay one counterexample file in it"),
    (["check", f"{GALLERY}:correct_online:extra", "--op", "softmax"], "has 2 colons"),
    (["check", f"{GALLERY}:correct_online", "--op", "softmax", "--properties", "range",
      "--baseline", f"{GALLERY}:correct_online"], "which --properties ['range'] leaves out"),
    (["check", f"{GALLERY}:__name__", "--op", "softmax"],
     "__name__ is not a function but a value of type str"),
    (["check", f"{GALLERY}:correct_online", "--op", "softmax", "--convention", "sdpa"],
     "applies to attention kernels only"),
])
def test_cli_usage_errors_exit_2_with_one_line(argv, words, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_cli_finds_a_module_of_the_current_folder_as_python_m_does(tmp_path, monkeypatch,
                                                                  capsys) -> None:
    (tmp_path / "my_kernels.py").write_text("import torch\n"
                                            "def sm(x):\n"
                                            "    return torch.softmax(x.float(), -1).to(x.dtype)\n")
    (tmp_path / "needs_more.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    code = main(["check", "my_kernels:sm", "--op", "softmax", "--fully-masked", "nan",
                 "--dtypes", "float32", "--max-examples", "3", "--seed", "0", "-q"])
    assert code == 0 and "PASSED" in capsys.readouterr().out
    # a module that is found but fails to import names what it lacks, not the target
    assert main(["check", "needs_more:f", "--op", "softmax"]) == 2
    err = capsys.readouterr().err.strip()
    assert "No module named 'no_such_dependency_xyz'" in err and "current folder" not in err


def test_cli_rejects_a_bad_flag_value_with_exit_2(capsys) -> None:
    assert main(["check", "x:y", "--op", "softmax", "--fully-masked", "maybe"]) == 2
    err = capsys.readouterr().err.strip()
    assert "invalid choice: 'maybe'" in err and len(err.splitlines()) == 1


def test_pytest_plugin_runs_a_suite_in_a_users_test_file(tmp_path) -> None:
    test_file = tmp_path / "test_user_kernels.py"
    test_file.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(GALLERY.parent)!r})
        import gallery
        from onlinesm.pytest_plugin import onlinesm_suite

        test_good = onlinesm_suite(gallery.correct_online, op="softmax", dtypes=["float32"],
                                   properties=["accuracy"], database=False, save_failures=False)
        test_bad = onlinesm_suite(gallery.bug_sentinel_max, op="softmax", dtypes=["float32"],
                                  properties=["accuracy"], database=False, save_failures=False)
    """))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(test_file), "-q", "-p", "no:cacheprovider",
         "--onlinesm-seed", "0", "--onlinesm-max-examples", "15", "-m", "onlinesm"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout
    assert "FAILED accuracy [float32]" in proc.stdout


def test_an_input_with_nothing_to_check_is_untested_not_a_pass() -> None:
    # Each property given an input where it has nothing to check says so (Untested), so that
    # `pass (N)` counts only examples that tested something; and shift invariance finds an
    # exact shift per row, so a batch mixing huge and ordinary rows is still tested.
    from onlinesm.declarations import Conventions
    from onlinesm.harness import Kernel
    from onlinesm.properties import SOFTMAX_PROPERTIES, PropertyFailure, Untested

    calls = []

    def softmax_np(x):
        calls.append(x.shape)
        return reference.softmax_offline(x)

    k, conv = Kernel(softmax_np, op="softmax", backend="numpy"), Conventions()
    plain = np.array([[0.5, 1.0, 2.0]], dtype=np.float32)  # no -inf, no special row, one row
    for name in ("masked_zero", "fully_masked", "row_independence"):
        with pytest.raises(Untested):
            SOFTMAX_PROPERTIES[name](k, plain, conv)
    with pytest.raises(Untested):
        SOFTMAX_PROPERTIES["deterministic"](k, plain, Conventions(deterministic=False))
    mixed = np.array([[-4.6e32, -4.7e32], [0.5, 1.0]], dtype=np.float32)  # no common shift
    calls.clear()
    SOFTMAX_PROPERTIES["shift_invariance"](k, mixed, conv)
    assert calls == [(2, 2), (2, 2)]  # both rows, each shifted by its own exact c

    def shift_breaks(x):  # right for the row [0.5, 1], wrong once it is shifted (by 1)
        y = reference.softmax_offline(x)
        return np.where(x.max(axis=-1, keepdims=True) > 1.2, np.float32(0.5), y)

    with pytest.raises(PropertyFailure, match="one exact shift per row|softmax\\(x \\+"):
        SOFTMAX_PROPERTIES["shift_invariance"](Kernel(shift_breaks, op="softmax", backend="numpy"),
                                               mixed[1:], conv)


def test_a_failure_is_reduced_only_while_it_fails_the_same_way(tmp_path) -> None:
    # The kernel breaks past 300 columns (IndexError) and refuses shorter rows with another
    # exception: the reduced input must still be the IndexError, not the refusal, and a
    # property failure must stay a property failure.
    from onlinesm.declarations import Conventions
    from onlinesm.failures import shrink_and_save
    from onlinesm.harness import Kernel, KernelError

    def two_faults(x):
        if x.shape[-1] < 300:
            raise ValueError(f"rows of at least 300, got {x.shape[-1]}")
        if x.shape[-1] > 300:
            raise IndexError("tile index out of range")
        return reference.softmax_offline(x)

    k, conv = Kernel(two_faults, op="softmax", backend="numpy"), Conventions()
    x = np.linspace(-3, 3, 2 * 400, dtype=np.float32).reshape(2, 400)
    with pytest.raises(KernelError) as first:
        k.softmax(x)
    small, message, _ = shrink_and_save(k, "softmax", "accuracy", conv, {"x": x}, first.value,
                                        directory=None)
    assert small["x"].shape[-1] > 300 and "IndexError" in message, message

    def sentinel_below_300_refuses(x):
        if x.shape[-1] < 300:
            raise ValueError(f"rows of at least 300, got {x.shape[-1]}")
        return gallery.bug_sentinel_max(torch.from_numpy(x)).numpy()

    torch = pytest.importorskip("torch")
    k = Kernel(sentinel_below_300_refuses, op="softmax", backend="numpy")
    rows = np.full((1, 400), -1e32, dtype=np.float32)  # below the -1e30 sentinel: all zeros
    from onlinesm.properties import SOFTMAX_PROPERTIES, PropertyFailure

    with pytest.raises(PropertyFailure) as failure:
        SOFTMAX_PROPERTIES["accuracy"](k, rows, conv)
    small, message, _ = shrink_and_save(k, "softmax", "accuracy", conv, {"x": rows},
                                        failure.value, directory=None)
    assert small["x"].shape[-1] >= 300 and "ValueError" not in message, message
