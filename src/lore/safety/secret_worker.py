"""The process that holds Betterleaks' Go runtime, so that lore's own process never does.

Run by ``lore.safety.secret_detector`` as ``python -P <this file>``: it imports nothing
of lore (only the standard library and ``betterleaks``), loads the Go library, and
answers scans over its standard input and output until its input closes, which happens
when the lore process that started it exits, however it exits.

Frames, both ways: one byte of operation, four bytes of big-endian length, that many
bytes. Operations: ``s`` scan (UTF-8 text in; a JSON list of ``[rule_id, value]`` out),
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

import json
import os
import signal
import struct
import sys
import time
from typing import IO

HEADER = struct.Struct(">cI")


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


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    import betterleaks

    while (frame := read_frame(requests)) is not None:
        op, body = frame
        try:
            if op == b"c":
                write_frame(replies, b"c", repr(time.process_time()).encode())
                continue
            findings = betterleaks.scan_string(body.decode("utf-8"))
            found = [[f.rule_id, f.match.value or f.match.full] for f in findings]
            write_frame(replies, b"s", json.dumps(found).encode("utf-8"))
        except Exception as err:  # the client turns it into a LoreError
            write_frame(replies, b"e", f"{type(err).__name__}: {err}".encode())


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
