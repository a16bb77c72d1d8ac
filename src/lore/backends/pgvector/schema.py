"""The PostgreSQL schema of one lore index and its ordered migrations.

Every table of an index is prefixed with the index name (``lore_chunks``, ``runbooks_chunks``),
so several indexes share one database. Names are composed with ``psycopg.sql.Identifier``
from a name the settings already restrict to ``[a-z][a-z0-9_]{0,40}``; values are always
query parameters. Applied versions are recorded in ``<index>_schema_version``; migrations
run under a transaction-scoped advisory lock, so two processes opening the same index at
once apply each step exactly once.

The embedding column starts without a dimension: the dimension is the embedder's, known
only when the first sync records it (``vector_statements``), and it fixes the HNSW index.

The tables' names are ``tables.py``; the statements run against these tables, and the
row mapping, ``statements.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from lore.access import tenant_term
from lore.backends.pgvector import bm25, postings

# The names, where the backend's modules have always found them (``tables.py``).
from lore.backends.pgvector.tables import INDEX_NAME as INDEX_NAME
from lore.backends.pgvector.tables import LOCK_CLASS as LOCK_CLASS
from lore.backends.pgvector.tables import Tables as Tables
from lore.backends.pgvector.tables import lock_key as lock_key
from lore.errors import ConfigError, MissingExtraError
from lore.migrations import Migration, schema
from lore.migrations import migrate as run_migrations

try:
    import psycopg
    from psycopg import sql
    from psycopg.rows import TupleRow
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

#: A migration step: SQL (table names in braces), or a function for what SQL alone cannot
#: do (analysing stored text with tantivy's analyzers).
Step = str | Callable[[psycopg.Connection[TupleRow], "Tables"], object]

#: Append only; never edit an applied migration. The number of one is its version in
#: ``<index>_schema_version``; ``about`` is recorded there beside it.
MIGRATIONS: tuple[Migration[Step], ...] = schema(
    Migration(
        "m001_documents_chunks_state_embedder",
        about="documents, chunks, state, embedder",
        steps=(
            """CREATE TABLE {documents} (
                uri text PRIMARY KEY,
                source text NOT NULL,
                title text NOT NULL,
                revision text NOT NULL,
                updated_at timestamptz NOT NULL,
                labels jsonb NOT NULL,
                media_type text NOT NULL,
                chunk_count integer NOT NULL,
                indexed_at timestamptz NOT NULL
            )""",
            "CREATE INDEX {documents_source} ON {documents} (source)",
            """CREATE TABLE {chunks} (
                id text PRIMARY KEY,
                uri text NOT NULL,
                ordinal integer NOT NULL,
                text text NOT NULL,
                section text NOT NULL,
                content_hash text NOT NULL,
                title text NOT NULL,
                revision text NOT NULL,
                updated_at timestamptz NOT NULL,
                labels jsonb NOT NULL,
                label_terms text[] NOT NULL,
                embed_key text NOT NULL,
                embedding vector,
                tsv tsvector NOT NULL,
                idents text[] NOT NULL
            )""",
            "CREATE INDEX {chunks_uri} ON {chunks} (uri)",
            "CREATE INDEX {chunks_tsv} ON {chunks} USING gin (tsv)",
            "CREATE INDEX {chunks_idents} ON {chunks} USING gin (idents)",
            "CREATE INDEX {chunks_labels} ON {chunks} USING gin (label_terms)",
            "CREATE INDEX {chunks_embed_key} ON {chunks} (embed_key)",
            "CREATE TABLE {state} (key text PRIMARY KEY, value text NOT NULL)",
            """CREATE TABLE {embedder} (
                only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
                model_id text NOT NULL,
                dimension integer NOT NULL CHECK (dimension > 0)
            )""",
        ),
    ),
    Migration(
        "m002_sync_runs",
        about="sync run history",
        steps=(
            # The record is the JSON every backend keeps, as text: jsonb refuses the
            # \u0000 escape a failure reason quoting a binary file may carry.
            """CREATE TABLE {runs} (
                run_id text PRIMARY KEY,
                started_at timestamptz NOT NULL,
                finished_at timestamptz NOT NULL,
                trigger text NOT NULL,
                status text NOT NULL,
                sources text[] NOT NULL,
                record text NOT NULL
            )""",
            "CREATE INDEX {runs_started} ON {runs} (started_at DESC)",
            "CREATE INDEX {runs_sources} ON {runs} USING gin (sources)",
        ),
    ),
    Migration(
        "m003_access",
        about="access: who may read each document, and its tenant (issue 12)",
        steps=(
            # NULL access is unknown: admins only. Chunks carry lore.access.access_terms;
            # rows of an older index get the default tenant's term and no group, so they
            # are for admins until the next sync writes them afresh.
            "ALTER TABLE {documents} ADD COLUMN access text[], ADD COLUMN tenant text",
            f"ALTER TABLE {{chunks}} ADD COLUMN access_terms text[] NOT NULL "
            f"DEFAULT ARRAY['{tenant_term(None)}']::text[]",
            "CREATE INDEX {chunks_access} ON {chunks} USING gin (access_terms)",
        ),
    ),
    Migration(
        "m004_events",
        about="retrieval events, feedback and alert suggestions (issue 13)",
        steps=(
            # Records as text, like runs: jsonb refuses \u0000, which a query may carry.
            """CREATE TABLE {events} (
                event_id text PRIMARY KEY, time timestamptz NOT NULL, tenant text,
                empty boolean NOT NULL, degraded boolean NOT NULL, uris text[] NOT NULL,
                record text NOT NULL
            )""",
            "CREATE INDEX {events_time} ON {events} (time DESC)",
            """CREATE TABLE {feedback} (
                feedback_id text PRIMARY KEY, event_id text NOT NULL, time timestamptz NOT NULL,
                record text NOT NULL
            )""",
            "CREATE INDEX {feedback_event} ON {feedback} (event_id)",
            """CREATE TABLE {suggestions} (
                tenant text NOT NULL, fingerprint text NOT NULL, time timestamptz NOT NULL,
                event_id text, record text NOT NULL, PRIMARY KEY (tenant, fingerprint)
            )""",
        ),
    ),
    Migration(
        "m005_bm25_postings",
        about="BM25: postings and term statistics built from the stored chunks; tsvector columns dropped",
        # The postings are built once the latest layout stands (``postings.mark_stale``).
        steps=(*bm25.MIGRATION_STATEMENTS, postings.mark_stale),
    ),
    Migration(
        "m006_bm25_path_field",
        about="BM25: the path field (folder and file-name words), as in the SQLite backend",
        steps=(
            "ALTER TABLE {chunks} ADD COLUMN len_path integer NOT NULL DEFAULT 0",
            "ALTER TABLE {postings} ADD COLUMN tf_path smallint NOT NULL DEFAULT 0, "
            "ADD COLUMN len_path smallint NOT NULL DEFAULT 0",
            "ALTER TABLE {terms} ADD COLUMN df_path integer NOT NULL DEFAULT 0",
            "ALTER TABLE {bm25_stats} ADD COLUMN len_path bigint NOT NULL DEFAULT 0",
            "DROP INDEX {postings_impact}",
            bm25.PATH_IMPACT_INDEX,
            postings.mark_stale,
        ),
    ),
    Migration(
        "m007_bm25_terms_bytewise",
        about="BM25: terms compared byte-wise (COLLATE \"C\")",
        # Terms are only ever matched exactly and ordered for locking, never for people:
        # under a locale's collation every comparison of a sort or B-tree insert calls
        # strcoll: the impact index's build over the 2.7M postings of 20k synthetic chunks
        # took 10.0 s of server CPU, 6.0-6.8 s byte-wise. Byte order is code-point order
        # in UTF-8, the order the client sorts terms in.
        steps=(
            'ALTER TABLE {postings} ALTER COLUMN term TYPE text COLLATE "C"',
            'ALTER TABLE {terms} ALTER COLUMN term TYPE text COLLATE "C"',
        ),
    ),
    Migration(
        "m008_bm25_content_field",
        about="BM25: one field for the whole chunk, title and path again where they are names",
        # As full-text version 5 of the SQLite backend (bench/history/quality.md, "A document's
        # name by its shape").
        steps=(*bm25.CONTENT_FIELD_STATEMENTS, postings.IMPACT_INDEX, postings.mark_stale),
    ),
    Migration(
        "m009_replica_sessions_sync_queue",
        about="lore serve replicas: page sessions and the queue of syncs",
        # Sessions are keyed by a hash of the cookie's id, and hold the HMAC of their
        # token, never a principal (lore.backends.pgvector.replicas).
        steps=(
            """CREATE TABLE {sessions} (
                key text PRIMARY KEY, token_digest text NOT NULL, csrf_token text NOT NULL,
                created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                expires_at timestamptz NOT NULL
            )""",
            "CREATE INDEX {sessions_token} ON {sessions} (token_digest, created_at)",
            """CREATE TABLE {sync_queue} (
                run_id text PRIMARY KEY, source text, queued_at timestamptz NOT NULL,
                started_at timestamptz, holder text
            )""",
            # One waiting run per source (and one over every source): a second request queues nothing.
            "CREATE UNIQUE INDEX {sync_queue_waiting} ON {sync_queue} (coalesce(source, '')) "
            "WHERE started_at IS NULL",
        ),
    ),
)

LATEST_VERSION = len(MIGRATIONS)


def schema_version(conn: psycopg.Connection[TupleRow], tables: Tables) -> int:
    """The highest applied migration, 0 for an index that does not exist yet."""
    name = f"{tables.index}_schema_version"
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    if not exists or not exists[0]:
        return 0
    row = conn.execute(tables.sql("SELECT coalesce(max(version), 0) FROM {schema_version}")).fetchone()
    return int(row[0]) if row else 0


def migrate(conn: psycopg.Connection[TupleRow], tables: Tables) -> int:
    """Create the extension and bring the index's tables to ``LATEST_VERSION``: one
    transaction under one advisory lock, each migration a savepoint of it."""
    with conn.transaction():
        # One lock for every index: CREATE EXTENSION races between indexes too.
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, lock_key("migrate", "*")))
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(
            tables.sql(
                "CREATE TABLE IF NOT EXISTS {schema_version} ("
                " version integer PRIMARY KEY, description text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
        )
        return run_migrations(MIGRATIONS, _VersionTable(conn, tables))


class _VersionTable:
    """The ``lore.migrations.Ledger`` of one index: a row per applied migration in
    ``<index>_schema_version``."""

    def __init__(self, conn: psycopg.Connection[TupleRow], tables: Tables) -> None:
        self._conn = conn
        self._tables = tables

    def version(self) -> int:
        return schema_version(self._conn, self._tables)

    def step(self) -> AbstractContextManager[object]:
        return self._conn.transaction()

    def apply(self, step: Step) -> None:
        if isinstance(step, str):
            self._conn.execute(self._tables.sql(step))
        else:
            step(self._conn, self._tables)

    def record(self, version: int, migration: Migration[Step]) -> None:
        self._conn.execute(
            self._tables.sql("INSERT INTO {schema_version} (version, description) VALUES (%s, %s)"),
            (version, migration.about or migration.name),
        )

    def too_new(self, version: int, latest: int) -> ConfigError:
        return ConfigError(
            f"index {self._tables.index!r} has schema version {version}, newer than this lore "
            f"({latest}); upgrade lore"
        )


def vector_statements(tables: Tables, dimension: int) -> list[sql.Composed]:
    """Fix the embedding column's dimension and build the cosine HNSW index over it."""
    return [vector_column_statement(tables, dimension), vector_index_statement(tables)]


def vector_column_statement(tables: Tables, dimension: int) -> sql.Composed:
    """Fix the embedding column's dimension; run once, when the index records its embedder."""
    # A type modifier cannot be a query parameter; it is rendered as an int literal.
    return tables.sql(
        "ALTER TABLE {chunks} ALTER COLUMN embedding TYPE vector({dim})", dim=sql.Literal(int(dimension))
    )


def vector_index_statement(tables: Tables) -> sql.Composed:
    """The cosine HNSW index. Built once over a first load rather than row by row as it
    arrives: a bulk build is several times faster (docs/backends.md)."""
    return tables.sql(
        "CREATE INDEX IF NOT EXISTS {chunks_embedding} ON {chunks} USING hnsw (embedding vector_cosine_ops)"
    )


#: Parameters: the kilobytes a bulk index build should have. ``maintenance_work_mem`` is
#: raised for the transaction only, never lowered: an HNSW build whose graph outgrows it
#: goes on inserting on disk, several times slower (pgvector's notice "hnsw graph no longer
#: fits into maintenance_work_mem"); the server's default, 64MB, holds about 35k vectors
#: of 384 dimensions.
RAISE_BUILD_MEMORY = (
    "SELECT set_config('maintenance_work_mem', "
    "greatest(pg_size_bytes(current_setting('maintenance_work_mem')) / 1024, %s)::text || 'kB', true)"
)
#: The most a build asks for (a server's own larger setting stays).
MAX_BUILD_MEMORY_KB = 1024 * 1024


def build_memory_kb(rows: int, dimension: int) -> int:
    """What an HNSW graph of ``rows`` vectors needs in memory, with room to spare: each
    element holds its vector and its neighbour lists (measured by pgvector's own notice:
    about 1.7 kB per 384-dimension vector at the default m = 16)."""
    per_row = dimension * 4 + 300
    return min(MAX_BUILD_MEMORY_KB, max(1, rows * per_row * 5 // 4 // 1024))


def drop_statements(tables: Tables) -> list[sql.Composed]:
    return [
        tables.sql(f"DROP TABLE IF EXISTS {{{name}}}")
        for name in (
            *("postings", "terms", "bm25_stats", "chunks", "documents", "state", "embedder"),
            *("schema_version", "reembed", "reembed_target", "runs", "events", "feedback", "suggestions"),
            *("sessions", "sync_queue"),
        )
    ]
