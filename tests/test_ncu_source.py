"""bench/ncu_source.py: ncu's per-instruction samples summed into cycles per part of a kernel."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import ncu_source  # noqa: E402

# The shape of ncu's source page (`--page source --csv --print-source sass`): a line naming
# the kernel, then a header and one row per instruction, numbers with thousands separators.
HEADER = ["Address", "Source", ncu_source.SAMPLES, "Warp Stall Sampling (Not-issued Samples)",
          ncu_source.EXECUTED, "stall_barrier", "stall_long_sb", "stall_wait",
          "stall_barrier (Not Issued)"]


def _row(address: int, sass: str, samples: int, executed: int, barrier: int = 0,
         long_sb: int = 0) -> list[str]:
    wait = samples - barrier - long_sb
    return [hex(0x7F00 + address), sass, f"{samples:,}", "0", f"{executed:,}", str(barrier),
            str(long_sb), str(wait), "0"]


def _write(path: Path, rows: list[list[str]]) -> Path:
    lines = [",".join(f'"{c}"' for c in r) for r in [["Kernel Name", "k"], HEADER, *rows]]
    text = "\n".join(lines) + "\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.fixture
def kernel_csv(tmp_path: Path) -> Path:
    # A loop entered 100 times whose body ran 400 times, and an epilogue run 100 times.
    return _write(tmp_path / "source.csv.gz", [
        _row(0x00, "MOV R1, R2", 2, 100),  # loop entry
        _row(0x10, "HGMMA", 30, 400, long_sb=10),
        _row(0x20, "MUFU.EX2 R3, R3", 10, 400),
        _row(0x30, "BAR.SYNC 0x1", 1_200, 100, barrier=1_100),  # the epilogue
        _row(0x40, "EXIT", 0, 0),
    ])


def test_a_region_costs_its_samples_times_the_interval_and_warps_per_execution(kernel_csv):
    rows = ncu_source.read_source(str(kernel_csv))
    assert [r.offset for r in rows] == [0x00, 0x10, 0x20, 0x30, 0x40]
    assert rows[3].samples == 1200 and rows[3].stalls["barrier"] == 1100
    loop = ncu_source.region(rows, 0x00, 0x30, interval=2048, warps=12)
    # the loop body's count (400, two instructions), not its entry's (100)
    assert loop["executions"] == 400 and loop["samples"] == 42
    assert loop["cycles"] == pytest.approx(42 * 2048 * 12 / 400)
    end = ncu_source.region(rows, 0x30, 0x50, interval=2048, warps=12)
    assert end["executions"] == 100 and end["cycles"] == pytest.approx(1200 * 2048 * 12 / 100)
    assert ncu_source.region(rows, 0x50, 0x60, interval=2048, warps=12)["cycles"] == 0
    # code run the same number of times sums up as one class, most samples first
    assert ncu_source.by_executions(rows)[:2] == [(100, 2, 1202.0), (400, 2, 40.0)]


def test_the_command_prints_its_tables_and_refuses_bad_input_in_one_line(kernel_csv, tmp_path,
                                                                         capsys):
    assert ncu_source.main([str(kernel_csv), "--warps", "12", "--regions", "0:30:loop"]) == 0
    out = capsys.readouterr().out
    assert "| loop | 00000-00030 | 3 | 42 | 400 | 2580 |" in out  # 42 x 2048 x 12 / 400
    assert "`BAR.SYNC 0x1` | barrier=1100 |" in out
    with pytest.raises(SystemExit):
        ncu_source.main([str(kernel_csv), "--regions", "0:30:loop"])
    assert "--regions needs --warps" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ncu_source.main([str(kernel_csv), "--warps", "12", "--regions", "0-30"])
    assert "give lo:hi:name" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="cannot read it"):
        ncu_source.read_source(str(tmp_path / "missing.csv"))
    plain = tmp_path / "plain.csv"
    plain.write_text('"Kernel Name","k"\n"Address","Source"\n')
    with pytest.raises(SystemExit, match="Warp Stall Sampling"):
        ncu_source.read_source(str(plain))
    plain.write_text("no header\n")
    with pytest.raises(SystemExit, match="no 'Address,Source' header"):
        ncu_source.read_source(str(plain))
