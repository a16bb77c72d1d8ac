"""Spans of a cold start, for measuring one (``bench/cold_profile.py``), off by default.

With ``LORE_TRACE_STARTUP`` naming a file, ``mark(label)`` appends one line to it: the
process id, the label, the monotonic clock and the process's CPU time. The forked query
worker marks into the same file, and ``time.perf_counter`` is the system-wide monotonic
clock on Linux, so the two sides of a cold ``lore search`` line up on one time axis: which
one the other waits for is what a cut must target.

Standard library only, and nothing but an environment lookup at import: ``lore.cli``
imports it first.
"""

from __future__ import annotations

import os
import time

#: The file the marks go to; unset (the default) makes ``mark`` a no-op.
SWITCH = "LORE_TRACE_STARTUP"
_PATH = os.environ.get(SWITCH) or None


def mark(label: str) -> None:
    if _PATH is None:
        return
    line = f"{os.getpid()}\t{label}\t{time.perf_counter():.6f}\t{time.process_time():.6f}\n"
    try:
        with open(_PATH, "a", encoding="utf-8") as trace:
            trace.write(line)
    except OSError:
        pass  # a measurement aid never fails the command it measures
