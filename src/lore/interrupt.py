"""Blocking reads of the terminal or stdin that a Ctrl-C always ends.

The interpreter acts on a signal only between bytecodes: the C-level handler sets a flag,
and a blocking ``read()`` returns early (EINTR) only when the signal arrives while the
call is already waiting. A SIGINT that lands in the few instructions between the last
check and the start of the ``read()`` is noticed when the read returns, and at an idle
prompt or an idle stdio server that is never: the process hangs with the signal pending
(seen on a loaded CI machine, where being descheduled right there is common). The
interpreter's wake-up fd closes that window: its handler writes a byte to the fd, so a
``select()`` that waits on it as well returns at once, however close to the call the
signal came, and the pending ``KeyboardInterrupt`` is raised as soon as bytecode runs.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import sys
import threading
from collections.abc import Iterator
from typing import IO, BinaryIO

_READ_SIZE = 65536


def _signals_checked() -> None:
    """Entering a Python function checks for pending signals: one that arrived before the
    wake-up fd was set is raised here, before the wait, instead of after it."""


def wait_readable(fd: int) -> None:
    """Return once ``fd`` has input (or end of input); a signal whose handler raises
    (SIGINT's ``KeyboardInterrupt``) is raised instead, whenever it arrived."""
    if threading.current_thread() is not threading.main_thread():
        select.select([fd], [], [])  # only the main thread receives Python's signals
        return
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    previous = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    try:
        while True:
            _signals_checked()
            ready, _, _ = select.select([fd, wake_read], [], [])
            if fd in ready:
                return
            # A signal whose handler did not raise (SIGWINCH, a handler that sets a flag):
            # drain its byte and go on waiting.
            with contextlib.suppress(BlockingIOError):
                os.set_blocking(wake_read, False)
                os.read(wake_read, _READ_SIZE)
    finally:
        signal.set_wakeup_fd(previous)
        os.close(wake_read)
        os.close(wake_write)


def _fileno(stream: IO[bytes] | IO[str]) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        return None  # an in-memory stream never blocks


def lines(stream: BinaryIO) -> Iterator[bytes]:
    """The lines of ``stream`` (each with its ``\\n``, the last one perhaps without),
    read from its file descriptor so that waiting for the next one is interruptible.
    Nothing may have been read through ``stream``'s own buffer before."""
    fd = _fileno(stream)
    if fd is None:
        yield from iter(stream.readline, b"")
        return
    pending = b""
    while True:
        wait_readable(fd)
        data = os.read(fd, _READ_SIZE)
        if not data:
            break
        pending += data
        while (end := pending.find(b"\n")) >= 0:
            line, pending = pending[: end + 1], pending[end + 1 :]
            yield line
    if pending:
        yield pending


def read_line(prompt: str = "") -> str | None:
    """``input(prompt)`` on the process's own stdin, interruptible; None at end of input."""
    sys.stdout.write(prompt)
    sys.stdout.flush()
    fd = _fileno(sys.stdin)
    if fd is not None:
        wait_readable(fd)
    line = sys.stdin.readline()
    return line.rstrip("\n") if line else None
