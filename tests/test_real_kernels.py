"""The kernels people have, checked as they are: domains, refusals, adapters, mask kinds.

Each kernel here is written in this file and mimics one trait of real kernels: bf16/fp16 only,
refusing some head dims, needing Sq == Sk or lengths that are a multiple of a tile, taking no
mask, another calling convention or layout. Each must be checkable with one command, with no
false alarm and no false pass.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from onlinesm.check import check_attention, check_softmax  # noqa: E402
from onlinesm.cli import main  # noqa: E402
from onlinesm.errors import UsageError  # noqa: E402

FAST = dict(seed=0, database=False, save_failures=False, raise_on_failure=False, max_examples=4)
SMALL = dict(head_dims=(16,), max_seq_q=32, max_seq_k=48, max_heads=2, max_batch=1)


def _sdpa(q, k, v, *, mask=None, causal=False, scale=None):
    if mask is not None and causal:
        tri = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
        mask, causal = mask & tri, False
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)


# ---------------------------------------------------------------------------------------------
# 1. The first call lies inside the declared domain

def half_only_softmax(x):
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"only bf16/fp16 are supported, got {x.dtype}")
    return torch.softmax(x.float(), -1).to(x.dtype)


def test_a_half_precision_only_kernel_is_tested_in_its_dtypes(capsys) -> None:
    result = check_softmax(half_only_softmax, dtypes=["bfloat16", "float16"], fully_masked="nan",
                           properties=["accuracy", "range"], **FAST)
    assert result.passed, result.report()
    assert main(["check", f"{__file__}:half_only_softmax", "--op", "softmax", "--dtypes",
                 "bfloat16", "--fully-masked", "nan", "--properties", "accuracy", "--max-examples",
                 "3", "--seed", "0", "-q"]) == 0


def half_only_attention(q, k, v, *, mask=None, causal=False, scale=None):
    if q.dtype not in (torch.bfloat16, torch.float16) or q.shape[-1] not in (64, 128):
        raise RuntimeError("No available kernel: needs bf16/fp16 and head dim 64 or 128")
    return _sdpa(q, k, v, mask=mask, causal=causal, scale=scale)


def test_the_first_attention_call_uses_a_declared_dtype_and_head_dim() -> None:
    result = check_attention(half_only_attention, dtypes=["bfloat16"], head_dims=(64,),
                             max_seq_q=16, max_seq_k=24, max_heads=2, max_batch=1,
                             properties=["accuracy"], **FAST)
    assert result.passed, result.report()


# ---------------------------------------------------------------------------------------------
# 2. Every generated call lies inside the domain; what cannot be tested is n/a, never pass

def no_mask_attention(q, k, v, *, causal=False, scale=None):
    return _sdpa(q, k, v, causal=causal, scale=scale)


def test_without_masks_the_mask_properties_are_na() -> None:
    result = check_attention(no_mask_attention, allow_mask=False, dtypes=["float32"], **SMALL, **FAST)
    cells = {o.property: o for o in result.outcomes}
    assert result.passed, result.report()
    for prop in ("masked_invisible", "causal_mask"):
        assert cells[prop].status == "na" and "mask" in cells[prop].reason
        assert f"| {prop} | n/a (" in result.table()


def square_only_attention(q, k, v, *, mask=None, causal=False, scale=None):
    if q.shape[2] != k.shape[2]:
        raise AssertionError(f"called with Sq={q.shape[2]} != Sk={k.shape[2]}")
    return _sdpa(q, k, v, mask=mask, causal=causal, scale=scale)


def test_same_seq_is_honoured_by_every_property() -> None:
    result = check_attention(square_only_attention, same_seq=True, dtypes=["float32"],
                             properties=["accuracy", "causal_mask", "split_merge", "key_permutation"],
                             **SMALL, **FAST)
    cells = {o.property: o for o in result.outcomes}
    assert cells["split_merge"].status == "na" and "Sq == Sk" in cells["split_merge"].reason
    assert all(o.status in ("passed", "na") for o in result.outcomes), result.report()


def tile_multiple_attention(q, k, v, *, mask=None, causal=False, scale=None):
    if q.shape[2] % 16 or k.shape[2] % 16:
        raise AssertionError(f"called with Sq={q.shape[2]}, Sk={k.shape[2]}: not multiples of 16")
    return _sdpa(q, k, v, mask=mask, causal=causal, scale=scale)


def test_seq_multiple_is_honoured() -> None:
    result = check_attention(tile_multiple_attention, seq_multiple=16, dtypes=["float32"],
                             properties=["accuracy", "deterministic"], head_dims=(16,),
                             max_seq_q=64, max_seq_k=96, max_heads=2, max_batch=1, **FAST)
    assert result.passed, result.report()
    assert all(o.examples > 0 for o in result.outcomes)


def tile_multiple_softmax(x):
    if x.shape[-1] % 128:
        raise ValueError(f"N must be a multiple of 128, got {x.shape[-1]}")
    return torch.softmax(x.float(), -1).to(x.dtype)


def tile_multiple_sentinel_softmax(x):
    """Tiles of 128 and the running max started at -1e30: rows below it come out as zeros."""
    if x.shape[-1] % 128:
        raise ValueError(f"N must be a multiple of 128, got {x.shape[-1]}")
    xf = x.float()
    m = torch.maximum(xf.amax(-1, keepdim=True), torch.tensor(-1e30))
    e = torch.exp(xf - m)
    return (e / e.sum(-1, keepdim=True)).nan_to_num(0.0).to(x.dtype)


def test_len_multiple_draws_only_rows_the_kernel_takes(capsys) -> None:
    opts = dict(dtypes=["bfloat16"], fully_masked="nan", max_len=2048, **FAST)
    result = check_softmax(tile_multiple_softmax, len_multiple=128, **opts)
    assert result.passed, result.report()
    assert all(o.rejected == 0 for o in result.outcomes)
    assert all(o.examples > 1 for o in result.outcomes), result.table()  # fully_masked too
    buggy = check_softmax(tile_multiple_sentinel_softmax, len_multiple=128, **opts)
    assert not buggy.passed
    for failure in buggy.failures:  # reduced to rows the kernel takes, never to its refusal
        assert "must be a multiple of 128" not in failure.message, failure.message
        assert failure.inputs["x"].shape[-1] % 128 == 0, failure.message
    assert main(["check", f"{__file__}:tile_multiple_softmax", "--op", "softmax",
                 "--len-multiple", "128", "--max-len", "1024", "--dtypes", "float16",
                 "--fully-masked", "nan", "--properties", "accuracy", "--max-examples", "3",
                 "--seed", "0", "-q"]) == 0


def long_rows_sentinel_softmax(x):
    if x.shape[-1] < 100:
        raise ValueError(f"rows of at least 100, got {x.shape[-1]}")
    return tile_multiple_sentinel_softmax(torch.nn.functional.pad(x, (0, -x.shape[-1] % 128),
                                                                  value=float("-inf")))[..., :x.shape[-1]]


def test_the_minimiser_keeps_rows_inside_the_domain() -> None:
    result = check_softmax(long_rows_sentinel_softmax, min_len=100, max_len=600,
                           dtypes=["float32"], properties=["accuracy", "row_sum"],
                           **dict(FAST, max_examples=10, save_failures=True))
    assert not result.passed
    for failure in result.failures:
        assert "rows of at least 100" not in failure.message, failure.message
        assert failure.inputs["x"].shape[-1] >= 100, failure.message


def fa_like(q, k, v, *, mask=None, causal=False, scale=None):
    """bf16 only, head dims 64 and 128, Sq and Sk in whole tiles of 128: FlashAttention's kind."""
    if q.dtype != torch.bfloat16 or q.shape[-1] not in (64, 128) or q.shape[2] % 128 or k.shape[2] % 128:
        raise RuntimeError("No available kernel: bf16, head dim 64/128, S % 128 == 0")
    return _sdpa(q, k, v, mask=mask, causal=causal, scale=scale)


@pytest.mark.parametrize("kernel,words", [
    (tile_multiple_softmax, "it runs on a row of 128: if the kernel takes only such inputs, "
                            "declare them with --len-multiple 128"),
    (fa_like, "it runs on Sq = Sk = 128 with head dims [64, 128] in bfloat16: if the kernel takes "
              "only such inputs, declare them with --dtypes bfloat16 --seq-multiple 128 "
              "--max-seq-q 128 --head-dims 64,128"),
    (half_only_attention, "it runs on head dims [64, 128] in bfloat16,float16: if the kernel "
                          "takes only such inputs, declare them with --dtypes bfloat16,float16 "
                          "--head-dims 64,128"),
])
def test_a_kernel_that_refuses_the_first_input_is_told_the_shapes_it_runs(kernel, words) -> None:
    run = check_softmax if kernel is tile_multiple_softmax else check_attention
    with pytest.raises(UsageError, match="nothing could be tested") as err:
        run(kernel, **FAST)
    assert words in str(err.value), str(err.value)
    if kernel is fa_like:  # the flags named make a check that runs, and passes
        result = check_attention(fa_like, dtypes=["bfloat16"], seq_multiple=128,
                                 head_dims=(64, 128), max_seq_q=128, properties=["accuracy"],
                                 **FAST)
        assert result.passed and result.outcomes[0].examples > 0, result.report()


# ---------------------------------------------------------------------------------------------
# 3. Declared refusals: rejected and counted, never a failure; undeclared ones still fail

def refuses_head_dim_32(q, k, v, *, mask=None, causal=False, scale=None):
    if q.shape[-1] == 32:
        raise RuntimeError("No available kernel. Aborting execution.")
    return _sdpa(q, k, v, mask=mask, causal=causal, scale=scale)


def test_a_declared_refusal_is_rejected_and_counted() -> None:
    opts = dict(head_dims=(16, 32), max_seq_q=16, max_seq_k=24, max_heads=2, max_batch=1,
                dtypes=["float32"], properties=["accuracy"], **FAST)
    undeclared = check_attention(refuses_head_dim_32, **opts)
    assert not undeclared.passed and "No available kernel" in undeclared.failures[0].message
    declared = check_attention(refuses_head_dim_32, unsupported=[(RuntimeError, "No available kernel")], **opts)
    assert declared.passed, declared.report()
    (cell,) = declared.outcomes
    assert cell.rejected > 0 and cell.examples > 0
    assert f"rejected {cell.rejected}" in declared.table()
    assert "rejected (declared refusals) per family" in declared.report()


def test_a_kernel_that_refuses_everything_tested_nothing(capsys) -> None:
    def refuses_all(q, k, v, *, mask=None, causal=False, scale=None):
        raise RuntimeError("No available kernel")

    with pytest.raises(UsageError, match="nothing could be tested: every property is n/a"):
        check_attention(refuses_all, unsupported=["RuntimeError:No available"], dtypes=["float32"],
                        **SMALL, **FAST)


# ---------------------------------------------------------------------------------------------
# 4. Calling conventions: one command, no wrapper

FLASH_STYLE = '''
import torch


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """[B, S, H, D] in and out, bottom-right causal, lse [B, H, Sq] in float32."""
    qf, kf, vf = (t.transpose(1, 2).float() for t in (q, k, v))
    if kf.shape[1] != qf.shape[1]:
        kf = kf.repeat_interleave(qf.shape[1] // kf.shape[1], 1)
        vf = vf.repeat_interleave(qf.shape[1] // vf.shape[1], 1)
    scale = softmax_scale if softmax_scale is not None else qf.shape[-1] ** -0.5
    s = qf @ kf.transpose(-1, -2) * scale
    if causal:
        sq, sk = s.shape[-2:]
        keep = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    out = (p @ vf).transpose(1, 2).to(q.dtype).contiguous()
    return (out, lse, None) if return_attn_probs else out
'''


def test_a_flash_attn_style_kernel_in_one_command(tmp_path: Path) -> None:
    (tmp_path / "fa.py").write_text(textwrap.dedent(FLASH_STYLE))
    proc = subprocess.run(
        [sys.executable, "-m", "onlinesm", "check", "fa.py:flash_attn_func", "--convention",
         "flash_attn", "--head-dims", "16", "--max-seq-q", "24", "--max-seq-k", "32",
         "--max-examples", "3", "--seed", "0", "-q"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED" in proc.stdout and "masked_invisible | n/a" in proc.stdout


def test_sdpa_with_a_pinned_backend_needs_no_target(capsys) -> None:
    assert main(["check", "--convention", "sdpa", "--sdpa-backend", "math", "--dtypes", "float32",
                 "--head-dims", "16", "--max-seq-q", "16", "--max-seq-k", "24", "--max-examples",
                 "3", "--seed", "0", "-q"]) == 0
    out = capsys.readouterr().out
    assert "scaled_dot_product_attention" in out and "PASSED" in out


def test_sdpa_backends_that_cannot_run_are_declared_refusals(capsys) -> None:
    code = main(["check", "--convention", "sdpa", "--sdpa-backend", "efficient", "--dtypes",
                 "bfloat16", "--unsupported", "RuntimeError:No viable backend|No available kernel",
                 "--head-dims", "16", "--max-seq-q", "8", "--max-seq-k", "8", "--max-examples",
                 "2", "--seed", "0", "-q"])
    if torch.cuda.is_available():
        pytest.skip("the efficient backend runs on this machine")
    assert code == 2  # nothing could be tested: every input was refused
    assert "every property is n/a" in capsys.readouterr().err


def test_mask_kinds_each_get_a_run(capsys, tmp_path: Path) -> None:
    assert main(["check", "--convention", "sdpa", "--sdpa-backend", "math", "--dtypes", "float32",
                 "--mask-kinds", "additive,finite-min", "--properties", "accuracy,fully_masked",
                 "--head-dims", "16", "--max-seq-q", "16", "--max-seq-k", "24",
                 "--max-examples", "3", "--seed", "0", "-q", "--report", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "== mask kind additive" in out and "== mask kind finite-min" in out
    # each kind's results are kept: one report folder per kind
    assert (tmp_path / "r" / "additive" / "summary.json").is_file()
    assert (tmp_path / "r" / "finite-min" / "summary.json").is_file()


# ---------------------------------------------------------------------------------------------
# 7. A failing convention names the one the kernel seems to use

def bottom_right_attention(q, k, v, *, mask=None, causal=False, scale=None):
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        tri = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        mask = tri if mask is None else mask & tri
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def test_the_convention_the_kernel_uses_is_named() -> None:
    result = check_attention(bottom_right_attention, dtypes=["float32"], properties=["accuracy"],
                             families=["causal"], head_dims=(16,), max_seq_q=8, max_seq_k=24,
                             max_heads=1, max_batch=1, **FAST)
    assert not result.passed
    assert "matches causal_align='bottom-right'; declare it" in result.failures[0].message
    declared = check_attention(bottom_right_attention, causal_align="bottom-right", dtypes=["float32"],
                               properties=["accuracy"], families=["causal"], head_dims=(16,),
                               max_seq_q=8, max_seq_k=24, max_heads=1, max_batch=1, **FAST)
    assert declared.passed, declared.report()


def test_the_fully_masked_convention_the_kernel_uses_is_named() -> None:
    result = check_softmax(lambda x: torch.softmax(x, -1), dtypes=["float32"],
                           properties=["fully_masked"], **FAST)
    assert not result.passed
    assert "matches fully_masked='nan'" in result.failures[0].message


# ---------------------------------------------------------------------------------------------
# Under Triton's interpreter: a Triton kernel of a user's, and onlinesm's own in both alignments

HALF_ONLY_TRITON = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _row_softmax(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + offs, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.where(offs < n_cols, tl.exp(x - tl.where(m == -float("inf"), 0.0, m)), 0.0)
    d = tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride + offs, (e / d).to(y_ptr.dtype.element_ty), mask=offs < n_cols)


def softmax(x):
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"bf16/fp16 only, got {x.dtype}")
    if x.shape[-1] > 256:
        raise ValueError(f"rows up to 256 columns, got {x.shape[-1]}")
    y = torch.empty_like(x)
    _row_softmax[(x.shape[0],)](x, y, x.stride(0), x.shape[-1], BLOCK=triton.next_power_of_2(x.shape[-1]))
    return y
'''


@pytest.mark.interpreter
def test_a_half_only_triton_kernel_with_a_declared_refusal(tmp_path: Path) -> None:
    (tmp_path / "tk.py").write_text(textwrap.dedent(HALF_ONLY_TRITON))
    base = [sys.executable, "-m", "onlinesm", "check", "tk.py:softmax", "--op", "softmax",
            "--dtypes", "bfloat16", "--fully-masked", "nan", "--properties", "accuracy,range",
            "--max-len", "300", "--max-examples", "4", "--seed", "0", "-q", "--device", "cpu"]
    refused = subprocess.run(base, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert refused.returncode == 1 and "rows up to 256 columns" in refused.stdout, refused.stdout + refused.stderr
    declared = subprocess.run(base + ["--unsupported", "ValueError:rows up to 256"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert declared.returncode == 0, declared.stdout + declared.stderr
    assert "rejected" in declared.stdout


@pytest.mark.interpreter
@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
def test_onlinesms_own_attention_in_both_alignments(align: str, capsys) -> None:
    assert main(["check", "onlinesm.kernels:attention", "--op", "attention", "--kwarg",
                 f"causal_align={align}", "--dtypes", "float32", "--head-dims", "16",
                 "--max-seq-q", "12", "--max-seq-k", "20", "--max-heads", "1",
                 "--properties", "accuracy,causal_mask", "--families", "causal,gaussian",
                 "--max-examples", "3", "--seed", "0", "-q", "--device", "cpu"]) == 0
    assert "PASSED" in capsys.readouterr().out


def test_a_target_named_like_its_submodule_is_the_function() -> None:
    import importlib
    import types

    from onlinesm.targets import load_target

    importlib.import_module("onlinesm.kernels.attention")  # binds the package attribute to the module
    fn = load_target("onlinesm.kernels:attention")
    assert not isinstance(fn, types.ModuleType) and fn.__name__ == "attention"


def test_the_kernels_imported_after_their_submodules_run_and_can_be_checked() -> None:
    # An import of the submodule first binds the module to the package's attribute, so
    # `from onlinesm.kernels import attention` then returns the module: it must run as the
    # function and show the function's signature (check_attention refused it: "the kernel
    # must be callable"). A fresh process, since this one may have bound the functions.
    code = (
        "import importlib, inspect, torch\n"
        "from onlinesm import kernels\n"
        "kernels.use_interpreter(True)\n"
        "importlib.import_module('onlinesm.kernels.attention')\n"
        "importlib.import_module('onlinesm.kernels.softmax')\n"
        "from onlinesm.kernels import attention, softmax\n"
        "from onlinesm.check import check_attention\n"
        "q = torch.randn(1, 1, 4, 16)\n"
        "print(attention(q, q, q, causal=True).shape == q.shape, float(softmax(torch.zeros(2, 4)).sum()),\n"
        "      'causal' in inspect.signature(attention).parameters,\n"
        "      'fully_masked' in inspect.signature(softmax).parameters)\n"
        "r = check_attention(attention, dtypes=('float32',), head_dims=(16,), max_seq_q=8, max_seq_k=8,\n"
        "                    max_examples=2, seed=0, database=False, save_failures=False,\n"
        "                    raise_on_failure=False)\n"
        "print(r.passed)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "2.0", "True", "True", "True"], out.stdout


class _TutorialAttention(torch.autograd.Function):
    """The Triton tutorial's calling form: attention(q, k, v, causal, sm_scale), positional."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale):  # type: ignore[no-untyped-def, override]
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)


def test_a_kernel_called_otherwise_is_told_the_form_and_a_wrapper_passes() -> None:
    with pytest.raises(UsageError, match=r"missing 2 required positional arguments.*onlinesm calls "
                                         r"an attention kernel as fn\(q, k, v, \*, mask=None"):
        check_attention(_TutorialAttention.apply, **FAST)

    def attn(q, k, v, *, causal=False, scale=None):  # the README's wrapper
        return _TutorialAttention.apply(q, k, v, causal,
                                        q.shape[-1] ** -0.5 if scale is None else scale)

    result = check_attention(attn, allow_mask=False, dtypes=["float32"], **SMALL, **FAST)
    assert result.passed, result.report()
