"""`onlinesm report` and `check --report`: outputs, the JSON schema, verdicts, usage errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from onlinesm.cli import main  # noqa: E402
from onlinesm.report.schema import SCHEMA, encode, validate  # noqa: E402

HERE = Path(__file__).resolve()

KERNELS = '''
import torch

def good_softmax(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)

def bf16_accumulating_softmax(x):
    """Sums the exps in bf16, rounding after every addition: a real bug class."""
    xf = x.float()
    m = xf.max(dim=-1, keepdim=True).values
    e = torch.exp(xf - m)
    s = torch.zeros_like(e[..., :1]).to(torch.bfloat16)
    for j in range(e.shape[-1]):
        s = (s.float() + e[..., j : j + 1]).to(torch.bfloat16)
    return (e / s.float()).to(x.dtype)
'''

TINY = ["--dtypes", "float32", "--seeds", "1", "--lengths", "16,300", "--rows", "2",
        "--families", "gaussian,huge_spread,masked_prefix", "--no-fa3", "--quiet"]


@pytest.fixture()
def kernels_file(tmp_path: Path) -> str:
    path = tmp_path / "mykernels.py"
    path.write_text(KERNELS)
    return str(path)


def _load(directory: Path) -> dict:
    return json.loads((directory / "summary.json").read_text())


def test_tiny_report_writes_outputs_and_flags_the_buggy_kernel(tmp_path, kernels_file, capsys,
                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "rep"
    code = main(["report", f"{kernels_file}:good_softmax", f"{kernels_file}:bf16_accumulating_softmax",
                 "--op", "softmax", "--out", str(out), "--exp", "accurate", "--html", *TINY])
    assert code == 1  # the buggy kernel fails
    for name in ("index.md", "summary.json", "index.html"):
        assert (out / name).is_file(), name
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert "softmax-float32-length.png" in pngs and "softmax-ulp-histogram.png" in pngs
    doc = _load(out)
    assert validate(doc) == []
    assert doc["schema"] == SCHEMA and doc["kind"] == "report" and doc["passed"] is False
    verdict = {v["kernel"].split(":")[-1]: v for v in doc["verdicts"]}
    assert verdict["good_softmax"]["status"] == "pass"
    assert verdict["bf16_accumulating_softmax"]["status"] == "fail"
    # the verdict table leads index.md and shows both
    text = (out / "index.md").read_text()
    table = text[text.index("## Verdicts"):text.index("## Kernels")]
    assert "**FAIL**" in table and "pass" in table
    # the failure has a minimal counterexample with a replay command that works
    (fail,) = doc["failures"]
    assert fail["replay"] and "onlinesm replay" in text
    assert Path(fail["replay"]).is_file()
    assert main(["replay", fail["replay"]]) == 1
    # html is self-contained
    assert "data:image/png;base64," in (out / "index.html").read_text()
    # no temporary folders left next to the report
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".rep")] == []


def test_builtin_references_report_passes(tmp_path):
    out = tmp_path / "ref"
    code = main(["report", "--no-triton", "--out", str(out), *TINY, "--seqs", "16",
                 "--attention-families", "gaussian,key_padding"])
    doc = _load(out)
    assert validate(doc) == []
    assert code == 0, [v for v in doc["verdicts"] if v["status"] != "pass"]
    names = {(k["op"], k["name"]) for k in doc["kernels"]}
    assert ("softmax", "torch.softmax") in names and ("attention", "torch.sdpa") in names
    assert {s["family"] for s in doc["stats"] if s["op"] == "attention"} == {"gaussian", "key_padding"}
    assert "attention-vs-seq.png" in doc["files"]


def test_bad_target_exits_2_with_one_line(tmp_path, capsys):
    code = main(["report", "no_such_module_xyz:fn", "--op", "softmax", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("onlinesm: error:") and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("flag", ["--head-dim", "--fa3-seq", "--heads", "--seeds"])
def test_a_zero_size_is_refused_not_replaced_by_the_default(flag, tmp_path, capsys):
    code = main(["report", "--out", str(tmp_path / "r"), flag, "0", "--no-plots", "-q"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and f"{flag}=0 must be at least 1" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


def test_target_without_op_exits_2(tmp_path, kernels_file, capsys):
    assert main(["report", f"{kernels_file}:good_softmax", "--out", str(tmp_path / "r")]) == 2
    assert "--op" in capsys.readouterr().err


def test_unwritable_dir_exits_2_and_writes_nothing(tmp_path, kernels_file, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = blocker / "report"
    code = main(["report", f"{kernels_file}:good_softmax", "--op", "softmax", "--out", str(out),
                 *TINY])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("onlinesm: error: cannot write the report")
    assert len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "mykernels.py"]


def test_failed_run_leaves_previous_report_intact(tmp_path):
    from onlinesm.report.schema import atomic_directory

    out = tmp_path / "rep"
    out.mkdir()
    (out / "index.md").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_directory(out) as tmp:
            (tmp / "index.md").write_text("half")
            raise RuntimeError("interrupted")
    assert (out / "index.md").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]


def test_check_report_validates_against_the_same_schema(tmp_path, kernels_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "chk"
    code = main(["check", f"{kernels_file}:good_softmax", "--op", "softmax", "--dtypes", "float32",
                 "--max-examples", "3", "--max-len", "64", "--exp", "accurate", "--fully-masked", "nan",
                 "--properties", "accuracy,fully_masked", "--report", str(out), "-q"])
    assert code == 0
    doc = _load(out)
    assert validate(doc) == [] and doc["kind"] == "check" and doc["passed"] is True
    assert (out / "index.md").read_text().startswith("# onlinesm check softmax")


def test_validator_catches_mistakes():
    doc = {"schema": "onlinesm.report/0"}
    problems = validate(doc)
    assert any("schema" in p for p in problems) and any("missing key 'kind'" in p for p in problems)
    assert encode([float("inf"), float("nan"), np.float32(1.5)]) == ["inf", "nan", 1.5]


TILED = '''
import torch

def tiled_softmax(x):
    if x.shape[-1] % 128:
        raise ValueError(f"N must be a multiple of 128, got {x.shape[-1]}")
    return torch.softmax(x.float(), dim=-1).to(x.dtype)

def tiled_attention(q, k, v, *, mask=None, causal=False, scale=None):
    if q.shape[2] % 64 or k.shape[2] % 64:
        raise RuntimeError("No available kernel: S % 64 != 0")
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                            is_causal=causal, scale=scale)
'''


def test_a_kernel_of_tiles_is_reported_on_its_tiles_only(tmp_path, capsys):
    (tmp_path / "tiled.py").write_text(TILED)
    target, out = f"{tmp_path / 'tiled.py'}:tiled_softmax", tmp_path / "r"
    small = ["--dtypes", "bfloat16", "--seeds", "1", "--rows", "2", "--families",
             "gaussian,masked_prefix", "--fully-masked", "nan", "--no-plots", "--quiet"]
    # undeclared: the first call fails, and the flag that fits is named
    assert main(["report", target, "--op", "softmax", "--out", str(out), *small]) == 2
    assert "declare them with --len-multiple 128" in capsys.readouterr().err
    assert not out.exists()
    # declared: the default lengths rounded up to whole tiles, every case a multiple of 128
    assert main(["report", target, "--op", "softmax", "--out", str(out), "--len-multiple", "128",
                 *small]) == 0
    doc = json.loads((out / "summary.json").read_text())
    assert doc["settings"]["lengths"] == [128, 256, 384, 1024, 1152, 4224]  # 16 ... 4097 rounded up
    assert {s["family"] for s in doc["stats"]} == {"gaussian", "masked_prefix"}
    assert all(s["errors"] == 0 and s["cases"] == 6 for s in doc["stats"])  # one seed, 6 lengths
    assert "declared domain: len_multiple=128" in (out / "index.md").read_text()
    # declared, but the grid given holds no whole tile: nothing tested, exit 2, nothing written
    capsys.readouterr()
    assert main(["report", target, "--op", "softmax", "--out", str(tmp_path / "r2"),
                 "--len-multiple", "128", "--lengths", "100,300", *small]) == 2
    assert "no row length of the report's grid (100, 300)" in capsys.readouterr().err
    # attention: a grid of key lengths outside the tile is nothing tested, not a pass
    attn = f"{tmp_path / 'tiled.py'}:tiled_attention"
    assert main(["report", attn, "--op", "attention", "--out", str(tmp_path / "r3"),
                 "--seq-multiple", "64", "--seqs", "16,40", "--dtypes", "float32", "--seeds",
                 "1", "--attention-families", "gaussian", "--no-fa3", "--no-plots",
                 "--quiet"]) == 2
    assert "nothing could be tested: no case of the report's grid" in capsys.readouterr().err
    assert not (tmp_path / "r3").exists()


def _table_report(tmp_path: Path, monkeypatch: Any, table: str, *args: str) -> dict:
    """``onlinesm report`` on the kernels of a [tool.onlinesm] table in tmp_path (where
    tiled.py holds TILED and HALF): its summary.json; asserts exit 0."""
    (tmp_path / ".git").mkdir()  # the search for pyproject.toml stops here
    (tmp_path / "tiled.py").write_text(TILED + HALF)
    (tmp_path / "pyproject.toml").write_text(table)
    monkeypatch.chdir(tmp_path)
    code = main(["report", "--out", "r", "--seeds", "1", "--rows", "2", "--no-fa3", "--no-plots",
                 "--quiet", *args])
    assert code == 0
    return json.loads((tmp_path / "r" / "summary.json").read_text())


HALF = '''

def half_only(x):
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"only 16-bit, got {x.dtype}")
    return torch.softmax(x.float(), dim=-1).to(x.dtype)

def d128(q, k, v, *, mask=None, causal=False, scale=None):
    if q.shape[-1] != 128:
        raise RuntimeError("No available kernel: head dim 128 only")
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                            is_causal=causal, scale=scale)
'''


def test_the_report_holds_a_table_kernel_to_its_declared_domain(tmp_path, monkeypatch):
    doc = _table_report(
        tmp_path, monkeypatch,
        '[tool.onlinesm.kernels.half]\ntarget = "tiled.py:half_only"\nop = "softmax"\n'
        'fully-masked = "nan"\ndtypes = ["bfloat16"]\nmax-len = 100\n',
        "--lengths", "16,300", "--dtypes", "float32,bfloat16", "--families", "gaussian")
    assert [(v["kernel"], v["dtype"], v["cases"]) for v in doc["verdicts"]] == [("half", "bfloat16", 1)]


def test_declared_refusals_are_counted_not_failed(tmp_path, capsys):
    (tmp_path / "tiled.py").write_text(TILED)
    out = tmp_path / "r"
    argv = ["report", f"{tmp_path / 'tiled.py'}:tiled_softmax", "--op", "softmax", "--out",
            str(out), "--lengths", "128,130", "--dtypes", "float32", "--seeds", "1", "--rows",
            "2", "--families", "gaussian", "--fully-masked", "nan", "--min-len", "128", "--no-plots",
            "--quiet"]
    assert main(argv) == 1  # undeclared, the refusal of 130 is a broken call: FAIL
    capsys.readouterr()
    assert main(argv + ["--unsupported", "ValueError:multiple of 128"]) == 0
    doc = json.loads((out / "summary.json").read_text())
    [verdict] = doc["verdicts"]
    assert verdict["status"] == "pass" and verdict["cases"] == 1 and verdict["refused"] == 1
    assert ", refused 1 |" in (out / "index.md").read_text()


def test_each_table_kernel_runs_its_own_grid_of_tiles(tmp_path, monkeypatch):
    doc = _table_report(
        tmp_path, monkeypatch,
        '[tool.onlinesm.kernels.tiled]\ntarget = "tiled.py:tiled_softmax"\nop = "softmax"\n'
        'fully-masked = "nan"\nlen-multiple = 128\n\n'
        '[tool.onlinesm.kernels.plain]\ntarget = "onlinesm.report.builtin:torch_softmax"\n'
        'op = "softmax"\nfully-masked = "nan"\n',
        "--dtypes", "float32", "--families", "gaussian")
    cases = {v["kernel"]: v["cases"] for v in doc["verdicts"]}
    # the default 16, 65, 129, 257, 1000, 1025, 4097 for plain; 128 ... 4224 for tiled
    assert cases == {"tiled": 6, "plain": 7}, cases
    assert doc["settings"]["lengths"] == [16, 65, 128, 129, 256, 257, 384, 1000, 1024, 1025,
                                          1152, 4097, 4224]


def test_a_table_kernel_of_one_head_dim_gets_a_grid_of_it(tmp_path, monkeypatch):
    doc = _table_report(
        tmp_path, monkeypatch,
        '[tool.onlinesm.kernels.d128]\ntarget = "tiled.py:d128"\nop = "attention"\n'
        'head-dims = [128]\n',
        "--dtypes", "float32", "--seqs", "16", "--attention-families", "gaussian")
    assert [(v["kernel"], v["cases"]) for v in doc["verdicts"]] == [("d128", 1)]
    assert "its grid's head dim: 128" in (tmp_path / "r" / "index.md").read_text()


def test_a_kernel_the_fa3_table_cannot_run_says_why_in_one_row(tmp_path, capsys):
    (tmp_path / "tiled.py").write_text(TILED + HALF.replace("head dim 128 only",
                                                            "head dim 128 only | see docs"))
    out = tmp_path / "r"
    assert main(["report", f"{tmp_path / 'tiled.py'}:d128", "--op", "attention", "--out",
                 str(out), "--head-dim", "128", "--dtypes", "float32", "--seeds", "1", "--seqs",
                 "16", "--attention-families", "gaussian", "--no-plots", "--quiet"]) == 0
    [row] = [line for line in (out / "index.md").read_text().splitlines()
             if line.startswith("| ") and "d128 | error | error |" in line]
    assert "did not run: " in row and "head dim 128 only \\| see docs" in row
    assert row.replace("\\|", "").count("|") == 5  # four cells, the pipe escaped


def test_a_kernel_of_another_calling_convention_is_reported_through_it(tmp_path, capsys):
    from test_real_kernels import FLASH_STYLE

    (tmp_path / "fa.py").write_text(FLASH_STYLE)
    out = tmp_path / "r"
    assert main(["report", f"{tmp_path / 'fa.py'}:flash_attn_func", "--op", "attention",
                 "--convention", "flash_attn", "--out", str(out), "--dtypes", "float32,bfloat16",
                 "--seeds", "1", "--seqs", "16,40", "--attention-families", "gaussian,causal",
                 "--no-fa3", "--no-plots", "--quiet"]) == 0, capsys.readouterr().err
    doc = json.loads((out / "summary.json").read_text())
    # the convention implies bf16 / fp16, bottom-right causal, no mask: float32 is not run
    assert [(v["dtype"], v["status"]) for v in doc["verdicts"]] == [("bfloat16", "pass")]
    # causal cases (Sq = Sk / 2) held to bottom-right, not to the grid's top-left exact answer
    assert {s["family"] for s in doc["stats"]} == {"gaussian", "causal"}
    [kernel] = doc["kernels"]
    assert kernel["causal_align"] == "bottom-right"


def test_grouped_query_cases_need_allow_gqa_as_in_check(tmp_path, capsys):
    (tmp_path / "g.py").write_text(
        "import torch\n"
        "def no_gqa(q, k, v, *, mask=None, causal=False, scale=None):\n"
        "    if k.shape[1] != q.shape[1]:\n"
        "        raise RuntimeError('grouped-query heads not supported')\n"
        "    return torch.nn.functional.scaled_dot_product_attention(\n"
        "        q, k, v, attn_mask=mask, is_causal=causal, scale=scale)\n")
    argv = ["report", f"{tmp_path / 'g.py'}:no_gqa", "--op", "attention", "--out",
            str(tmp_path / "r"), "--dtypes", "float32", "--seeds", "1", "--seqs", "16",
            "--attention-families", "gaussian,gqa", "--no-fa3", "--no-plots", "--quiet"]
    assert main(argv) == 0  # check's default domain has no grouped-query heads: nor does this
    doc = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert {s["family"] for s in doc["stats"]} == {"gaussian"}
    assert main(argv + ["--allow-gqa"]) == 1  # declared, the refusal is a failure
