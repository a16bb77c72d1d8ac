"""Where a cold ``lore search`` spends its time, on both of its processes.

    .venv/bin/python bench/cold_profile.py [--runs 7] [--config lore.toml]

Runs N fresh ``lore search --mode hybrid`` processes (the default path: the query model in
the forked worker, ``lore.embedders.query_worker``) with ``LORE_TRACE_STARTUP`` set, so that
the parent and the worker mark their steps in one file (``lore.startup_trace``), and prints
each step's median time since spawn and the CPU seconds its process had spent by then. The
parent waits for the worker between "query embedding" and "query embedded": the side that
reaches that point last is the one whose cuts shorten the search. Without ``--config`` it
indexes examples/runbooks first, as ``bench/cold_start.py`` does.

CPU seconds are what the load of a shared machine inflates least; wall times there grow
with the load average, which the table's title gives.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from _console import bench_console
from cold_start import PATHS, QUESTIONS, child_env, sync, write_config
from rich.console import Console
from rich.table import Table

WORKER_PREFIX = "worker: "


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(config: Path, query: str, trace: Path) -> tuple[dict[str, tuple[float, float]], float, float]:
    """Each mark's (seconds since spawn, CPU seconds of its process), the wall time and the
    CPU seconds of the ``lore`` process (the worker is not its to reap: its own marks give
    its CPU)."""
    path = PATHS[0]
    env = child_env(path) | {"LORE_TRACE_STARTUP": str(trace)}
    command = [*path.prefix, "--config", str(config), "search", query, "--mode", "hybrid", "-k", "3"]
    trace.write_text("", encoding="utf-8")
    cpu = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"lore search failed: {done.stderr.strip()[-800:]}")
    marks: dict[str, tuple[float, float]] = {}
    for line in trace.read_text(encoding="utf-8").splitlines():
        _pid, label, clock, process_cpu = line.split("\t")
        # The first of a label (the worker encodes the warm-up text, then the query).
        marks.setdefault(label, (float(clock) - started, float(process_cpu)))
    return marks, wall, _children_cpu() - cpu


def measure(config: Path, runs: int) -> tuple[dict[str, list[tuple[float, float]]], list[float], list[float]]:
    marks: dict[str, list[tuple[float, float]]] = defaultdict(list)
    walls, cpus = [], []
    with tempfile.TemporaryDirectory(prefix="lore-trace-") as scratch:
        trace = Path(scratch) / "trace.tsv"
        for index in range(runs):
            run, wall, cpu = one_run(config, QUESTIONS[index % len(QUESTIONS)], trace)
            for label, value in run.items():
                marks[label].append(value)
            walls.append(wall)
            cpus.append(cpu)
    return marks, walls, cpus


def report(
    console: Console, marks: dict[str, list[tuple[float, float]]], walls: list[float], cpus: list[float]
) -> None:
    load = os.getloadavg()[0]
    table = Table(title=f"cold lore search, {len(walls)} runs, load average {load:.1f} (medians, ms)")
    for column in ("process", "step", "since spawn", "CPU of its process"):
        table.add_column(column, justify="left" if column in ("process", "step") else "right")
    ordered = sorted(marks.items(), key=lambda item: statistics.median(v[0] for v in item[1]))
    for label, values in ordered:
        side = "worker" if label.startswith(WORKER_PREFIX) else "parent"
        since = statistics.median(v[0] for v in values) * 1000
        cpu = statistics.median(v[1] for v in values) * 1000
        table.add_row(side, label.removeprefix(WORKER_PREFIX), f"{since:.0f}", f"{cpu:.0f}")
    table.add_row(
        "both",
        "exit (wall; CPU of the parent)",
        f"{statistics.median(walls) * 1000:.0f}",
        f"{statistics.median(cpus) * 1000:.0f}",
    )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7, help="fresh processes (default 7)")
    parser.add_argument("--config", type=Path, help="an indexed lore.toml (default: index examples/)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    console = bench_console()
    if not console.is_terminal:
        console.width = 120
    if args.config is not None:
        report(console, *measure(args.config.resolve(), args.runs))
        return 0
    with tempfile.TemporaryDirectory(prefix="lore-cold-") as scratch:
        config = write_config(Path(scratch))
        console.log("indexing examples/runbooks")
        sync(config)
        report(console, *measure(config, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
