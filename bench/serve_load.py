"""Search latency under load: ``lore serve`` (POST /v1/search) and ``lore mcp --http``,
at 1, 8 and 32 concurrent clients, while a sync writes the same index.

    .venv/bin/python bench/serve_load.py [--local] [--requests 200] [--seconds 30] [--rounds 3]
                                          [--clients 1,8,32] [--no-shared] [--repeat]
                                          [--workdir DIR] [--sync-nice 19] [--targets serve,mcp]
                                          [--warm 0]
    .venv/bin/python bench/serve_load.py --quick    # the goal's check: --local --no-shared, 1 round
    .venv/bin/python bench/serve_load.py --peer ../base/src [--clients 1,8] ...  # against a commit

Loopback only, bounded in count (``--requests`` per level) and time (``--seconds`` per
level). The corpus is a scratch copy of examples/runbooks plus ../shared/corpora when it
is present; the index, tokens and audit log live in a temporary folder. During every level
a driver keeps a sync running: it edits one runbook of the scratch copy and syncs (through
``POST /v1/sync`` for lore serve, ``lore sync`` beside ``lore mcp --http``), so each sync
re-chunks, embeds and writes a document while the searches run. lore serve runs each sync
in a child process of niceness 19 (``lore.web.sync_process``); the ``lore sync`` beside
``lore mcp --http`` is started as docs/service.md tells a user to start one,
``nice -n 19 lore sync`` (``--sync-nice 0``: at normal priority, as runs before it were). The embedder is the
deterministic ``hashing`` one unless ``--local`` (the offline all-MiniLM-L6-v2; goal: p95 at
8 clients <= 100 ms). The table shows medians over ``--rounds`` rounds.

Every query text is new (a question and the request's number), so the servers' query
embedding cache never answers; ``--repeat`` cycles the questions instead, as agents repeat
them. Beside the latencies: the server process's own CPU time per request (from /proc, so
the figure means something on a shared machine; its threads only, so a sync running on a
thread inside it is included, a sync process is not), the syncs' CPU time per request
(the server's threads of lowered priority, its sync processes, and the ``lore sync`` runs
beside lore mcp --http, each once it has exited), this driver's own CPU time per request
(the load generator shares the machine's cores with the server), and the load average
over the level. lore mcp --http gets one search before its levels, since it opens the
query model at its first search, where lore serve does before ``/readyz`` answers.
``--warm N``: each server first answers N searches (one client, no sync, not measured), so
the first level no longer pays for filling the safety chain's per-passage caches (the
first hundred or so searches over the example corpus screen passages no cache holds yet;
the level after them finds every one cached). Without it the first level (1 client)
measures a server warming up and the later ones a warm server, and a ratio against
another commit mixes the two (bench/history/benchmarks.md, 2026-12-07, h/serve8).
Below the table, each level's first failed answer, if any.

``--peer SRC``: every round runs each target twice, once on another checkout's ``src``
folder (the commit before a change, "before") and once on this one ("after"), alternating
which goes first, each on a corpus copy and index of its own synced by its own code; a
second table gives after/before of the medians (p50, p95, server CPU per request).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import httpx2
from _console import bench_console
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_latency import QUESTIONS, percentile
from rich.console import Console
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_CORPORA = REPO_ROOT.parent / "shared" / "corpora"
LORE = Path(sys.executable).with_name("lore")
#: lore.web.sync_runner.SYNC_NICENESS, without importing the service into the driver.
SYNC_NICENESS = 10
#: How docs/service.md says to run a sync beside a serving process, as a user would:
#: ``nice -n 19 lore sync`` (lore serve runs its own syncs at that niceness); set from
#: ``--sync-nice`` (0: at normal priority, as the runs before lore serve's did).
BACKGROUND: tuple[str, ...] = ()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Level:
    target: str
    clients: int
    samples: list[float] = field(default_factory=list)
    errors: int = 0
    #: What the first failed request answered, shown below the table.
    first_error: str | None = None
    syncs: int = 0
    #: The server process's own CPU time over the level (its sync threads included when
    #: syncs run in-process).
    cpu_seconds: float = 0.0
    #: What the syncs used: the server's lowered-priority threads and its sync processes
    #: (lore serve), or the ``lore sync`` processes beside it (lore mcp --http).
    sync_cpu_seconds: float = 0.0
    #: This driver's own CPU time over the level (its HTTP or MCP clients): on a 2-core
    #: machine the load generator competes with the server it measures.
    client_cpu_seconds: float = 0.0
    load: float = 0.0

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_seconds / max(1, len(self.samples))

    @property
    def sync_cpu_ms_per_request(self) -> float:
        return 1000 * self.sync_cpu_seconds / max(1, len(self.samples))

    @property
    def client_cpu_ms_per_request(self) -> float:
        return 1000 * self.client_cpu_seconds / max(1, len(self.samples))


def _stat_fields(path: Path) -> list[str] | None:
    try:
        return path.read_text().rpartition(")")[2].split()
    except OSError:
        return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, its own threads and its running secret
    detector worker (``lore.safety.secret_detector``: part of every search's chain, in a
    process of its own) (Linux /proc; 0 elsewhere)."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    own = 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + secret_worker_cpu_seconds(pid)


def secret_worker_cpu_seconds(pid: int) -> float:
    """CPU time so far of ``pid``'s live children that run the secret detector's worker."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            fields = _stat_fields(Path(f"/proc/{child}/stat"))
            if b"secret_worker" in command and fields is not None:
                total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds(pid: int) -> float:
    """CPU time of the process's children that have exited and been waited for: lore
    serve's sync processes (``lore.web.sync_process``)."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    return 0.0 if fields is None else (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def own_children_cpu_seconds() -> float:
    """CPU time of this driver's exited children: the ``lore sync`` runs beside lore mcp."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def background_cpu_seconds(pid: int) -> float:
    """CPU time so far of the process's threads running at a lowered priority: lore
    serve's sync thread (``lore.web.sync_runner.SYNC_NICENESS``) and the helpers it has
    running. A helper that has exited is counted in the process's total only, so the
    figure is a lower bound of what the syncs cost."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        fields = _stat_fields(task / "stat")
        if fields is not None and int(fields[16]) >= SYNC_NICENESS:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


#: Whether each query text is a new one (set from --repeat).
DISTINCT = True
#: Searches each server answers before its first level (set from --warm).
WARM = 0


#: Numbers every distinct query of the run (levels and rounds included), so that no
#: level finds its texts in the server's cache from an earlier one.
_ISSUED = itertools.count()


def question(i: int) -> str:
    text = QUESTIONS[i % len(QUESTIONS)]
    return f"{text} (request {next(_ISSUED)})" if DISTINCT else text


def write_config(scratch: Path, shared: bool) -> Path:
    corpus = scratch / "runbooks"
    shutil.copytree(REPO_ROOT / "examples" / "runbooks", corpus)
    tables = [
        '[[sources]]\nname = "runbooks"\ntype = "filesystem"\npath = "runbooks"\nvisibility = "all-viewers"\n'
    ]
    if shared and SHARED_CORPORA.is_dir():
        for folder in sorted(path for path in SHARED_CORPORA.iterdir() if path.is_dir()):
            tables.append(
                f'[[sources]]\nname = "{folder.name}"\ntype = "filesystem"\npath = "{folder}"\n'
                'visibility = "all-viewers"\ninclude = ["**/*.md"]\n'
            )
    config = scratch / "lore.toml"
    config.write_text(
        'db_path = "lore.db"\naudit_path = "audit.jsonl"\n\n' + "\n".join(tables), encoding="utf-8"
    )
    return config


def lore(config: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [str(LORE), "--config", str(config), *args], capture_output=True, text=True, env=env, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"lore {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def start(args: list[str], env: dict[str, str], ready_url: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([str(LORE), *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{args} exited: {process.stderr.read().decode() if process.stderr else ''}")
        try:
            if httpx.get(ready_url, timeout=2).status_code in (200, 400, 401, 405, 406):
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{args} did not become ready")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=60)


def touch_runbook(scratch: Path, number: int) -> None:
    path = sorted((scratch / "runbooks").rglob("*.md"))[0]
    text = path.read_text(encoding="utf-8").split("\n<!-- load ")[0]
    path.write_text(f"{text}\n<!-- load {number} -->\n", encoding="utf-8")


async def run_level(
    level: Level,
    requests: int,
    seconds: float,
    call: Callable[[int, int], Awaitable[str | None]],
    drive_sync: Callable[[asyncio.Event], Awaitable[int]],
    pid: int,
) -> None:
    stop = asyncio.Event()
    deadline = time.monotonic() + seconds
    counter = iter(range(requests))

    async def client(number: int) -> None:
        for i in counter:
            if time.monotonic() > deadline:
                return
            started = time.perf_counter()
            problem = await call(number, i)
            level.samples.append((time.perf_counter() - started) * 1000)
            if problem is not None:
                level.errors += 1
                level.first_error = level.first_error or problem

    def sync_cpu() -> float:
        return background_cpu_seconds(pid) + children_cpu_seconds(pid) + own_children_cpu_seconds()

    syncing = asyncio.create_task(drive_sync(stop))
    cpu, background, own = cpu_seconds(pid), sync_cpu(), time.process_time()
    await asyncio.gather(*(client(n) for n in range(level.clients)))
    level.cpu_seconds = cpu_seconds(pid) - cpu
    level.client_cpu_seconds = time.process_time() - own
    stop.set()
    level.syncs = await syncing
    # After the sync under way has finished, so that its process has been waited for.
    level.sync_cpu_seconds = sync_cpu() - background
    level.load = os.getloadavg()[0]


async def serve_round(
    config: Path, scratch: Path, env: dict[str, str], clients: list[int], requests: int, seconds: float
) -> list[Level]:
    # A token per client, as each agent has its own: one token shared by 32 clients passes
    # the per-principal rate limit (docs/service.md) once the server answers fast enough.
    viewers = [
        lore(config, env, "token", "create", "--role", "viewer", "--name", f"load-v{n}-{time.time_ns()}")
        for n in range(max(clients))
    ]
    editor = lore(config, env, "token", "create", "--role", "editor", "--name", f"load-e-{time.time_ns()}")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start(["--config", str(config), "serve", "--port", str(port)], env, f"{url}/readyz")
    levels = []
    try:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with (
            httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http,
            httpx.AsyncClient(
                base_url=url, timeout=30, headers={"Authorization": f"Bearer {editor}"}
            ) as admin,
        ):

            async def call(number: int, i: int) -> str | None:
                response = await http.post(
                    "/v1/search",
                    json={"query": question(i), "top_k": 5},
                    headers={"Authorization": f"Bearer {viewers[number]}"},
                )
                if response.status_code == 200 and response.json()["error"] is None:
                    return None
                return f"HTTP {response.status_code}: {response.text[:300]}"

            async def drive_sync(stop: asyncio.Event) -> int:
                done = 0
                while not stop.is_set():
                    touch_runbook(scratch, done)
                    run_id = (await admin.post("/v1/sync", json={"source": "runbooks"})).json()["run_id"]
                    while not stop.is_set():
                        history = (await admin.get("/v1/sync")).json()["history"]
                        if any(run["run_id"] == run_id and run["finished_at"] for run in history):
                            done += 1
                            break
                        await asyncio.sleep(0.05)
                return done

            for i in range(WARM):
                problem = await call(0, i)
                if problem is not None:
                    raise SystemExit(f"a warm-up search failed: {problem}")
            for count in clients:
                level = Level("lore serve", count)
                await run_level(level, requests, seconds, call, drive_sync, process.pid)
                levels.append(level)
    finally:
        stop_process(process)
    return levels


async def mcp_round(
    config: Path, scratch: Path, env: dict[str, str], clients: list[int], requests: int, seconds: float
) -> list[Level]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    process = start(["--config", str(config), "mcp", "--http", "--port", str(port)], env, url)
    levels = []
    try:
        # lore mcp --http opens the query model at its first search (lore serve before
        # /readyz answers): one search first, so that no level measures the model's load.
        async with _McpPool(url, 1) as pool:
            for i in range(max(1, WARM)):
                await pool.clients[0].call_tool("knowledge_search", {"query": question(i), "top_k": 5})
        for count in clients:
            level = Level("lore mcp --http", count)
            async with _McpPool(url, count) as pool:

                async def call(number: int, i: int) -> str | None:
                    result = await pool.clients[number].call_tool(
                        "knowledge_search", {"query": question(i), "top_k": 5}
                    )
                    return str(result.content)[:300] if result.is_error else None

                async def drive_sync(stop: asyncio.Event) -> int:
                    done = 0
                    while not stop.is_set():
                        touch_runbook(scratch, done)
                        sync = await asyncio.create_subprocess_exec(
                            *BACKGROUND,
                            str(LORE),
                            "--config",
                            str(config),
                            "sync",
                            env=env,
                            stdout=asyncio.subprocess.DEVNULL,
                            stderr=asyncio.subprocess.DEVNULL,
                        )
                        await sync.wait()
                        done += 1
                    return done

                await run_level(level, requests, seconds, call, drive_sync, process.pid)
            levels.append(level)
    finally:
        stop_process(process)
    return levels


class _McpPool:
    """``count`` MCP sessions, one per simulated client."""

    def __init__(self, url: str, count: int) -> None:
        self.url = url
        self.count = count
        self.clients: list[Client] = []

    async def __aenter__(self) -> _McpPool:
        self._exit = AsyncExitStack()
        for _ in range(self.count):
            http = await self._exit.enter_async_context(httpx2.AsyncClient(timeout=30))
            client = await self._exit.enter_async_context(
                Client(streamable_http_client(self.url, http_client=http))
            )
            self.clients.append(client)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._exit.aclose()


def report_ratios(console: Console, rounds: list[list[Level]]) -> None:
    """After/before of the medians, for a ``--peer`` run (targets ``... [before]``/``[after]``)."""
    table = Table(title=f"after / before (medians of {len(rounds)} rounds; < 1 is faster after)")
    for column in ("target", "clients", "p50", "p95", "server CPU ms/req"):
        table.add_column(column, justify="left" if column == "target" else "right")

    def median_of(target: str, clients: int, figure: Callable[[Level], float]) -> float:
        return statistics.median(
            figure(level)
            for levels in rounds
            for level in levels
            if (level.target, level.clients) == (target, clients)
        )

    figures: tuple[Callable[[Level], float], ...] = (
        lambda level: percentile(level.samples, 0.50),
        lambda level: percentile(level.samples, 0.95),
        lambda level: level.cpu_ms_per_request,
    )
    for level in rounds[0]:
        if not level.target.endswith(" [after]"):
            continue
        name = level.target.removesuffix(" [after]")
        ratios = [
            median_of(level.target, level.clients, figure)
            / max(1e-9, median_of(f"{name} [before]", level.clients, figure))
            for figure in figures
        ]
        table.add_row(name, str(level.clients), *(f"{ratio:.2f}" for ratio in ratios))
    console.print(table)


def report(console: Console, rounds: list[list[Level]], embedder: str) -> None:
    table = Table(
        title=f"search under load while a sync runs (embedder: {embedder}; medians of {len(rounds)} rounds)"
    )
    columns = (
        "target", "clients", "requests", "errors", "p50 ms", "p95 ms", "server CPU ms/req",
        "sync CPU ms/req", "client CPU ms/req", "syncs", "load",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "target" else "right")
    for position, first in enumerate(rounds[0]):
        same = [levels[position] for levels in rounds]
        table.add_row(
            first.target,
            str(first.clients),
            str(int(statistics.median(len(level.samples) for level in same))),
            str(int(statistics.median(level.errors for level in same))),
            f"{statistics.median(percentile(level.samples, 0.50) for level in same):.1f}",
            f"{statistics.median(percentile(level.samples, 0.95) for level in same):.1f}",
            f"{statistics.median(level.cpu_ms_per_request for level in same):.1f}",
            f"{statistics.median(level.sync_cpu_ms_per_request for level in same):.1f}",
            f"{statistics.median(level.client_cpu_ms_per_request for level in same):.1f}",
            str(int(statistics.median(level.syncs for level in same))),
            f"{statistics.median(level.load for level in same):.1f}",
        )
    console.print(table)
    for levels in rounds:
        for level in levels:
            if level.first_error is not None:
                console.print(f"first error of {level.target} at {level.clients}: {level.first_error}")


async def main_async(options: argparse.Namespace) -> None:
    global DISTINCT, BACKGROUND, WARM
    DISTINCT = not options.repeat
    WARM = options.warm
    if options.sync_nice and shutil.which("nice"):
        BACKGROUND = ("nice", "-n", str(options.sync_nice))
    if options.quick:
        options.local, options.no_shared, options.rounds = True, True, 1
        options.requests, options.seconds = 100, 15.0
    console = bench_console()
    clients = [int(part) for part in options.clients.split(",")]
    with contextlib.ExitStack() as stack:
        if options.workdir is not None:
            scratch = options.workdir.resolve()
            scratch.mkdir(parents=True, exist_ok=True)
        else:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lore-serve-load-")))
        # (label, the corpus copy and index folder, the code's src folder or None: as installed)
        sides: list[tuple[str, Path, Path | None]] = [("", scratch, None)]
        if options.peer is not None:
            sides = [
                ("before", scratch / "before", options.peer.resolve()),
                ("after", scratch / "after", REPO_ROOT / "src"),
            ]
        for _, folder, _ in sides:
            folder.mkdir(parents=True, exist_ok=True)
            if not (
                folder / "lore.toml"
            ).exists():  # a --workdir of an earlier run keeps its corpus and index
                write_config(folder, shared=not options.no_shared)
        env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
        env["LORE_EMBEDDER"] = "local" if options.local else "hashing"
        # Each client is a closed loop with a token of its own, and one alone sends 100 or
        # more searches a second here, past the default 50 a second per token (docs/service.md):
        # the bench measures the searches, not the limiter (tests/test_web_api.py does).
        env["LORE_SERVE__RATE_LIMIT"] = "10000"
        env["LORE_SERVE__RATE_BURST"] = "10000"
        env["XDG_CACHE_HOME"] = os.environ.get("XDG_CACHE_HOME", str(scratch / "cache"))
        envs = []
        for _, folder, code in sides:
            side_env = dict(env)
            if code is not None:
                side_env["PYTHONPATH"] = str(code)
            envs.append(side_env)
            console.print(f"syncing the corpus into {folder} ...")
            lore(folder / "lore.toml", side_env, "sync")
        rounds: list[list[Level]] = []
        targets = {part.strip() for part in options.targets.split(",")}
        for number in range(options.rounds):
            levels = []
            order = list(zip(sides, envs, strict=True))
            for (label, folder, _), side_env in order if number % 2 == 0 else reversed(order):
                got = []
                side_config = folder / "lore.toml"
                if "serve" in targets:
                    got += await serve_round(
                        side_config, folder, side_env, clients, options.requests, options.seconds
                    )
                if "mcp" in targets:
                    got += await mcp_round(
                        side_config, folder, side_env, clients, options.requests, options.seconds
                    )
                for level in got:
                    level.target = f"{level.target} [{label}]" if label else level.target
                levels += got
            # The same row order in every round, whichever side ran first.
            levels.sort(key=lambda level: (level.target.endswith("[after]"), level.target, level.clients))
            rounds.append(levels)
        report(console, rounds, env["LORE_EMBEDDER"])
        if options.peer is not None:
            report_ratios(console, rounds)
        console.print(
            f"{'distinct' if DISTINCT else 'repeated'} queries; load average now "
            f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--local", action="store_true", help="the local model instead of the hashing embedder"
    )
    parser.add_argument("--requests", type=int, default=200, help="searches per level (default 200)")
    parser.add_argument("--seconds", type=float, default=30.0, help="time bound per level (default 30)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the table shows medians (default 3)")
    parser.add_argument("--clients", default="1,8,32", help="concurrency levels (default 1,8,32)")
    parser.add_argument(
        "--targets", default="serve,mcp", help="which servers: serve, mcp or both (default serve,mcp)"
    )
    parser.add_argument("--no-shared", action="store_true", help="the example corpus only")
    parser.add_argument(
        "--repeat", action="store_true", help="cycle the questions (the embedding cache answers)"
    )
    parser.add_argument(
        "--sync-nice",
        type=int,
        default=19,
        help="niceness of the lore sync runs beside lore mcp --http (default 19, as docs/service.md "
        "says to run them; 0: normal priority)",
    )
    parser.add_argument(
        "--warm",
        type=int,
        default=0,
        help="searches each server answers before its first level, not measured (default 0)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the corpus copy and index here (default: a temporary folder); a later run "
        "with the same folder skips the first sync of the corpus",
    )
    parser.add_argument(
        "--peer",
        type=Path,
        help="another checkout's src folder: each target runs on it (before) and on this checkout "
        "(after), alternating, with a table of after/before",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the goal's check in a few minutes: --local --no-shared --rounds 1 --requests 100 --seconds 15",
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
