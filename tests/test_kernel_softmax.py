"""onlinesm.kernels.softmax against the exact (float64) softmax, on the rows that break kernels.

Without CUDA the kernels run under Triton's interpreter on CPU tensors (small shapes, fast);
with CUDA they run compiled, and the ``gpu`` tests add long rows and the split path.

The tolerance is derived, not tuned (see :func:`allowed`): per element,

    |y - y_exact| <= u_out * |y_exact| + u32 * B_i * |y_exact| + abs_floor,
    B_i = 3 |x_i - m| + c_exp            exp(x_i - m): rounding of x - m, of log2(e) and of the
                                         product (3 |x - m| u), plus exp2's own error (c_exp ulp)
        + (2 + 6/e) n + 2 c_exp          d: two roundings per element in the (m, d) recurrence,
                                         and each term's exp / rescale errors 6 (m - x_j) u
                                         weighted by its share e_j / d <= exp(-(m - x_j)) -- at
                                         most 6/e per term since t e^-t <= 1/e
        + 2                              1 / d and the product e * (1 / d)
    abs_floor = 2**-126 + out's smallest subnormal   (fp32 underflow, possibly flushed, and the
                                                      output's subnormal rounding)

c_exp is 1 ulp under the interpreter (numpy's exp2) and 3 on the GPU (ex2.approx, measured at
2.05 ulp on the H200, docs/conventions.md). Elements whose input is -inf must be exactly 0.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # no import: the mode must be chosen first
    pytest.skip("needs triton", allow_module_level=True)

from onlinesm import dtypes, kernels, oracle  # noqa: E402

INTERPRETED = kernels.use_interpreter(None if torch.cuda.is_available() else True)
from onlinesm.kernels import softmax  # noqa: E402  (after the mode is chosen)

from bench_modules import bench_module  # noqa: E402  (conftest puts tests/ on sys.path)

# The module itself (``import onlinesm.kernels.softmax as sm`` would give the function, which
# the package binds under the same name).
sm = importlib.import_module("onlinesm.kernels.softmax")
sp = importlib.import_module("onlinesm.kernels.softmax_plan")  # TUNING, PLAN_TABLE, plan()

DEVICE = "cpu" if INTERPRETED else "cuda"
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
U32 = dtypes.resolve("float32").u
C_EXP = 1.0 if INTERPRETED else 3.0
# Small on-chip limit and tile so that both paths, and their tile boundaries, are reached with
# rows of a few hundred elements under the interpreter.
TILE = 64
SMALL = dict(max_on_chip=256, tile=TILE)
# "split_packed": the split path with its one-word (m, d) exchange (TUNING["split_packed"]).
PATHS = ["on_chip", "stream"] if INTERPRETED else ["on_chip", "stream", "split", "split_packed"]
NEG_INF = float("-inf")

gpu = pytest.mark.gpu
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def run(x: torch.Tensor, path: str = "auto", **kw) -> torch.Tensor:
    """Call the kernel on a given path with the small test tile."""
    opts = {**SMALL, **kw}
    if path == "split_packed":
        path, opts["tuning"] = "split", {**kw.get("tuning", {}), "split_packed": True}
    if path == "split":
        opts["tile"] = kw.get("tile", 32)  # several chunks per row even for short test rows
    return softmax(x, path=path, **opts)


def allowed(x64: np.ndarray, y_exact: np.ndarray, out_dtype: torch.dtype) -> np.ndarray:
    """The per-element error bound of the module docstring."""
    fmt = dtypes.resolve(out_dtype)
    n = x64.shape[-1]
    finite = np.where(np.isfinite(x64), x64, -np.inf)
    m = finite.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        dist = np.where(np.isfinite(x64) & np.isfinite(m), m - x64, np.inf)
    b = 3.0 * dist + C_EXP + (2.0 + 6.0 / math.e) * n + 2.0 * C_EXP + 2.0
    with np.errstate(invalid="ignore"):
        rel = np.where(np.isfinite(b), fmt.u + U32 * b, np.inf)
        tol = rel * np.abs(y_exact)
    tol = np.where(y_exact == 0, 0.0, tol)  # 0 * inf
    return tol + 2.0**-126 + fmt.smallest_subnormal


def check(x: torch.Tensor, y: torch.Tensor, fully_masked: str = "zeros") -> None:
    """y is softmax(x) within :func:`allowed`; -inf inputs give exact 0; fully masked rows."""
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    x_np = dtypes.to_numpy(x)
    y_np = dtypes.to_numpy(y).astype(np.float64)
    x64 = x_np.astype(np.float64)
    exact = oracle.softmax(x_np)
    empty = ~np.isfinite(x64).any(axis=-1)
    if fully_masked == "nan":
        assert np.isnan(y_np[empty]).all(), "fully masked rows must be NaN"
        exact = np.where(empty[..., None], np.nan, exact)
    rows = ~empty if fully_masked == "nan" else np.ones_like(empty)
    assert np.isfinite(y_np[rows]).all(), "NaN/inf in the output of a row with a finite entry"
    assert (y_np[rows][np.isneginf(x64[rows])] == 0).all(), "a -inf input must give exactly 0"
    err = np.abs(y_np[rows] - exact[rows])
    tol = allowed(x64, exact, x.dtype)[rows]
    bad = err > tol
    if bad.any():
        i = int(np.argmax(err - tol))
        raise AssertionError(
            f"{int(bad.sum())} of {err.size} elements out of bound; worst: y={y_np[rows].ravel()[i]!r}"
            f" exact={exact[rows].ravel()[i]!r} error={err.ravel()[i]:.3g} allowed={tol.ravel()[i]:.3g}"
        )


def make(rows: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A tensor of ``dtype`` on the test device from float64 values (rounded to nearest)."""
    fmt = dtypes.resolve(dtype)
    return dtypes.to_torch(np.asarray(rows, dtype=np.float64).astype(fmt.numpy), DEVICE)


def gaussian(m: int, n: int, scale: float = 3.0, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((m, n)) * scale


# ---------------------------------------------------------------------------------- accuracy
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_lengths_around_block_and_tile_boundaries(dtype, path):
    lengths = [1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257]
    if path == "on_chip":
        lengths = [n for n in lengths if n <= 256]
    for n in lengths:
        x = make(gaussian(3, n, seed=n), dtype)
        check(x, run(x, path))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_auto_path_switches_at_the_on_chip_limit(dtype):
    for n in (255, 256, 257, 300):
        long = "split" if not INTERPRETED and dtype == torch.float32 else "stream"
        size = torch.empty(0, dtype=dtype).element_size()
        got = sm.plan(n, **SMALL, interpreted=INTERPRETED, itemsize=size).path
        assert got == ("on_chip" if n <= 256 else long)
        x = make(gaussian(2, n, seed=n), dtype)
        check(x, run(x))


@pytest.mark.parametrize("path", PATHS)
def test_many_short_rows_packed_per_program(path):
    x = make(gaussian(37, 5, seed=1), torch.float32)  # 37 rows: a partial last program
    check(x, run(x, path))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_persistent_pipelined_on_chip_grid(dtype):
    # Fewer programs than row blocks: each program loops (under the interpreter the grid is one
    # program per block, so this checks the loop's arithmetic; the GPU adds the pipelining).
    x = make(gaussian(9, 200, seed=14), dtype)
    for rows_per_program in (1, 4):
        tuning = dict(chip_stages=2, chip_programs_per_sm=1,
                      min_elems_per_program=256 * rows_per_program)
        check(x, run(x, "on_chip", tuning=tuning))


def test_chunking_covers_rows_with_fewer_padded_columns():
    assert sp._chunking(12288) == (4096, 3, 0)
    assert sp._chunking(3000) == (1024, 3, 0)
    assert sp._chunking(49152) == (16384, 3, 0)
    assert sp._chunking(1000) == (1024, 1, 0)  # 2 x 512 covers no fewer: one chunk
    assert sp._chunking(4096) == (4096, 1, 0)
    # with a tail: a power-of-two block and a smaller one past it, where that pads least
    assert sp._chunking(17000, tail=True) == (16384, 1, 1024)  # 3 x 8192 pads 45%
    assert sp._chunking(33000, chunks=False, tail=True) == (32768, 1, 256)
    assert sp._chunking(12288, tail=True) == (4096, 3, 0)  # 8192 + 4096 covers as many
    assert sp._chunking(20000, tail=True) == (16384, 1, 4096)
    assert sp._chunking(24576, tail=True) == (8192, 3, 0)
    assert sp._chunking(16384, tail=True) == (16384, 1, 0)  # a power of two: no tail
    assert sp._chunking(24577, tail=True) == (32768, 1, 0)  # 16,384 + 16,384: no smaller
    for n in (1, 5, 17, 33, 100, 1000, 3000, 5000, 12288, 17000, 40000):
        for tail in (False, True):
            block, chunks, rest = sp._chunking(n, tail=tail)
            assert block & (block - 1) == 0 and chunks in (1, 3) and rest & (rest - 1) == 0
            assert block * chunks + rest >= n and rest < block and (rest == 0 or chunks == 1)
            assert rest == 0 or block * chunks + rest - n < rest  # the tail is needed whole


# Rows that do not start on a 16-byte vector: each is an aligned window, whole vectors in the
# middle and up to 2 (vec - 1) loose elements at its ends, handled apart (kernels' SHIFT).
def _vec(dtype) -> int:
    return 16 // torch.empty(0, dtype=dtype).element_size()


def _off_vector_rows(n: int, dtype) -> np.ndarray:
    """2 vec + 3 rows of n (their starts take every offset within a vector), with the max in a
    head and a tail loose element, a fully masked row and a -inf prefix through the head."""
    big = 30.0 if dtype != torch.float16 else 11.0
    x = gaussian(2 * _vec(dtype) + 3, n, seed=n)
    x[1, 0] = big  # row 1 starts off the vector boundary: its first element is loose
    x[2, -1] = big  # ... and so is the last element of most rows
    x[3] = NEG_INF
    x[4, : n // 2 + 1] = NEG_INF
    return x


#: One row per program on chip: the layout where 16-bit rows take windows there.
ONE_ROW = dict(min_elems_per_program=1)
#: Several 16-bit rows per program on chip, each as a window.
PACKED_WINDOWS = dict(chip_windows_packed=True)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rows_off_the_vector_boundary(dtype, path):
    vec = _vec(dtype)
    for n in (1, 3, vec - 1, vec + 1, 2 * vec + 3, 67, 129, 203):
        t = make(_off_vector_rows(n, dtype), dtype)
        size = t.element_size()
        assert sm._shift(size, sm._alignment(size, n, n, n), t, torch.empty_like(t)) == (
            1 if n % vec == 0 else vec)
        # ... and with memory after the last row (a streamed window may read into it)
        rows = _off_vector_rows(n, dtype)
        slack = make(np.vstack([rows, rows[:1]]), dtype)[:-1]
        for fm in ("zeros", "nan"):
            check(t, run(t, path, fully_masked=fm, tuning=ONE_ROW), fm)
            check(t, run(t, path, fully_masked=fm), fm)
            check(slack, run(slack, path, fully_masked=fm, tuning=ONE_ROW), fm)
            if path == "on_chip":  # several windows per program (a --tune candidate)
                check(t, run(t, path, fully_masked=fm, tuning=PACKED_WINDOWS), fm)


def test_windows_where_they_pay_and_never_past_the_memory_x_owns():
    def shift(dtype, path, rows_after=1, **kw):
        x = torch.empty(9 + rows_after, 203, dtype=dtype, device=DEVICE)[:9]
        y = torch.empty(9, 203, dtype=dtype, device=DEVICE)
        return sm._launch_plan(x, y, path, 256, TILE, kw.get("tuning"))[3]

    # On chip: only one 16-bit row per program.
    assert shift(torch.bfloat16, "on_chip", tuning=ONE_ROW) == 8
    assert shift(torch.bfloat16, "on_chip") == 1  # 4096 // 210: 16 rows per program
    assert shift(torch.bfloat16, "on_chip", tuning=PACKED_WINDOWS) == 8
    assert shift(torch.float32, "on_chip", tuning=ONE_ROW) == 1
    # Streamed: windows read whole vectors past a row's end, so the last row needs memory
    # after it: a following row, or the CUDA caching allocator's 512-byte blocks (9 x 203 x 4
    # bytes end 4 bytes short of a vector boundary).
    assert shift(torch.float32, "stream") == 4 and shift(torch.bfloat16, "stream") == 8
    assert shift(torch.float32, "stream", rows_after=0) == (4 if DEVICE == "cuda" else 1)
    assert sm._window_fits(torch.empty(5, 44, device=DEVICE)[:, :41], 4)  # 3 columns follow
    # Split rows keep their windows either way: each part loads its row's whole windows under
    # one mask for every row (the row's own bounds applied after the copy), which where the
    # last row's would pass x's memory also stops there (REACH: see
    # test_split_windows_stop_at_xs_memory_where_the_last_rows_reach_leaves_it)
    assert shift(torch.float32, "split") > 1 and shift(torch.bfloat16, "split") > 1
    assert shift(torch.float32, "split", rows_after=0) > 1


def test_short_rows_off_the_vector_boundary_take_smaller_programs():
    def launch(n, dtype):
        x = torch.empty(64, n, dtype=dtype, device=DEVICE)
        p, _, _, shift = sm._launch_plan(x, torch.empty_like(x), "auto", None, None, None)
        return p.path, p.block, p.rows_per_program, shift

    # Loaded element by element: 512 to 2048 elements per program by length (PLAN_TABLE);
    # aligned rows keep 4096.
    assert launch(255, torch.float32) == ("on_chip", 256, 4, 1)
    assert launch(77, torch.float32) == ("on_chip", 128, 4, 1)
    assert launch(256, torch.float32) == ("on_chip", 256, 16, 1)
    assert launch(127, torch.bfloat16) == ("on_chip", 128, 4, 1)
    assert launch(255, torch.bfloat16) == ("on_chip", 256, 4, 1)
    assert launch(505, torch.float16) == ("on_chip", 512, 4, 1)
    assert launch(3001, torch.float32)[2] == 1  # past the range: unchanged
    # aligned fp32 rows of 513-1024 one per program (2 warps), the rows around them packed
    assert launch(1000, torch.float32) == ("on_chip", 1024, 1, 1)
    assert launch(1024, torch.float32) == ("on_chip", 1024, 1, 1)
    assert launch(512, torch.float32)[2] == 8 and launch(2048, torch.float32)[2] == 2
    # odd 16-bit rows of 506-2041 (windows of 513-2048 columns) as windows, a row per program
    # in one warp, those of 513-1536 as a block and a tail where that pads less; narrower ones
    # element by element (four rows of 505 in 4 warps); windows of 3073-4096 as one block in
    # 2 warps
    for n, launch_ in ((1001, (1024, 0, 1, 1, 8)), (506, (512, 256, 1, 1, 8)),
                       (777, (1024, 0, 1, 1, 8)), (1500, (1024, 512, 1, 1, 8)),
                       (2041, (2048, 0, 1, 1, 8)), (505, (512, 0, 4, 4, 1)),
                       (3500, (4096, 0, 1, 2, 8))):
        x = torch.empty(64, n, dtype=torch.bfloat16, device=DEVICE)
        p, _, _, shift = sm._launch_plan(x, torch.empty_like(x), "auto", None, None, None)
        assert (p.block, p.tail, p.rows_per_program, p.num_warps, shift) == launch_, n
    # aligned 16-bit rows of 1025-1536: 1024 columns and a tail (1200: 1024 + 256), not 2048
    for n, launch_ in ((1200, (1024, 256, 2)), (1536, (1024, 512, 2)), (1544, (2048, 0, 8))):
        x = torch.empty(64, n, dtype=torch.float16, device=DEVICE)
        p = sm._launch_plan(x, torch.empty_like(x), "auto", None, None, None)[0]
        assert (p.block, p.tail, p.num_warps) == launch_, n
    x = torch.empty(64, 1024, dtype=torch.bfloat16, device=DEVICE)  # aligned: as before
    assert sm._launch_plan(x, torch.empty_like(x), "auto", None, None, None)[0].num_warps == 8
    # 16-bit rows up to 65: several windows per program (width 63 + 7 -> a block of 128) ...
    assert launch(63, torch.bfloat16) == ("on_chip", 128, 32, 8)
    # ... or, where windows cannot be taken (y's rows start at other offsets), 512 elements
    x = torch.empty(64, 63, dtype=torch.bfloat16, device=DEVICE)
    y = torch.empty(64, 64, dtype=torch.bfloat16, device=DEVICE)[:, :63]
    p, _, _, shift = sm._launch_plan(x, y, "auto", None, None, None)
    assert (p.block, p.rows_per_program, shift) == (64, 8, 1)


def test_rows_of_4k_to_262k_split_where_on_chip_pads_or_windows_lose():
    """PLAN_TABLE: 16-bit rows that 3 chunks of 8192 would pad by 4% or more split in chunks
    of 2048 in 2 warps, ten per SM, with the exchange a row ahead; windows (odd N, width
    n + 7) of 8k-32k in chunks of 4096 in 2 warps, ten per SM; windows
    of 32k-36k in chunks of 4096 in 4 warps, of 36k-262k in chunks of 8192, pipelined; fp32
    windows of 4k-6k and 8k-32k in small chunks; the rest as before."""
    def launch(n: int, windowed: bool = False, itemsize: int = 2) -> tuple:
        # a window's width: n plus the loose elements of one vector (7 in 16-bit, 3 in fp32)
        width = n + (16 // itemsize - 1) * windowed
        p = sp.plan(width, itemsize=itemsize, interpreted=False, windowed=windowed)
        return p.path, p.block, p.split, p.num_warps

    assert launch(20481) == ("split", 2048, 11, 2)
    assert launch(23552) == ("split", 2048, 12, 2)
    assert launch(20481, windowed=True) == ("split", 4096, 6, 2)
    assert launch(16384)[0] == launch(23553)[0] == launch(24576)[0] == "on_chip"
    # ... but aligned rows of 16,385-20,480 on chip as 16,384 and a tail of 4096, windows
    # of that width split
    assert launch(16385) == launch(20480) == ("on_chip", 16384, 1, 16)
    assert sp.plan(16385, itemsize=2, interpreted=False).tail == 4096
    assert launch(16393, windowed=True) == ("split", 4096, 5, 2)
    assert launch(8185, windowed=True)[0] == "on_chip"  # windows up to 8192 stay on chip
    assert launch(12289, windowed=True) == ("split", 4096, 4, 2)
    assert launch(30001, windowed=True) == ("split", 4096, 8, 2)
    assert launch(40001, windowed=True) == ("split", 8192, 5, 4)
    # aligned rows of that length: in chunks of 2048 (the exchange a row ahead)
    assert launch(40000) == ("split", 2048, 20, 2)
    assert launch(45000) == ("split", 2048, 22, 2)
    assert launch(100001, windowed=True) == ("split", 4096, 25, 2)  # 49k-131k: chunks of 4096
    assert launch(150001, windowed=True) == ("split", 8192, 19, 4)  # 131k-262k: of 8192
    assert launch(300001, windowed=True) == ("split", 8192, 37, 4)
    # 16-bit windows up to 8240 wide on chip, one per program, as a block and a tail; those
    # of 8241-12,288 on chip as 3 chunks of 4096 capped at 128 registers; wider ones split
    assert launch(8191, windowed=True) == launch(8233, windowed=True) == ("on_chip", 8192, 1, 4)
    assert sp.plan(8198, itemsize=2, interpreted=False, windowed=True).tail == 1024
    for n in (8235, 8441, 9001, 12281):
        p = sp.plan(n + 7, itemsize=2, interpreted=False, windowed=True)
        assert (p.path, p.block, p.chunks, p.tail, p.num_warps) == ("on_chip", 4096, 3, 0, 4), n
        assert sp._tuning(n + 7, 2, "auto", None, windowed=True)["chip_maxnreg"] == 128, n
    assert sp._tuning(12288, 2, "auto", None)["chip_maxnreg"] == 0  # aligned rows: uncapped
    assert launch(12283, windowed=True) == ("split", 4096, 4, 2)
    # fp32 windows where the on-chip block pads most: 12k-32k in chunks of 2048 in 2 warps;
    # 4k-6k and 8k-12k on chip as a block and a tail (test_odd_rows_of_4k_to_12k_on_chip...),
    # 7,001 and aligned rows on chip
    def fp32(n: int, windowed: bool = True) -> tuple:
        return launch(n, windowed, itemsize=4)

    assert fp32(5001)[0] == fp32(9001)[0] == fp32(9217)[0] == fp32(12251)[0] == "on_chip"
    assert fp32(12289) == ("split", 2048, 7, 2)
    assert fp32(30001) == ("split", 2048, 15, 2)
    assert fp32(7001)[0] == fp32(12288, windowed=False)[0] == "on_chip"
    # fp32 windows of 32k-49k split as the longer rows (on chip they load element by
    # element); aligned rows of that length stay on chip
    assert fp32(40001) == ("split", 8192, 5, 4)
    assert fp32(40000, windowed=False)[0] == "on_chip"
    # fp32 aligned rows just past 8192, 16,384 and 32,768 on chip as that block and a tail
    for n, block, tail in ((8193, 8192, 2048), (9216, 8192, 2048), (16385, 16384, 2048),
                           (20480, 16384, 4096), (20481, 16384, 8192), (24576, 16384, 8192),
                           (32769, 32768, 4096), (34816, 32768, 4096)):
        p = sp.plan(n, itemsize=4, interpreted=False)
        assert (p.path, p.block, p.chunks, p.tail) == ("on_chip", block, 1, tail), n
    for n in (8192, 9217, 16384, 24577, 34817):  # and without a tail either side
        assert sp.plan(n, itemsize=4, interpreted=False).tail == 0, n
    assert fp32(16401) == ("split", 2048, 9, 2)  # windows still split
    # a caller's window_overrides replace the row's: {} plans windows as aligned rows
    t = sp._tuning(12296, 2, "auto", dict(window_overrides={}), windowed=True)
    assert t["max_on_chip"] == sp.TUNING["max_on_chip"] and not t["split_packed"]
    # the interpreter, which runs programs one at a time, streams what a GPU splits
    assert sp.plan(30008, itemsize=2, interpreted=True, windowed=True).path == "stream"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_chunked_rows_off_the_vector_boundary(dtype):
    # Windows of 3 chunks (n + vec - 1 just above a power of two) and of one block in 2 warps,
    # one row per program.
    for n in (33, 35, 37, 45):
        t = make(_off_vector_rows(n, dtype), dtype)
        for tuning in ({**CHUNKED, **ONE_ROW}, dict(chip_warps=2, **ONE_ROW)):
            check(t, run(t, "on_chip", tuning=tuning))


@pytest.mark.parametrize("path", PATHS)
def test_loose_elements_propagate_nan(path):
    x = torch.randn(3, 37, device=DEVICE)  # in bf16, rows start at offsets 0, 5, 2 of a vector
    x[1, 0] = float("nan")  # a loose head element
    x[2, 36] = float("inf")  # a loose tail element
    x = x.to(torch.bfloat16)  # 16-bit: windows on every path
    y = run(x, path, tuning=ONE_ROW)
    assert torch.isfinite(y[0]).all() and torch.isnan(y[1]).all() and torch.isnan(y[2]).all()


def _rows_at(offset_bytes: int, rows: int, n: int, dtype: torch.dtype,
             pitch: int | None = None) -> torch.Tensor:
    """rows x n of a fresh buffer, starting offset_bytes past a 128-byte boundary, rows pitch
    elements apart (n: contiguous)."""
    size = torch.empty(0, dtype=dtype).element_size()
    pitch = pitch or n
    buf = torch.empty(rows * pitch + 256 // size, dtype=dtype, device=DEVICE)
    skip = (-buf.data_ptr() % 128 + offset_bytes) // size
    return buf[skip:skip + rows * pitch].view(rows, pitch)[:, :n]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_split_windows_start_rows_on_128_bytes_where_they_start_off_a_sector(dtype):
    """With window_bytes=128 (split rows' split_window_bytes), rows that start off a vector or
    a 32-byte sector are windows of 128 bytes; rows on sectors, or whose layout cannot take
    such windows, are what the 16-byte rule makes them."""
    size = torch.empty(0, dtype=dtype).element_size()
    vec, wide = 16 // size, 128 // size
    off_sector = 32 * 1312 // size + vec  # aligned, every other row 16 bytes off a sector
    on_sector = 32 * 1313 // size  # aligned, rows 32 bytes apart but not 128

    def shift(x, y=None):
        y = _rows_at(0, x.shape[0], x.shape[1], dtype) if y is None else y
        return sm._shift(size, sm._alignment(size, x.shape[1], x.stride(0), y.stride(0)), x, y,
                         window_bytes=128)

    assert shift(_rows_at(0, 4, off_sector, dtype)) == wide
    assert shift(_rows_at(0, 4, 21001, dtype)) == wide  # odd: rows off every vector
    assert shift(_rows_at(0, 4, on_sector, dtype)) == 1
    assert shift(_rows_at(0, 4, 21504, dtype)) == 1  # 43,008 / 86,016 bytes: all on 128
    assert shift(_rows_at(0, 1, off_sector, dtype)) == 1  # one row, on 128 bytes
    # x 16 bytes past the boundary: the 16-byte rule (windows for odd rows, none for aligned)
    assert shift(_rows_at(16, 4, off_sector, dtype)) == 1
    assert shift(_rows_at(16, 4, 21001, dtype)) == vec
    # rows 128 bytes apart in x, contiguous in y: their offsets differ by row
    assert shift(_rows_at(0, 4, off_sector, dtype, pitch=21504)) == 1
    assert sm._shift(size, 1, *(_rows_at(0, 4, 21001, dtype),) * 2) == vec  # the default: 16 B


def test_split_launches_take_the_wide_windows_where_their_parts_cover_them():
    """_launch_plan: split rows off a sector become 128-byte windows (SHIFT 64 in bf16) whose
    parts (split_columns with the window as granule) start on the window and cover the row;
    rows on sectors stay unwindowed, and so does a row whose plan covers too few columns."""
    def launch(n, **tuning):
        x, y = _rows_at(0, 4, n, torch.bfloat16), _rows_at(0, 4, n, torch.bfloat16)
        p, _, _, shift = sm._launch_plan(x, y, "split", None, None, tuning or None)
        cols = sp.split_columns(n + shift - 1, p.split, p.block, granule=shift)
        assert cols % max(16, shift) == 0 and cols * p.split >= n + shift - 1
        return shift

    assert launch(21000) == 64 and launch(21001) == 64
    assert launch(36000) == 1  # rows 0 or 64 bytes off 128: on sectors
    assert launch(3 * 8192 - 8) == 1  # 3 x 8192 columns cannot hold the window's 63 more
    assert launch(21000, split_window_bytes=16) == 1 and launch(21001, split_window_bytes=16) == 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_row_layouts_that_cannot_shift_take_the_scalar_path(dtype):
    vec = _vec(dtype)
    base = make(gaussian(5, 49, seed=3), dtype)
    y = torch.empty(5, 41, dtype=dtype, device=DEVICE)
    cases = {
        "start off a 16-byte boundary": (base[:, 1:42], 1),
        "row strides 49 and 41 differ by whole vectors": (base[:, :41], vec),
        "row strides 48 and 41 do not": (make(gaussian(5, 48, seed=4), dtype)[:, :41], 1),
    }
    for what, (x, want) in cases.items():
        assert sm._shift(x.element_size(), 1, x, y) == want, what
        for path in PATHS:
            check(x, run(x, path, tuning=ONE_ROW))


# Chunked rows under the interpreter: short rows with a small BLOCK reach 1 and 3 chunks,
# their ends and the -inf padding of the last chunk.
CHUNKED = dict(chip_chunked=True)


#: ... and rows covered by a power-of-two block and a smaller tail (17,000 = 16,384 + a tail).
TAILED = dict(chip_tail=True)
#: ... or by 3 chunks and a tail smaller than one of them (200 = 3 x 64 + a tail), at 128
#: elements per thread (in fewer warps the tail stays narrower than a chunk: not dropped).
CHUNKS_TAILED = dict(chip_chunked=True, chip_chunks_tail=True, chunk_elems_per_thread=128)


@pytest.mark.parametrize("tuning", [CHUNKED, TAILED, {**CHUNKED, **TAILED}, CHUNKS_TAILED],
                         ids=["chunks", "tail", "both", "chunks_tail"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_chunked_on_chip_rows(dtype, tuning):
    seen = set()
    for n in (17, 40, 48, 100, 140, 192, 200, 255, 600):
        p = sm.plan(n, path="on_chip", tuning=tuning, itemsize=torch.empty(0, dtype=dtype).element_size())
        block, chunks, tail = sp._chunking(n, "chip_chunked" in tuning, "chip_tail" in tuning,
                                           "chip_chunks_tail" in tuning)
        assert p.block * p.chunks + p.tail >= n and (p.block, p.chunks) == (block, chunks)
        assert p.tail == 0 if not tail else tail <= p.tail < p.block  # widened to a vector
        seen.add((p.chunks, p.tail > 0))
        x = gaussian(5, n, seed=n)
        x[1, : n // 2 + 1] = NEG_INF  # a prefix across chunk boundaries
        x[2] = NEG_INF  # fully masked
        x[3] = -1e31 * (1 + np.random.default_rng(n).random(n)) if dtype != torch.float16 else -6e4
        # the max in the last chunk's tail, large enough that exp overflows unless m includes it
        x[4, -1] = 200.0 if dtype != torch.float16 else 11.0
        t = make(x, dtype)
        for fm in ("zeros", "nan"):
            check(t, run(t, "on_chip", tuning=tuning, fully_masked=fm), fm)
    # 40 and 48 = 3 x 16, 192 = 3 x 64; 600 = 512 + a tail widened to a vector per thread;
    # 100 and 200 = 3 x 32 and 3 x 64 + a tail
    if tuning is CHUNKED:
        assert seen == {(1, False), (3, False)}
    else:
        assert (3, True) in seen if tuning is CHUNKS_TAILED else (1, True) in seen


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_windows_as_three_chunks_and_a_tail(dtype):
    # An odd row one per program (a window in 16-bit, element by element in fp32) held as 3
    # chunks and a tail (1601: a window of 1608 = 3 x 512 + a tail of 256 in one warp).
    x = make(_off_vector_rows(1601, dtype), dtype)
    tuning = dict(CHUNKS_TAILED, **ONE_ROW)
    p = sm.plan(1601 + _vec(dtype) - 1, path="on_chip", tuning=tuning, itemsize=x.element_size())
    # 16-bit: the window's 72 columns past the chunks in a tail widened to a vector per
    # thread; fp32: the row's 65 in a tail of 128
    assert (p.block, p.chunks, p.num_warps) == (512, 3, 1)
    assert p.tail == (256 if x.element_size() == 2 else 128)
    for fm in ("zeros", "nan"):
        check(x, run(x, "on_chip", tuning=tuning, fully_masked=fm), fm)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tailed_rows_as_windows_packed_and_persistent(dtype):
    # Rows off the vector boundary, one per program: windows (16-bit) whose whole vectors end
    # in the tail; several rows per program; a persistent, pipelined grid.
    x = make(_off_vector_rows(600, dtype), dtype)  # 600 or windows of 607: 512 + a tail
    for extra in (ONE_ROW, dict(min_elems_per_program=2048),
                  dict(chip_stages=2, chip_programs_per_sm=2)):
        p = sm.plan(607, path="on_chip", tuning={**TAILED, **extra},
                    itemsize=x.element_size())
        assert (p.block, p.tail) == (512, 32 * p.num_warps * _vec(dtype) // p.rows_per_program)
        for fm in ("zeros", "nan"):
            check(x, run(x, "on_chip", tuning={**TAILED, **extra}, fully_masked=fm), fm)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_odd_rows_of_4k_to_12k_on_chip_as_a_block_and_a_tail(dtype):
    # The shipped plan: odd rows of 4097-6144 and 8193-9216 columns (fp32: 8193-12,288;
    # 16-bit: their windows' width) on chip as a power-of-two block and a tail, 16-bit rows
    # as one window each, fp32 rows element by element (the launch the H200 ran at 96-99% of
    # copy).
    for n in (4097, 8191) if dtype != torch.float32 else (4097, 9001, 10039, 12251):
        x = _hard_rows(n, dtype)
        p, _t, _align, shift = sm._launch_plan(x, torch.empty_like(x), "auto", None, None, None)
        assert (p.path, p.rows_per_program, shift > 1) == (
            "on_chip", 1, dtype != torch.float32), n
        assert p.tail > 0 and p.block * p.chunks + p.tail >= n + shift - 1, (n, p)
        for fm in ("zeros", "nan"):
            check(x, softmax(x, fully_masked=fm), fm)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_short_odd_rows_on_chip_as_windows(dtype):
    # The shipped plan: odd 16-bit rows read as windows of 513-2048 columns (506-2041) on
    # chip as windows, one per program in one warp, those of 513-1536 as a block and a tail
    # where that pads less; 2042-3065 as one window of 3 x 1024 in one warp (registers
    # capped on the GPU), 3066-4089 as one block of 4096 in 2 warps; narrower rows element by
    # element; aligned rows of 1025-1536 as 1024 columns and a tail. On the hard rows, both
    # conventions.
    for n, windowed, tail in ((505, False, 0), (506, True, 256), (601, True, 256),
                              (777, True, 0), (1001, True, 0), (1101, True, 256),
                              (1300, True, 512), (1529, True, 512), (1537, True, 0),
                              (2041, True, 0), (2047, True, 0), (3500, True, 0),
                              (1200, False, 256)):
        x = _hard_rows(n, dtype)
        p, _t, _align, shift = sm._launch_plan(x, torch.empty_like(x), "auto", None, None, None)
        assert (p.path, shift > 1) == ("on_chip", windowed), (n, p, shift)
        assert p.rows_per_program == 1 or not windowed, (n, p)
        assert p.tail == tail and p.block * p.chunks + p.tail >= n + shift - 1, (n, p)
        for fm in ("zeros", "nan"):
            check(x, softmax(x, fully_masked=fm), fm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_chunked_rows_packed_and_persistent(dtype):
    x = make(gaussian(9, 96, seed=21), dtype)  # 96 = 3 x 32: three chunks per row
    for extra in (dict(min_elems_per_program=256), dict(chip_stages=2, chip_programs_per_sm=2),
                  dict(chip_warps=2)):
        tuning = {**CHUNKED, **extra}
        check(x, run(x, "on_chip", tuning=tuning))


def test_chunked_rows_propagate_nan_and_posinf():
    x = torch.randn(3, 100, device=DEVICE)
    x[0, 99] = float("nan")  # in the last chunk
    x[1, 3] = float("inf")  # in the first
    y = softmax(x, path="on_chip", tuning=CHUNKED)
    assert torch.isnan(y[0]).all() and torch.isnan(y[1]).all() and torch.isfinite(y[2]).all()


def test_long_rows_split_on_the_gpu_stream_under_the_interpreter():
    """The shipped table: rows past the on-chip limit split across programs on the GPU (one
    read), in chunks that give at most 32 per row where (m, d) travel as one word; the
    interpreter, which runs programs one at a time, always streams."""
    tuned = sp._tuning  # the knobs plan() used for a row

    def split(n: int, itemsize: int) -> tuple[int, int, bool]:
        p = sm.plan(n, itemsize=itemsize, interpreted=False)
        assert p.path == "split", (n, itemsize)
        return p.block, p.split, bool(tuned(n, itemsize, "auto", None)["split_packed"])

    assert split(65536, 4) == (2048, 32, True)
    assert split(131072, 4) == (2048, 64, True)
    assert split(262144, 4) == (4096, 64, True)  # past 131,072 the exchange a row ahead
    assert split(1 << 21, 4) == (4096, 512, True)
    assert split(49153, 2) == (2048, 25, True)
    assert split(131072, 2) == (4096, 32, True)
    assert split(262145, 2) == (8192, 33, True)
    assert tuned(262144, 2, "auto", None)["split_warps"] == 4  # five 4-warp programs per SM
    # 16-bit rows: aligned rows of 24,577-40,960 split too (on chip, 32,768 in 16 warps ran
    # 3-5 points behind; 3 chunks of 16,384 would pad 32,769-40,960 by 20% or more), longer
    # ones up to 49,152 stay on chip; 24,577-131,072 with the exchange a row ahead (chunks
    # of 2048 ten per SM up to 65,536, of 4096 five per SM past it), then chunks of 8192
    # five per SM
    for n, chunk, per_sm, ahead in (
            (24577, 2048, 10, True), (28672, 2048, 10, True), (32768, 2048, 10, True),
            (32769, 2048, 10, True), (35840, 2048, 10, True), (35841, 2048, 10, True),
            (40960, 2048, 10, True), (49153, 2048, 10, True), (65536, 2048, 10, True),
            (65537, 4096, 5, True), (131072, 4096, 5, True), (131073, 8192, 5, False),
            (262144, 8192, 5, False), (262145, 8192, 5, False)):
        t = tuned(n, 2, "auto", None)
        assert split(n, 2)[0] == chunk, n
        assert (t["split_programs_per_sm"], t["split_exchange_ahead"]) == (per_sm, ahead), n
    # fp32: every split row with the exchange a row ahead, in chunks of 2048 ten per SM up
    # to 131,072, of 4096 five per SM past it; windows in chunks of 8192, not ahead
    for n, chunk, per_sm in ((49153, 2048, 10), (131072, 2048, 10), (131073, 4096, 5)):
        t = tuned(n, 4, "auto", None)
        assert (t["split_chunk"], t["split_programs_per_sm"], t["split_exchange_ahead"]) == (
            chunk, per_sm, True), n
        assert tuned(n, 4, "auto", None, True)["split_exchange_ahead"] is False, n
    assert sm.plan(40961, itemsize=2, interpreted=False).path == "split"
    assert sm.plan(49152, itemsize=2, interpreted=False).path == "split"
    assert sm.plan(32768, itemsize=2, interpreted=False).path == "split"
    assert sm.plan(24576, itemsize=2, interpreted=False).path == "on_chip"  # 3 x 8192, level
    # ... and odd rows there (windows) in small chunks, not ahead
    assert (tuned(28673, 2, "auto", None, True)["split_chunk"],
            tuned(28673, 2, "auto", None, True)["split_exchange_ahead"]) == (4096, False)
    # the poll in PTX with relaxed loads, the row loop pipelined: fp32 rows in 2 stages,
    # windows too; 16-bit rows in 3, windows (odd rows) too: in chunks of 4096 from 49,153
    # to 131,072, of 8192 past it
    knobs = ("split_stages", "split_chunk", "split_poll_loads")
    for n, itemsize, windowed, want in (
            (49153, 4, False, (3, 2048, True)), (1 << 21, 4, True, (2, 8192, True)),
            (49153, 2, False, (3, 2048, True)), (49153, 2, True, (3, 4096, True)),
            (131072, 2, True, (3, 4096, True)), (131073, 2, True, (3, 8192, True)),
            (262144, 2, True, (3, 8192, True)), (262145, 2, True, (3, 8192, True)),
            (1 << 21, 2, False, (3, 8192, True))):
        t = tuned(n, itemsize, "auto", None, windowed)
        assert tuple(t[k] for k in knobs) == want, (n, itemsize, windowed)
    assert sm.plan(131072, itemsize=2, interpreted=True).path == "stream"
    assert sm.plan(1 << 22, itemsize=2, interpreted=False).path == "stream"  # past 64 chunks
    # 16-bit rows of 4k-32k: 64 elements per thread (8 warps for a 16,384 block, not 32)
    assert sm.plan(16384, itemsize=2).num_warps == 8
    assert sm.plan(12288, itemsize=4).num_warps == 32
    assert sm.plan(4096, itemsize=2).num_warps == 8  # below the range: 16 per thread
    # ... unless 3 chunks pad less: then 128 per thread (12,288 = 3 x 4096 in 4 warps), and
    # 16-bit rows up to 24,576 stay on chip that way (past 40,960 they split: 45,056)
    assert sm.plan(45056, itemsize=2, interpreted=False).path == "split"
    for n, chunks, warps, stages in ((3000, 3, 1, 1), (12288, 3, 4, 1), (8000, 1, 4, 1),
                                     (24576, 3, 8, 3)):
        p = sm.plan(n, itemsize=2, interpreted=False)
        assert (p.path, p.chunks, p.num_warps, p.stages) == ("on_chip", chunks, warps, stages), n


def test_plan_table_sets_the_auto_plan_for_its_range(monkeypatch):
    row = (2, 8192, 16384, dict(chip_chunked=True, chip_warps=16))
    monkeypatch.setattr(sp, "PLAN_TABLE", [row])
    p = sm.plan(12288, itemsize=2, interpreted=False)
    assert (p.path, p.block, p.chunks, p.num_warps) == ("on_chip", 4096, 3, 16)
    assert sm.plan(12288, itemsize=4).chunks == 1  # another element size: untouched
    assert sm.plan(4096, itemsize=2).chunks == 1  # outside the range: untouched
    assert sm.plan(12288, itemsize=2, tuning=dict(chip_warps=8)).num_warps == 8  # caller wins
    assert sm.plan(12288, itemsize=2, path="on_chip").chunks == 1  # a forced path: no table
    # chunk_elems_per_thread sets the warps of chunked rows only
    row = (2, 2048, 16384, dict(chip_chunked=True, chunk_elems_per_thread=128))
    monkeypatch.setattr(sp, "PLAN_TABLE", [row])
    assert sm.plan(12288, itemsize=2).num_warps == 4  # 12288 / (32 * 128) = 3, up to a power of 2
    assert sm.plan(16384, itemsize=2).num_warps == 16384 // (32 * 16)  # one block: 16 each
    monkeypatch.setattr(sp, "PLAN_TABLE", [(4, 0, 1 << 30, dict(max_on_chip=128))])
    x = make(gaussian(3, 200, seed=3), torch.float32)
    assert sm.plan(200, itemsize=4, interpreted=True).path == "stream"
    check(x, softmax(x))
    monkeypatch.setattr(sp, "PLAN_TABLE", [(4, 0, 1 << 30, dict(chip_chunked=True, chip_stages=2))])
    assert sp._tuning(200, 4, "auto", None)["chip_stages"] == 2  # the launcher reads it too
    check(x, softmax(x))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masks_prefix_longer_than_a_tile_suffix_scattered(dtype, path):
    n = 300 if path != "on_chip" else 256
    x = gaussian(4, n, seed=2)
    x[0, : 2 * TILE + 17] = NEG_INF  # masked prefix: the first tiles see only -inf
    x[1, 5:] = NEG_INF  # one short finite prefix
    x[2, ::3] = NEG_INF  # scattered
    x[3, :-1] = NEG_INF  # exactly one finite entry, at the very end
    t = make(x, dtype)
    check(t, run(t, path))
    y = dtypes.to_numpy(run(t, path)).astype(np.float64)
    assert y[3, -1] == 1.0


@pytest.mark.parametrize("fully_masked", ["zeros", "nan"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fully_masked_rows_follow_the_convention(dtype, path, fully_masked):
    n = 200
    x = gaussian(3, n, seed=3)
    x[1] = NEG_INF
    t = make(x, dtype)
    y = run(t, path, fully_masked=fully_masked)
    check(t, y, fully_masked)
    y1 = dtypes.to_numpy(y[1]).astype(np.float64)
    assert (y1 == 0).all() if fully_masked == "zeros" else np.isnan(y1).all()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rows_entirely_below_a_finite_sentinel(dtype, path):
    # A kernel that starts the running max at -1e30 sees nothing above it here.
    rng = np.random.default_rng(4)
    x = -1e31 * (1 + rng.random((3, 150)))  # [-2e31, -1e31]
    x[1] = -3e38 + 1e36 * rng.random(150)  # near the most negative finite fp32 / bf16
    x[2, :] = -1e35
    x[2, 7] = -9.9e34  # one clear winner
    t = make(x, dtype)
    check(t, run(t, path))


@pytest.mark.parametrize("path", PATHS)
def test_rows_near_the_most_negative_float16(path):
    x = -65504.0 + 8.0 * np.random.default_rng(5).integers(0, 8, size=(2, 150))
    t = make(x, torch.float16)
    check(t, run(t, path))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy, on purpose
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_huge_maxima_near_dtype_max(dtype, path):
    big = dtypes.resolve(dtype).max
    x = gaussian(3, 150, seed=6)
    x[0, [3, 90, 149]] = big  # three tied maxima: 1/3 each, no overflow in x - m
    x[1] = big - np.abs(gaussian(1, 150, seed=7)[0]) * big * 2**-6  # all huge, spread ~ max/64
    x[2, 10] = big
    x[2, 11] = -big  # x - m = -2 max overflows fp32 to -inf: exp must still be 0, not NaN
    t = make(x, dtype)
    check(t, run(t, path))
    y0 = dtypes.to_numpy(run(t, path)[0]).astype(np.float64)
    fmt = dtypes.resolve(dtype)
    assert abs(y0[3] - 1 / 3) <= (fmt.u + 8 * U32) * (1 / 3)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_max_grows_at_every_tile_and_constant_rows(dtype, path):
    x = np.stack([np.linspace(-20, 20, 200), np.full(200, 7.0), np.linspace(20, -20, 200)])
    t = make(x, dtype)
    check(t, run(t, path))


# ---------------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("path", PATHS)
def test_strided_rows_and_columns(path):
    base = make(gaussian(8, 400, seed=8), torch.bfloat16)
    for x in (base[::3, :200], base[:, 1:301], base[:, ::2], base.t()[:150, :8].t()):
        assert not x.is_contiguous()
        check(x, run(x, path))


def test_nd_input_and_zero_rows():
    base = make(gaussian(24, 70, seed=9), torch.float16).reshape(2, 3, 4, 70)
    x = base.permute(1, 0, 2, 3)  # leading dims not collapsible into one stride
    y = run(x)
    assert y.shape == x.shape
    check(x.reshape(-1, 70), y.reshape(-1, 70))
    one = make(gaussian(1, 9, seed=10)[0], torch.float32)
    check(one[None], run(one)[None])
    empty = torch.empty(0, 5, device=DEVICE)
    assert run(empty).shape == (0, 5)


def test_input_unchanged_and_deterministic():
    x = make(gaussian(4, 300, seed=11), torch.bfloat16)
    before = x.clone()
    a, b = run(x, "stream"), run(x, "stream")
    assert torch.equal(x, before)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf
def test_nan_and_posinf_rows_give_nan():
    x = gaussian(2, 100, seed=12)
    x[0, 4] = np.nan
    x[1, 9] = np.inf
    for path in PATHS:
        y = dtypes.to_numpy(run(make(x, torch.float32), path))
        assert np.isnan(y).all(), path


# ---------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "bad, kind, words",
    [
        (lambda: torch.zeros(2, 3, dtype=torch.float64, device=DEVICE), TypeError, "float64"),
        (lambda: torch.zeros(2, 3, dtype=torch.int32, device=DEVICE), TypeError, "int32"),
        (lambda: np.zeros((2, 3), np.float32), TypeError, "torch.Tensor"),
        (lambda: torch.zeros(2, 0, device=DEVICE), ValueError, "shape=(2, 0)"),
        (lambda: torch.tensor(1.0, device=DEVICE), ValueError, "shape=()"),
        (lambda: torch.zeros(2, 3, device="meta"), ValueError, "device=meta"),
    ],
)
def test_bad_input_is_refused_with_the_value_and_the_fix(bad, kind, words):
    with pytest.raises(kind, match=None) as info:
        softmax(bad())
    assert words in str(info.value) and "; " in str(info.value)


def test_bad_options_are_refused():
    x = torch.zeros(2, 3, device=DEVICE)
    with pytest.raises(ValueError, match="fully_masked='ones'"):
        softmax(x, fully_masked="ones")
    with pytest.raises(ValueError, match="path='fast'"):
        softmax(x, path="fast")


@pytest.mark.skipif(not INTERPRETED, reason="the interpreter refuses the split path")
def test_split_path_needs_a_gpu():
    with pytest.raises(ValueError, match="path='split'"):
        softmax(torch.zeros(2, 300), path="split")


def test_switching_mode_after_import_is_an_error():
    with pytest.raises(RuntimeError, match="already imported"):
        kernels.use_interpreter(not INTERPRETED)
    assert kernels.use_interpreter(INTERPRETED) == INTERPRETED  # same mode: harmless


def test_declares_its_exp_and_accumulation():
    assert sm.EXP == "fast" and sm.ACCUMULATE == "float32" and sm.INTERPRETED == INTERPRETED


# ---------------------------------------------------------------------------------- GPU
def _hard_rows(n: int, dtype) -> torch.Tensor:
    """Six rows of n that break kernels: -inf over the first half, fully masked, below any
    sentinel (near fp16's lowest in fp16), and gaussian rows with a wide spread."""
    x = gaussian(6, n, scale=4.0, seed=n)
    x[1, : n // 2] = NEG_INF
    x[2] = NEG_INF
    x[3] = -1e31 * (1 + np.random.default_rng(n).random(n)) if dtype != torch.float16 else -6e4
    return make(x, dtype)


@gpu
@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [505, 601, 777, 1000, 1001, 1101, 1200, 1300, 1529, 1999, 2047,
                               3500, 4096, 5001, 8233, 8241, 8441, 8501, 9000, 10001, 12281,
                               12289, 17000, 18000, 20001,
                               21000, 24576, 28680, 32768, 32769, 33000, 34000, 36000, 36008,
                               40001, 50257, 52008, 65536, 65537, 98304, 131072 + 3, 151936,
                               262137, 262144, 300_000, (1 << 20) + 3])
def test_gpu_long_rows_every_path(dtype, n):
    t = _hard_rows(n, dtype)
    for path in ("auto", "stream", "split", "split_packed") if n > 2048 else (
            "auto", "on_chip", "stream"):
        tuning = dict(split_packed=True) if path == "split_packed" else None
        path = "split" if path == "split_packed" else path
        for fm in ("zeros", "nan"):
            check(t, softmax(t, path=path, fully_masked=fm, tuning=tuning), fm)


@gpu
@requires_cuda
def test_gpu_many_rows_split_grid_is_persistent():
    # More rows than the persistent grid has groups: every group loops over several rows.
    t = make(gaussian(1000, 70_000, seed=13), torch.bfloat16)
    check(t, softmax(t, path="split"))
    check(t, softmax(t, path="split", tuning=dict(split_packed=True)))


def test_split_programs_per_sm_follow_the_registers():
    fit = sp._programs_that_fit
    assert fit(8, 72, 4) == 7  # 72 x 128 threads x 8 > 65,536 registers: one fewer
    assert fit(8, 64, 4) == 8
    assert fit(8, 65, 4) == 7  # allocated 8 at a time: 65 costs 72
    assert fit(4, 40, 8) == 4  # never more than asked
    assert fit(8, 32, 4, warps_per_sm=16) == 4  # warps bind first
    assert fit(8, 255, 32) == 1  # at least one
    assert fit(8, 0, 4) == 8  # registers unknown: as asked
    # ... and the shared memory of pipelined stages (plus 1 KB per program for the driver)
    assert fit(5, 96, 4, shared=33 * 1024) == 5  # bf16 8192-chunks, two buffers: 5 x 34 KB
    assert fit(4, 120, 4, shared=65 * 1024) == 3  # fp32: 4 x 66 KB > 228 KB, three fit
    assert fit(4, 120, 4, shared=0) == 4  # shared memory unknown: registers decide
    assert fit(2, 64, 4, shared=300 * 1024) == 1  # never below one


def test_tuning_knobs_are_checked():
    # A misspelt knob would silently time the shipped plan under the wrong name.
    with pytest.raises(ValueError, match="'split_stage' is not a knob.*did you mean 'split_stages'"):
        sm.plan(65536, itemsize=2, interpreted=False, tuning=dict(split_stage=3))
    with pytest.raises(ValueError, match="'split_chunks' is not a knob.*did you mean 'split_chunk'"):
        sm.plan(20008, itemsize=2, interpreted=False, windowed=True,
                tuning=dict(window_overrides=dict(split_chunks=2048)))
    with pytest.raises(ValueError, match="'split_warp' is not a knob.*did you mean 'split_warps'"):
        sm.plan(52008, itemsize=2, interpreted=False,
                tuning=dict(off_sector_overrides=dict(split_warp=2)))
    for *_, overrides in sp.PLAN_TABLE:  # the table speaks the same language
        assert (set(overrides) | set(overrides.get("window_overrides", {}))
                | set(overrides.get("off_sector_overrides", {}))) <= set(sp.TUNING)
    t = sp._tuning(65536, 2, "auto", dict(split_min_lanes=24))
    with pytest.raises(ValueError, match="split_min_lanes=24 must be a power of two"):
        sp.split_exchange(t, 8)


def test_the_exchange_a_row_ahead_needs_the_packed_word_and_polls_in_ptx():
    # split_exchange_ahead publishes row r + 1 before row r's wait: the packed exchange's
    # publish and wait apart, the wait as the PTX poll; with the counter it does not apply.
    ahead = sp._tuning(65536, 2, "auto", dict(split_exchange_ahead=True, split_stages=1))
    ex = sp.split_exchange(ahead, 8)
    assert ex.ahead and ex.packed and ex.poll_in_asm and str(ex).endswith(" ahead")
    counted = sp.split_exchange({**ahead, "split_packed": False}, 8)
    assert not counted.ahead and str(counted) == "counter l32"
    assert not sp.TUNING["split_exchange_ahead"]  # off, but where PLAN_TABLE turns it on
    assert sp.split_exchange(sp._tuning(65536, 2, "auto", None), 32).ahead
    assert not sp.split_exchange(sp._tuning(65537, 2, "auto", None, windowed=True), 9).ahead


def test_the_exchange_a_row_ahead_compiles_without_spills_in_its_bench_shapes():
    # Two parts live across the wait: in the shipped shapes that spills (bf16 chunks of 4096
    # in 2 warps: 564 bytes), so the bench times it in shapes of half the part per thread.
    # The kernel path cannot run on a CPU (its programs wait for each other); this is what a
    # machine without a GPU can check of it: it compiles for sm_90a, takes AHEAD, fits.
    import json

    kw = dict(_bench_variants()(21000, 2))["split ahead c4096 w4 x5"]  # the bench's launch
    rows = _split_ptxas("--dtypes", "bfloat16", "--ns", "21000,131072", "--path", kw["path"],
                        "--tuning", json.dumps(kw["tuning"]))
    assert [r["options"]["AHEAD"] for r in rows] == [True, True]
    assert all(r["spill_bytes"] == 0 and r["registers"] <= 96 for r in rows), rows
    # the shipped launch of an odd N there (a window): not ahead, another kernel
    shipped = _split_ptxas("--dtypes", "bfloat16", "--ns", "21001")[0]
    assert shipped["options"]["AHEAD"] is False and shipped["ptx_sha"] != rows[0]["ptx_sha"]


@pytest.mark.parametrize("width, parts, want", [
    (20488, 11, 1872),  # 10 x 2048 and 8: 1862.5 rounded up to 16
    (21000, 11, 1920),  # 10 x 2048 and 520: 1909.1 rounded up to 16
    (33000, 17, 2048),  # 1941.2 each would shorten 2048 by 5%: whole chunks
    (36000, 18, 2048),  # 17 x 2048 and 1184: 2000 each shortens 2048 by 2%: whole chunks
    (65536, 32, 2048),  # whole chunks already
    (151936, 19, 8192),  # 8000 each would shorten 8192 by 2%: whole chunks
    (262145, 33, 8192),  # 7952 each, 3%: whole chunks
])
def test_split_parts_are_equal_whole_vectors_that_cover_the_row(width, parts, want):
    # A row waits for its longest part: equal parts, each within what a program holds and a
    # multiple of 16 elements (every part starts on a 16-byte vector), covering the row;
    # whole chunks where equal parts would shorten the longest by less than a sixteenth.
    p = sm.plan(width, itemsize=2, interpreted=False)
    assert p.split == parts
    cols = sp.split_columns(width, p.split, p.block)
    assert cols == want and cols % 16 == 0 and cols <= p.block
    assert p.split * cols >= width > (p.split - 1) * cols  # every program has columns
    assert sp.split_columns(width, p.split, p.block, balanced=False) == p.block


def test_split_register_cap_lets_the_planned_programs_share_an_sm():
    cap = sp._register_cap
    assert cap(2, 8) == 128  # fp32 chunks of 16,384: two 8-warp programs, 65,536 registers
    assert cap(8, 4) == 64
    assert cap(3, 4) == 168  # 65,536 / 384 = 170.7, allocated 8 at a time
    assert cap(1, 1) == 255  # the hardware's most
    for programs, warps in ((2, 8), (3, 4), (7, 4), (4, 8)):  # the cap always fits them
        assert sp._programs_that_fit(programs, cap(programs, warps), warps) == programs


@gpu
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("knobs", [
    dict(), dict(split_cap_registers=False), dict(split_packed=False),
    # the row loop pipelined or not (the next row's chunk copied while this one waits in a
    # PTX poll), polling with atomics or loads, in as many lanes as chunks or in 32
    dict(split_stages=1, split_poll_asm=False), dict(split_stages=3),
    dict(split_stages=2, split_poll_loads=False), dict(window_overrides={}),
    dict(split_min_lanes=1), dict(split_stages=3, split_chunk=4096, split_programs_per_sm=8),
    dict(split_chunk=4096, split_warps=2, split_programs_per_sm=10),
    dict(split_balanced=False), dict(split_stages=4),
    # the exchange a row ahead, pipelined or not, in a shape that holds two parts unspilled
    dict(split_exchange_ahead=True, split_chunk=4096, split_warps=4, split_programs_per_sm=5),
    dict(split_exchange_ahead=True, split_stages=1, split_chunk=2048, split_warps=2,
         split_programs_per_sm=10),
    # ... and pipelined in chunks of 2048 (the 16-bit rows' shipped launch; fp32 rows of
    # 52k-131k ran 1-2 points faster in it, not yet shipped)
    dict(split_exchange_ahead=True, split_stages=3, split_chunk=2048, split_warps=2,
         split_programs_per_sm=10),
    # split windows with whole vectors of 16 bytes (few loose elements): pipelined, in one
    # stage with the Triton-level poll, and a row ahead
    dict(split_loose_vectors=True),
    dict(split_loose_vectors=True, split_stages=1, split_poll_asm=False),
    dict(split_loose_vectors=True, split_exchange_ahead=True, split_chunk=2048, split_warps=2,
         split_programs_per_sm=10)], ids=str)
def test_gpu_split_variants_stay_correct(dtype, knobs):
    # Registers capped (fp32 windows spill to fit the plan) or not, either exchange, pipelined
    # or not: rows that break kernels, odd rows (windows), and many rows per group.
    for n in (50257, 65536, 100001):
        t = _hard_rows(n, dtype)
        for fm in ("zeros", "nan"):
            check(t, softmax(t, fully_masked=fm, tuning=knobs), fm)
    t = make(gaussian(600, 65_537, seed=3), dtype)  # groups loop over rows, waits overlap
    sm._SPLIT_FIT.clear()  # the first launch sized as planned, the second by what fits
    for _ in range(2):
        check(t, softmax(t, tuning=knobs))


@gpu
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_split_grid_sized_by_registers(dtype, monkeypatch):
    # The second launch takes its grid from the first one's compiled registers, read once:
    # later launches of the same plan run the same compiled kernel.
    sm._SPLIT_FIT.clear()
    sm._LAUNCHES.clear()
    sizings = []
    fit = sm._programs_that_fit
    monkeypatch.setattr(sm, "_programs_that_fit", lambda *a: sizings.append(a) or fit(*a))
    assert sm._plan_module.TUNING["split_fit_registers"]  # shipped on
    t = _hard_rows(50257, dtype)
    for _ in range(3):
        check(t, softmax(t))
    assert len(sm._SPLIT_FIT) == 1 and len(sizings) == 1
    # at most the plan's count (the grid must stay one the GPU holds at once), at least one
    _p, knobs, _align, _shift = sm._launch_plan(t, t, "auto", None, None, None)
    assert 1 <= next(iter(sm._SPLIT_FIT.values())) <= knobs["split_programs_per_sm"]


@gpu
@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n, path", [(1000, "auto"), (1001, "on_chip"), (12288, "auto"),
                                     (5001, "stream"), (50257, "split")])
def test_gpu_repeated_calls_launch_their_kernel_directly_and_stay_right(dtype, n, path,
                                                                       monkeypatch):
    # A plan's first call compiles through Triton's JIT; later calls of the same plan launch
    # the compiled kernel directly, on other data, as right. The JIT's launches are counted:
    # one per new plan (y, allocated per call, may start at another offset within 1 KB, a
    # plan of its own), none for the calls of a known one.
    import triton

    sm._LAUNCHES.clear()
    t = _hard_rows(n, dtype)
    for fm in ("zeros", "nan"):
        check(t, softmax(t, path=path, fully_masked=fm), fm)
    runs = []
    run = triton.runtime.jit.JITFunction.run

    def counted(self, *args, **kwargs):
        runs.append(self)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(triton.runtime.jit.JITFunction, "run", counted)
    planned, calls = len(sm._LAUNCHES), 0
    for seed in (1, 2, 3, 4):
        u = gaussian(6, n, scale=4.0, seed=seed)
        u[2] = NEG_INF
        t.copy_(make(u, dtype))  # new data in x's own memory: x's part of the key stays
        for fm in ("zeros", "nan"):
            check(t, softmax(t, path=path, fully_masked=fm), fm)
            calls += 1
    assert len(runs) == len(sm._LAUNCHES) - planned  # through the JIT: new plans only
    assert len(runs) < calls


@gpu
@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
# Forced on chip only up to 49152: at 65539 in fp32 the row needs 393 KB of shared memory and
# Triton raises OutOfResources (path="auto" never sends such a row on chip).
@pytest.mark.parametrize("n", [3000, 12288, 17001, 20000, 49152])
def test_gpu_sweep_candidates(dtype, n):
    # The variants bench/softmax.py --tune times, on the rows that break kernels.
    t = _hard_rows(n, dtype)
    cases = [dict(),  # the shipped plan (16-bit: 3 chunks, 128 elements per thread)
             dict(path="on_chip", tuning=CHUNKED),
             dict(path="on_chip", tuning=dict(chip_chunked=True, chunk_elems_per_thread=128)),
             dict(path="on_chip", tuning=dict(chip_chunked=True, chip_stages=2,
                                              chip_programs_per_sm=2)),
             # a power-of-two block and a tail (17,001 in 16-bit: as windows, one per program)
             dict(path="on_chip", tuning=dict(chip_tail=True, elems_per_thread=32)),
             dict(path="on_chip", tuning=dict(chip_tail=True, chip_stages=2,
                                              chip_programs_per_sm=2)),
             # with a register cap (two 16-warp programs per SM where 16,384 + 8192 takes 72)
             dict(path="on_chip", tuning=dict(chip_tail=True, elems_per_thread=32,
                                              chip_maxnreg=64))]
    for kw in cases:
        for fm in ("zeros", "nan"):
            check(t, softmax(t, fully_masked=fm, **kw), fm)


def test_alignment_is_one_vector_of_the_dtype() -> None:
    """ALIGN is a whole 16-byte vector of the element type (bf16 rows of 1000 vectorise), and 1
    as soon as the length or a row stride breaks it."""
    from onlinesm.kernels.softmax import _alignment

    assert _alignment(2, 1000, 1000, 1000) == 8
    assert _alignment(4, 1000, 1000, 1000) == 4
    assert _alignment(2, 3000, 3000, 3000) == 8
    assert _alignment(2, 1000, 1004, 1000) == 1  # a row stride off the vector
    assert _alignment(4, 1002, 1002, 1002) == 1


def _bench_variants():
    """bench/softmax.py's variants(): the launch candidates --tune times on a GPU."""
    return bench_module("softmax").variants


def test_bench_softmax_leaves_out_launches_only_a_broken_kernel_explains():
    # bench/softmax.py times a launch only if its output on the bench's rows is within what a
    # correct kernel gives: a wrong launch must not enter a table as a fast one.
    bench = bench_module("softmax")
    x = torch.randn(4, 1000, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 4
    exact = torch.softmax(x, dim=-1)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        size = torch.empty(0, dtype=dtype).element_size()
        good = exact.to(dtype)  # a correct kernel: the exact result, rounded
        assert bench.plausible(bench.max_errors(good, x)[0], size), dtype
        lost_rescale = torch.exp(x - x.max(-1, keepdim=True).values).to(dtype)  # no 1 / d
        nan = good.clone()
        nan[0, 0] = float("nan")
        for bad in (lost_rescale, nan, torch.softmax(x * 1.1, dim=-1).to(dtype)):
            assert not bench.plausible(bench.max_errors(bad, x)[0], size), dtype


def test_bench_softmax_random_lengths_cover_every_kind_of_row():
    # bench/softmax.py --random K: lengths drawn log-uniformly from 1k-64k, each kind of row
    # that plans differently in turn (odd, off a 32-byte sector in 16-bit or in fp32, off the
    # vector, aligned); the same seed, the same lengths.
    bench = bench_module("softmax")
    ns = bench.random_lengths(50, seed=7)
    assert ns == sorted(set(ns)) and len(ns) == 50 and 1000 <= ns[0] and ns[-1] <= 65536
    kinds = [[n for n in ns if n % m == r] for m, r in bench.RANDOM_KINDS]
    assert [len(k) for k in kinds] == [10] * 5
    assert ns == bench.random_lengths(50, seed=7) != bench.random_lengths(50, seed=8)
    # log-uniform: about as many below 8k as above it (a uniform draw puts 11% there)
    assert 15 <= sum(n < 8192 for n in ns) <= 35


def test_bench_plan_map_names_each_class_of_rows_and_its_launch():
    # bench/plan_map.py: the launch of every length of each kind of row, merged into ranges.
    # bf16 of 23,000-25,000: aligned rows split up to 23,552, on chip as 3 x 8192 to 24,576,
    # split past it; rows off a sector split throughout, in 12 then 13 parts.
    plan_map = bench_module("plan_map")
    rows = plan_map.plan_map("bfloat16", 23000, 25000, ("aligned", "off a sector"))
    aligned = [r for r in rows if r["kind"] == "aligned"]
    assert [(r["first"], r["last"]) for r in aligned] == [
        (23008, 23552), (23568, 24576), (24592, 24992)]
    assert [r["launch"].split(" in ")[0].split(" as ")[0] for r in aligned] == [
        "split", "on chip", "split"]
    assert aligned[1]["launch"].startswith("on chip as 3 x 8192")
    off = [r for r in rows if r["kind"] == "off a sector"]
    assert all(r["launch"].startswith("split in chunks of 2048") for r in off), off
    assert off[0]["first"] == 23000 and off[-1]["last"] == 25000
    assert [r["parts"] for r in off] == [(12, 12), (12, 12), (13, 13)], off  # (fewest, most)
    assert all(a["last"] + 16 == b["first"] for a, b in zip(off, off[1:]))  # no length lost
    # Even rows off the vector (bf16 N = 2, 4, 6 mod 8) are windows: 128-byte ones, then,
    # just below five parts of 4096, 32-byte ones, then 16-byte ones for the last length,
    # then 128-byte ones again in six parts.
    bands = plan_map.plan_map("bfloat16", 20000, 20480, ("off the vector",))
    assert [(r["first"], r["last"], r["launch"].rsplit("windows of ", 1)[1], r["parts"])
            for r in bands] == [(20002, 20420, "128 B", (5, 5)), (20422, 20468, "32 B", (5, 5)),
                                (20470, 20470, "16 B", (5, 5)), (20474, 20478, "128 B", (6, 6))]
    assert all(n % 8 in (2, 4, 6) for r in bands for n in (r["first"], r["last"]))
    with pytest.raises(ValueError, match="unknown kind 'even'"):
        plan_map.plan_map("bfloat16", 1000, 1100, ("even",))


def test_ncu_softmax_cases_name_real_knobs_and_lengths():
    # bench/ncu_targets.py builds its softmax cases from their names (softmax_<dtype>_N[_V])
    # on the GPU only: a misspelt dtype, variant knob or suffix would surface there, as a
    # lost call.
    ncu = bench_module("ncu_targets")
    for variant in ncu.VARIANTS.values():
        assert set(variant) <= set(sp.TUNING), variant
    for name in ncu.CASES:
        if name.startswith("softmax"):
            _, dtype, n, *variant = name.split("_")
            assert dtype in ncu.DTYPES and int(n) > 0 and all(v in ncu.VARIANTS for v in variant)
            assert isinstance(getattr(torch, ncu.DTYPES[dtype]), torch.dtype), name


def test_bench_medians_compare_candidates_by_medians_over_runs(tmp_path, capsys, monkeypatch):
    # Three runs of bench/softmax.py --tune: each candidate's median % of copy, its range, and
    # its median ratio to the shipped launch in the same runs (not the ratio of medians).
    import json
    import sys

    medians = bench_module("medians")
    runs = [[dict(dtype="bfloat16", N=21000, M=4, bytes=8, copy=copy, ours=ours, alt=alt,
                  ours_err=[0.0, 0.0], plan="split")]
            for copy, ours, alt in ((4000.0, 3400.0, 3600.0), (4200.0, 3780.0, 3570.0),
                                    (4100.0, 3567.0, 3649.0))]
    got = {m["candidate"]: m for m in medians.medians(runs)}
    assert set(got) == {"ours", "alt"}  # not copy, M, bytes, errors or the plan
    assert got["ours"]["pct"] == pytest.approx(87.0) and got["ours"]["runs"] == 3
    assert (got["alt"]["lo"], got["alt"]["hi"]) == pytest.approx((85.0, 90.0))
    assert got["alt"]["vs_ours"] == pytest.approx(3649.0 / 3567.0)  # middle of 1.06, 0.94, 1.02
    files = []
    for i, rows in enumerate(runs):
        files.append(tmp_path / f"run{i}.json")
        files[-1].write_text(json.dumps(dict(rows=rows)))
    monkeypatch.setattr(sys, "argv", ["medians.py", "--only", "alt", *map(str, files)])
    medians.main()
    assert "| bfloat16 | 21000 | alt | 89.0 | 85.0-90.0 | 3 | 1.023 | split |" in (
        capsys.readouterr().out)
    monkeypatch.setattr(sys, "argv", ["medians.py", str(tmp_path / "missing.json")])
    with pytest.raises(SystemExit, match="cannot read the rows of .*missing.json"):
        medians.main()


def test_bench_attention_medians_judge_a_kernel_by_its_median_against_cudnn(tmp_path, capsys):
    # bench/attention.py --medians: onlinesm x cuDNN per configuration, the median of each
    # run's own ratio (not a ratio of medians), and every run's in order.
    import json

    bench = bench_module("attention")
    row = dict(dtype="float16", D=64, S=2048, causal=True)
    files = []
    for i, (ours, cudnn) in enumerate(((90.0, 100.0), (99.0, 90.0), (95.0, 100.0))):
        files.append(tmp_path / f"run{i}.json")
        files[-1].write_text(json.dumps(dict(rows=[dict(row, onlinesm=ours, cudnn=cudnn)])))
    assert bench.main(["--medians", *map(str, files)]) == 0
    assert "| float16 | 64 | 2048 | yes | 0.95 | 0.90 / 1.10 / 0.95 |" in capsys.readouterr().out


@pytest.mark.parametrize("n", [63, 1001, 5000, 20000, 22000], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_every_on_chip_tune_candidate_is_correct(dtype, n):
    # Before a GPU run times them: a wrong candidate would be a wasted (or misleading) run.
    variants = _bench_variants()(n, torch.empty(0, dtype=dtype).element_size())
    chip = [(name, kw) for name, kw in variants if kw["path"] == "on_chip"]
    assert chip, f"no on-chip candidate for N = {n}"
    x = gaussian(3, n, seed=n)
    x[1, -1] = 200.0 if dtype != torch.float16 else 11.0  # the max in the last chunk
    x[2] = NEG_INF
    t = make(x, dtype)
    for name, kw in chip:
        try:
            check(t, softmax(t, **kw))
        except AssertionError as err:
            raise AssertionError(f"candidate {name!r} ({kw}): {err}") from None


@gpu
@requires_cuda
@pytest.mark.parametrize("n", [20000, 40000, 100001], ids=str)
def test_gpu_every_split_tune_candidate_is_correct(n):
    # The split launches bench/softmax.py --tune times, on rows that break kernels, before
    # their speed is believed (bf16: the 16-bit candidates are the most numerous).
    variants = _bench_variants()(n, 2)
    split = [(name, kw) for name, kw in variants if kw["path"] == "split"]
    assert split, f"no split candidate for N = {n}"
    t = _hard_rows(n, torch.bfloat16)
    for name, kw in split:
        try:
            for fm in ("zeros", "nan"):
                check(t, softmax(t, fully_masked=fm, **kw), fm)
        except AssertionError as err:
            raise AssertionError(f"candidate {name!r} ({kw}): {err}") from None


def _split_ptxas(*args: str) -> list[dict]:
    """bench/split_ptxas.py's launches (compiled for sm_90a offline, ptxas -v), as dicts."""
    return _offline_sm90("split_ptxas.py", *args)


def _offline_sm90(script: str, *args: str) -> list[dict]:
    """bench/<script>'s kernels compiled for sm_90a offline (ptxas -v), as dicts."""
    from offline_compile import sm90_json  # conftest puts tests/ on sys.path

    pytest.importorskip("triton.backends.nvidia.compiler")
    return sm90_json(script, *args)


def test_the_shipped_split_launches_do_not_spill():
    # Split rows are latency-bound: a spill under the register cap cost bf16 131,072 a fifth
    # of its bandwidth on the H200. Every shipped exchange: pipelined in 3 stages (16-bit) or
    # 2 (fp32), windows, 32 and 128 lanes.
    rows = _split_ptxas("--dtypes", "bfloat16,float16,float32", "--ns", "65536,100001,262144")
    assert len(rows) == 9
    # The exchange a row ahead (two parts live across the wait) where PLAN_TABLE runs it:
    # 16-bit 65,536 (above), 98,304, fp32 65,536 and 262,144 (above), bf16 rows off a 32-byte
    # sector of 33,000, 36,008 and 41,800 (as 128-byte windows of 16-byte vectors; 41,800's
    # aligned neighbours stay on chip); not on odd N's windows, nor on bf16 52,008's (off a
    # sector), which take their row's window knobs.
    # (fp32 rows of 524,288 and 1,048,576, 128 and 256 lanes, spill 4 and 8 bytes under
    # triton 3.9: see test_the_longest_fp32_rows_spill_at_most_a_word_a_row_ahead.)
    ahead = _split_ptxas("--dtypes", "bfloat16", "--ns",
                         "22000,33024,36000,98304,33000,36008,41800,52008")
    assert [(r["options"]["AHEAD"], r["options"]["CHUNK"], r["options"]["SHIFT"] > 1)
            for r in ahead] == [(True, 2048, False), (True, 2048, False), (True, 2048, False),
                                (True, 4096, False), (True, 2048, True), (True, 2048, True),
                                (True, 2048, True), (False, 8192, True)]
    assert [(r["dtype"], r["options"]["AHEAD"]) for r in rows if r["n"] != 100001] == [
        ("bfloat16", True), ("bfloat16", False), ("float16", True), ("float16", False),
        ("float32", True), ("float32", True)]
    rows += ahead
    # fp32 131,072 ahead in chunks of 2048: 64 parts, merged in 64 lanes
    (longest,) = _split_ptxas("--dtypes", "float32", "--ns", "131072")
    assert (longest["options"]["AHEAD"], longest["options"]["CHUNK"]) == (True, 2048)
    rows.append(longest)
    # 16-bit rows of 8k-262k in chunks of 4096: 2 warps (windows 12,289, 21,001, 30,001 and
    # 33,001; windows of 20,001 spill 36 bytes under triton 3.9, none under 3.6), and 8192 in
    # 4 warps (windows of 40,001, 262,137 and, pipelined in 3 stages like the aligned rows,
    # 300,007)
    small = _split_ptxas("--dtypes", "bfloat16", "--ns",
                         "12289,21001,30001,33001,40001,262137,300007")
    assert [(r["options"]["CHUNK"], r["options"]["num_warps"]) for r in small] == [
        (4096, 2), (4096, 2), (4096, 2), (4096, 2), (8192, 4), (8192, 4), (8192, 4)]
    assert small[-1]["options"]["STAGES"] == 3
    rows += small
    # fp32 windows of 9k-32k: chunks of 2048 in 2 warps
    rows += _split_ptxas("--dtypes", "float32", "--ns", "20001")
    for r in rows:
        assert r["options"]["POLL_IN_ASM"] and r["options"]["PACKED"], r["options"]
        assert r["registers"] <= r["options"]["maxnreg"], r
        assert r["spill_bytes"] == 0, (r["dtype"], r["n"], r["options"], r["spill_bytes"])


def test_rows_off_a_sector_take_their_rows_knobs_then_the_callers():
    # Every other row of bf16 33,000 or 52,008 starts 16 bytes off a 32-byte sector. At
    # 33,000 (and 22,520, as 32-byte windows: fewer parts) the PLAN_TABLE row reads them
    # with the aligned rows' launch, the exchange a row ahead in chunks of 2048, as 128-byte
    # windows of 16-byte vectors; at 52,008 as 128-byte windows of their own vectors in
    # chunks of 8192, not ahead. A
    # caller's knob still wins over them: unwindowed at 33,000 (16-byte windows), chunks of
    # 4096 at 52,008.
    own = _split_ptxas("--dtypes", "bfloat16", "--ns", "33000,22520,52008")
    (narrow,) = _split_ptxas("--dtypes", "bfloat16", "--ns", "33000",
                             "--tuning", '{"split_window_bytes": 16}')
    (mine,) = _split_ptxas("--dtypes", "bfloat16", "--ns", "52008",
                           "--tuning", '{"split_chunk": 4096}')
    assert [tuple(r["options"][k] for k in ("CHUNK", "AHEAD", "SHIFT", "LOOSE"))
            for r in (*own, narrow, mine)] == [
        (2048, True, 64, 8), (2048, True, 16, 8), (8192, False, 64, 0), (2048, True, 1, 0),
        (4096, False, 64, 0)]


# The split kernel's index helpers by name, for _split_cover's kernel: a compiled kernel calls
# a jitted function that is a global of its module, not a module's attribute.
split_where, split_loose, split_load_ok = sm._split_where, sm._split_loose, sm._split_load_ok


def _split_cover(n: int, itemsize: int, loose: int, rows: int, chunk: int = 256,
                 x_reach: int | None = None, window_bytes: int = 128):
    """Run the split kernel's index helpers (_split_where, _split_loose, _split_load_ok: where
    each program's part of each row lies, its loose elements, what it loads) for contiguous
    rows of ``n`` as 128-byte windows, one program per (row, part), as the launcher would cut
    them: (how often each element of x is written, the furthest column any part loads, how
    many columns parts write without having loaded them). ``x_reach``: the loads bounded by
    that much memory (REACH); ``window_bytes``: the windows' width (split_window_bytes), the
    parts covering the rows' span (_window_span). Runs where the split kernel cannot, under
    the interpreter."""
    import triton
    import triton.language as tl

    @triton.jit
    def cover_kernel(cols_ptr, loose_ptr, far_ptr, missed_ptr, n_cols, stride, chunk_cols,
                     x_reach, CHUNK: tl.constexpr, SHIFT: tl.constexpr, LOOSE: tl.constexpr,
                     ALIGN: tl.constexpr, REACH: tl.constexpr):
        row64 = tl.program_id(0).to(tl.int64)
        part = tl.program_id(1)
        pid = tl.program_id(0) * tl.num_programs(1) + part
        start = part * chunk_cols
        cols = tl.arange(0, CHUNK)
        EDGES: tl.constexpr = SHIFT > 1 and (LOOSE == 0 or ALIGN % LOOSE != 0)  # as the kernel
        SLOTS: tl.constexpr = ((2 * LOOSE if LOOSE > 0 else 2 * SHIFT) if EDGES else 2)
        x_base, _y, first, v_lo, v_hi, col_ok = split_where(
            row64, n_cols, stride, stride, chunk_cols, start, cols, SHIFT, None, LOOSE)
        ke, oke = split_loose(first, v_lo, v_hi, n_cols, part, SHIFT, None, LOOSE, EDGES)
        if REACH:
            load_ok = split_load_ok(cols, start, chunk_cols, n_cols, SHIFT, LOOSE,
                                    x_reach - x_base)
        else:
            load_ok = split_load_ok(cols, start, chunk_cols, n_cols, SHIFT, LOOSE)
        # the columns (from x's start) this part writes, -1 for none, and its loose ones
        tl.store(cols_ptr + pid * CHUNK + cols, tl.where(col_ok, x_base + start + cols, -1))
        tl.store(loose_ptr + pid * 2 * SHIFT + tl.arange(0, SLOTS), tl.where(oke, x_base + ke, -1))
        tl.store(far_ptr + pid, tl.max(tl.where(load_ok, x_base + start + cols, -1), axis=0))
        tl.store(missed_ptr + pid, tl.sum((col_ok & ~load_ok).to(tl.int32), axis=0))

    shift = window_bytes // itemsize
    align = sm._alignment(itemsize, n, n)
    span = sm._window_span(torch.empty(rows, n), shift)  # (its stride in elements is n)
    chunk_cols = sp.split_columns(span, -(-span // chunk), chunk, granule=shift)
    split = -(-span // chunk_cols)
    programs = rows * split
    cols = torch.full((programs * chunk,), -1, dtype=torch.int64, device=DEVICE)
    loose_cols = torch.full((programs * 2 * shift,), -1, dtype=torch.int64, device=DEVICE)
    far = torch.full((programs,), -1, dtype=torch.int64, device=DEVICE)
    missed = torch.zeros(programs, dtype=torch.int32, device=DEVICE)
    cover_kernel[(rows, split)](cols, loose_cols, far, missed, n, n, chunk_cols, x_reach or 0,
                                CHUNK=chunk, SHIFT=shift, LOOSE=loose, ALIGN=align,
                                REACH=x_reach is not None)
    written = torch.cat([cols, loose_cols]).cpu().numpy()
    cover = np.bincount(written[written >= 0], minlength=rows * n + 4 * shift)
    return cover, int(far.max().item()), int(missed.sum().item())


@pytest.mark.parametrize("window", [128, 32], ids=["w128", "w32"])
@pytest.mark.parametrize("bounded", [False, True], ids=["same_loads", "reach"])
@pytest.mark.parametrize("loose", [False, True], ids=["window_vectors", "loose_vectors"])
@pytest.mark.parametrize("n, itemsize", [(1001, 2), (777, 2), (1000, 2), (1001, 4), (998, 4)])
def test_split_parts_and_loose_elements_cover_every_row_once(n, itemsize, loose, bounded,
                                                             window):
    # Every element of every row is written exactly once by the parts of a split row read as
    # 128- or 32-byte windows (whole vectors by the part that holds them, loose ones by part
    # 0), and nothing outside the rows, with parts that cover only the rows' span
    # (_window_span: 1000 16-bit columns as 32-byte windows, 1008); every part loads what it
    # writes, and no part loads past the reach the launcher checks (_split_reach_fits), or
    # with REACH past x's end (x_reach: the rows' exact memory, whole vectors): odd rows at
    # every offset of their window and rows off a 32-byte sector, with whole vectors of the
    # window or of 16 bytes.
    shift, vector = window // itemsize, 16 // itemsize
    rows = shift + 3  # odd rows start at every offset of the window in turn
    x_reach = rows * n // vector * vector if bounded else None
    cover, far, missed = _split_cover(n, itemsize, vector if loose else 0, rows,
                                      x_reach=x_reach, window_bytes=window)
    assert (cover[: rows * n] == 1).all(), np.flatnonzero(cover[: rows * n] != 1)[:8]
    assert not cover[rows * n:].any(), np.flatnonzero(cover[rows * n:])[:8] + rows * n
    assert missed == 0
    last_window = (rows - 1) * n // shift * shift
    reach = (n + shift - 1) // (vector if loose else shift) * (vector if loose else shift)
    assert far < last_window + reach, (far, last_window + reach)
    if bounded:
        assert far < x_reach, (far, x_reach)
    elif window == 128:  # the same loads on every row: the last one's pass x's end here
        assert far >= rows * n, (far, rows * n)


@gpu
@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [9001, 12289, 20001, 50257])
def test_gpu_split_loose_vectors_at_every_window_offset(dtype, n):
    # Odd rows start at every offset of their 128-byte window in turn (a window of 64 bf16
    # elements: 64 rows cover them all), so every head and tail of loose elements, from none
    # to a vector's worth less one, and every part's bound is met; split either way.
    x = gaussian(70, n, scale=4.0, seed=n)
    x[::7, : n // 3] = NEG_INF  # -inf runs across the first parts' bounds
    x[5] = NEG_INF  # a fully masked row
    t = make(x, dtype)
    for knobs in (dict(split_loose_vectors=True), dict(split_loose_vectors=True, split_stages=1,
                                                        split_poll_asm=False)):
        for fm in ("zeros", "nan"):
            check(t, softmax(t, path="split", fully_masked=fm, tuning=knobs), fm)


@gpu
@requires_cuda
@pytest.mark.parametrize("dtype, n, rows, knobs", [
    # rows off a sector, the exchange a row ahead, as 128-byte windows (by default they take
    # 32-byte ones here, whose reach fits: test_gpu_rows_off_a_sector_as_narrower_windows)
    (torch.bfloat16, 22776, 32, dict(split_fewer_parts_window_bytes=0)),
    (torch.float16, 22776, 32, dict(split_fewer_parts_window_bytes=0)),
    (torch.float32, 50257, 128, dict(split_loose_vectors=True)),  # odd rows, one row a loop
], ids=["bf16", "fp16", "fp32"])
def test_gpu_split_windows_stop_where_xs_memory_ends(dtype, n, rows, knobs):
    # x ends with its last row on a 512-byte boundary, so the caching allocator gives it no
    # slack, and the parts' loads up to the furthest row's last whole vector would leave its
    # memory: the launch bounds them by it (REACH). The results are checked here; run under
    # compute-sanitizer with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (bench/gpu_run.sh sanitize),
    # where x is its own allocation, a load past x's end is an error.
    assert rows * n * torch.empty(0, dtype=dtype).element_size() % 512 == 0
    x = gaussian(rows, n, scale=4.0, seed=n)
    x[::5, : n // 2] = NEG_INF  # -inf runs across the parts' bounds
    x[-1, -3:] = 9.0  # the last row's largest elements at its very end
    t = make(x, dtype)
    assert t.data_ptr() % 128 == 0  # on a window (CUDA allocations are)
    assert sm._launch(t, torch.empty_like(t), "auto", None, None, knobs, False).options["REACH"]
    for fm in ("zeros", "nan"):
        check(t, softmax(t, fully_masked=fm, tuning=knobs), fm)


def _bf16_rows_owning(owned: int, rows: int, n: int) -> torch.Tensor:
    """Contiguous bf16 rows (rows, n) on the CPU that start on 128 bytes, in a storage of
    exactly ``owned`` elements (a view's storage is its whole buffer's), so _window_fits
    sees that size and no allocator's rounding: a numpy buffer's slice that starts on 128
    bytes, which torch.frombuffer wraps as a storage of exactly that slice."""
    buffer = np.empty(2 * owned + 128, dtype=np.uint8)
    skip = -buffer.ctypes.data % 128
    held = torch.frombuffer(memoryview(buffer[skip: skip + 2 * owned]), dtype=torch.bfloat16)
    assert held.data_ptr() % 128 == 0 and held.untyped_storage().nbytes() == 2 * owned
    return torch.as_strided(held, (rows, n), (n, 1))


def _split_launch(x: torch.Tensor, tuning: dict | None = None) -> tuple[int, int, int, bool]:
    """(CHUNK, SHIFT, LOOSE, REACH) of the split launch softmax(x) makes, planned as on a GPU
    of 132 SMs (monkeypatched by the caller), on CPU tensors."""
    launch = sm._launch(x, x, "auto", None, None, tuning, False)
    o = launch.options
    return o["CHUNK"], o["SHIFT"], o["LOOSE"], o["REACH"]


def test_split_windows_stop_at_xs_memory_where_the_last_rows_reach_leaves_it(monkeypatch):
    # split_loose_vectors: odd rows as 128-byte windows with whole vectors of 16 bytes, so
    # each part loads up to the furthest row's last whole vector (n + 63 columns rounded
    # down to 8 in bf16), which can pass the last row's end and x's memory with it. There
    # the launch keeps its windows and bounds its loads by the memory x owns (REACH);
    # elsewhere it loads the same columns on every row, as before. Planned as on a GPU of
    # 132 SMs, on CPU tensors (their storage's exact size counts: no allocator's rounding).
    monkeypatch.setattr(sm, "INTERPRETED", False)
    monkeypatch.setattr(sm, "_sm_count", lambda device: 132)
    n, rows = 12297, 4  # the last row starts at 36,891: 27 columns into its window
    last_window = (rows - 1) * n // 64 * 64
    reach = last_window + (n + 63) // 8 * 8  # 49,224 columns from x's start
    own = -(-rows * n // 64) * 64  # 49,216: the windows holding the last row
    assert own < reach
    knobs = dict(split_loose_vectors=True, split_chunk=4096)
    assert _split_launch(_bf16_rows_owning(reach, rows, n), knobs) == (4096, 64, 8, False)
    for owned in (reach - 1, own, rows * n):
        assert _split_launch(_bf16_rows_owning(owned, rows, n), knobs) == (4096, 64, 8, True)


def test_rows_off_a_sector_keep_their_windows_where_x_ends_with_them(monkeypatch):
    # bf16 33,016: every other row starts 16 bytes off a 32-byte sector, and the plan reads
    # such rows as 128-byte windows of 16-byte vectors (off_sector_overrides). Where the last
    # row's reach (its window's start + 33,072 columns) would leave x's memory, they stay
    # windows, with the loads bounded by x's memory (they used to be read unwindowed: bf16
    # 22,776 at 89% of copy on the H200 against 90-91% windowed), or, by default, take
    # 32-byte windows, as many parts (17), whose reach (33,024 columns) fits.
    monkeypatch.setattr(sm, "INTERPRETED", False)
    monkeypatch.setattr(sm, "_sm_count", lambda device: 132)
    n, rows = 33016, 8  # the last row starts 8 columns into its window and ends on one
    last_window = (rows - 1) * n // 64 * 64
    reach = last_window + (n + 63) // 8 * 8  # 264,176 columns from x's start
    assert reach > rows * n  # past the last row's windows, which end with x
    wide = dict(split_fewer_parts_window_bytes=0)
    assert _split_launch(_bf16_rows_owning(reach, rows, n)) == (2048, 64, 8, False)
    assert _split_launch(_bf16_rows_owning(reach - 1, rows, n), wide) == (2048, 64, 8, True)
    assert _split_launch(_bf16_rows_owning(reach - 1, rows, n)) == (2048, 16, 8, False)
    assert _split_launch(_bf16_rows_owning(rows * n, rows, n)) == (2048, 16, 8, False)
    # rows on a sector need no window, whatever x owns
    assert _split_launch(_bf16_rows_owning(4 * 33024, 4, 33024)) == (2048, 1, 0, False)


@pytest.mark.parametrize("n, planned", [
    (23560, ("split", 2048, 12, 64)), (24392, ("split", 2048, 12, 64)),
    (24568, ("split", 2048, 12, 16)), (24576, ("on_chip", 8192, 1, 1)),
    (23568, ("on_chip", 8192, 1, 1))])
def test_rows_off_a_sector_of_23k_to_24k_split_where_their_aligned_neighbours_stay_on_chip(
        monkeypatch, n, planned):
    # bf16 rows of 23,553-24,576 run on chip as 3 x 8192, but those off a 32-byte sector
    # (N an odd multiple of 8: 23,560, 24,392, 24,568) straddle sectors there (H200: 81-82%
    # of copy), so their PLAN_TABLE row's off_sector_overrides split them as 20,481-23,552
    # are: the exchange a row ahead in chunks of 2048, windows of 16-byte vectors (32-byte
    # windows where they take fewer parts: 24,568). Aligned rows, a caller's path="on_chip",
    # and the interpreter keep them on chip.
    monkeypatch.setattr(sm, "INTERPRETED", False)
    monkeypatch.setattr(sm, "_sm_count", lambda device: 132)
    x = _bf16_rows_owning(64 * n + 64, 64, n)
    launch = sm._launch(x, x, "auto", None, None, None, False)
    o = launch.options
    if planned[0] == "split":
        got = ("split", o["CHUNK"], o["SPLIT"], o["SHIFT"])
        assert o["AHEAD"] and o["LOOSE"] == 8 and o["num_warps"] == 2
    else:
        got = ("on_chip", o["BLOCK_N"], 1, o["SHIFT"])
    assert got == planned
    assert "BLOCK_N" in sm._launch(x, x, "on_chip", None, None, None, False).options
    monkeypatch.setattr(sm, "INTERPRETED", True)
    assert "BLOCK_N" in sm._launch(x, x, "auto", None, None, None, False).options


@pytest.mark.parametrize("dtype, n, parts, shift", [
    (torch.bfloat16, 20449, 5, 16), (torch.bfloat16, 20465, 5, 16), (torch.bfloat16, 20467, 5, 8),
    (torch.bfloat16, 20417, 5, 64), (torch.float32, 14321, 7, 8), (torch.float32, 14305, 7, 32)])
def test_odd_rows_just_below_a_part_split_as_32_byte_windows(monkeypatch, dtype, n, parts,
                                                              shift):
    # An odd row whose 128-byte windows span up to 63 (fp32: 31) more columns than the plan's
    # parts cover reads as 32-byte windows where those fit (split_narrow_window_bytes; H200,
    # bf16 20,449 90% of copy against 88% as 16-byte windows), else as 16-byte ones; a caller
    # who asks for 16-byte windows gets them.
    monkeypatch.setattr(sm, "INTERPRETED", False)
    monkeypatch.setattr(sm, "_sm_count", lambda device: 132)
    x = _rows_at(0, 64, n, dtype)
    o = sm._launch(x, x, "auto", None, None, None, False).options
    assert (o["SPLIT"], o["SHIFT"]) == (parts, shift)
    narrow = dict(split_window_bytes=16)
    assert sm._launch(x, x, "auto", None, None, narrow, False).options["SHIFT"] == 16 // (
        x.element_size())


def test_odd_rows_of_32k_to_35k_split_in_chunks_of_4096_in_two_warps(monkeypatch):
    # Windows (odd N) of 32,769-35,840: chunks of 4096 in 2 warps, ten per SM (H200, bf16
    # 33,748: 91.0% of copy against 87.1% in 4 warps eight per SM).
    monkeypatch.setattr(sm, "INTERPRETED", False)
    monkeypatch.setattr(sm, "_sm_count", lambda device: 132)
    for n in (32771, 33748, 35001):
        x = _bf16_rows_owning(64 * n + 64, 64, n)  # on 128 bytes: 128-byte windows
        o = sm._launch(x, x, "auto", None, None, None, False).options
        assert (o["CHUNK"], o["num_warps"], o["SHIFT"], o["AHEAD"]) == (4096, 2, 64, False), n


@pytest.mark.parametrize("n, slack, window, parts, wide_parts", [
    (22520, 64, 16, 11, 12), (32760, 64, 16, 16, 17), (22776, 64, 64, 12, 12),
    (33000, 64, 64, 17, 17), (22264, 64, 64, 11, 11), (22776, 0, 16, 12, 12),
    (22264, 0, 16, 11, 11)])
def test_rows_off_a_sector_take_narrower_windows_where_they_take_fewer_parts_or_spare_reach(
        monkeypatch, n, slack, window, parts, wide_parts):
    # bf16 rows of 22,520 (every other one 16 bytes off a sector) span 22,576 columns as
    # 128-byte windows, 12 parts of 2048, and 22,528 as 32-byte ones: 11 parts, so they are
    # taken (split_fewer_parts_window_bytes); 22,776 and 33,000 take as many parts either way
    # and keep 128 bytes, and 22,264 fits in 11 either way, where x owns 64 columns past its
    # last row. Where it owns none, the 128-byte windows' reach passes x's end (they would
    # need REACH) and the 32-byte ones' does not: those are taken. The parts cover the span,
    # and the caller's 0 keeps 128-byte windows.
    monkeypatch.setattr(sm, "INTERPRETED", False)
    monkeypatch.setattr(sm, "_sm_count", lambda device: 132)
    x = _bf16_rows_owning(64 * n + slack, 64, n)
    launch = sm._launch(x, x, "auto", None, None, None, False)
    assert (launch.options["SHIFT"], launch.options["SPLIT"]) == (window, parts)
    assert not launch.options["REACH"]
    assert parts * launch.columns >= n + window - math.gcd(n, window)
    wide = sm._launch(x, x, "auto", None, None, dict(split_fewer_parts_window_bytes=0), False)
    assert (wide.options["SHIFT"], wide.options["SPLIT"]) == (64, wide_parts)
    assert wide.options["REACH"] == (slack == 0)


def _rows_across_parts(rows: int, n: int, dtype) -> torch.Tensor:
    """rows x n that a split launch gets wrong at its parts' bounds: -inf over the first half
    of every fifth row (runs across the bounds), each row's largest element at its very end,
    and row 7 fully masked."""
    x = gaussian(rows, n, scale=4.0, seed=n)
    x[::5, : n // 2] = NEG_INF
    x[:, -1] = 9.0
    x[7] = NEG_INF
    return make(x, dtype)


@gpu
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("n", [22520, 32760, 22776])
def test_gpu_rows_off_a_sector_as_narrower_windows(dtype, n):
    # Rows 16 bytes off a sector every other row, as 32-byte windows: the parts cover only
    # the rows' span (n + 16 - 8 columns), so a part one column short would leave the end of
    # every other row unwritten. -inf runs across the parts' bounds, a fully masked row, and
    # each row's largest element at its very end; by default on an H200 (132 SMs) and forced.
    # (22,776: as many parts as 128-byte windows, taken since x ends with its last row, 64
    # rows on a 512-byte block, where the 128-byte windows' loads would pass it.)
    assert 64 * n * 2 % 512 == 0
    t = _rows_across_parts(64, n, dtype)
    if sm._sm_count(t.device) == 132:
        assert sm._launch(t, torch.empty_like(t), "auto", None, None, None, False).options[
            "SHIFT"] == 16
    for knobs in (None, dict(split_window_bytes=32, split_loose_vectors=True)):
        for fm in ("zeros", "nan"):
            check(t, softmax(t, fully_masked=fm, tuning=knobs), fm)


@gpu
@requires_cuda
@pytest.mark.parametrize("dtype, n, path", [
    *((d, n, path) for d in (torch.bfloat16, torch.float16) for n, path in (
        (41800, "split"), (44336, "split"), (33748, "split"), (23560, "split"),
        (24568, "split"), (23568, "on_chip"), (20449, "split"))),
    (torch.float32, 10039, "on_chip"), (torch.float32, 12251, "on_chip"),
    (torch.float32, 14321, "split")], ids=str)
def test_gpu_rows_of_10k_to_49k_take_their_launch(dtype, n, path):
    # Rows of 40,961-49,152 split, those off a sector of 23,553-24,576 too (their aligned
    # neighbours stay on chip), odd rows of 32,769-35,840 in chunks of 4096 in 2 warps, odd
    # rows whose 128-byte windows would take one more part as 32-byte windows (20,449; fp32
    # 14,321), fp32 odd rows of 9217-12,288 on chip as a block and a tail: -inf runs across
    # the parts' bounds, a fully masked row, each row's largest element at its very end.
    t = _rows_across_parts(40, n, dtype)
    launch = sm._launch(t, torch.empty_like(t), "auto", None, None, None, False)
    assert ("BLOCK_N" in launch.options) == (path == "on_chip")
    for fm in ("zeros", "nan"):
        check(t, softmax(t, fully_masked=fm), fm)


def test_the_tma_split_experiment_still_reads_its_parts_by_tma():
    # bench/softmax_tma.py keeps the split softmax whose parts go through TMA boxes (it lost
    # on the H200: 67-72% of copy against 90-92%) runnable: compiled for sm_90a, every
    # variant loads by TMA, the store variants also write by TMA, and none spills.
    rows = _offline_sm90("softmax_tma.py", "--offline")
    assert len(rows) == 8
    assert all(r["tma_loads"] > 0 and r["spill_bytes"] == 0 for r in rows), rows
    assert [r["variant"] for r in rows if r["tma_stores"]] == [
        "tma st3 store", "tma ahead st2 store", "tma ahead st3 store"]


def test_split_windows_bounded_by_xs_memory_compile_without_a_spill():
    # REACH (loads bounded by x's memory, where the last row's reach would pass it) is a
    # different kernel with one bound per row: no spill under the plan's register cap, with
    # the exchange a row ahead (bf16 22,776) and without (bf16 and fp32 50,257, fp32 100,001).
    bf16, fp32 = ("--dtypes", "bfloat16", "--ns", "22776,50257"), ("--dtypes", "float32",
                                                                  "--ns", "50257,100001")
    bounded = _split_ptxas(*bf16, "--reach") + _split_ptxas(*fp32, "--reach")
    plain = _split_ptxas(*bf16) + _split_ptxas(*fp32)
    assert [r["options"]["REACH"] for r in bounded] == [True, True, True, True]
    assert [r["options"]["REACH"] for r in plain] == [False] * 4
    assert all(r["spill_bytes"] == 0 for r in bounded), [r["spill_bytes"] for r in bounded]
    assert all(a["ptx_sha"] != b["ptx_sha"] for a, b in zip(bounded, plain))


def test_split_loose_vectors_compile_without_a_spill_and_leave_aligned_rows_alone():
    # With whole vectors of 16 bytes, odd rows' loose elements fit in 2 x 8 (16-bit) or 2 x 4
    # (fp32) slots: a different kernel (its PTX), with no spill under the plan's register
    # cap; aligned rows (no window) compile to the same code with the knob on.
    on, off = '{"split_loose_vectors": true}', '{"split_loose_vectors": false}'
    odd = _split_ptxas("--dtypes", "bfloat16,float32", "--ns", "12289,50257", "--tuning", on)
    plain = _split_ptxas("--dtypes", "bfloat16,float32", "--ns", "12289,50257", "--tuning", off)
    assert [r["options"]["LOOSE"] for r in odd] == [8, 8, 4, 4]
    assert [r["options"]["LOOSE"] for r in plain] == [0, 0, 0, 0]
    assert all(r["spill_bytes"] == 0 for r in odd), [r["spill_bytes"] for r in odd]
    assert all(a["ptx_sha"] != b["ptx_sha"] for a, b in zip(odd, plain))
    # rows off a sector (16-byte aligned) as 128-byte windows: whole vectors hold every row,
    # so no loose elements at all (EDGES off in the kernel)
    (off_sector,) = _split_ptxas("--dtypes", "bfloat16", "--ns", "52008", "--tuning", on)
    (off_sector_plain,) = _split_ptxas("--dtypes", "bfloat16", "--ns", "52008", "--tuning", off)
    assert off_sector["options"]["LOOSE"] == 8 and off_sector["spill_bytes"] == 0
    assert off_sector["ptx_sha"] != off_sector_plain["ptx_sha"]
    (aligned_on,) = _split_ptxas("--dtypes", "bfloat16", "--ns", "65536", "--tuning", on)
    (aligned,) = _split_ptxas("--dtypes", "bfloat16", "--ns", "65536", "--tuning", off)
    assert aligned_on["options"]["LOOSE"] == 0 and aligned_on["ptx_sha"] == aligned["ptx_sha"]


def test_bf16_windows_in_one_warp_fit_128_registers_without_a_spill():
    # Odd 16-bit rows of 2042-3065 run on chip as one window of 3 x 1024 in one warp: bf16
    # takes 163 registers there (triton 3.6; its conversions to fp32 keep the packed values
    # live), fp16 128, so an SM holds 12 bf16 warps and 16 fp16 ones (bf16 2047 at 90.5% of
    # copy, fp16 99.6%). The plan caps them at 128 (chip_maxnreg in the PLAN_TABLE row's
    # window_overrides: bf16 2047 at 96.9%); capped, they must not spill, or the cap trades
    # occupancy for local memory.
    rows = _split_ptxas("--dtypes", "bfloat16,float16", "--ns", "2047,3001")
    assert all(r["path"] == "on_chip" for r in rows)
    assert all(r["registers"] <= 128 and r["spill_bytes"] == 0 for r in rows), [
        (r["registers"], r["spill_bytes"]) for r in rows]


def test_16_bit_windows_of_3_chunks_fit_128_registers_without_a_spill():
    # Odd 16-bit rows of 8,234-12,281 run on chip as one window of 3 x 4096 in 4 warps: their
    # masks take 137-140 registers uncapped (triton 3.6), 3 programs per SM where the aligned
    # rows' 128 hold 4; the plan caps them at 128 (bf16 9,001 at 96.3% of copy against 89.2%
    # split). Capped, they must not spill; 12,289's window (3 x 4096 and a tail) would (64-76
    # bytes under triton 3.6), so it stays split.
    rows = _split_ptxas("--dtypes", "bfloat16,float16", "--ns", "8241,10001,12281,12289")
    assert [r["path"] for r in rows] == ["on_chip"] * 3 + ["split"] + ["on_chip"] * 3 + ["split"]
    capped = [r for r in rows if r["path"] == "on_chip"]
    assert all((r["options"]["CHUNKS"], r["options"]["maxnreg"]) == (3, 128) for r in capped)
    assert all(r["registers"] <= 128 and r["spill_bytes"] == 0 for r in capped), [
        (r["registers"], r["spill_bytes"]) for r in capped]


def test_the_longest_fp32_rows_spill_at_most_a_word_a_row_ahead():
    # fp32 rows of 512k-1M with the exchange a row ahead merge 128 or 256 lanes and spill a
    # word or two under triton 3.9; on the H200 (triton 3.6) they ran at 94% and 91% of copy
    # (82-86% without it). A larger spill there is a regression to look at.
    rows = _split_ptxas("--dtypes", "float32", "--ns", "524288,1048576")
    assert [(r["options"]["AHEAD"], r["options"]["LANES"]) for r in rows] == [
        (True, 128), (True, 256)]
    assert all(r["spill_bytes"] <= 8 for r in rows), [r["spill_bytes"] for r in rows]


def test_the_shipped_tails_load_whole_vectors_without_a_relayout():
    # A row's tail thinner than one 16-byte vector per thread is laid out again through
    # shared memory (8 KB for bf16 17,000 in 16 warps with a tail of 1024: 66% of copy on the
    # H200 against 90%); the plan widens it. Every shipped tail, compiled for sm_90a.
    rows = (_split_ptxas("--dtypes", "bfloat16,float16", "--ns", "17000,20480")
            + _split_ptxas("--dtypes", "float32", "--ns", "9000,17000,20480,33000"))
    for r in rows:
        o = r["options"]
        assert r["path"] == "on_chip" and o["TAIL"] >= 2048, (r["dtype"], r["n"], o)
        assert r["spill_bytes"] == 0 and r["shared"] <= 256, (r["dtype"], r["n"], r["shared"])


def test_the_spill_audit_sees_a_spill():
    # Eight programs per SM cap the pipelined kernel at 64 registers: it must spill.
    (r,) = _split_ptxas("--dtypes", "bfloat16", "--ns", "131072",
                        "--tuning", '{"split_programs_per_sm": 8}')
    assert r["options"]["maxnreg"] == 64 and r["spill_bytes"] > 0, r


def test_bf16_is_widened_on_its_bits_on_the_gpu():
    # bf16 is the top half of the fp32 of the same value: the kernels widen it by shifting
    # its bits (_widen: a shift and a mask per pair, in PTX), not by one conversion per
    # element, and fill the masked lanes after that (_load_part). Every bf16 launch shape
    # (split, on chip pipelined and not) shows the pairs and no per-element conversion of its
    # chunks; fp16 has none of it (its code is the plain conversion).
    rows = _split_ptxas("--dtypes", "bfloat16,float16", "--ns", "4096,12288,24000,65536")
    for r in rows:
        o, what = r["options"], (r["dtype"], r["n"], r["path"])
        if r["dtype"] == "float16":
            assert r["widened_pairs"] == 0, what
            continue
        # one pair per two of the elements a thread holds, at least (the chunks' elements)
        per_thread = (o["CHUNK"] if r["path"] == "split" else o["CHUNKS"] * o["BLOCK_N"]
                      * o.get("ROWS", 1)) // (32 * o["num_warps"])
        assert r["widened_pairs"] >= per_thread // 2 > 0, (what, r["widened_pairs"], per_thread)
        assert r["cvt_bf16"] == 0 and r["spill_bytes"] == 0, (what, r["cvt_bf16"])
    assert {(r["path"], r["options"].get("STAGES", 1) > 1) for r in rows} >= {
        ("split", True), ("on_chip", True), ("on_chip", False)}, [
        (r["n"], r["path"], r["options"].get("STAGES")) for r in rows]


widen = sm._widen  # a global, for the kernel below to call (as the split helpers above)


def _widen_all_bf16():
    """Every bf16 bit pattern widened by the kernels' _widen on the GPU: (x, fp32 bits)."""
    import triton
    import triton.language as tl

    @triton.jit
    def widen_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + i, widen(tl.load(x_ptr + i)))

    x = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device="cuda").to(torch.int16)
    y = torch.empty(x.numel(), dtype=torch.float32, device="cuda")
    widen_kernel[(x.numel() // 1024,)](x.view(torch.bfloat16), y, BLOCK=1024)
    return x, y.view(torch.int32)


@gpu
@requires_cuda
def test_gpu_bf16_widened_on_its_bits_exactly():
    # Every one of the 65,536 bf16 bit patterns (zeros, subnormals, infinities, NaN payloads):
    # widened in pairs by the PTX of _widen, each must be its bits shifted into an fp32's top
    # half, bit for bit, and the fp32 value torch gives it.
    x, bits = _widen_all_bf16()
    assert torch.equal(bits, x.to(torch.int32) << 16)
    finite = ~torch.isnan(x.view(torch.bfloat16))
    assert torch.equal(bits.view(torch.float32)[finite], x.view(torch.bfloat16).float()[finite])


@pytest.mark.parametrize("rounded", [False, True], ids=["exact", "512-byte blocks"])
def test_a_remembered_launch_is_the_one_planning_gives(monkeypatch, rounded):
    # softmax() plans a launch once per key (_launch) and reuses it: the key must hold all
    # that planning reads. Planned as on a GPU of 132 SMs, on CPU tensors of one shape that
    # differ only where they start (a row's window alignment) or in how much memory they own
    # past their start (whether a window's last vector fits): each remembered launch must be
    # the one a fresh plan gives.
    monkeypatch.setattr(sm, "INTERPRETED", False)
    monkeypatch.setattr(sm, "_sm_count", lambda device: 132)
    monkeypatch.setattr(sm, "_LAUNCHES", {})
    # as with PyTorch's CUDA caching allocator, whose blocks are whole 512 bytes, or exact
    monkeypatch.setattr(sm, "_caching_allocator", lambda device: rounded)
    pairs = []
    for n, rows in ((1001, 4), (12297, 4), (33016, 8)):
        for offset in (0, 1, 8, 64):  # elements past a 128-byte start
            for spare in (0, 100, 4096):  # memory owned past the last row
                buf = torch.empty(rows * n + offset + spare + 64, dtype=torch.bfloat16)
                start = -buf.data_ptr() % 128 // 2  # the first element on 128 bytes
                x = torch.as_strided(buf, (rows, n), (n, 1), start + offset)
                pairs.append((x, torch.empty(rows, n, dtype=torch.bfloat16)))
    for path in ("auto", "split"):
        for x, y in pairs:
            sm._launch(x, y, path, None, None, None, False)
        launches = [sm._launch(x, y, path, None, None, None, False) for x, y in pairs]
        assert launches == [sm._plan_launch(x, y, path, None, None, None, False)
                            for x, y in pairs]
    assert len({(launch.options.get("SHIFT"), launch.options.get("LOOSE"))
                for launch in launches}) > 1  # the tensors do plan differently


def test_softmax_plans_once_per_launch_key(monkeypatch):
    # A second launch on the same tensors reuses the plan; a new shape, a caller's tuning and
    # a replaced PLAN_TABLE each plan again; softmax() launches what _launch gives.
    planned = []
    plan_launch = sm._plan_launch

    def counting(*args):
        planned.append(args[0].shape)
        return plan_launch(*args)

    monkeypatch.setattr(sm, "_plan_launch", counting)
    monkeypatch.setattr(sm, "_LAUNCHES", {})
    x = make(gaussian(3, 200, seed=4), torch.float32)
    y = torch.empty_like(x)
    for _ in range(3):
        sm._launch(x, y, "auto", None, None, None, False)
    assert len(planned) == 1
    sm._launch(x[:, :150], y[:, :150], "auto", None, None, None, False)
    assert len(planned) == 2
    sm._launch(x, y, "auto", None, None, {}, False)
    sm._launch(x, y, "auto", None, None, {}, False)
    assert len(planned) == 4
    monkeypatch.setattr(sp, "PLAN_TABLE", list(sp.PLAN_TABLE))
    sm._launch(x, y, "auto", None, None, None, False)
    assert len(planned) == 5
    for _ in range(2):
        check(x, softmax(x))


def test_aligned_16_bit_rows_under_a_register_cap_compile_without_a_spill():
    # Aligned 16-bit rows of 1025-1280 (1024 + a tail of 256, two rows a program in 2 warps)
    # are capped at 56 registers: bf16 takes 60 uncapped (triton 3.6), 32 warps an SM (bf16
    # 1,104 at 88% of copy, capped 92%). Those of 12,289-16,384 (16,384 in 8 warps) at 80:
    # uncapped 128 (triton 3.6), two programs an SM (12,640 at 90%, capped 100%). Rows with a
    # tail of 512 (1,400) stay uncapped (73% capped against 99%), and so do the odd rows'
    # windows. Capped, none may spill, or the cap trades occupancy for local memory.
    rows = _split_ptxas("--dtypes", "bfloat16,float16", "--ns", "1104,1280,1400,1101,12296,16384")
    caps = [r["options"].get("maxnreg") for r in rows]
    assert caps == [56, 56, None, None, 80, 80] * 2, caps
    assert all(r["path"] == "on_chip" and r["spill_bytes"] == 0 for r in rows), [
        (r["path"], r["spill_bytes"]) for r in rows]
    assert all(r["registers"] <= (r["options"].get("maxnreg") or 255) for r in rows)


@gpu
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("n, cap", [(1064, 56), (1280, 56), (1400, None), (12296, 80),
                                    (12600, 80), (16384, 80)])
def test_gpu_aligned_16_bit_rows_under_a_register_cap(dtype, n, cap):
    # The capped on-chip launches (see the test above) on the GPU: -inf runs across the
    # block's and the tail's bounds, a fully masked row, each row's largest element at its end.
    t = _rows_across_parts(40, n, dtype)
    launch = sm._launch(t, torch.empty_like(t), "auto", None, None, None, False)
    assert launch.options.get("maxnreg") == cap
    for fm in ("zeros", "nan"):
        check(t, softmax(t, fully_masked=fm), fm)


def test_fp32_rows_under_a_register_cap_compile_without_a_spill():
    # fp32 windows of 6145-8192 (8192 in 16 warps) are capped at 40 registers: they take 56
    # uncapped (triton 3.6), two programs an SM (6,242 at 89.6% of copy, capped 97.9%).
    # Aligned rows of 18,433-24,576 (16,384 + a tail of 4096 or 8192, 16 warps) at 64: 79-90
    # uncapped, one program an SM (20,488 at 91.3%, capped 97.3%); off a sector too. Aligned
    # rows of 6145-8192 and of 16,385-18,432 keep theirs. Capped, none may spill more than one
    # register: none under triton 3.6 (the H200's, where the caps were timed), 4 bytes at 64
    # under 3.9.
    rows = _split_ptxas("--dtypes", "float32", "--ns", "6242,7001,8000,18000,20488,20484,24576")
    caps = [r["options"].get("maxnreg") for r in rows]
    assert caps == [40, 40, None, None, 64, 64, 64], caps
    assert all(r["path"] == "on_chip" and r["spill_bytes"] <= 4 for r in rows), [
        (r["path"], r["spill_bytes"]) for r in rows]
    assert all(r["spill_bytes"] == 0 for r in rows[:4]), [r["spill_bytes"] for r in rows]
    assert all(r["registers"] <= (r["options"].get("maxnreg") or 255) for r in rows)


@gpu
@requires_cuda
@pytest.mark.parametrize("n, cap", [(6242, 40), (7001, 40), (8000, None), (18000, None),
                                    (20488, 64), (20484, 64), (24576, 64)])
def test_gpu_fp32_rows_under_a_register_cap(n, cap):
    # The capped on-chip launches (see the test above) on the GPU: -inf runs across the
    # block's and the tail's bounds, a fully masked row, each row's largest element at its end.
    t = _rows_across_parts(40, n, torch.float32)
    launch = sm._launch(t, torch.empty_like(t), "auto", None, None, None, False)
    assert launch.options.get("maxnreg") == cap
    for fm in ("zeros", "nan"):
        check(t, softmax(t, fully_masked=fm), fm)


def test_bench_plan_map_counts_the_programs_registers_let_an_sm_hold():
    # ncu on the H200 (bench_softmax.md, thirty-first round): 2-warp programs at 60 registers,
    # 16 an SM (theoretical occupancy 50%); at 56, 18 (56.25%, 36 warps). 8-warp programs of
    # 16,384 columns at 128 registers: 2; at 80: 3 (25 warps' registers).
    plan_map = bench_module("plan_map")
    assert [plan_map.programs_per_sm(r, w) for r, w in ((60, 2), (56, 2), (128, 8), (80, 8))] \
        == [16, 18, 2, 3]
    assert plan_map.programs_per_sm(32, 1) == 32  # 64 warps' registers, but 32 programs
    # ... and the launches of the map, compiled offline: the shipped cap holds that count, and
    # the cap the map proposes would hold one more program at least (48: 21, the unit of a
    # warp's registers being 256).
    (row,) = _offline_sm90("plan_map.py", "--dtypes", "bfloat16", "--low", "1104", "--high",
                           "1104", "--kinds", "aligned", "--occupancy")
    assert row["first"] == 1104 and row["launch"].endswith("56 registers"), row
    assert row["registers"] <= 56 and row["programs"] == 18, row
    assert plan_map.programs_per_sm(row["cap"], 2) > 18, row
    assert plan_map.programs_per_sm(row["cap"] + 8, 2) == 18, row  # the largest such cap
