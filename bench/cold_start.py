"""Cold start: a fresh ``lore search`` and a fresh ``lore mcp``, new query path against PyTorch.

    .venv/bin/python bench/cold_start.py [--runs 5] [--query "etcd has no leader"]
    .venv/bin/python bench/cold_start.py --peer ../base/src [--runs 9]

Indexes the example corpus (examples/runbooks) into a temporary directory with the local
model (which converts the model for OpenVINO and caches it there, as a first ``lore sync``
does), then times N fresh processes of each kind, round-robin so that the machine's load
falls on every path alike:

- ``lore search --mode hybrid``, end to end (spawn to exit), and
- ``lore mcp`` over stdio, from spawn through ``initialize`` to the first ``tools/call``
  result (the MCP SDK's stdio client, as an agent would start it),

each on four query paths: the default (no PyTorch: ``lore.embedders.local_query``, with
the query model loaded by a worker forked at start, ``lore.embedders.query_worker``), the
same with the model loaded by a thread of the process itself (``LORE_QUERY_WORKER=0``),
sentence-transformers with OpenVINO (what every query ran before that path existed, forced
here by switching the PyTorch-free path off inside the child process), and
``embedding_runtime = "torch"``. The table gives medians, minimums and maximums, and each
path's median against the default's. The targets are a cold search within 1.0 s and an MCP
first result within 1.5 s.

``--peer SRC``: this checkout against another checkout's ``src`` folder (a commit before a
change), on the default path alone, in one run alternating process by process, each with
an index synced by its own code; besides ``lore search`` and ``lore mcp``, ``lore --help``
and a bare ``import lore.cli`` (what every command pays before its own work), with each of
this checkout's medians against the peer's (the peer's rows come first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from _console import bench_console
from mcp import Client, StdioServerParameters
from rich.console import Console
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
QUESTIONS = ("etcd has no leader", "pod stuck in CrashLoopBackOff", "node NotReady", "certificate expiry")
TARGETS_S = {"search": 1.0, "mcp": 1.5}

#: Runs the real ``lore`` entry point, with the PyTorch-free query path switched off.
_WITHOUT_FAST_PATH = (
    "import sys; from lore.embedders.local import LocalEmbedder; "
    "LocalEmbedder._open_query_encoder = lambda self: None; "
    "from lore.cli import main; sys.argv[0] = 'lore'; main()"
)


@dataclass(frozen=True)
class QueryPath:
    name: str
    #: The interpreter arguments before lore's own (``-c`` script or the console script).
    prefix: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


LORE = str(Path(PYTHON).with_name("lore"))
#: The worker is forked for the default path only (``lore.embedders.query_worker``).
_NO_WORKER = ("LORE_QUERY_WORKER", "0")
PATHS = (
    QueryPath("default: no PyTorch, query model in a forked worker", (LORE,)),
    QueryPath("no PyTorch, query model in a thread", (LORE,), (_NO_WORKER,)),
    QueryPath("sentence-transformers + OpenVINO (before)", (PYTHON, "-c", _WITHOUT_FAST_PATH), (_NO_WORKER,)),
    QueryPath("embedding_runtime = torch", (LORE,), (("LORE_EMBEDDING_RUNTIME", "torch"), _NO_WORKER)),
)


def write_config(root: Path) -> Path:
    config = root / "lore.toml"
    config.write_text(
        f"""backend = "sqlite"
db_path = "lore.db"
embedder = "local"
cache_dir = "cache"
audit_path = "audit.jsonl"

[[sources]]
name = "runbooks"
type = "filesystem"
path = "{REPO_ROOT / "examples" / "runbooks"}"
visibility = "all-viewers"
""",
        encoding="utf-8",
    )
    return config


def child_env(path: QueryPath) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORE_")}
    # The checkout's own code, also where the venv has lore installed from elsewhere.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), env.get("PYTHONPATH")]))
    # An installed lore runs from bytecode; without it every child would compile lore's
    # modules from source again (about 0.15 s of a cold search), which no user pays.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(path.env)
    return env


@dataclass(frozen=True)
class Sample:
    wall_s: float
    #: CPU seconds of the lore process (user + system): what the load of a shared machine
    #: does not inflate, unlike the wall time.
    cpu_s: float


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(command: list[str], path: QueryPath, what: str, expect: str = "") -> Sample:
    cpu = _children_cpu()
    started = time.perf_counter()
    finished = subprocess.run(command, env=child_env(path), capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if finished.returncode != 0 or expect not in finished.stdout:
        raise SystemExit(f"{path.name}: {what} failed: {finished.stderr.strip()[-800:]}")
    return Sample(elapsed, _children_cpu() - cpu)


def time_help(path: QueryPath, config: Path, query: str) -> Sample:
    return _timed([*path.prefix, "--help"], path, "lore --help", "Usage")


def time_import(path: QueryPath, config: Path, query: str) -> Sample:
    return _timed([PYTHON, "-c", "import lore.cli"], path, "import lore.cli")


def time_search(path: QueryPath, config: Path, query: str) -> Sample:
    command = [*path.prefix, "--config", str(config), "search", query, "--mode", "hybrid", "-k", "3"]
    cpu = _children_cpu()
    started = time.perf_counter()
    finished = subprocess.run(command, env=child_env(path), capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if finished.returncode != 0 or "passages for" not in finished.stdout:
        raise SystemExit(f"{path.name}: lore search failed: {finished.stderr.strip()[-800:]}")
    return Sample(elapsed, _children_cpu() - cpu)


async def _first_result(path: QueryPath, config: Path, query: str) -> Sample:
    params = StdioServerParameters(
        command=path.prefix[0],
        args=[*path.prefix[1:], "--config", str(config), "mcp"],
        cwd=str(config.parent),
        env=child_env(path),
    )
    before = {child.pid for child in psutil.Process().children()}
    started = time.perf_counter()
    async with Client(params) as client:  # spawn, then initialize
        result = await client.call_tool("knowledge_search", {"query": query, "top_k": 3})
        elapsed = time.perf_counter() - started
        [server] = [child for child in psutil.Process().children() if child.pid not in before]
        times = server.cpu_times()
    if result.is_error:
        raise SystemExit(f"{path.name}: tool call failed: {result.content}")
    return Sample(elapsed, times.user + times.system)


def time_mcp(path: QueryPath, config: Path, query: str) -> Sample:
    return asyncio.run(_first_result(path, config, query))


def sync(config: Path, path: QueryPath = PATHS[0]) -> None:
    env = child_env(path)
    finished = subprocess.run(
        [str(Path(PYTHON).with_name("lore")), "--config", str(config), "sync"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if finished.returncode != 0:
        raise SystemExit(f"lore sync failed: {finished.stderr.strip()[-800:]}")


Timer = Callable[[QueryPath, Path, str], Sample]
#: What each round times per path: (kind, timer). ``--peer`` adds the two without a query.
KINDS: tuple[tuple[str, Timer], ...] = (("search", time_search), ("mcp", time_mcp))
PEER_KINDS: tuple[tuple[str, Timer], ...] = (("import", time_import), ("help", time_help), *KINDS)


def _code_of(path: QueryPath) -> str:
    return dict(path.env).get("PYTHONPATH", "")


def measure(
    runs: int, paths: tuple[QueryPath, ...] = PATHS, kinds: tuple[tuple[str, Timer], ...] = KINDS
) -> dict[tuple[str, str], list[Sample]]:
    """One sample per fresh process, keyed by (kind, path name); every path runs once per
    round. A path that names its own code (``PYTHONPATH``) gets an index synced by it."""
    samples: dict[tuple[str, str], list[Sample]] = {}
    with tempfile.TemporaryDirectory(prefix="lore-cold-") as scratch:
        configs: dict[str, Path] = {}
        for path in paths:
            code = _code_of(path)
            if code not in configs:
                folder = Path(scratch) / str(len(configs))
                folder.mkdir()
                configs[code] = write_config(folder)
                sync(configs[code], path)
        for round_ in range(runs):
            query = QUESTIONS[round_ % len(QUESTIONS)]
            # Alternate which path goes first, so neither always follows the other.
            ordered = paths if round_ % 2 == 0 else tuple(reversed(paths))
            for kind, timer in kinds:
                for path in ordered:
                    sample = timer(path, configs[_code_of(path)], query)
                    samples.setdefault((kind, path.name), []).append(sample)
    return samples


def report(console: Console, samples: dict[tuple[str, str], list[Sample]], runs: int) -> None:
    load = os.getloadavg()[0]
    table = Table(title=f"cold start, {runs} fresh processes per row, load average {load:.1f} at the end (s)")
    columns = ("what", "query path", "median", "min", "max", "vs 1st row", "CPU", "vs 1st row", "target")
    for column in columns:
        table.add_column(column, justify="left" if column in ("what", "query path") else "right")
    labels = (
        ("import", "import lore.cli"),
        ("help", "lore --help"),
        ("search", "lore search (hybrid)"),
        ("mcp", "lore mcp to 1st result"),
    )
    for kind, label in labels:
        rows = [(name, times) for (k, name), times in samples.items() if k == kind]
        if not rows:
            continue
        base = statistics.median(sample.wall_s for sample in rows[0][1])
        base_cpu = statistics.median(sample.cpu_s for sample in rows[0][1])
        for name, times in rows:
            wall = [sample.wall_s for sample in times]
            median, cpu = statistics.median(wall), statistics.median(sample.cpu_s for sample in times)
            target = ""
            if name == rows[0][0] and kind in TARGETS_S:
                target = f"≤ {TARGETS_S[kind]:.1f} {'pass' if median <= TARGETS_S[kind] else 'MISS'}"
            figures = (f"{median:.2f}", f"{min(wall):.2f}", f"{max(wall):.2f}", f"{median / base:.2f}x")
            table.add_row(label, name, *figures, f"{cpu:.2f}", f"{cpu / base_cpu:.2f}x", target)
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per path and kind (default 5)")
    parser.add_argument(
        "--default-only",
        action="store_true",
        help="time the two PyTorch-free query paths alone (worker and thread, side by side)",
    )
    parser.add_argument(
        "--peer",
        type=Path,
        help="another checkout's src folder: the default path of this checkout against it, alternating",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    console = bench_console()
    if not console.is_terminal:
        console.width = 140
    paths = PATHS[:2] if args.default_only else PATHS
    kinds = KINDS
    if args.peer is not None:
        peer = args.peer.resolve()
        if not (peer / "lore" / "__init__.py").is_file():
            parser.error(f"--peer {peer}: no lore package there")
        # The peer first: each row of this checkout reads against it ("vs 1st row").
        here = REPO_ROOT / "src"
        paths = (
            QueryPath(f"peer {peer}", (LORE,), (("PYTHONPATH", str(peer)),)),
            QueryPath(f"this checkout {here}", (LORE,), (("PYTHONPATH", str(here)),)),
        )
        kinds = PEER_KINDS
    processes = len(paths) * len(kinds)
    console.log(f"indexing examples/runbooks, then {args.runs} rounds of {processes} fresh processes")
    samples = measure(args.runs, paths, kinds)
    report(console, samples, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
