"""The PostgreSQL schema of one lore index, and its ordered migrations.

Every table of an index is prefixed with the index name (``lore_chunks``, ``runbooks_chunks``),
so several indexes share one database. Names are composed with ``psycopg.sql.Identifier``
from a name the settings already restrict to ``[a-z][a-z0-9_]{0,40}``; values are always
query parameters. Applied versions are recorded in ``<index>_schema_version``; migrations
run under a transaction-scoped advisory lock, so two processes opening the same index at
once apply each step exactly once.

The embedding column starts without a dimension: the dimension is the embedder's, known
only when the first sync records it (``vector_statements``), and it fixes the HNSW index.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from lore.errors import ConfigError

INDEX_NAME = re.compile(r"[a-z][a-z0-9_]{0,40}")
#: Full-text configuration of the word channel. Identifiers get their own exact column.
TEXT_SEARCH_CONFIG = "english"

#: ``pg_advisory_lock(classid, objid)`` namespace of lore: the bytes of "lore".
LOCK_CLASS = int.from_bytes(b"lore", "big")


def lock_key(purpose: str, index: str) -> int:
    """A stable signed 32-bit advisory-lock key (Python-side, so it never depends on the
    server's internal hash function)."""
    digest = hashlib.blake2b(f"{purpose}:{index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True, slots=True)
class Tables:
    """The relation names of one index."""

    index: str

    def __post_init__(self) -> None:
        # The settings enforce this too; checked again for callers that build a backend directly.
        if not INDEX_NAME.fullmatch(self.index):
            raise ConfigError(f"index name {self.index!r} must match {INDEX_NAME.pattern}")

    def name(self, suffix: str) -> sql.Identifier:
        # Suffixes stay short: an index name of 41 characters plus any of them fits the
        # 63-byte identifier limit, so PostgreSQL never silently truncates (and collides).
        return sql.Identifier(f"{self.index}_{suffix}")

    def mapping(self) -> Mapping[str, sql.Identifier]:
        return {
            "schema_version": self.name("schema_version"),
            "documents": self.name("documents"),
            "documents_source": self.name("documents_source"),
            "chunks": self.name("chunks"),
            "chunks_uri": self.name("chunks_uri"),
            "chunks_tsv": self.name("chunks_tsv"),
            "chunks_idents": self.name("chunks_idents"),
            "chunks_labels": self.name("chunks_labels"),
            "chunks_embed_key": self.name("chunks_embed_key"),
            "chunks_embedding": self.name("chunks_embedding"),
            "state": self.name("state"),
            "embedder": self.name("embedder"),
        }

    def sql(self, template: str, **extra: sql.Composable) -> sql.Composed:
        return sql.SQL(template).format(**self.mapping(), **extra)


#: (version, description, statements). Append only; never edit an applied step.
MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "documents, chunks, state, embedder",
        (
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
)

LATEST_VERSION = MIGRATIONS[-1][0]


def schema_version(conn: psycopg.Connection[TupleRow], tables: Tables) -> int:
    """The highest applied migration, 0 for an index that does not exist yet."""
    name = f"{tables.index}_schema_version"
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    if not exists or not exists[0]:
        return 0
    row = conn.execute(tables.sql("SELECT coalesce(max(version), 0) FROM {schema_version}")).fetchone()
    return int(row[0]) if row else 0


def migrate(conn: psycopg.Connection[TupleRow], tables: Tables) -> int:
    """Create the extension and bring the index's tables to ``LATEST_VERSION``."""
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
        current = schema_version(conn, tables)
        if current > LATEST_VERSION:
            raise ConfigError(
                f"index {tables.index!r} has schema version {current}, newer than this lore "
                f"({LATEST_VERSION}); upgrade lore"
            )
        for version, description, statements in MIGRATIONS:
            if version <= current:
                continue
            for statement in statements:
                conn.execute(tables.sql(statement))
            conn.execute(
                tables.sql("INSERT INTO {schema_version} (version, description) VALUES (%s, %s)"),
                (version, description),
            )
    return LATEST_VERSION


def vector_statements(tables: Tables, dimension: int) -> list[sql.Composed]:
    """Fix the embedding column's dimension and build the cosine HNSW index over it; run
    once, when the index records its embedder."""
    return [
        # A type modifier cannot be a query parameter; it is rendered as an int literal.
        tables.sql(
            "ALTER TABLE {chunks} ALTER COLUMN embedding TYPE vector({dim})", dim=sql.Literal(int(dimension))
        ),
        tables.sql(
            "CREATE INDEX IF NOT EXISTS {chunks_embedding} ON {chunks} "
            "USING hnsw (embedding vector_cosine_ops)"
        ),
    ]


def drop_statements(tables: Tables) -> list[sql.Composed]:
    return [
        tables.sql(f"DROP TABLE IF EXISTS {{{name}}}")
        for name in ("chunks", "documents", "state", "embedder", "schema_version")
    ]
