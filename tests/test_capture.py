"""onlinesm.capture: fd-level capture of a kernel call's output.

Each test runs its scenario in a fresh Python process whose own stdout and stderr are pipes, so
"nothing reached the real stderr" is observable and pytest's capture (capfd) stays out of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from onlinesm.capture import CapturedOutput, captured_output

PRELUDE = """
import json, os, subprocess, sys
from onlinesm.capture import captured_output
"""


def child(code: str, timeout: float = 60) -> tuple[dict, str, str]:
    """Run code in a fresh interpreter; (the JSON it prints last, its stdout, its stderr)."""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result, proc.stdout, proc.stderr


def test_fd_writes_subprocesses_and_print_are_captured_and_kept_off_the_real_fds():
    result, out, err = child("""
        with captured_output() as cap:
            os.write(2, b"fd two\\n")
            os.write(1, b"fd one\\n")
            subprocess.run(["sh", "-c", "echo boom >&2; echo bang"], check=True)
            print("printed")
            print("to sys.stderr", file=sys.stderr)
        print(json.dumps({"text": cap.text, "lines": cap.nlines, "summary": cap.summary()}))
    """)
    assert err == ""
    assert out.strip().count("\n") == 0  # only the JSON line reached the real stdout
    assert result["text"] == "fd two\nfd one\nboom\nbang\nprinted\nto sys.stderr\n"
    assert result["lines"] == 6
    assert result["summary"] == "6 lines of output: 'fd two' (5 more lines)"


def test_fds_and_streams_are_restored_after_an_exception():
    result, out, err = child("""
        before = (os.fstat(1).st_ino, os.fstat(2).st_ino, sys.stdout, sys.stderr)
        try:
            with captured_output() as cap:
                os.write(2, b"about to fail\\n")
                raise RuntimeError("kernel crashed")
        except RuntimeError as e:
            caught = str(e)
        after = (os.fstat(1).st_ino, os.fstat(2).st_ino, sys.stdout, sys.stderr)
        os.write(2, b"after\\n")
        print(json.dumps({"same": before == after, "caught": caught, "text": cap.text}))
    """)
    assert result == {"same": True, "caught": "kernel crashed", "text": "about to fail\n"}
    assert err == "after\n"


def test_nested_captures():
    result, out, err = child("""
        with captured_output() as outer:
            os.write(2, b"outer 1\\n")
            with captured_output() as inner:
                os.write(2, b"inner\\n")
            os.write(2, b"outer 2\\n")
        print(json.dumps({"outer": outer.text, "inner": inner.text}))
    """)
    assert result == {"outer": "outer 1\nouter 2\n", "inner": "inner\n"}
    assert err == ""


def test_large_output_does_not_hang_is_bounded_in_text_and_whole_in_the_log(tmp_path):
    result, out, err = child(f"""
        with captured_output(keep=4096) as cap:
            subprocess.run(["sh", "-c", "yes 'ptxas error line' | head -n 200000 >&2"], check=True)
            os.write(2, b"last line\\n")
        path = cap.save({str(tmp_path)!r}, "my kernel/fwd")
        path2 = cap.save({str(tmp_path)!r}, "my kernel/fwd")
        print(json.dumps({{"n": cap.nbytes, "lines": cap.nlines, "len": len(cap.text),
                          "truncated": cap.truncated, "tail": cap.text[-10:],
                          "path": str(path), "path2": str(path2), "summary": cap.summary(log=path)}}))
    """)
    assert err == ""
    full = 200000 * len("ptxas error line\n") + len("last line\n")
    assert result["n"] == full and result["lines"] == 200001
    assert result["truncated"] and result["len"] < 9000
    assert result["tail"] == "last line\n"
    log = tmp_path / "my_kernel_fwd.log"
    assert result["path"] == str(log) and result["path2"] == str(tmp_path / "my_kernel_fwd-1.log")
    assert log.stat().st_size == full
    assert result["summary"] == (f"200,001 lines of output: 'ptxas error line' (200,000 more lines); "
                                 f"full log: {log}")


def test_c_stdio_buffers_are_flushed_into_the_capture():
    result, out, err = child("""
        import ctypes
        libc = ctypes.CDLL(None)
        with captured_output() as cap:
            libc.printf(b"from printf without a newline")
        print(json.dumps({"text": cap.text}))
    """)
    assert result["text"] == "from printf without a newline"


def test_empty_capture_and_bad_arguments():
    cap = CapturedOutput()
    assert cap.summary() == "" and cap.text == ""
    with pytest.raises(ValueError, match="save it before close"):
        cap.save("unused", "k")
    with pytest.raises(ValueError, match="positive number of bytes"):
        CapturedOutput(keep=0)


def test_in_process_capture_restores_pytest_streams():
    # capture inside pytest's own sys-level capture: the streams must come back untouched
    before = (sys.stdout, sys.stderr)
    with captured_output() as cap:
        print("inside")
    assert (sys.stdout, sys.stderr) == before
    assert cap.text == "inside\n"
