"""The kernel matrix: configuration, `onlinesm check` on it, pytest items, xdist workers, GPU pinning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onlinesm.config import ConfigError, find_config, load_config
from onlinesm.gpus import device_for, tx_specs, visible_devices
from onlinesm.matrix import item_seed

GALLERY = Path(__file__).parent / "gallery.py"

TABLE = f"""
[tool.onlinesm]
max-examples = 3
device = "cpu"
max-len = 32

[tool.onlinesm.kernels.good]
target = "{GALLERY}:torch_softmax"
op = "softmax"
fully-masked = "nan"
dtypes = ["float32"]
properties = ["accuracy", "row_sum"]

[tool.onlinesm.kernels.sentinel]
target = "{GALLERY}:bug_sentinel_max"
op = "softmax"
dtypes = ["float32", "bfloat16"]
properties = ["accuracy", "masked_zero"]
"""


def _project(tmp_path: Path, text: str = TABLE, name: str = "pyproject.toml") -> Path:
    (tmp_path / ".git").mkdir(parents=True, exist_ok=True)  # the search stops here
    (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def _errors(tmp_path: Path, body: str) -> str:
    path = _project(tmp_path, "[tool.onlinesm.kernels.k]\n" + body) / "pyproject.toml"
    with pytest.raises(ConfigError) as err:
        load_config(path)
    return str(err.value)


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONHASHSEED": "0", **env}
    full.pop("PYTEST_XDIST_WORKER", None)
    full.pop("ONLINESM_PINNED", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=240)


# ---------------------------------------------------------------------------------------------
# configuration


def test_both_spellings_and_defaults(tmp_path: Path) -> None:
    m = load_config(_project(tmp_path, """
        [tool.onlinesm]
        profile = "ci"
        [tool.onlinesm.kernels.a]
        target = "pkg.mod:fn"
        op = "softmax"
        fully-masked = "nan"
        max_len = 64
        [tool.onlinesm.kernels.b]
        target = "pkg.mod:attn"
        op = "attention"
        fully_masked = "zeros"
        no-mask = true
        nondeterministic = true
        unsupported = "RuntimeError:head dim"
        """) / "pyproject.toml")
    a, b = m.entries["a"], m.entries["b"]
    assert a.keywords == {"profile": "ci", "fully_masked": "nan", "max_len": 64}
    assert b.keywords["allow_mask"] is False and b.keywords["deterministic"] is False
    assert b.keywords["unsupported"] == ["RuntimeError:head dim"]


def test_unknown_key_suggests(tmp_path: Path) -> None:
    msg = _errors(tmp_path, 'target = "m:f"\nop = "softmax"\nfully_maksed = "nan"\n')
    assert msg == ("pyproject.toml: [tool.onlinesm.kernels.k] key 'fully_maksed' is unknown; "
                   "did you mean 'fully_masked'?") or msg.endswith(
        "[tool.onlinesm.kernels.k] key 'fully_maksed' is unknown; did you mean 'fully_masked'?")


@pytest.mark.parametrize("body, expected", [
    ('max-len = true', "key 'max-len' = True is a boolean"),
    ('max-len = "big"', "key 'max-len': 'big' is not a positive integer"),
    ('no-mask = "yes"', "key 'no-mask' = 'yes' is a string; expected true or false"),
    ('skip = "accuracy"', "key 'skip' = 'accuracy' is a string; expected a table"),
    ('fully-masked = "none"', "key 'fully-masked' = 'none' is not one of"),
    ('dtypes = ["float99"]', "dtypes='float99' is not a floating-point dtype"),
])
def test_wrong_values(tmp_path: Path, body: str, expected: str) -> None:
    assert expected in _errors(tmp_path, f'target = "m:f"\nop = "softmax"\n{body}\n')


def test_missing_target_and_op(tmp_path: Path) -> None:
    assert "key 'target' is missing" in _errors(tmp_path, 'op = "softmax"\n')
    assert "key 'op' is missing" in _errors(tmp_path / "x" if False else tmp_path, 'target = "m:f"\n')
    m = load_config(_project(tmp_path, '[tool.onlinesm.kernels.f]\ntarget = "m:f"\nconvention = "flash_attn"\n')
                    / "pyproject.toml")
    assert m.entries["f"].op == "attention" and m.entries["f"].dtypes == ("bfloat16", "float16")


def test_onlinesm_toml_wins_and_search_stops_at_git(tmp_path: Path) -> None:
    _project(tmp_path)
    (tmp_path / "onlinesm.toml").write_text('[kernels.only]\ntarget = "m:f"\nop = "softmax"\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert find_config(sub) == (tmp_path / "onlinesm.toml").resolve()
    assert list(load_config(find_config(sub)).entries) == ["only"]
    inner = sub / "proj"
    (inner / ".git").mkdir(parents=True)
    assert find_config(inner) is None  # a project root without a table: no search above it


@pytest.mark.skipif(sys.version_info >= (3, 11), reason="tomli is used on Python 3.10 only; "
                    "this interpreter reads TOML with tomllib")
def test_tomli_on_310(tmp_path: Path) -> None:  # pragma: no cover
    assert load_config(_project(tmp_path) / "pyproject.toml").entries


def test_seed_depends_on_item_and_user_seed() -> None:
    s = item_seed("k", "accuracy", "float32", None)
    assert s == item_seed("k", "accuracy", "float32", None)
    assert len({s, item_seed("k", "accuracy", "bfloat16", None), item_seed("k", "accuracy", "float32", 1)}) == 3


def test_gpu_round_robin_without_cuda() -> None:
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "3, 5"}) == ["3", "5"]
    assert [device_for(f"gw{k}", ["3", "5"]) for k in range(3)] == ["3", "5", "3"]
    assert device_for("master", ["0"]) is None and device_for("gw0", []) is None
    assert tx_specs(2, ["3"]) == ["popen//env:CUDA_VISIBLE_DEVICES=3//env:ONLINESM_PINNED=1"] * 2


# ---------------------------------------------------------------------------------------------
# the command line, pytest items and workers (subprocesses in a tiny project)


def test_check_runs_the_matrix_and_one_name(tmp_path: Path) -> None:
    _project(tmp_path)
    r = _run(["-m", "onlinesm", "check", "-q"], tmp_path)
    assert r.returncode == 1, r.stderr
    assert "| good | softmax | PASSED | 2 items |" in r.stdout
    assert "| sentinel | softmax | FAILED | 4 items, 2 falsified |" in r.stdout
    r = _run(["-m", "onlinesm", "check", "good", "-q"], tmp_path)
    assert r.returncode == 0 and "sentinel" not in r.stdout, r.stdout + r.stderr
    r = _run(["-m", "onlinesm", "check", "goood"], tmp_path)
    assert r.returncode == 2 and "did you mean 'good'?" in r.stderr


def _counterexamples(root: Path) -> dict[str, dict]:
    out = {}
    for p in sorted((root / ".onlinesm" / "failures").glob("*.json")):
        rec = json.loads(p.read_text())  # intact JSON, or this raises
        out[f"{rec['property']}[{next(iter(rec['inputs'].values()))['dtype']}]"] = rec["inputs"]
    return out


def test_workers_merge_and_reproduce(tmp_path: Path) -> None:
    """Two workers: every item's result comes back, the counterexample files are whole, and an
    item run alone gives the same counterexample as under -n 2 (seeds derived from the item)."""
    two = _project(tmp_path / "two")
    r = _run(["-m", "onlinesm", "check", "-q", "--workers", "2"], two)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "| good | softmax | PASSED | 2 items |" in r.stdout
    assert "| sentinel | softmax | FAILED | 4 items, 2 falsified |" in r.stdout
    runs = list((two / ".onlinesm" / "runs").glob("*/items/item-*.json"))
    assert len(runs) == 6
    merged = _counterexamples(two)
    assert set(merged) == {"accuracy[float32]", "accuracy[bfloat16]"}
    log = next((two / ".onlinesm" / "runs").glob("*/pytest.log")).read_text()
    assert "2 failed, 4 passed" in log  # the workers' output is kept, even under -q

    alone = _project(tmp_path / "alone")
    r = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "sentinel and accuracy and float32"], alone)
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout + r.stderr
    assert _counterexamples(alone)["accuracy[float32]"] == merged["accuracy[float32]"]

    xdist = _project(tmp_path / "xdist")
    r = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "-m", "onlinesm"], xdist,
             CUDA_VISIBLE_DEVICES="7,9")
    assert r.returncode == 1 and "2 failed, 4 passed" in r.stdout, r.stdout + r.stderr
    assert _counterexamples(xdist) == merged


def test_workers_pinned_before_conftest(tmp_path: Path) -> None:
    """pytest -n 2 with GPUs 7 and 9: each worker sees one of them before conftest.py is imported."""
    _project(tmp_path, TABLE.replace('properties = ["accuracy", "row_sum"]', 'properties = ["row_sum"]')
             .split("[tool.onlinesm.kernels.sentinel]")[0])
    (tmp_path / "conftest.py").write_text(
        "import os\nopen(f\"seen-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}\", 'w')"
        ".write(os.environ.get('CUDA_VISIBLE_DEVICES', ''))\n")
    r = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2"], tmp_path, CUDA_VISIBLE_DEVICES="7,9")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "seen-gw0").read_text() == "7" and (tmp_path / "seen-gw1").read_text() == "9"


def test_worker_crash_names_the_log(tmp_path: Path) -> None:
    """A kernel that kills its worker process: its items give no result, the error says so and
    names the log, where pytest-xdist says which worker went down."""
    (tmp_path / "crash.py").write_text("import os\n\ndef softmax(x):\n    os._exit(3)\n")
    _project(tmp_path, TABLE.split("[tool.onlinesm.kernels.good]")[0] + """
[tool.onlinesm.kernels.crash]
target = "crash.py:softmax"
op = "softmax"
dtypes = ["float32"]
properties = ["row_sum"]
""")
    r = _run(["-m", "onlinesm", "check", "-q", "--workers", "2"], tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    line = next(x for x in r.stderr.splitlines() if "crash:" in x)
    assert "1 of 1 items gave no result (the workers' output: " in line, r.stderr
    log = Path(tmp_path, line.split("the workers' output: ")[1].rstrip(")"))
    assert "crashed" in log.read_text() or "node down" in log.read_text()


def test_matrix_items_include_the_statistical_tier(tmp_path: Path) -> None:
    """A kernel without declared properties gets the items a single check runs, the statistical
    tier included: accuracy_statistical unless turned off, regression with a baseline."""
    _project(tmp_path, f"""
[tool.onlinesm.kernels.plain]
target = "{GALLERY}:torch_softmax"
op = "softmax"

[tool.onlinesm.kernels.quiet]
target = "{GALLERY}:torch_softmax"
op = "softmax"
statistical = false

[tool.onlinesm.kernels.new]
target = "{GALLERY}:torch_softmax"
op = "softmax"
baseline = "{GALLERY}:torch_softmax"
""")
    entries = load_config(tmp_path / "pyproject.toml").entries
    assert entries["plain"].properties()[-1] == "accuracy_statistical"
    assert "accuracy_statistical" not in entries["quiet"].properties()
    assert entries["new"].properties()[-2:] == ["accuracy_statistical", "regression"]


def test_a_hang_noted_by_one_worker_stops_the_kernel_in_another(tmp_path: Path, monkeypatch) -> None:
    """Workers share the run folder: once one notes that a kernel hung, another worker's items
    of that kernel are not run (the kernel is never called again), as in a single process."""
    from onlinesm import matrix

    _project(tmp_path)
    entry = load_config(tmp_path / "pyproject.toml").entries["good"]
    spec = matrix.entry_json(entry, None)
    monkeypatch.setattr(matrix, "_HUNG", {})
    calls: list[int] = []
    record = matrix.run_item(spec, "row_sum", "float32", fn=lambda x: calls.append(1), shared=tmp_path / "run")
    assert record["status"] != "not_run" and calls  # nothing noted yet: the kernel runs
    monkeypatch.setattr(matrix, "_HUNG", {})
    calls.clear()
    (tmp_path / "run").mkdir(exist_ok=True)
    matrix._hung_note(tmp_path / "run", "good").write_text("input float32[3, 700]")
    record = matrix.run_item(spec, "accuracy", "float32", fn=lambda x: calls.append(1), shared=tmp_path / "run")
    assert record["status"] == "not_run" and not calls
    assert record["reason"] == "kernel hung on input float32[3, 700]"


def test_workers_steal_work_where_xdist_can(monkeypatch) -> None:
    """Items differ in cost by orders of magnitude: --workers uses xdist's worksteal scheduling
    (3.2+), and the load scheduling of older versions."""
    import xdist

    from onlinesm.matrix_cli import _dist_mode

    monkeypatch.setattr(xdist, "__version__", "3.8.0")
    assert _dist_mode() == "worksteal"
    monkeypatch.setattr(xdist, "__version__", "3.1.0")
    assert _dist_mode() == "load"


def test_parallel_order_evens_the_workers_shares() -> None:
    """Under xdist the matrix items are dealt out by cost: the heavy statistical items of a
    kernel matrix split evenly between the two workers' contiguous shares, heaviest first, and
    every item is kept exactly once."""
    from onlinesm.pytest_items import HEAVY_PROPERTIES, balanced_order

    class Item:
        def __init__(self, kernel: str, prop: str) -> None:
            self.kernel, self.prop = kernel, prop

    # collection order: kernel a has a statistical item per dtype, kernel b (say a baseline
    # kernel with statistical = false) none, so the collection's halves are uneven
    items = [Item("a", p) for _ in range(3) for p in ("accuracy", "accuracy_statistical")]
    items += [Item("b", p) for _ in range(3) for p in ("accuracy", "range")]
    cost = lambda share: sum(HEAVY_PROPERTIES.get(i.prop, 1.0) for i in share)  # noqa: E731
    assert cost(items[:6]) - cost(items[6:]) == 12  # what xdist would hand out as collected
    ordered = balanced_order(items, 2)
    assert sorted(map(id, ordered)) == sorted(map(id, items))
    first, second = ordered[:6], ordered[6:]  # worksteal's initial contiguous shares
    assert abs(cost(first) - cost(second)) <= max(HEAVY_PROPERTIES.values())
    for share in (first, second):  # heaviest first: the items left at a share's end are light
        assert share[0].prop == "accuracy_statistical"
        assert share[-1].prop != "accuracy_statistical"
