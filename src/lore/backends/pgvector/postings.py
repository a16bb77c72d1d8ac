"""The write side of the BM25 channel (``bm25.py`` searches): postings and term
statistics added and removed in each write's transaction, rebuilt from the stored chunks.

The client analyses each chunk with tantivy's analyzers (the SQLite backend's own terms,
``analysis.field_terms``), counts the postings from the token streams with numpy and lays
them out as a COPY stream (``lay_out``, before the write starts; ``counting.py``: an
``INSERT ... SELECT`` that counted them on the server cost seven times the server time);
the terms' document frequencies and the statistics follow in one statement each per write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from lore.backends.fulltext_analysis import FULLTEXT_VERSION
from lore.backends.pgvector.analysis import field_terms
from lore.backends.pgvector.bm25 import FIELDS
from lore.backends.pgvector.counting import SMALLINT_MAX, count
from lore.errors import MissingExtraError

try:
    import psycopg
    from psycopg import sql
    from psycopg.rows import TupleRow
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

if TYPE_CHECKING:
    from lore.backends.pgvector.tables import Tables


@dataclass(slots=True)
class Postings:
    """The analysed chunks of a write: each chunk's token stream per field (``FIELDS``
    order) and its field lengths, which the chunk rows and the statistics take too. The
    postings are counted from the streams when written (``write_postings``)."""

    chunk_ids: list[str] = field(default_factory=list)
    streams: list[list[list[str]]] = field(default_factory=list)
    lengths: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def add(self, chunk_id: str, title: str, section: str, text: str, uri: str = "") -> None:
        analysed = field_terms(title, section, text, uri)
        streams = [analysed[name] for name in FIELDS]
        self.chunk_ids.append(chunk_id)
        self.streams.append(streams)
        self.lengths[chunk_id] = tuple(min(len(terms), SMALLINT_MAX) for terms in streams)

    def stats_params(self) -> list[int]:
        """Parameters of ``ADD_STATS``: the chunk count, then each field's total length."""
        totals = [sum(lengths[i] for lengths in self.lengths.values()) for i in range(len(FIELDS))]
        return [len(self.lengths), *totals]


def merged(parts: Sequence[Postings]) -> Postings:
    """The analysed chunks of several documents, to be written together."""
    if len(parts) == 1:
        return parts[0]
    found = Postings()
    for part in parts:
        found.chunk_ids.extend(part.chunk_ids)
        found.streams.extend(part.streams)
        found.lengths.update(part.lengths)
    return found


def _columns(template: str) -> str:
    return ", ".join(template.format(f=name) for name in FIELDS)


_TERM_UPSERT = "ON CONFLICT (term) DO UPDATE SET " + ", ".join(
    f"df_{name} = {{terms}}.df_{name} + EXCLUDED.df_{name}" for name in FIELDS
)

#: The postings of a write, copied in (``counting.Counted.copy_data``).
COPY_POSTINGS = (
    "COPY {postings} (term, chunk, " + _columns("tf_{f}") + ", " + _columns("len_{f}")
    + ", impact) FROM STDIN (FORMAT BINARY)"
)

#: Parameters: the terms, then per field their document frequencies in the write. Added
#: in term order, so concurrent writers lock term rows in one order and cannot deadlock.
ADD_TERMS = f"""
INSERT INTO {{terms}} (term, {_columns("df_{f}")})
SELECT * FROM unnest(%s::text[], {_columns("%s::int[]")}) ORDER BY 1
{_TERM_UPSERT}
"""

#: Parameters: ``Postings.stats_params()``.
ADD_STATS = "UPDATE {bm25_stats} SET chunks = chunks + %s, " + _columns("len_{f} = len_{f} + %s")

#: ``{keys}``: the chunk keys whose postings go. Their term frequencies are taken back
#: out of ``terms`` in the same statement, in term order.
REMOVE_POSTINGS = f"""
WITH gone AS (
    DELETE FROM {{postings}} WHERE chunk = ANY({{keys}})
    RETURNING term, {_columns("tf_{f}")}
)
INSERT INTO {{terms}} (term, {_columns("df_{f}")})
SELECT term, {_columns("-count(*) FILTER (WHERE tf_{f} > 0)")}
FROM gone GROUP BY term ORDER BY term
{_TERM_UPSERT}
"""

#: ``{keys}``: the same chunk keys; run before their rows are deleted.
REMOVE_STATS = f"""
UPDATE {{bm25_stats}} s SET chunks = s.chunks - o.n, {_columns("len_{f} = s.len_{f} - o.{f}")}
FROM (SELECT count(*) AS n, {_columns("coalesce(sum(len_{f}), 0) AS {f}")}
      FROM {{chunks}} WHERE key = ANY({{keys}})) o
"""


@lru_cache(maxsize=256)
def removal_statements(tables: Tables, chunks_where: str) -> tuple[sql.Composed, ...]:
    """Statements that take the chunks ``chunks_where`` selects (one parameter, given to
    each statement) out of the postings and statistics; run before their rows go."""
    keys = tables.sql("ARRAY(SELECT key FROM {chunks} WHERE " + chunks_where + ")")
    return (tables.sql(REMOVE_POSTINGS, keys=keys), tables.sql(REMOVE_STATS, keys=keys))


@dataclass(frozen=True, slots=True)
class Laid:
    """The postings of a write laid out for the server: their COPY stream, the terms they
    hold with each field's document frequencies, and what they add to the statistics."""

    copy_data: bytes
    terms: list[str]
    frequencies: list[list[int]]
    stats: list[int]


def lay_out(postings: Postings, keys: Mapping[str, int]) -> Laid:
    """The postings of chunks whose keys (by id) are ``keys``: all the client's work of a
    write, done before it starts."""
    if not postings.lengths:
        return Laid(b"", [], [], [])
    counted = count(
        postings.streams,
        [postings.lengths[chunk_id] for chunk_id in postings.chunk_ids],
        [keys[chunk_id] for chunk_id in postings.chunk_ids],
    )
    terms, frequencies = counted.frequencies()
    return Laid(counted.copy_data(), terms, frequencies, postings.stats_params())


def copy_postings(conn: psycopg.Connection[TupleRow], tables: Tables, laid: Laid) -> None:
    if laid.copy_data:
        with conn.cursor() as cur, cur.copy(tables.sql(COPY_POSTINGS)) as copy:
            copy.write(laid.copy_data)


def add_statistics(conn: psycopg.Connection[TupleRow], tables: Tables, laid: Laid) -> None:
    """The terms' document frequencies and the statistics the postings add."""
    if laid.stats:
        conn.execute(tables.sql(ADD_TERMS), [laid.terms, *laid.frequencies])
        conn.execute(tables.sql(ADD_STATS), laid.stats)


def write_postings(
    conn: psycopg.Connection[TupleRow], tables: Tables, postings: Postings, keys: Mapping[str, int]
) -> None:
    """Add postings (their chunks' rows, with their lengths, already written; ``keys``
    their chunk keys by id), their terms' document frequencies and the statistics."""
    laid = lay_out(postings, keys)
    copy_postings(conn, tables, laid)
    add_statistics(conn, tables, laid)


def backfill(conn: psycopg.Connection[TupleRow], tables: Tables, batch: int = 2000) -> None:
    """Add the postings of every stored chunk (``rebuild`` empties the tables first)."""
    after = 0
    while True:
        rows = conn.execute(
            tables.sql(
                "SELECT key, id, title, section, text, uri FROM {chunks} WHERE key > %s ORDER BY key LIMIT %s"
            ),
            (after, batch),
        ).fetchall()
        if not rows:
            return
        postings = Postings()
        for _, chunk_id, title, section, text, uri in rows:
            postings.add(chunk_id, title, section, text, uri)
        set_lengths(conn, tables, postings)
        write_postings(conn, tables, postings, {row[1]: int(row[0]) for row in rows})
        after = int(rows[-1][0])


def set_lengths(conn: psycopg.Connection[TupleRow], tables: Tables, postings: Postings) -> None:
    ids = list(postings.lengths)
    columns = [[postings.lengths[i][position] for i in ids] for position in range(len(FIELDS))]
    conn.execute(
        tables.sql(
            f"UPDATE {{chunks}} c SET {_columns('len_{f} = u.{f}')} "
            f"FROM unnest(%s::text[], {_columns('%s::int[]')}) AS u(id, {_columns('{f}')}) "
            "WHERE c.id = u.id"
        ),
        [ids, *columns],
    )


#: The index a term's best postings are read from, ``impact`` first, with every column a
#: posting is scored from (an index-only scan). Migration 6 creates it; a first load drops
#: it and builds it once at the end (``first_load``).
IMPACT_INDEX = (
    "CREATE INDEX IF NOT EXISTS {postings_impact} ON {postings} (term, impact DESC) INCLUDE (chunk, "
    + _columns("tf_{f}")
    + ", "
    + _columns("len_{f}")
    + ")"
)
#: The index a chunk's postings are found by when it is replaced or deleted; a first load
#: drops it too and builds it at the end.
CHUNK_INDEX = "CREATE INDEX IF NOT EXISTS {postings_chunk} ON {postings} (chunk)"
#: What a first load builds at its end, in this order.
LOAD_INDEXES = (IMPACT_INDEX, CHUNK_INDEX)


def first_load(conn: psycopg.Connection[TupleRow], tables: Tables) -> bool:
    """Under the write lock, before writing into an index that holds no chunks: drop the
    postings' indexes, which a bulk build at the end makes several times cheaper than
    keeping them row by row (measured at 20k chunks: the impact index was half the cost of
    writing postings; the chunk index, one entry per posting, cost the server about 1.5 us
    a posting, ~0.2 ms a chunk). Searches meanwhile stay correct, only slower, and so does
    a document written twice in one load (its old postings are then found by a scan).
    True when dropped: ``restore_indexes`` must follow (on release, or on the next open
    after a crash)."""
    with conn.transaction():
        row = conn.execute(tables.sql("SELECT chunks FROM {bm25_stats}")).fetchone()
        if row is None or int(row[0]) != 0:
            return False
        conn.execute(tables.sql("DROP INDEX IF EXISTS {postings_impact}"))
        conn.execute(tables.sql("DROP INDEX IF EXISTS {postings_chunk}"))
    return True


def restore_indexes(conn: psycopg.Connection[TupleRow], tables: Tables) -> None:
    """Build the postings' indexes a first load dropped (nothing when they exist)."""
    for statement in LOAD_INDEXES:
        conn.execute(tables.sql(statement))


def end_first_load(conn: psycopg.Connection[TupleRow], tables: Tables) -> None:
    """Build the postings' indexes in bulk, then vacuum what the load wrote (on an
    autocommit connection): the visibility map lets a term's postings be read from the
    index alone (else each query fetched heap pages), and the statistics give the planner
    real sizes."""
    restore_indexes(conn, tables)
    for table in ("postings", "chunks", "terms"):
        conn.execute(tables.sql(f"VACUUM (ANALYZE) {{{table}}}"))


#: The ``state`` key recording which analysis the postings were built with: when the
#: SQLite full-text index's analyzers change (``FULLTEXT_VERSION``), so must these.
ANALYSIS_KEY = "lore.bm25_analysis"


def rebuild(conn: psycopg.Connection[TupleRow], tables: Tables) -> int:
    """Build the postings and statistics afresh from the stored chunks (``lore reindex``,
    and on opening an index analysed by another version); returns the chunk count."""
    with conn.transaction():
        conn.execute(tables.sql("TRUNCATE {postings}, {terms}"))
        conn.execute(tables.sql("UPDATE {bm25_stats} SET chunks = 0, " + _columns("len_{f} = 0")))
        backfill(conn, tables)
        conn.execute(
            tables.sql(
                "INSERT INTO {state} (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
            ),
            (ANALYSIS_KEY, str(FULLTEXT_VERSION)),
        )
        row = conn.execute(tables.sql("SELECT chunks FROM {bm25_stats}")).fetchone()
    return int(row[0]) if row else 0


def is_current(conn: psycopg.Connection[TupleRow], tables: Tables) -> bool:
    """Whether the postings were built with the analyzers this lore uses."""
    row = conn.execute(tables.sql("SELECT value FROM {state} WHERE key = %s"), (ANALYSIS_KEY,)).fetchone()
    return row is not None and row[0] == str(FULLTEXT_VERSION)


def mark_stale(conn: psycopg.Connection[TupleRow], tables: Tables) -> None:
    """A migration step: the postings are rebuilt (``rebuild``) once the index has reached
    the latest layout, since a rebuild writes every column of that layout."""
    conn.execute(tables.sql("DELETE FROM {state} WHERE key = %s"), (ANALYSIS_KEY,))

