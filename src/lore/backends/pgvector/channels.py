"""The two retrieval channels of the pgvector backend, run on one pooled connection.

Round trips are most of a query's cost on a busy server, so the channels share them: the
BM25 channel first reads its terms' statistics (the weights depend on them), then its
scan and the vector channel's go out together in one pipeline. The vector channel needs
no transaction of its own in the common case: every pooled connection starts with
iterative HNSW scans in strict order and an ``ef_search`` of the candidate depth
(``configure``), so a channel asking for no more than that is one statement. A deeper
one, and the exact re-scan of a filtered channel that came back short, set what they need
locally in a transaction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from lore.backends.fulltext_analysis import ident_weights, query_terms
from lore.backends.pgvector import bm25
from lore.backends.pgvector.schema import Tables
from lore.backends.pgvector.statements import PASSAGE_COLUMNS, RowFilter, vector_channel_statement
from lore.errors import MissingExtraError

try:
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql
    from psycopg.rows import TupleRow
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

#: pgvector's own ceiling for ``hnsw.ef_search``.
MAX_EF_SEARCH = 1000
Ranked = list[tuple[str, float]]
Statement = tuple[sql.Composed, list[Any]]


def configure(ef_search: int) -> Callable[[psycopg.Connection[TupleRow]], None]:
    """The pool's per-connection setup: the vector type, and the session's HNSW settings.
    Iterative scans return the same rows as a plain scan when nothing is filtered out."""
    ef = str(min(max(ef_search, 1), MAX_EF_SEARCH))

    def setup(conn: psycopg.Connection[TupleRow]) -> None:
        register_vector(conn)
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', false)")
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (ef,))

    return setup


@dataclass(frozen=True, slots=True)
class Channels:
    """What one search runs: the tables, the BM25 settings, and the session's ef_search."""

    tables: Tables
    boosts: bm25.Boosts
    candidates: int
    ef_search: int

    def text_statement(
        self, conn: psycopg.Connection[TupleRow], text: str, where: RowFilter, depth: int
    ) -> Statement | None:
        """The BM25 scan for ``text`` (one round trip for the statistics), None when no
        term of it is indexed."""
        words, identifiers = query_terms(text)
        if not words and not identifiers:
            return None
        found = conn.execute(
            self.tables.sql(bm25.STATISTICS), (list(dict.fromkeys(words + identifiers)),)
        ).fetchall()
        weights = bm25.weights(found, words, ident_weights(text, identifiers), self.boosts)
        if weights is None:
            return None
        statement = bm25.search_statement(self.tables, weights, where)
        return statement, bm25.search_params(weights, max(self.candidates, depth), where, depth)

    def search(
        self,
        conn: psycopg.Connection[TupleRow],
        text: Statement | None,
        vector: npt.NDArray[np.float32] | None,
        where: RowFilter,
        depth: int,
    ) -> tuple[Ranked | None, Ranked | None]:
        """Both channels' ranked ids (None for one not run), in one round trip when the
        vector channel fits the session's settings."""
        nearest: Statement | None = None
        if vector is not None:
            nearest = vector_channel_statement(self.tables, where), [vector, *where.params(), depth]
        alone = nearest is not None and depth > self.ef_search
        with conn.pipeline():
            text_cursor = conn.execute(*text) if text is not None else None
            vector_cursor = conn.execute(*nearest) if nearest is not None and not alone else None
        lexical = [(row[0], float(row[1])) for row in text_cursor.fetchall()] if text_cursor else None
        if nearest is None:
            return lexical, None
        rows = vector_cursor.fetchall() if vector_cursor is not None else _deep_scan(conn, nearest, depth)
        if where.active and len(rows) < depth:
            rows = _exact_scan(conn, nearest)
        return lexical, [(row[0], 1.0 - float(row[1])) for row in rows if not math.isnan(float(row[1]))]

    def fetch(self, conn: psycopg.Connection[TupleRow], ids: list[str]) -> dict[str, tuple[Any, ...]]:
        if not ids:
            return {}
        rows = conn.execute(
            self.tables.sql(f"SELECT {PASSAGE_COLUMNS} FROM {{chunks}} WHERE id = ANY(%s)"),
            (ids,),
        ).fetchall()
        return {row[0]: row for row in rows}


def _deep_scan(conn: psycopg.Connection[TupleRow], nearest: Statement, depth: int) -> list[Any]:
    with conn.transaction():
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(min(depth, MAX_EF_SEARCH)),))
        return conn.execute(*nearest).fetchall()


def _exact_scan(conn: psycopg.Connection[TupleRow], nearest: Statement) -> list[Any]:
    """Fewer than asked for: the filtered set is small, or the index walk gave up first
    (a very selective filter exhausts ``hnsw.max_scan_tuples``). Either way an exact scan
    over the rows the label and access GIN indexes select is cheap."""
    with conn.transaction():
        conn.execute("SELECT set_config('enable_indexscan', 'off', true)")
        return conn.execute(*nearest).fetchall()
