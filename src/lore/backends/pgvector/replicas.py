"""What ``lore serve`` replicas over one pgvector index share, in the index's database.

Every replica is interchangeable because nothing a request needs lives in one process:

- **Page sessions**: a row per session, keyed by the SHA-256 of the cookie's random id
  (a copy of the table does not sign anyone in), holding the HMAC of the token that
  signed in and the CSRF token. The principal is never stored: each request reads role,
  groups and tenant from the token store again, so revoking a token ends its sessions on
  every replica at their next request.
- **One writer at a time**: a session-level advisory lock, the write turn, waited for
  (``lock_timeout``) on a connection of its own for the length of one write (an upload,
  an edit, a whole sync), and taken by the process that writes: the replica for an
  upload or an edit, the sync's child process for a sync (``lore.web.sync_process``),
  ``lore sync`` for a sync from the command line. So it lasts exactly as long as the
  writing: a replica killed mid-sync does not free it while its orphaned child still
  writes. It is taken before, and is not, the backend's write lock
  (``PgVectorBackend.write_lock``, a try-lock the sync pipeline takes inside the turn):
  a writer that holds the turn finds that one free unless something outside the
  replicas (``lore reembed``, ``lore migrate``) writes, which is an ``IndexLockedError``
  and a 503 with ``Retry-After`` on the HTTP routes.
- **The scheduler's lease**: another session-level advisory lock, held for as long as
  the replica leads, on a connection kept open for it. PostgreSQL releases it when that
  session ends: at once when the holder's process dies (its socket closes), and within
  the server-side TCP keepalive (``KEEPALIVE_*``: about 11 s) when its host or network
  does. The others try every ``lore.web.sync_runner.LEASE_TICK_S``, so one of them leads
  within that bound plus a tick. A holder that stays connected but stops (a frozen
  process) keeps the lease: PostgreSQL cannot tell it from a slow one.
- **The queue of syncs**: ``POST /v1/sync`` on any replica inserts a row; the lease's
  holder takes rows oldest first and deletes each once run (the run itself is in the
  index's run history under the same id). A row taken by a holder that lost the lease
  goes back to the queue when the next holder takes over.

Advisory locks rather than a lease row with an expiry: the database itself says who
holds it and ends it with its session, so no clock of any replica is trusted and no
renewal can be late.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

from lore.backends.pgvector.errors import translated
from lore.backends.pgvector.tables import LOCK_CLASS, Tables, lock_key
from lore.errors import BackendUnavailableError, MissingExtraError
from lore.protocols import QueuedSync, SharedSession

try:
    import psycopg
    from psycopg.rows import TupleRow
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

#: Server-side TCP keepalive of the lease's session: a holder whose host or network is
#: gone is noticed after IDLE + INTERVAL * COUNT seconds.
KEEPALIVE_IDLE_S = 5
KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_COUNT = 3
CONNECT_TIMEOUT_S = 5
TCP_USER_TIMEOUT_MS = 10_000
STATEMENT_TIMEOUT_MS = 5_000


def replica_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class PgReplicas:
    """``lore.protocols.Replicas`` over one index's tables in PostgreSQL."""

    def __init__(self, dsn: str, index_name: str, *, replica_id: str | None = None) -> None:
        self._dsn = dsn
        self._tables = Tables(index_name)
        self.replica_id = replica_id or f"{replica_name()}:{uuid.uuid4().hex[:6]}"
        self._lease_key = (LOCK_CLASS, lock_key("scheduler", index_name))
        self._write_key = (LOCK_CLASS, lock_key("replica-write", index_name))
        #: The lease's session (kept open by a replica waiting for the lease too), and
        #: whether it holds the lease.
        self._lease: psycopg.Connection[TupleRow] | None = None
        self._holding = False
        self._lease_guard = threading.Lock()
        self._local = threading.local()

    # -- connections -----------------------------------------------------------------

    def _connect(self, purpose: str) -> psycopg.Connection[TupleRow]:
        with translated(BackendUnavailableError, "the index's database is unreachable"):
            return psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name=f"lore-serve {purpose} {self.replica_id}"[:63],
                # A database that stops answering fails a statement within seconds
                # instead of holding the caller: sent data unacknowledged for
                # TCP_USER_TIMEOUT_MS, or a statement running past STATEMENT_TIMEOUT_MS
                # (not for the write turn, which waits for its lock on purpose).
                tcp_user_timeout=TCP_USER_TIMEOUT_MS,
                keepalives_idle=KEEPALIVE_IDLE_S,
                keepalives_interval=KEEPALIVE_INTERVAL_S,
                keepalives_count=KEEPALIVE_COUNT,
                options="" if purpose == "write" else f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            )

    @contextlib.contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[TupleRow]]:
        """A connection of this thread's own, reopened after a failure."""
        conn: psycopg.Connection[TupleRow] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self._local.conn = self._connect("state")
        with translated(BackendUnavailableError, "the index's database failed"):
            try:
                yield conn
            except psycopg.Error:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
                self._local.conn = None
                raise

    # -- sessions --------------------------------------------------------------------

    def put_session(self, key: str, session: SharedSession, keep: int) -> None:
        expires = datetime.fromtimestamp(session.expires, UTC)
        with self._conn() as conn, conn.transaction():
            conn.execute(self._tables.sql("DELETE FROM {sessions} WHERE expires_at <= now()"))
            conn.execute(
                self._tables.sql(
                    "INSERT INTO {sessions} (key, token_digest, csrf_token, expires_at)"
                    " VALUES (%s, %s, %s, %s)"
                ),
                (key, session.token_digest, session.csrf_token, expires),
            )
            # Bounded: signing in again and again keeps the newest few, never all of them.
            conn.execute(
                self._tables.sql(
                    "DELETE FROM {sessions} WHERE token_digest = %s AND key NOT IN ("
                    " SELECT key FROM {sessions} WHERE token_digest = %s"
                    " ORDER BY created_at DESC LIMIT %s)"
                ),
                (session.token_digest, session.token_digest, keep),
            )

    def session(self, key: str) -> SharedSession | None:
        with self._conn() as conn:
            row = conn.execute(
                self._tables.sql(
                    "SELECT token_digest, csrf_token, extract(epoch FROM expires_at) FROM {sessions}"
                    " WHERE key = %s AND expires_at > now()"
                ),
                (key,),
            ).fetchone()
        return SharedSession(str(row[0]), str(row[1]), float(row[2])) if row else None

    def drop_session(self, key: str) -> None:
        with self._conn() as conn:
            conn.execute(self._tables.sql("DELETE FROM {sessions} WHERE key = %s"), (key,))

    # -- one writer at a time --------------------------------------------------------

    @contextlib.contextmanager
    def write_turn(self, timeout: float) -> Iterator[None]:
        conn = self._connect("write")
        try:
            with translated(
                BackendUnavailableError,
                "the index's database failed",
                locked=f"another replica is writing the index; it did not finish within {timeout:.0f} s",
            ):
                conn.execute(f"SET lock_timeout = {max(1, int(timeout * 1000))}")
                conn.execute("SELECT pg_advisory_lock(%s, %s)", self._write_key)
            yield  # the lock ends with the session, however the write ends
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    # -- the scheduler's lease -------------------------------------------------------

    def lead(self) -> bool:
        with self._lease_guard:
            conn = self._lease
            if conn is None or conn.closed:
                self._holding = False
                try:
                    conn = self._connect("lease")
                    for name, value in (
                        ("tcp_keepalives_idle", KEEPALIVE_IDLE_S),
                        ("tcp_keepalives_interval", KEEPALIVE_INTERVAL_S),
                        ("tcp_keepalives_count", KEEPALIVE_COUNT),
                    ):
                        conn.execute(f"SET {name} = {int(value)}")
                except (BackendUnavailableError, psycopg.Error):
                    return False
                self._lease = conn
            try:
                if self._holding:
                    conn.execute("SELECT 1")  # the session, and with it the lease, still stands
                    return True
                row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", self._lease_key).fetchone()
            except psycopg.Error:  # the session is gone, and the lease with it
                with contextlib.suppress(psycopg.Error):
                    conn.close()
                self._lease, self._holding = None, False
                return False
            self._holding = bool(row and row[0])
            return self._holding

    def leader(self) -> str | None:
        prefix = "lore-serve lease "
        with self._conn() as conn:
            row = conn.execute(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s::oid"
                " AND l.objid = %s::oid AND l.objsubid = 2 AND a.datname = current_database()",
                (self._lease_key[0], self._lease_key[1] & 0xFFFFFFFF),
            ).fetchone()
        if not row or not row[0]:
            return None
        name = str(row[0])
        return name[len(prefix) :] if name.startswith(prefix) else name

    def resign(self) -> None:
        with self._lease_guard:
            if self._lease is not None:
                with contextlib.suppress(psycopg.Error):
                    self._lease.close()
            self._lease, self._holding = None, False

    # -- the queue of syncs ----------------------------------------------------------

    def enqueue(self, run_id: str, source: str | None) -> QueuedSync:
        with self._conn() as conn:
            row = conn.execute(
                self._tables.sql(
                    "INSERT INTO {sync_queue} (run_id, source, queued_at) VALUES (%s, %s, now())"
                    " ON CONFLICT DO NOTHING RETURNING run_id, source, queued_at, started_at, holder"
                ),
                (run_id, source),
            ).fetchone()
            if row is None:  # the same source is already waiting: that run it is
                row = conn.execute(
                    self._tables.sql(
                        "SELECT run_id, source, queued_at, started_at, holder FROM {sync_queue}"
                        " WHERE coalesce(source, '') = coalesce(%s, '') AND started_at IS NULL"
                    ),
                    (source,),
                ).fetchone()
        if row is None:  # taken between the two statements: queue it anew
            return self.enqueue(run_id, source)
        return _queued(row)

    def claim(self) -> QueuedSync | None:
        with self._conn() as conn:
            row = conn.execute(
                self._tables.sql(
                    "UPDATE {sync_queue} SET started_at = now(), holder = %s WHERE run_id = ("
                    " SELECT run_id FROM {sync_queue} WHERE started_at IS NULL"
                    " ORDER BY queued_at, run_id LIMIT 1 FOR UPDATE SKIP LOCKED)"
                    " RETURNING run_id, source, queued_at, started_at, holder"
                ),
                (self.replica_id,),
            ).fetchone()
        return _queued(row) if row is not None else None

    def finish(self, run_id: str) -> None:
        with self._conn() as conn:
            conn.execute(self._tables.sql("DELETE FROM {sync_queue} WHERE run_id = %s"), (run_id,))

    def requeue_orphans(self) -> int:
        with self._conn() as conn, conn.transaction():
            # A run of another holder, taken before this one led: its holder lost the lease
            # (only the holder runs syncs). Queued again, unless its source waits already.
            orphans = conn.execute(
                self._tables.sql(
                    "DELETE FROM {sync_queue} WHERE started_at IS NOT NULL AND holder <> %s"
                    " RETURNING run_id, source, queued_at"
                ),
                (self.replica_id,),
            ).fetchall()
            for run_id, source, queued_at in orphans:
                conn.execute(
                    self._tables.sql(
                        "INSERT INTO {sync_queue} (run_id, source, queued_at) VALUES (%s, %s, %s)"
                        " ON CONFLICT DO NOTHING"
                    ),
                    (run_id, source, queued_at),
                )
        return len(orphans)

    def live(self) -> list[QueuedSync]:
        with self._conn() as conn:
            rows = conn.execute(
                self._tables.sql(
                    "SELECT run_id, source, queued_at, started_at, holder FROM {sync_queue}"
                    " ORDER BY started_at IS NULL, queued_at, run_id"
                )
            ).fetchall()
        return [_queued(row) for row in rows]

    def close(self) -> None:
        self.resign()
        conn: psycopg.Connection[TupleRow] | None = getattr(self._local, "conn", None)
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


def _queued(row: tuple[object, ...]) -> QueuedSync:
    run_id, source, queued_at, started_at, holder = row
    assert isinstance(queued_at, datetime)
    return QueuedSync(
        run_id=str(run_id),
        source=None if source is None else str(source),
        queued_at=queued_at,
        started_at=started_at if isinstance(started_at, datetime) else None,
        holder=None if holder is None else str(holder),
    )


def open_replicas(dsn: str, index_name: str) -> PgReplicas:
    """The replicas' shared state of one index; its tables exist once the backend opened it."""
    return PgReplicas(dsn, index_name)
