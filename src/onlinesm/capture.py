"""Capture what a kernel call writes to stdout and stderr, down to the file descriptors.

A kernel that fails to compile can print thousands of lines (a ``ptxas`` crash, a C extension's
diagnostics). Those tools write to file descriptors 1 and 2 directly, so
``contextlib.redirect_stderr`` sees nothing. :func:`captured_output` points fds 1 and 2 *and*
``sys.stdout`` / ``sys.stderr`` at one temporary file for the duration of the block, then
restores them (also on an exception). Afterwards the :class:`CapturedOutput` it yielded holds a
bounded ``.text`` (the first and last few KB), a one-line :meth:`~CapturedOutput.summary`, and
:meth:`~CapturedOutput.save` writes the full output to a log file.

A file, not a pipe: nothing has to read while the kernel writes, so megabytes of output cannot
deadlock the call. Captures nest (an inner block captures its own output and restores the
outer one's fds).

The fd redirection is process-wide: while a call is captured, whatever any other thread writes
to fd 1 or 2 (or to ``sys.stdout`` / ``sys.stderr``) lands in the capture too. onlinesm calls
one kernel at a time, so that is the kernel's own output. A call left running after the block
(a hung kernel abandoned on its helper thread) writes to the real fds again.

Example:
    >>> import os
    >>> from onlinesm.capture import captured_output
    >>> with captured_output() as out:
    ...     _ = os.write(2, b"ptxas fatal : Unresolved extern\\n")
    >>> out.summary()
    "1 line of output: 'ptxas fatal : Unresolved extern'"
    >>> out.save(".onlinesm/logs", "my_kernel")  # doctest: +SKIP
    PosixPath('.onlinesm/logs/my_kernel.log')
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import IO, Iterator

__all__ = ["CapturedOutput", "captured_output", "DEFAULT_LOG_DIR"]

#: Where :meth:`CapturedOutput.save` writes when given no directory.
DEFAULT_LOG_DIR = Path(".onlinesm") / "logs"
#: Bytes of the start and of the end of the output that ``.text`` keeps when it is longer.
DEFAULT_KEEP = 8192
_CHUNK = 1 << 20


class CapturedOutput:
    """What a :func:`captured_output` block wrote to fds 1 and 2 (interleaved, in order).

    ``text``: the output decoded as UTF-8 (invalid bytes replaced), whole when at most
    ``2 * keep`` bytes, else the first and last ``keep`` bytes around a line saying how many
    were left out. ``nbytes`` and ``nlines`` count the full output. Empty until the block exits.
    The full output stays in an anonymous temporary file until :meth:`close`.
    """

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self._file: IO[bytes] | None = None
        if keep < 1:
            raise ValueError(f"keep={keep!r} must be a positive number of bytes, e.g. 8192")
        self.keep = keep
        self.text = ""
        self.nbytes = 0
        self.nlines = 0

    @property
    def truncated(self) -> bool:
        """Whether ``text`` leaves out the middle of the output."""
        return self.nbytes > 2 * self.keep

    def first_line(self, limit: int = 200) -> str:
        """The first non-blank line, stripped and cut to ``limit`` characters ("" when none)."""
        for line in self.text.splitlines():
            if line.strip():
                line = line.strip()
                return line if len(line) <= limit else line[: limit - 3] + "..."
        return ""

    def summary(self, log: str | os.PathLike[str] | None = None) -> str:
        """One line for a failure message; "" when nothing was written.

        >>> out.summary(log=".onlinesm/logs/k.log")  # doctest: +SKIP
        "3,214 lines of output: 'ptxas fatal ...' (3,213 more lines); full log: .onlinesm/logs/k.log"
        """
        if self.nbytes == 0:
            return ""
        lines = max(self.nlines, 1)
        text = f"{lines:,} line{'s' if lines != 1 else ''} of output: {self.first_line()!r}"
        if lines > 1:
            text += f" ({lines - 1:,} more line{'s' if lines != 2 else ''})"
        if log is not None:
            text += f"; full log: {os.fspath(log)}"
        return text

    def save(self, directory: str | os.PathLike[str] | None = None, name: str = "kernel") -> Path:
        """Write the full output to ``directory/name.log`` and return the path.

        ``directory`` defaults to :data:`DEFAULT_LOG_DIR` (created if missing); ``name`` is made
        safe for a file name, and ``-1``, ``-2``, ... is appended rather than overwrite a log.
        """
        if self._file is None:
            raise ValueError("this capture was closed (or never ran); save it before close()")
        folder = Path(DEFAULT_LOG_DIR if directory is None else directory)
        folder.mkdir(parents=True, exist_ok=True)
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "kernel"
        path = folder / f"{stem}.log"
        n = 0
        while path.exists():
            n += 1
            path = folder / f"{stem}-{n}.log"
        self._file.seek(0)
        with open(path, "wb") as log:
            while chunk := self._file.read(_CHUNK):
                log.write(chunk)
        return path

    def close(self) -> None:
        """Drop the temporary file holding the full output (``text`` stays)."""
        if getattr(self, "_file", None) is not None:
            self._file.close()
            self._file = None

    def __del__(self) -> None:
        self.close()

    def _finish(self, file: IO[bytes]) -> None:
        """Read the counts and the bounded text from the finished temporary file."""
        self._file = file
        file.seek(0, os.SEEK_END)
        self.nbytes = file.tell()
        file.seek(0)
        newlines, last = 0, b""
        while chunk := file.read(_CHUNK):
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
        self.nlines = newlines + (1 if self.nbytes and last != b"\n" else 0)
        file.seek(0)
        if not self.truncated:
            data = file.read()
            self.text = data.decode("utf-8", errors="replace")
            return
        head = file.read(self.keep)
        file.seek(self.nbytes - self.keep)
        tail = file.read(self.keep)
        left_out = self.nbytes - 2 * self.keep
        self.text = (head.decode("utf-8", errors="replace")
                     + f"\n[... {left_out:,} bytes left out; save() writes the full output ...]\n"
                     + tail.decode("utf-8", errors="replace"))


def _flush_all() -> None:
    """Flush Python's and C's stdio buffers, so buffered output lands on the right side."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no libc symbols (e.g. some platforms)
        pass


@contextlib.contextmanager
def captured_output(keep: int = DEFAULT_KEEP) -> Iterator[CapturedOutput]:
    """Send fds 1 and 2 and ``sys.stdout`` / ``sys.stderr`` to a temporary file in the block.

    Yields a :class:`CapturedOutput`, filled in when the block exits (normally or not). The
    original fds and streams are restored even when the block raises; the exception propagates.

    >>> import subprocess
    >>> with captured_output() as out:
    ...     _ = subprocess.run(["sh", "-c", "echo boom >&2"])
    >>> out.text
    'boom\\n'
    """
    captured = CapturedOutput(keep)
    file = tempfile.TemporaryFile(mode="w+b", prefix="onlinesm-capture-")
    _flush_all()
    saved: dict[int, int] = {}
    old_streams = (sys.stdout, sys.stderr)
    stream = io.TextIOWrapper(open(file.fileno(), "wb", buffering=0, closefd=False), encoding="utf-8",
                              errors="backslashreplace", write_through=True)
    try:
        for fd in (1, 2):
            try:
                saved[fd] = os.dup(fd)
            except OSError:  # fd closed (a daemon): close it again afterwards
                saved[fd] = -1
            os.dup2(file.fileno(), fd)
        sys.stdout = sys.stderr = stream
        yield captured
    finally:
        try:
            _flush_all()
        finally:
            sys.stdout, sys.stderr = old_streams
            for fd, copy in saved.items():
                if copy < 0:
                    os.close(fd)
                else:
                    os.dup2(copy, fd)
                    os.close(copy)
            try:
                stream.detach()  # keeps the temporary file open
            except ValueError:
                pass
            captured._finish(file)
