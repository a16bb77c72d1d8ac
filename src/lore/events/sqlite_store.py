"""Events, feedback and alert suggestions in SQLite: in the index's own file for the
SQLite backend (its schema migration creates the tables), or in a sidecar file beside
the data of a backend that has no store of its own (qdrant, Elasticsearch, Discovery
Engine). Each record is kept whole as JSON, with the columns the filters use."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from lore.backends.read_only_file import connect_read_only
from lore.errors import IndexingError
from lore.events.record import AlertSuggestion, EventQuery, Feedback, RetrievalEvent, dumps
from lore.migrations import Migration, UserVersion, migrate, schema
from lore.sqlite_errors import translated

#: The tables, as one migration: ``lore.backends.sqlite.schema`` appends it to the
#: index's migrations (``m005_events``), and a sidecar file applies it as its first
#: (``SIDECAR_MIGRATIONS``). IF NOT EXISTS: an index rolled back to an older schema
#: version by hand keeps these tables, and its re-migration must not fail on them.
EVENT_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS retrieval_events (
        event_id TEXT PRIMARY KEY,
        time TEXT NOT NULL,
        tenant TEXT,
        empty INTEGER NOT NULL,
        degraded INTEGER NOT NULL,
        record TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS retrieval_events_by_time ON retrieval_events (time)",
    """CREATE TABLE IF NOT EXISTS retrieval_feedback (
        feedback_id TEXT PRIMARY KEY,
        event_id TEXT NOT NULL,
        time TEXT NOT NULL,
        record TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS retrieval_feedback_by_event ON retrieval_feedback (event_id)",
    # tenant '' is the default tenant: a primary key column cannot hold NULL usefully.
    """CREATE TABLE IF NOT EXISTS alert_suggestions (
        tenant TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        time TEXT NOT NULL,
        event_id TEXT,
        record TEXT NOT NULL,
        PRIMARY KEY (tenant, fingerprint)
    ) WITHOUT ROWID""",
)

#: The migrations of a sidecar file, which holds nothing but the events.
SIDECAR_MIGRATIONS: tuple[Migration[str], ...] = schema(Migration("m001_events", EVENT_SCHEMA))

SIDECAR_NAME = "events.db"

#: ``EventQuery.conditions`` in SQLite.
_CONDITIONS = {
    "since": "time >= ?",
    "empty": "empty = ?",
    "degraded": "degraded = ?",
    "uri": "EXISTS (SELECT 1 FROM json_each(record, '$.results') WHERE json_extract(value, '$.uri') = ?)",
    "tenant": "tenant IS ?",
}


def _sqlite_value(value: object) -> str | int | None:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return int(value)
    return None if value is None else str(value)


class SqliteEventStore:
    """``lore.protocols.EventStore`` over one SQLite file; its connection is its own, so
    the background writer never waits on the backend's locks, and is opened on first use.

    ``read_only``: why the file cannot be written (then writes raise ``IndexingError``,
    which the recorder counts as drops). ``sidecar``: the file is the store's alone and
    gets its schema here."""

    def __init__(
        self,
        path: Path,
        *,
        read_only: str | None = None,
        sidecar: bool = False,
        fallback_read_only: bool = False,
    ) -> None:
        """``fallback_read_only``: when the file cannot be opened for writing (a
        read-only mount), read it read-only (``lore events`` there)."""
        self._path = Path(path)
        self._read_only = read_only
        self._sidecar = sidecar
        self._fallback = fallback_read_only
        self._conn: sqlite3.Connection | None = None
        self._guard = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    @contextmanager
    def _connection(self, what: str) -> Iterator[sqlite3.Connection]:
        with self._guard, translated(IndexingError, f"{what} in {self._path}"):
            if self._conn is None:
                self._conn = self._open()
            yield self._conn

    def _open(self) -> sqlite3.Connection:
        if self._read_only is not None:
            return connect_read_only(self._path)
        if self._sidecar:
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:  # not SQLite's: a folder that cannot be made (a read-only mount)
                raise IndexingError(f"cannot make the folder of the events file {self._path}: {err}") from err
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=5.0)
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as err:
            if not self._fallback:
                raise
            self._read_only = str(err)
            return self._open()
        conn.execute("PRAGMA synchronous = NORMAL")
        if self._sidecar:
            migrate(SIDECAR_MIGRATIONS, UserVersion(conn, self._too_new))
        return conn

    def _too_new(self, version: int, latest: int) -> IndexingError:
        return IndexingError(
            f"the events file {self._path} has schema version {version}, but this lore knows only "
            f"up to {latest}: upgrade lore"
        )

    def _writable(self, what: str) -> None:
        if self._read_only is not None:
            raise IndexingError(f"{what}: the index {self._path} is read-only ({self._read_only})")

    # -- events ------------------------------------------------------------------------

    def record_events(self, events: Sequence[RetrievalEvent]) -> None:
        self._writable("cannot record retrieval events")
        rows = [
            (e.event_id, e.time, e.tenant, int(e.empty), int(e.degraded), dumps(e.to_json())) for e in events
        ]
        with self._connection("cannot record retrieval events") as conn, _transaction(conn):
            conn.executemany(
                "INSERT OR REPLACE INTO retrieval_events "
                "(event_id, time, tenant, empty, degraded, record) VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )

    def events(self, query: EventQuery) -> list[RetrievalEvent]:
        conditions = query.conditions()
        where = ["1 = 1", *(_CONDITIONS[name] for name in conditions)]
        params = [_sqlite_value(value) for value in conditions.values()]
        sql = f"SELECT record FROM retrieval_events WHERE {' AND '.join(where)} ORDER BY time DESC LIMIT ?"
        with self._connection("cannot read retrieval events") as conn:
            rows = conn.execute(sql, (*params, query.limit)).fetchall()
        return [RetrievalEvent.from_json(_loads(row[0])) for row in rows]

    def event(self, event_id: str) -> RetrievalEvent | None:
        with self._connection("cannot read retrieval events") as conn:
            sql = "SELECT record FROM retrieval_events WHERE event_id = ?"
            row = conn.execute(sql, (event_id,)).fetchone()
        return RetrievalEvent.from_json(_loads(row[0])) if row else None

    def prune_events(self, before: datetime) -> int:
        """Drop events (with their feedback) and alert suggestions older than ``before``."""
        self._writable("cannot prune retrieval events")
        cutoff = before.isoformat()
        with self._connection("cannot prune retrieval events") as conn, _transaction(conn):
            conn.execute(
                "DELETE FROM retrieval_feedback WHERE event_id IN "
                "(SELECT event_id FROM retrieval_events WHERE time < ?)",
                (cutoff,),
            )
            count = conn.execute("DELETE FROM retrieval_events WHERE time < ?", (cutoff,)).rowcount
            conn.execute("DELETE FROM alert_suggestions WHERE time < ?", (cutoff,))
        return int(count)

    # -- feedback ----------------------------------------------------------------------

    def record_feedback(self, feedback: Feedback) -> None:
        self._writable("cannot record feedback")
        with self._connection("cannot record feedback") as conn:
            conn.execute(
                "INSERT INTO retrieval_feedback (feedback_id, event_id, time, record) VALUES (?, ?, ?, ?)",
                (feedback.feedback_id, feedback.event_id, feedback.time, dumps(feedback.to_json())),
            )

    def feedback(self, event_id: str | None = None) -> list[Feedback]:
        sql = "SELECT record FROM retrieval_feedback"
        params: tuple[str, ...] = ()
        if event_id is not None:
            sql, params = sql + " WHERE event_id = ?", (event_id,)
        with self._connection("cannot read feedback") as conn:
            rows = conn.execute(sql + " ORDER BY time", params).fetchall()
        return [Feedback.from_json(_loads(row[0])) for row in rows]

    # -- alert suggestions -----------------------------------------------------------------

    def record_alert_suggestion(self, suggestion: AlertSuggestion) -> None:
        self._writable("cannot record the alert suggestion")
        s = suggestion
        row = (s.tenant or "", s.fingerprint, s.time, s.event_id, dumps(s.result))
        with self._connection("cannot record the alert suggestion") as conn:
            conn.execute(
                "INSERT OR REPLACE INTO alert_suggestions (tenant, fingerprint, time, event_id, record) "
                "VALUES (?, ?, ?, ?, ?)",
                row,
            )

    def alert_suggestion(self, fingerprint: str, tenant: str | None) -> AlertSuggestion | None:
        with self._connection("cannot read alert suggestions") as conn:
            row = conn.execute(
                "SELECT time, event_id, record FROM alert_suggestions WHERE tenant = ? AND fingerprint = ?",
                (tenant or "", fingerprint),
            ).fetchone()
        if row is None:
            return None
        return AlertSuggestion(fingerprint, tenant, row[0], row[1], _loads(row[2]))

    def close(self) -> None:
        with self._guard:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _loads(text: str) -> dict[str, object]:
    import json

    value = json.loads(text)
    return value if isinstance(value, dict) else {}
