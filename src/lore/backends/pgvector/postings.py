"""The write side of the BM25 channel (``bm25.py`` searches): postings and term
statistics added and removed in each write's transaction, rebuilt from the stored chunks.

The client analyses each chunk with tantivy's analyzers (``field_terms``, the SQLite
backend's own) and sends the token streams as they come, one space-joined string per
field and chunk; the server counts them into postings and document frequencies in one
statement (``INSERT_POSTINGS``). Measured at 10k synthetic chunks: building the postings
lines in Python (a Counter and a formatted line per term and chunk) cost twice the
analysis itself, so the counting moved to the server, which runs beside the client on
another core. The tokens never hold a space: the English analyzer splits at every
non-alphanumeric character and the identifier analyzer's pattern (``\\w+([.-]\\w+)*``)
has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from lore.backends.pgvector.bm25 import FIELDS, K1, REFERENCE_LENGTHS, B
from lore.backends.sqlite.fulltext import FULLTEXT_VERSION, field_terms
from lore.errors import MissingExtraError

try:
    import psycopg
    from psycopg import sql
    from psycopg.rows import TupleRow
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

if TYPE_CHECKING:
    from lore.backends.pgvector.schema import Tables

#: Counts and lengths are smallint columns.
SMALLINT_MAX = 32_767


@dataclass(slots=True)
class Postings:
    """The token streams of some chunks (``INSERT_POSTINGS`` counts them) and their field
    lengths, which the chunk rows and the statistics take too."""

    chunk_ids: list[str] = field(default_factory=list)
    #: Per field (``FIELDS``), one space-joined token string per chunk.
    tokens: list[list[str]] = field(default_factory=lambda: [[] for _ in FIELDS])
    lengths: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def add(self, chunk_id: str, title: str, section: str, text: str, uri: str = "") -> None:
        analysed = field_terms(title, section, text, uri)
        self.chunk_ids.append(chunk_id)
        lengths = []
        for column, name in zip(self.tokens, FIELDS, strict=True):
            terms = analysed[name]
            column.append(" ".join(terms))
            lengths.append(min(len(terms), SMALLINT_MAX))
        self.lengths[chunk_id] = tuple(lengths)

    def params(self) -> list[Any]:
        """Parameters of ``INSERT_POSTINGS``."""
        return [self.chunk_ids, *self.tokens]

    def stats_params(self) -> list[int]:
        """Parameters of ``ADD_STATS``: the chunk count, then each field's total length."""
        totals = [sum(lengths[i] for lengths in self.lengths.values()) for i in range(len(FIELDS))]
        return [len(self.lengths), *totals]


def _columns(template: str) -> str:
    return ", ".join(template.format(f=name) for name in FIELDS)


def _impact() -> str:
    """A posting's length-normalised term frequency against ``REFERENCE_LENGTHS``: the
    order of a term's postings in its index (scores use the live averages)."""
    a = K1 * (1.0 - B)
    return " + ".join(
        f"tf_{name}::float8 / (tf_{name} + {a!r} + {K1 * B / REFERENCE_LENGTHS[name]!r} * len_{name})"
        for name in FIELDS
    )


def _tokens_by_field() -> str:
    return " UNION ALL ".join(
        f"SELECT {number}, x FROM string_to_table(u.{name}, ' ') x" for number, name in enumerate(FIELDS)
    )


_TERM_UPSERT = "ON CONFLICT (term) DO UPDATE SET " + ", ".join(
    f"df_{name} = {{terms}}.df_{name} + EXCLUDED.df_{name}" for name in FIELDS
)

#: Parameters: ``Postings.params()``. The chunks' rows are written first, in the same
#: transaction; each is looked up by id (a lateral lookup, so the planner cannot choose to
#: scan the chunks table). Document frequencies are added from what was inserted, in term
#: order, so concurrent writers lock term rows in one order and cannot deadlock.
INSERT_POSTINGS = f"""
WITH u AS MATERIALIZED (
    SELECT c.*, {_columns("u.{f}")}
    FROM unnest(%s::text[], {_columns("%s::text[]")}) AS u(id, {_columns("{f}")})
    CROSS JOIN LATERAL (SELECT key, {_columns("len_{f}")} FROM {{chunks}} WHERE id = u.id) c
),
counted AS (
    SELECT u.key, t.term, {_columns("u.len_{f}")},
           {", ".join(f"least(count(*) FILTER (WHERE t.n = {n}), {SMALLINT_MAX}) AS tf_{name}"
                      for n, name in enumerate(FIELDS))}
    FROM u CROSS JOIN LATERAL ({_tokens_by_field()}) t(n, term)
    WHERE t.term <> ''
    GROUP BY u.key, t.term, {_columns("u.len_{f}")}
),
inserted AS (
    INSERT INTO {{postings}} (term, chunk, {_columns("tf_{f}")}, {_columns("len_{f}")}, impact)
    SELECT term, key, {_columns("tf_{f}::int2")},
           {_columns("least(len_{f}, " + str(SMALLINT_MAX) + ")::int2")}, ({_impact()})::float4
    FROM counted
    RETURNING term, {_columns("tf_{f}")}
)
INSERT INTO {{terms}} (term, {_columns("df_{f}")})
SELECT term, {_columns("count(*) FILTER (WHERE tf_{f} > 0)")} FROM inserted GROUP BY term ORDER BY term
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


def write_postings(conn: psycopg.Connection[TupleRow], tables: Tables, postings: Postings) -> None:
    """Add postings (their chunks' rows, with their lengths, already written) and their
    statistics."""
    if not postings.lengths:
        return
    conn.execute(tables.sql(INSERT_POSTINGS), postings.params())
    conn.execute(tables.sql(ADD_STATS), postings.stats_params())


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
        write_postings(conn, tables, postings)
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


def first_load(conn: psycopg.Connection[TupleRow], tables: Tables) -> bool:
    """Under the write lock, before writing into an index that holds no chunks: drop the
    impact index, which a bulk build at the end makes several times faster than keeping it
    row by row (measured: it was half the cost of writing postings). Searches meanwhile
    stay correct, only slower. True when dropped: ``IMPACT_INDEX`` must follow (on release,
    or on the next open after a crash)."""
    with conn.transaction():
        row = conn.execute(tables.sql("SELECT chunks FROM {bm25_stats}")).fetchone()
        if row is None or int(row[0]) != 0:
            return False
        conn.execute(tables.sql("DROP INDEX IF EXISTS {postings_impact}"))
    return True


def end_first_load(conn: psycopg.Connection[TupleRow], tables: Tables) -> None:
    """Build the impact index in bulk, then vacuum what the load wrote (on an autocommit
    connection): the visibility map lets a term's postings be read from the index alone
    (else each query fetched heap pages), and the statistics give the planner real sizes."""
    conn.execute(tables.sql(IMPACT_INDEX))
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

