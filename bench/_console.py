"""The benches' console: a terminal's own width, or wide enough for every table when the
output goes to a file or a pipe, where rich would cut a wide table to 80 columns and its
figures to "182…"."""

from __future__ import annotations

import sys

from rich.console import Console

#: Columns of a table printed to a file or a pipe.
PIPED_WIDTH = 240


def bench_console() -> Console:
    return Console() if sys.stdout.isatty() else Console(width=PIPED_WIDTH)
