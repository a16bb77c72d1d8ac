"""``lore.protocols.EventStore`` in the pgvector backend's own database: the tables of
migration 4 (``schema.py``), on a connection of the store's own, so the background
writer never takes one from the search pool and outlives a closed backend (a one-shot
``lore search`` writes its event at exit)."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from lore.backends.pgvector.errors import translated
from lore.backends.pgvector.schema import LATEST_VERSION, Tables, migrate, schema_version
from lore.errors import IndexingError
from lore.events.record import AlertSuggestion, EventQuery, Feedback, RetrievalEvent, dumps

#: ``EventQuery.conditions`` in PostgreSQL.
_CONDITIONS = {
    "since": "time >= %s",
    "empty": "empty = %s",
    "degraded": "degraded = %s",
    "uri": "%s = ANY(uris)",
    "tenant": "tenant IS NOT DISTINCT FROM %s",
}


class PgEventStore:
    def __init__(self, dsn: str, index_name: str = "lore", *, connect_timeout: float = 5.0) -> None:
        self._dsn = dsn
        self._tables = Tables(index_name)
        self._timeout = connect_timeout
        self._conn: psycopg.Connection[TupleRow] | None = None
        self._guard = threading.Lock()

    @contextmanager
    def _connection(self, what: str) -> Iterator[psycopg.Connection[TupleRow]]:
        """The store's connection. Every driver error is an ``IndexingError``, an unreachable
        server's too: the event recorder counts that as a dropped event, and a search never
        fails for its event (``lore.backends.pgvector.errors``)."""
        with self._guard, translated(IndexingError, f"{what} in PostgreSQL index {self._tables.index!r}"):
            try:
                if self._conn is None or self._conn.closed:
                    conn = psycopg.connect(
                        self._dsn, autocommit=True, connect_timeout=max(1, math.ceil(self._timeout))
                    )
                    if schema_version(conn, self._tables) < LATEST_VERSION:
                        migrate(conn, self._tables)
                    self._conn = conn
                yield self._conn
            except psycopg.Error:
                if self._conn is not None and self._conn.broken:
                    self._conn = None  # reconnect on the next call
                raise

    def _sql(self, template: str) -> Any:
        return self._tables.sql(template)

    def record_events(self, events: Sequence[RetrievalEvent]) -> None:
        rows = [
            (
                e.event_id,
                e.time,
                e.tenant,
                e.empty,
                e.degraded,
                sorted({h.uri for h in e.results}),
                dumps(e.to_json()),
            )
            for e in events
        ]
        statement = self._sql(
            "INSERT INTO {events} (event_id, time, tenant, empty, degraded, uris, record) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (event_id) DO UPDATE SET record = excluded.record"
        )
        with (
            self._connection("cannot record retrieval events") as conn,
            conn.transaction(),
            conn.cursor() as cursor,
        ):
            cursor.executemany(statement, rows)

    def events(self, query: EventQuery) -> list[RetrievalEvent]:
        conditions = query.conditions()
        where = ["true", *(_CONDITIONS[name] for name in conditions)]
        params = list(conditions.values())
        statement = self._sql(
            f"SELECT record FROM {{events}} WHERE {' AND '.join(where)} ORDER BY time DESC LIMIT %s"
        )
        with self._connection("cannot read retrieval events") as conn:
            rows = conn.execute(statement, (*params, query.limit)).fetchall()
        return [RetrievalEvent.from_json(json.loads(row[0])) for row in rows]

    def event(self, event_id: str) -> RetrievalEvent | None:
        with self._connection("cannot read retrieval events") as conn:
            row = conn.execute(
                self._sql("SELECT record FROM {events} WHERE event_id = %s"), (event_id,)
            ).fetchone()
        return RetrievalEvent.from_json(json.loads(row[0])) if row else None

    def prune_events(self, before: datetime) -> int:
        with self._connection("cannot prune retrieval events") as conn, conn.transaction():
            conn.execute(
                self._sql(
                    "DELETE FROM {feedback} WHERE event_id IN (SELECT event_id FROM {events} WHERE time < %s)"
                ),
                (before,),
            )
            count = conn.execute(self._sql("DELETE FROM {events} WHERE time < %s"), (before,)).rowcount
            conn.execute(self._sql("DELETE FROM {suggestions} WHERE time < %s"), (before,))
        return int(count)

    def record_feedback(self, feedback: Feedback) -> None:
        with self._connection("cannot record feedback") as conn:
            conn.execute(
                self._sql(
                    "INSERT INTO {feedback} (feedback_id, event_id, time, record) VALUES (%s, %s, %s, %s)"
                ),
                (feedback.feedback_id, feedback.event_id, feedback.time, dumps(feedback.to_json())),
            )

    def feedback(self, event_id: str | None = None) -> list[Feedback]:
        where = " WHERE event_id = %s" if event_id is not None else ""
        params = (event_id,) if event_id is not None else ()
        with self._connection("cannot read feedback") as conn:
            rows = conn.execute(
                self._sql(f"SELECT record FROM {{feedback}}{where} ORDER BY time"), params
            ).fetchall()
        return [Feedback.from_json(json.loads(row[0])) for row in rows]

    def record_alert_suggestion(self, suggestion: AlertSuggestion) -> None:
        s = suggestion
        with self._connection("cannot record the alert suggestion") as conn:
            conn.execute(
                self._sql(
                    "INSERT INTO {suggestions} (tenant, fingerprint, time, event_id, record) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant, fingerprint) DO UPDATE SET "
                    "time = excluded.time, event_id = excluded.event_id, record = excluded.record"
                ),
                (s.tenant or "", s.fingerprint, s.time, s.event_id, dumps(s.result)),
            )

    def alert_suggestion(self, fingerprint: str, tenant: str | None) -> AlertSuggestion | None:
        with self._connection("cannot read alert suggestions") as conn:
            row = conn.execute(
                self._sql(
                    "SELECT time, event_id, record FROM {suggestions} WHERE tenant = %s AND fingerprint = %s"
                ),
                (tenant or "", fingerprint),
            ).fetchone()
        if row is None:
            return None
        return AlertSuggestion(fingerprint, tenant, row[0].isoformat(), row[1], json.loads(row[2]))

    def close(self) -> None:
        with self._guard:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
