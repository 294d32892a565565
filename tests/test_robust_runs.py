"""A run never lies: hangs, exits, environment errors, damaged replay files, repeated breaches.

Each test reproduces one way a run could give a false verdict or a useless one, with a small
kernel written here, and checks the honest outcome: the exit code, one clear line, and no
property reported as passing that did not run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onlinesm.check import check_attention, check_softmax, profile_name  # noqa: E402
from onlinesm.cli import main  # noqa: E402
from onlinesm.errors import UsageError  # noqa: E402

FAST = dict(seed=0, database=False, save_failures=False, raise_on_failure=False, max_examples=5)


def _cli(tmp_path: Path, source: str, *argv: str, timeout: float = 240) -> tuple[int, str, str, float]:
    """Run ``onlinesm`` in a fresh process on a kernel file written from ``source``."""
    kernel = tmp_path / "kernels.py"
    kernel.write_text(textwrap.dedent(source))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "onlinesm.cli", *argv], capture_output=True,
                          text=True, cwd=tmp_path, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


# ---------------------------------------------------------------------------------------------
# 1. A hang ends the run in about one deadline, with exit 1 and the input that hung

HANGS_ON_LONG_ROWS = """
    import time, torch

    def softmax(x):
        if x.shape[-1] > 500:
            time.sleep(3600)   # a hang: never returns
        return torch.softmax(x.float(), -1).to(x.dtype)
"""


def test_a_hang_stops_the_run_and_every_later_property_is_not_run(tmp_path: Path) -> None:
    code, out, err, seconds = _cli(tmp_path, HANGS_ON_LONG_ROWS, "check", "kernels.py:softmax",
                                   "--op", "softmax", "--dtypes", "float32,bfloat16",
                                   "--fully-masked", "nan", "--seed", "0", "--deadline", "3", "-q")
    assert code == 1, out + err
    assert seconds < 60, f"the run took {seconds:.0f} s for a 3 s deadline"
    assert "hung on input float32[" in out
    assert "did not return within 3 s" in out
    assert "not run (kernel hung on" in out
    # nothing after the hang is reported as a pass: the bfloat16 column never ran
    bf16 = [line.split("|")[3].strip() for line in out.splitlines() if line.startswith("| ")][1:]
    assert bf16 and all(cell == "not run" for cell in bf16), out
    assert out.count("FAILED deterministic") == 1


def test_compilation_time_of_a_new_variant_is_not_a_hang() -> None:
    """The first call of each (dtype, shape bucket) gets the compile allowance on top."""
    from onlinesm.harness import Kernel

    calls: list[tuple[int, ...]] = []

    def compiles_on_first_call(x):
        if tuple(x.shape) not in calls:
            calls.append(tuple(x.shape))
            time.sleep(0.6)  # "JIT compilation" of this variant
        return torch.softmax(x, -1)

    k = Kernel(compiles_on_first_call, op="softmax", deadline=0.3, compile_allowance=2.0)
    k.softmax(np.zeros((2, 8), np.float32))           # first call of the variant: allowed
    assert k.hung is None
    calls.clear()                                     # the same bucket again, slow: a hang
    with pytest.raises(Exception, match=r"did not return within 0\.3 s"):  # the deadline, unrounded
        k.softmax(np.zeros((2, 7), np.float32))
    assert k.hung is not None
    with pytest.raises(Exception, match="it hung earlier"):  # never called again
        k.softmax(np.zeros((2, 8), np.float32))


def test_the_deadline_is_a_keyword_of_the_api_and_checked() -> None:
    with pytest.raises(UsageError, match="deadline=-1"):
        check_softmax(lambda x: torch.softmax(x, -1), deadline=-1, **FAST)


@pytest.mark.parametrize("seconds", ["inf", "1e12"])
def test_a_deadline_past_any_thread_wait_means_no_limit(seconds: str, capsys) -> None:
    # a thread's wait takes at most threading.TIMEOUT_MAX seconds: longer is no limit, not
    # an OverflowError from the wait
    assert main(["check", "onlinesm.reference:softmax_offline", "--op", "softmax", "--backend",
                 "numpy", "--dtypes", "float32", "--properties", "range", "--max-examples", "3",
                 "--seed", "0", "--deadline", seconds, "--compile-allowance", seconds, "-q"]) == 0
    assert "PASSED" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# 2. sys.exit inside a kernel is a failure; at import time nothing could be tested

def test_sys_exit_in_a_kernel_fails_the_run(tmp_path: Path) -> None:
    code, out, err, _ = _cli(tmp_path, """
        import sys, torch

        def softmax(x):
            if x.shape[-1] > 500:
                sys.exit(0)
            return torch.softmax(x.float(), -1).to(x.dtype)
    """, "check", "kernels.py:softmax", "--op", "softmax", "--dtypes", "float32",
                             "--properties", "accuracy", "--seed", "0", "-q")
    assert code == 1, out + err
    assert "called sys.exit(0) on input float32[" in out


def test_sys_exit_at_import_is_exit_2(tmp_path: Path) -> None:
    code, out, err, _ = _cli(tmp_path, """
        import sys
        sys.exit(0)
        def softmax(x):
            return x
    """, "check", "kernels.py:softmax", "--op", "softmax")
    assert code == 2, out + err
    assert "called sys.exit(0); nothing could be tested" in err
    assert len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# 3. Missing arguments and environment errors are usage errors (exit 2, UsageError), not kernel bugs

@pytest.mark.parametrize("argv, says", [
    ([], "TARGET is needed"),  # the missing target first, whatever else is missing
    (["--dtypes", "bf16"], "TARGET is needed"),
    (["nosuch:fn"], "--op softmax or --op attention is needed"),
    (["onlinesm.reference:softmax_offline", "--workers", "2"], "--op softmax or --op attention"),
], ids=["bare", "flags_only", "no_op", "no_op_workers"])
def test_what_a_check_lacks_is_one_line_naming_the_first_thing_missing(
        argv, says, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # no [tool.onlinesm] table here
    assert main(["check", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("onlinesm: error: ") and says in err and "\n" not in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_a_usage_error(tmp_path: Path, capsys) -> None:
    with pytest.raises(UsageError, match="torch sees no CUDA device"):
        check_softmax(lambda x: torch.softmax(x, -1), device="cuda", **FAST)
    assert main(["check", "onlinesm.reference:softmax_offline", "--op", "softmax", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no CUDA device" in err and len(err.splitlines()) == 1
    saved = _saved_counterexample(tmp_path)
    assert main(["replay", str(saved), "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_usage_error_is_not_an_assertion_error() -> None:
    assert not issubclass(UsageError, AssertionError)


# ---------------------------------------------------------------------------------------------
# 4. check --report DIR is validated before the run

def test_an_unwritable_report_dir_fails_before_the_run(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    start = time.monotonic()
    code = main(["check", "onlinesm.reference:softmax_offline", "--op", "softmax",
                 "--report", str(blocker / "sub"), "-q"])
    assert code == 2
    assert time.monotonic() - start < 10  # nothing ran
    captured = capsys.readouterr()
    assert "cannot write the report" in captured.err and captured.out == ""


# ---------------------------------------------------------------------------------------------
# 5. replay of a damaged file: exit 2, one line naming the file and the field

def _saved_counterexample(tmp_path: Path) -> Path:
    from onlinesm import counterexample
    from onlinesm.harness import Kernel
    from onlinesm.properties import Conventions
    from onlinesm.reference import softmax_offline

    kernel = Kernel(softmax_offline, op="softmax", backend="numpy", target="onlinesm.reference:softmax_offline")
    path = counterexample.save(op="softmax", prop="accuracy", kernel=kernel, conventions=Conventions(),
                               inputs={"x": np.array([[1.0, 2.0]], np.float32)}, message="m",
                               directory=tmp_path)
    return Path(path)


@pytest.mark.parametrize("damage,words", [
    (lambda r: r.pop("property"), "the field 'property' is missing"),
    (lambda r: r.update(property="acuracy"), "property='acuracy' is not a softmax property"),
    (lambda r: r["inputs"]["x"].update(hex=["zz", "3f80"]), "inputs.x cannot be decoded: bad hex"),
    (lambda r: r["inputs"]["x"].update(shape=[3, 3]), "do not fill the shape [3, 3]"),
    (lambda r: r["inputs"].pop("x"), "inputs.x is missing"),
    (lambda r: r["conventions"].update(fully_masked="maybe"), "the field 'conventions' is damaged"),
])
def test_replay_of_a_damaged_file_names_the_file_and_field(tmp_path: Path, capsys, damage, words) -> None:
    path = _saved_counterexample(tmp_path)
    record = json.loads(path.read_text())
    damage(record)
    path.write_text(json.dumps(record))
    assert main(["replay", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert str(path) in err and words in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_replay_of_an_intact_file_still_works(tmp_path: Path, capsys) -> None:
    assert main(["replay", str(_saved_counterexample(tmp_path)), "--device", "cpu"]) == 0
    assert "now holds" in capsys.readouterr().out


def _refuses_to_run(x):
    raise RuntimeError("this kernel is not the one saved")


def test_replay_on_another_target_names_that_target(tmp_path: Path, monkeypatch, capsys) -> None:
    # the message names the kernel that ran (--target), not the one the file was saved from
    monkeypatch.setattr(sys.modules[__name__], "other_kernel", _refuses_to_run, raising=False)
    path = _saved_counterexample(tmp_path)
    assert main(["replay", str(path), "--target", f"{__name__}:other_kernel",
                 "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert f"{__name__}:other_kernel raised RuntimeError" in out, out
    assert "softmax_offline" not in out, out


# ---------------------------------------------------------------------------------------------
# 6. One contract breach is reported once, with the properties it broke

def test_a_breach_met_by_many_properties_is_reported_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)

    def returns_float64(x):
        return torch.softmax(x.double(), -1)

    result = check_softmax(returns_float64, dtypes=["float32"], seed=0, database=False,
                           raise_on_failure=False, max_examples=3, fully_masked="nan")
    failed = [o for o in result.outcomes if o.status == "failed"]
    assert len(failed) >= 5
    (failure,) = result.failures
    assert "as float64, expected float32" in failure.message
    assert len(failure.also) == len(failed) - 1
    text = result.report()
    assert f"the same breach in {len(failed)} properties" in text
    assert text.count("FAILED ") == 2  # the verdict line and the one failure block
    assert len(list((tmp_path / ".onlinesm" / "failures").glob("*.json"))) == 1


def test_a_missing_mask_keyword_suggests_the_flag() -> None:
    def no_mask(q, k, v, *, causal=False, scale=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    with pytest.raises(UsageError, match=r"takes no 'mask' keyword.*--no-mask"):
        check_attention(no_mask, **FAST)


def test_a_missing_scale_keyword_is_a_usage_error_not_eleven_failures() -> None:
    def no_scale(q, k, v, *, mask=None, causal=False):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                is_causal=causal)

    with pytest.raises(UsageError, match=r"takes no 'scale' keyword.*--convention"):
        check_attention(no_scale, **FAST)


def test_an_in_place_write_shows_the_changed_elements() -> None:
    def writes_input(x):
        y = torch.softmax(x.float(), -1).to(x.dtype)
        x[..., 0] = 0.0
        return y

    result = check_softmax(writes_input, dtypes=["float32"], properties=["accuracy"], **FAST)
    (failure,) = result.failures
    assert "modified its input x in place" in failure.message
    assert "elements changed: x[0, 0]" in failure.message and "-> 0" in failure.message


# ---------------------------------------------------------------------------------------------
# 7. Profiles are spelled the same way everywhere

def test_profiles_accept_both_spellings() -> None:
    assert profile_name("quick") == profile_name("onlinesm-quick") == "onlinesm-quick"
    assert check_softmax(lambda x: torch.softmax(x, -1), profile="ci", fully_masked="nan",
                         dtypes=["float32"], properties=["range"], **FAST).passed
    with pytest.raises(UsageError, match="profile='fast' is unknown; use one of quick, ci, thorough"):
        profile_name("fast")


def test_the_cli_accepts_the_long_profile_name(capsys) -> None:
    assert main(["check", "onlinesm.reference:softmax_offline", "--op", "softmax", "--backend", "numpy",
                 "--profile", "onlinesm-ci", "--dtypes", "float32", "--properties", "range",
                 "--max-examples", "3", "--seed", "0", "-q"]) == 0
    assert main(["check", "onlinesm.reference:softmax_offline", "--op", "softmax",
                 "--profile", "fast"]) == 2
    assert "--profile 'fast' is unknown" in capsys.readouterr().err  # the CLI's words



def test_a_misspelt_dtype_is_one_line_that_names_the_spellings(capsys) -> None:
    assert main(["check", "onlinesm.reference:softmax_offline", "--op", "softmax",
                 "--dtypes", "bf16x"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "--dtypes 'bf16x' is not a floating-point dtype" in err
    assert "bf16, fp32, fp16, fp64" in err and err.count("bf16x") == 1, err



@pytest.mark.parametrize("flags, words", [
    (["--properties="], "leaves no property to run"),
    (["--properties", "regression"], "give it with --baseline TARGET"),
    (["--properties", "accuracy_statistical", "--no-statistical"], "drop one of them"),
])
def test_a_selection_that_runs_no_property_is_a_usage_error(flags, words, capsys) -> None:
    # not PASSED over an empty table: nothing was tested
    assert main(["check", "onlinesm.reference:softmax_offline", "--op", "softmax", "--backend",
                 "numpy", "--dtypes", "float32", "--max-examples", "3", "--seed", "0", "-q",
                 *flags]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert words in err and len(err.splitlines()) == 1, err
    assert "PASSED" not in captured.out



def _softmax_kernel(x, dim=-1):
    return torch.softmax(x, dim)


def _attention_kernel(q, k, v, causal=False, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


@pytest.mark.parametrize("fn, op, words", [
    (_softmax_kernel, "attention", "for a softmax kernel use --op softmax"),
    (_attention_kernel, "softmax", "for an attention kernel use --op attention"),
])
def test_a_kernel_checked_as_the_other_op_is_told_so(fn, op, words, monkeypatch, capsys) -> None:
    # not a chain of hints about --no-mask, --no-causal or wrapping the kernel
    monkeypatch.setattr(sys.modules[__name__], "kernel_under_test", fn, raising=False)
    assert main(["check", f"{__name__}:kernel_under_test", "--op", op, "--dtypes", "float32",
                 "--max-examples", "3", "--seed", "0", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err
    assert "--no-mask" not in err and "wrap" not in err, err



@pytest.mark.parametrize("argv, words", [
    (["check", "m:f", "--max-exampels", "3"],
     "unrecognized arguments: --max-exampels 3; did you mean --max-examples? "
     "(`onlinesm check --help` lists the options)"),
    (["report", "--no-plost"], "did you mean --no-plots? (`onlinesm report --help`"),
    (["chek", "m:f"], "did you mean 'check'?"),
    (["check", "m:f", "--zzz"], "--zzz (`onlinesm check --help` lists the options)"),
    (["check", "m:f", "--seed", "x"], "invalid int value: 'x'; give a whole number"),
    (["check", "m:f", "--kwarg", "foo"], "error: --kwarg 'foo' must look like NAME=VALUE"),
])
def test_a_misspelt_flag_or_command_names_the_close_one_and_the_right_help(argv, words, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err
    assert err.startswith("onlinesm: error: "), err  # one prefix, whichever layer caught it



@pytest.mark.parametrize("flags, words", [
    (["--no-mask", "--mask-kinds", "bool"], "--mask-kinds does nothing here: --no-mask says"),
    (["--no-causal", "--causal-align", "bottom-right"], "--causal-align does nothing here"),
    (["--delta", "1e-3"], "add --tier probabilistic"),
    (["--regression-factor", "2"], "add that"),
])
def test_a_flag_that_another_makes_moot_is_refused(flags, words, capsys) -> None:
    # the user believes it applied: say it does not, before anything runs
    assert main(["check", "onlinesm.reference:softmax_offline", "--op", "attention", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err



def test_a_bad_value_is_named_by_its_flag_on_the_command_line(capsys) -> None:
    # the API's keywords (min_seq_q=10) in the CLI's words (--min-seq-q 10)
    assert main(["check", "onlinesm.reference:softmax_offline", "--op", "softmax",
                 "--min-len", "10", "--max-len", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--min-len 10 is above --max-len 5" in err and "min_len=" not in err, err


def test_a_config_files_bad_value_keeps_the_files_words(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "onlinesm.toml").write_text('[kernels.a]\ntarget = "onlinesm.reference:softmax_offline"'
                                            '\nop = "softmax"\ndtypes = ["float99"]\n')
    assert main(["check"]) == 2
    err = capsys.readouterr().err.strip()
    assert "[kernels.a] dtypes='float99' is not a floating-point dtype" in err, err


# ---------------------------------------------------------------------------------------------
# 9. A kernel's own noise (a compiler writing to fd 2) is one line and a log file

def test_a_kernel_that_floods_stderr_is_summarised_in_one_line(tmp_path: Path) -> None:
    code, out, err, _ = _cli(tmp_path, """
        import os, torch

        def softmax(x):
            if x.shape[-1] > 500:
                os.write(2, b"ptxas fatal : crashed\\n" + b"  .reg .f32 %f<99>;\\n" * 5000)
                raise RuntimeError("PassManager::run failed")
            return torch.softmax(x.float(), -1).to(x.dtype)
    """, "check", "kernels.py:softmax", "--op", "softmax", "--dtypes", "float32",
                             "--properties", "accuracy", "--seed", "0", "-q")
    assert code == 1, out + err
    assert ".reg .f32" not in out + err  # the flood went to the log, not the terminal
    assert "raised RuntimeError: PassManager::run failed" in out
    assert "the kernel wrote 5,001 lines of output: 'ptxas fatal : crashed'" in out
    logs = list((tmp_path / ".onlinesm" / "logs").glob("*.log"))
    assert logs and ".reg .f32" in logs[0].read_text()


# ---------------------------------------------------------------------------------------------
# 8. Under Triton's interpreter a user's bf16 store rounds to nearest even, as on the GPU

LIGER_STYLE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + offs, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.where(offs < n_cols, tl.exp(x - m), 0.0)
    d = tl.sum(e, axis=0)
    # the fp32 result stored into a bf16 tensor: the GPU rounds to nearest even here
    tl.store(y_ptr + row * stride + offs, e / d, mask=offs < n_cols)


def softmax(x):
    y = torch.empty_like(x)
    n = x.shape[-1]
    _softmax_kernel[(x.shape[0],)](x, y, x.stride(0), n, BLOCK=triton.next_power_of_2(n))
    return y
"""


@pytest.mark.interpreter
def test_a_users_triton_bf16_store_rounds_to_nearest_under_the_interpreter(tmp_path: Path, monkeypatch) -> None:
    import contextlib
    import importlib.util

    from onlinesm import interpreter

    assert interpreter.interpreted()
    path = tmp_path / "liger_style.py"
    path.write_text(LIGER_STYLE)
    spec = importlib.util.spec_from_file_location("liger_style_softmax", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    opts = dict(dtypes=["bfloat16"], properties=["accuracy"], families=["gaussian", "huge_spread"],
                min_len=2, max_len=64, **FAST)
    assert check_softmax(module.softmax, **opts).passed
    # without the rounding patch the interpreter truncates and the same correct kernel fails
    monkeypatch.setattr(interpreter, "bf16_round_to_nearest", lambda: contextlib.nullcontext(False))
    assert not check_softmax(module.softmax, **opts).passed


@pytest.mark.interpreter
def test_without_the_patch_a_one_ulp_bf16_miss_is_interpreter_suspect(tmp_path: Path, monkeypatch) -> None:
    import contextlib
    import importlib.util

    from onlinesm import interpreter

    path = tmp_path / "liger_style2.py"
    path.write_text(LIGER_STYLE)
    spec = importlib.util.spec_from_file_location("liger_style_softmax2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(interpreter, "bf16_round_to_nearest", lambda: contextlib.nullcontext(False))
    monkeypatch.setattr(interpreter, "patch_works", lambda: False)  # as on a future Triton
    opts = dict(dtypes=["bfloat16"], properties=["accuracy"], families=["gaussian", "huge_spread"],
                min_len=2, max_len=64, **FAST)
    result = check_softmax(module.softmax, **opts)
    assert result.passed and result.outcomes[0].status == "suspect"
    assert "interpreter-suspect accuracy [bfloat16]" in result.report()
    assert not check_softmax(module.softmax, strict=True, **opts).passed
