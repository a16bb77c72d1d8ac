"""Three ``lore serve`` replicas over one real PostgreSQL + pgvector index, behind Debian's
nginx in round-robin, under load from several clients (searches, MCP calls of the
handshake revision and of the stateless one, page sessions writing notes, syncs queued
through the API); the replica holding the scheduler's lease is killed (SIGKILL) mid-run.

Asserted: no request is lost beyond those in flight on the killed replica (each client
has at most one in flight, and retries a 502 or a broken connection); page sessions and
MCP calls go on through the others (a session signed in on one replica is honoured by
every one, and ends on every one when its token is revoked); at every sample at most one
replica believes it holds the lease, and another takes it over within a bound; the index
converges (every note written is in it exactly once). ``lore serve --workers`` over
SQLite is refused with one line, over pgvector it serves.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest

from optional_extras import in_ci, require_extra

require_extra("fastapi", "serve")
require_extra("mcp", "serve")

import httpx  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from lore.backends.pgvector.replicas import PgReplicas  # noqa: E402

from .replica_harness import (  # noqa: E402
    LORE,
    Proxy,
    Replica,
    kill,
    lore,
    nginx_available,
    start_proxy,
    start_replica,
    stop,
    stop_proxy,
    wait_ready,
    write_project,
)

#: Seconds of load, and when (into it) the lease's holder is killed.
LOAD_S = 16.0
KILL_AT_S = 6.0
#: How long another replica may take to hold the lease after its holder is killed: the
#: database ends the dead session at once (its socket closed), and the others try every
#: ``LEASE_TICK_S``; generous for a loaded 2-core machine.
TAKEOVER_BOUND_S = 15.0
RETRIES = 8


@pytest.fixture(scope="module")
def nginx() -> None:
    reason = nginx_available()
    if reason is not None:
        if in_ci():
            pytest.fail(f"CI=true and {reason}; a skip would hide it", pytrace=False)
        pytest.skip(reason)


@dataclass
class Tally:
    """What the clients saw: completed operations and first attempts lost."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    done: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def ok(self, kind: str) -> None:
        with self.lock:
            self.done[kind] = self.done.get(kind, 0) + 1

    def lose(self, what: str) -> None:
        with self.lock:
            self.lost.append(what)

    def fail(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)


def retried(tally: Tally, what: str, send: Callable[[], httpx.Response]) -> httpx.Response:
    """``send``, again after a broken connection or a 502/503/504 (a request in flight on
    the killed replica); each such attempt is counted as lost."""
    for _ in range(RETRIES):
        try:
            response = send()
        except httpx.TransportError as err:
            tally.lose(f"{what}: {type(err).__name__}")
        else:
            if response.status_code not in (502, 503, 504):
                return response
            tally.lose(f"{what}: {response.status_code}")
        time.sleep(0.3)
    raise AssertionError(f"{what}: no answer after {RETRIES} attempts")


def search_client(proxy: Proxy, token: str, stop_at: float, tally: Tally) -> None:
    with httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        while time.monotonic() < stop_at:
            found = retried(
                tally, "search", lambda: http.post("/v1/search", json={"query": "etcd leader", "top_k": 3})
            )
            if found.status_code != 200 or not found.json()["passages"]:
                tally.fail(f"search: {found.status_code} {found.text[:200]}")
            tally.ok("search")


def mcp_client(proxy: Proxy, token: str, mode: str, stop_at: float, tally: Tally) -> None:
    """MCP calls through the proxy: each POST may land on any replica (no sticky
    sessions). A call broken by the kill is retried on a new connection."""

    async def run() -> None:
        while time.monotonic() < stop_at:
            try:
                async with (
                    httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
                    Client(streamable_http_client(f"{proxy.url}/mcp", http_client=http), mode=mode) as client,
                ):
                    while time.monotonic() < stop_at:
                        result = await client.call_tool(
                            "knowledge_search", {"query": "disk full", "top_k": 2}
                        )
                        if result.is_error or not (result.structured_content or {}).get("passages"):
                            tally.fail(f"mcp {mode}: {result.content}")
                        tally.ok(f"mcp-{mode}")
            except Exception as err:  # the SDK's error for a broken call: retried
                tally.lose(f"mcp {mode}: {type(err).__name__}: {err}"[:300])
                await asyncio.sleep(0.3)

    asyncio.run(run())


def page_client(
    proxy: Proxy,
    token: str,
    number: int,
    stop_at: float,
    tally: Tally,
    written: list[str],
    cookies: list[httpx.Cookies],
) -> None:
    """Signs in once (on whichever replica), then writes notes on that one session while
    its requests go round the replicas; now and then queues a sync."""
    with httpx.Client(base_url=proxy.url, timeout=150) as http:
        signed = retried(tally, "sign-in", lambda: http.post("/v1/session", json={"token": token}))
        assert signed.status_code == 200, signed.text
        headers = {"X-CSRF-Token": signed.json()["csrf_token"]}
        cookies.append(http.cookies)
        i = 0
        while time.monotonic() < stop_at:
            uri = f"note://notes/replica-{number}-{i}"
            body = {
                "title": f"Replica {number} note {i}",
                "markdown": f"zorblat{number}x{i} written through nginx",
            }
            # PUT is idempotent: a retry of a write whose answer was lost writes the same note.
            put = retried(
                tally,
                "note",
                lambda uri=uri, body=body: http.put(
                    f"/v1/documents/{quote(uri, safe='')}", json=body, headers=headers
                ),
            )
            if put.status_code != 200:
                tally.fail(f"note {uri}: {put.status_code} {put.text[:200]}")
            else:
                written.append(uri)
                tally.ok("note")
            who = retried(tally, "whoami", lambda: http.get("/v1/session"))
            if who.status_code != 200 or who.json()["name"] != "eddie":
                tally.fail(f"session: {who.status_code} {who.text[:200]}")
            if i % 8 == 3:
                queued = retried(
                    tally, "sync", lambda: http.post("/v1/sync", json={"source": "runbooks"}, headers=headers)
                )
                if queued.status_code != 202:
                    tally.fail(f"sync: {queued.status_code} {queued.text[:200]}")
            i += 1


@dataclass
class Watch:
    """Samples of which live replicas believe they hold the scheduler's lease."""

    samples: list[tuple[float, list[int], str | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def watch_lease(replicas: list[Replica], token: str, watch: Watch) -> None:
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
        while not watch.stop.is_set():
            leading: list[int] = []
            holder: str | None = None
            at = time.monotonic()  # the round's start: an answer may precede a kill it follows
            for number, replica in enumerate(replicas):
                if not replica.alive():
                    continue
                try:
                    status = http.get(f"{replica.url}/v1/sync").json()["scheduler"]
                except (httpx.TransportError, ValueError, KeyError):
                    continue
                holder = status["holder"] or holder
                if status["leading"]:
                    leading.append(number)
            watch.samples.append((at, leading, holder))
            watch.stop.wait(0.25)


def holder_of(replicas: list[Replica], token: str) -> int | None:
    for number, replica in enumerate(replicas):
        if replica.alive():
            status = httpx.get(
                f"{replica.url}/v1/sync", headers={"Authorization": f"Bearer {token}"}, timeout=10
            )
            if status.json()["scheduler"]["leading"]:
                return number
    return None


def wait_idle(url: str, token: str, deadline_s: float = 180) -> None:
    deadline = time.monotonic() + deadline_s
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        while True:
            history = http.get("/v1/sync").json()["history"]
            if not any(run["status"] in ("queued", "running") for run in history):
                return
            assert time.monotonic() < deadline, f"syncs still queued or running: {history[:3]}"
            time.sleep(0.3)


@pytest.fixture
def served(
    pg_dsn: str, tmp_path: Path, nginx: None
) -> Iterator[tuple[Path, str, list[Replica], Proxy, dict[str, str]]]:
    index = f"rep_{uuid.uuid4().hex[:10]}"
    config = write_project(tmp_path, pg_dsn, index)
    tokens = {
        name: lore(config, "token", "create", "--role", role, "--name", name)
        for name, role in (("vera", "viewer"), ("eddie", "editor"), ("watcher", "viewer"))
    }
    lore(config, "sync")
    replicas = [start_replica(config, number) for number in range(3)]
    proxy: Proxy | None = None
    try:
        wait_ready(replicas)
        proxy = start_proxy(tmp_path / "nginx", [replica.port for replica in replicas])
        yield config, index, replicas, proxy, tokens
    finally:
        if proxy is not None:
            stop_proxy(proxy)
        for replica in replicas:
            stop(replica)


def test_three_replicas_behind_nginx_lose_one_and_go_on(
    served: tuple[Path, str, list[Replica], Proxy, dict[str, str]], pg_dsn: str
) -> None:
    import psycopg

    config, index, replicas, proxy, tokens = served
    # One replica takes the lease (the others keep trying); which one is the database's call.
    deadline = time.monotonic() + TAKEOVER_BOUND_S
    while (first := holder_of(replicas, tokens["watcher"])) is None:
        assert time.monotonic() < deadline, "no replica took the scheduler's lease"
        time.sleep(0.2)

    tally = Tally()
    watch = Watch()
    written: list[str] = []
    cookies: list[httpx.Cookies] = []
    stop_at = time.monotonic() + LOAD_S
    clients = [
        threading.Thread(target=search_client, args=(proxy, tokens["vera"], stop_at, tally)),
        threading.Thread(target=search_client, args=(proxy, tokens["vera"], stop_at, tally)),
        threading.Thread(target=mcp_client, args=(proxy, tokens["vera"], "legacy", stop_at, tally)),
        threading.Thread(target=mcp_client, args=(proxy, tokens["vera"], "auto", stop_at, tally)),
        threading.Thread(
            target=page_client, args=(proxy, tokens["eddie"], 0, stop_at, tally, written, cookies)
        ),
        threading.Thread(
            target=page_client, args=(proxy, tokens["eddie"], 1, stop_at, tally, written, cookies)
        ),
    ]
    watcher = threading.Thread(target=watch_lease, args=(replicas, tokens["watcher"], watch))
    watcher.start()
    for client in clients:
        client.start()
    time.sleep(KILL_AT_S)
    killed_at = time.monotonic()
    kill(replicas[first])
    for client in clients:
        client.join(timeout=LOAD_S + 200)
        assert not client.is_alive(), "a client did not finish"
    time.sleep(1.0)
    watch.stop.set()
    watcher.join()

    # No request lost beyond the ones in flight on the killed replica: each client has at
    # most one in flight, and every operation was answered in the end.
    assert not tally.errors, tally.errors[:5]
    assert len(tally.lost) <= len(clients), tally.lost
    for kind in ("search", "mcp-legacy", "mcp-auto", "note"):
        assert tally.done.get(kind, 0) >= 3, tally.done
    # Exactly one holder at any time, and another one soon after the holder died.
    assert all(len(leading) <= 1 for _, leading, _ in watch.samples), watch.samples
    after = [(at, leading) for at, leading, _ in watch.samples if at > killed_at and leading]
    assert after, "no replica took the lease over"
    assert after[0][0] - killed_at < TAKEOVER_BOUND_S
    assert all(leading[0] != first for _, leading in after)
    survivors = [replica for number, replica in enumerate(replicas) if number != first]

    # Sessions live in the database: the one signed in through the proxy is honoured by
    # each surviving replica asked directly, and ends on all of them with its token.
    for replica in survivors:
        who = httpx.get(f"{replica.url}/v1/session", cookies=cookies[0], timeout=10)
        assert who.status_code == 200, who.text
        assert who.json()["name"] == "eddie"
    lore(config, "token", "revoke", "eddie")
    for replica in survivors:
        assert httpx.get(f"{replica.url}/v1/session", cookies=cookies[0], timeout=10).status_code == 401

    # The index converges: once the queue is empty and one more sync has run, every note
    # written is in the index exactly once, whole (its chunks all there, none twice).
    wait_idle(proxy.url, tokens["watcher"])
    notes = sorted(set(written))
    assert notes
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT d.uri, d.chunk_count, count(c.*) FROM {index}_documents d "
            f"LEFT JOIN {index}_chunks c ON c.uri = d.uri WHERE d.uri LIKE 'note://notes/%' "
            "GROUP BY d.uri, d.chunk_count"
        ).fetchall()
        queue = conn.execute(f"SELECT count(*) FROM {index}_sync_queue").fetchone()
    indexed = {str(uri): (int(expected), int(found)) for uri, expected, found in rows}
    assert sorted(indexed) == notes
    assert all(expected == found >= 1 for expected, found in indexed.values()), indexed
    assert queue is not None
    assert queue[0] == 0
    files = sorted((config.parent / "lore.db.data" / "manual" / "notes").glob("*.md"))
    assert len(files) == len(notes)
    last = notes[-1].rsplit("/", 1)[1].split("-")
    found = httpx.post(
        f"{proxy.url}/v1/search",
        json={"query": f"zorblat{last[1]}x{last[2]}", "top_k": 1},
        headers={"Authorization": f"Bearer {tokens['vera']}"},
        timeout=30,
    ).json()
    assert found["passages"][0]["uri"] == notes[-1] or any(p["uri"] in notes for p in found["passages"])


def test_workers_over_sqlite_are_refused_with_one_line(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "lore.toml").write_text('backend = "sqlite"\nembedder = "hashing"\n', encoding="utf-8")
    done = subprocess.run(
        [str(LORE), "--config", str(tmp_path / "lore.toml"), "serve", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--workers 2" in lines[0]
    assert "pgvector" in lines[0]
    # The look-alike: one worker over SQLite is the embedded default, and not refused
    # (it goes on to listen, here on a port already taken, which is its own one line).
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        one = subprocess.run(
            [str(LORE), "--config", str(tmp_path / "lore.toml"), "serve", "--workers", "1", "--port", port],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert "--workers" not in one.stderr
    assert port in one.stderr


def test_workers_over_pgvector_share_one_port(pg_dsn: str, tmp_path: Path) -> None:
    """``--workers 2``: two processes on one port (uvicorn's supervisor), sessions and the
    lease shared through the database like separate replicas."""
    config = write_project(tmp_path, pg_dsn, f"wrk_{uuid.uuid4().hex[:10]}", vault=False)
    editor = lore(config, "token", "create", "--role", "editor", "--name", "eddie")
    server = start_replica(config, 0, "--workers", "2")
    try:
        wait_ready([server])
        with httpx.Client(base_url=server.url, timeout=60) as http:
            signed = http.post("/v1/session", json={"token": editor})
            assert signed.status_code == 200
            # Fresh connections: each may be accepted by either worker.
            for _ in range(8):
                with httpx.Client(base_url=server.url, cookies=http.cookies, timeout=60) as fresh:
                    assert fresh.get("/v1/session").status_code == 200
            deadline = time.monotonic() + TAKEOVER_BOUND_S
            while (
                http.get("/v1/sync", headers={"Authorization": f"Bearer {editor}"}).json()["scheduler"][
                    "holder"
                ]
                is None
            ):
                assert time.monotonic() < deadline, "no worker took the scheduler's lease"
                time.sleep(0.2)
    finally:
        stop(server)


# -- the shared state itself, on the same database ------------------------------------


@pytest.fixture
def shared(pg_dsn: str) -> Iterator[Callable[[], PgReplicas]]:
    """Replicas' state over a fresh index (its tables made by the backend's migrations)."""
    from lore.backends.pgvector import PgVectorBackend
    from lore.testing.embedders import CountingEmbedder

    index = f"st_{uuid.uuid4().hex[:10]}"
    PgVectorBackend(pg_dsn, CountingEmbedder(), index_name=index).close()
    opened: list[PgReplicas] = []

    def one() -> PgReplicas:
        opened.append(PgReplicas(pg_dsn, index))
        return opened[-1]

    yield one
    for each in opened:
        each.close()


def test_a_session_cookie_is_its_id_never_the_stored_key(shared: Callable[[], PgReplicas]) -> None:
    from lore.web.auth import MAX_SESSIONS_PER_TOKEN, Sessions, _shared_key

    on_one, on_other = Sessions(shared=shared()), Sessions(shared=shared())
    session_id, session = on_one.create("digest-a")
    found = on_other.get(session_id)  # the legitimate cookie, on another replica
    assert found is not None
    assert (found.token_digest, found.csrf_token) == ("digest-a", session.csrf_token)
    # What the table holds (a backup, a read of the database) is not a cookie.
    assert on_other.get(_shared_key(session_id)) is None
    assert on_other.get(session_id[:-1] + ("A" if session_id[-1] != "A" else "B")) is None
    on_other.drop(session_id)  # signing out on one replica ends it on all
    assert on_one.get(session_id) is None
    # Bounded per token: the oldest go.
    ids = [on_one.create("digest-b")[0] for _ in range(MAX_SESSIONS_PER_TOKEN + 2)]
    assert on_other.get(ids[0]) is None
    assert on_other.get(ids[1]) is None
    assert on_other.get(ids[-1]) is not None
    expired = Sessions(seconds=-1, shared=shared())
    assert on_one.get(expired.create("digest-c")[0]) is None


def test_one_lease_holder_and_a_takeover_when_its_session_dies(
    shared: Callable[[], PgReplicas], pg_dsn: str
) -> None:
    import psycopg

    first, second = shared(), shared()
    assert first.lead()
    assert not second.lead()
    assert first.lead()  # held, not taken twice
    assert first.leader() == first.replica_id
    assert second.leader() == first.replica_id
    # The holder's session ends (a crash, a network cut): the database frees the lease.
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"lore-serve lease {first.replica_id}"[:63],),
        )
    deadline = time.monotonic() + TAKEOVER_BOUND_S
    while not second.lead():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert not first.lead()  # the old holder notices instead of believing it still leads
    second.resign()
    assert first.lead()


def test_the_sync_queue_is_shared_and_orphans_go_back(shared: Callable[[], PgReplicas]) -> None:
    first, second = shared(), shared()
    queued = first.enqueue("run-1", "runbooks")
    assert second.enqueue("run-2", "runbooks").run_id == "run-1"  # already waiting: that run
    assert second.enqueue("run-3", None).run_id == "run-3"
    taken = first.claim()
    assert taken is not None
    assert (taken.run_id, taken.holder) == (queued.run_id, first.replica_id)
    # Queued again while it runs: a new run, waiting behind it.
    assert second.enqueue("run-4", "runbooks").run_id == "run-4"
    assert [(run.run_id, run.started_at is not None) for run in second.live()] == [
        ("run-1", True),
        ("run-3", False),
        ("run-4", False),
    ]
    # The first holder dies; the next one puts its run back in the queue (the source
    # already waits as run-4, so run-1 is not queued twice).
    assert second.requeue_orphans() == 1
    assert [run.run_id for run in second.live()] == ["run-3", "run-4"]
    taken = second.claim()
    assert taken is not None
    second.finish(taken.run_id)
    assert [run.run_id for run in first.live()] == ["run-4"]


def test_one_writer_at_a_time_across_replicas(shared: Callable[[], PgReplicas]) -> None:
    from lore.errors import IndexLockedError

    first, second = shared(), shared()
    with first.write_turn(5), pytest.raises(IndexLockedError), second.write_turn(0.3):
        pass
    with second.write_turn(0.3):  # the look-alike: once released, the other replica writes
        pass


# -- a sync's child outliving its replica ------------------------------------------------


def _sync_children_of(pid: int) -> list[int]:
    """The sync child processes (``lore.web.sync_process``) of process ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"lore.web.sync_process" in command:
                found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (an orphan's exit may leave a zombie nobody reaps)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_for(what: str, check: Callable[[], object], deadline_s: float = 120) -> object:
    deadline = time.monotonic() + deadline_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {deadline_s:.0f} s"
        time.sleep(0.1)
    return found


def test_an_orphaned_sync_keeps_the_write_turn_until_it_stops(pg_dsn: str, tmp_path: Path) -> None:
    """The replica running a sync is killed (SIGKILL) while its sync child writes: the
    child, an orphan now, still holds the replicas' write turn (it took it, not its
    parent), so an edit on another replica waits for its turn instead of finding the
    index's write lock taken (a 500 before); once the orphan stops at its next document
    boundary the edit lands. The orphan ends with one log line, no traceback.

    Deterministic: the test holds a row lock on the index's state row the sync writes
    first under its locks, so the child is known to be mid-write when its parent dies."""
    import psycopg

    from lore.backends.pgvector.tables import LOCK_CLASS, lock_key
    from lore.models import SYNC_UNFINISHED_KEY

    index = f"orp_{uuid.uuid4().hex[:10]}"
    config = write_project(tmp_path, pg_dsn, index, vault=False)
    editor = lore(config, "token", "create", "--role", "editor", "--name", "eddie")
    auth = {"Authorization": f"Bearer {editor}"}
    lore(config, "sync")
    replicas = [start_replica(config, number) for number in range(2)]

    def holders(purpose: str, admin: psycopg.Connection[tuple[object, ...]], granted: bool) -> list[str]:
        rows = admin.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted = %s AND l.classid = %s::oid"
            " AND l.objid = %s::oid AND a.datname = current_database()",
            (granted, LOCK_CLASS, lock_key(purpose, index) & 0xFFFFFFFF),
        ).fetchall()
        return [str(row[0]) for row in rows]

    try:
        wait_ready(replicas)
        _wait_for("a lease holder", lambda: holder_of(replicas, editor) is not None)
        leader = holder_of(replicas, editor)
        assert leader is not None
        other = replicas[1 - leader]
        parent = replicas[leader].process.pid
        with (
            psycopg.connect(pg_dsn, autocommit=True) as admin,
            psycopg.connect(pg_dsn) as blocker,
        ):
            blocker.execute(
                f"SELECT 1 FROM {index}_state WHERE key = %s FOR UPDATE", (SYNC_UNFINISHED_KEY,)
            )
            queued = httpx.post(f"{other.url}/v1/sync", json={"source": "runbooks"}, headers=auth, timeout=30)
            assert queued.status_code == 202, queued.text
            # The leader's child took the turn and the index's write lock, and now waits
            # for the row: it is mid-write.
            child = _wait_for("the sync's child", lambda: _sync_children_of(parent))
            assert isinstance(child, list)
            (child_pid,) = child
            _wait_for(
                "the child blocked on the state row",
                lambda: admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND query LIKE %s",
                    (f"%{index}_state%",),
                ).fetchone()
                >= (1,),
            )
            assert len(holders("write", admin, True)) == 1
            (turn,) = holders("replica-write", admin, True)
            assert f":{child_pid}:" in turn  # the writing process holds the turn, not its parent
            kill(replicas[leader])
            assert _running(child_pid)  # an orphan, still writing
            assert holders("replica-write", admin, True) == [turn]

            # An edit on the other replica meanwhile: it waits for its turn.
            answers: list[httpx.Response] = []
            uri = "note://notes/after-the-orphan"

            def edit() -> None:
                for _ in range(RETRIES):
                    answers.append(
                        httpx.put(
                            f"{other.url}/v1/documents/{quote(uri, safe='')}",
                            json={"title": "After the orphan", "markdown": "quuxfrob written after"},
                            headers=auth,
                            timeout=200,
                        )
                    )
                    if answers[-1].status_code != 503:
                        return
                    time.sleep(float(answers[-1].headers["Retry-After"]) / 10)

            writer = threading.Thread(target=edit)
            writer.start()
            _wait_for(
                "the edit waiting for its turn (or answered)",
                lambda: answers or holders("replica-write", admin, False),
            )
            blocker.rollback()  # the orphan goes on, stops at its next document, ends
            writer.join(timeout=300)
            assert not writer.is_alive()
            _wait_for("the orphan's exit", lambda: not _running(child_pid))
        assert all(answer.status_code in (200, 503) for answer in answers), [
            (answer.status_code, answer.text) for answer in answers
        ]
        for answer in answers[:-1]:
            assert answer.headers["Retry-After"]
            assert len(answer.json()["detail"].splitlines()) == 1
        assert answers[-1].status_code == 200, answers[-1].text
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT d.chunk_count, count(c.*) FROM {index}_documents d"
                f" LEFT JOIN {index}_chunks c ON c.uri = d.uri WHERE d.uri = %s GROUP BY d.chunk_count",
                (uri,),
            ).fetchone()
        assert row is not None
        assert row[0] == row[1] >= 1
        # The orphan said so in one line, and printed no traceback.
        log = replicas[leader].log.read_text(errors="replace")
        gone = [line for line in log.splitlines() if f"sync process {child_pid}:" in line]
        assert len(gone) == 1, log[-3000:]
        assert f"(pid {parent}) is gone" in gone[0]
        assert "Traceback" not in log, log[-3000:]
        assert "BrokenPipeError" not in log, log[-3000:]
    finally:
        for replica in replicas:
            stop(replica)


def test_lore_sync_from_the_command_line_waits_for_the_replicas_write_turn(
    pg_dsn: str, tmp_path: Path
) -> None:
    """A CronJob's ``lore sync`` takes the replicas' write turn too: while a replica writes
    (here the test holds the turn, as a replica's upload would) it waits without taking
    the index's write lock, and runs once the turn is free; so the replicas' uploads wait
    for it in turn rather than find the index locked."""
    import subprocess

    import psycopg

    from lore.backends.pgvector.tables import LOCK_CLASS, lock_key

    index = f"cli_{uuid.uuid4().hex[:10]}"
    config = write_project(tmp_path, pg_dsn, index, vault=False)
    lore(config, "sync")  # the index and its tables
    replica = PgReplicas(pg_dsn, index)

    def locks(purpose: str, admin: psycopg.Connection[tuple[object, ...]], granted: bool) -> int:
        row = admin.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted = %s AND l.classid = %s::oid"
            " AND l.objid = %s::oid AND a.datname = current_database()",
            (granted, LOCK_CLASS, lock_key(purpose, index) & 0xFFFFFFFF),
        ).fetchone()
        return int(row[0]) if row else 0

    try:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            with replica.write_turn(5):
                sync = subprocess.Popen(
                    [str(LORE), "--config", str(config), "sync"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                _wait_for("lore sync waiting for its turn", lambda: locks("replica-write", admin, False) == 1)
                assert locks("write", admin, True) == 0  # it waits before it locks the index
                assert sync.poll() is None
            _out, err = sync.communicate(timeout=300)
        assert sync.returncode == 0, err.decode(errors="replace")
    finally:
        replica.close()
