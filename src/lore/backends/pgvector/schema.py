"""The PostgreSQL schema of one lore index, its ordered migrations, and the statements
the backend runs against it.

Every table of an index is prefixed with the index name (``lore_chunks``, ``runbooks_chunks``),
so several indexes share one database. Names are composed with ``psycopg.sql.Identifier``
from a name the settings already restrict to ``[a-z][a-z0-9_]{0,40}``; values are always
query parameters. Applied versions are recorded in ``<index>_schema_version``; migrations
run under a transaction-scoped advisory lock, so two processes opening the same index at
once apply each step exactly once.

The embedding column starts without a dimension: the dimension is the embedder's, known
only when the first sync records it (``vector_statements``), and it fixes the HNSW index.

Row builders map lore's records to and from these tables, so ``pgvector.py`` holds only
connection handling and the search logic.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter, tenant_term
from lore.backends import lexical
from lore.backends.pgvector import bm25, postings
from lore.errors import ConfigError, MissingExtraError
from lore.models import SOURCE_LABEL, Chunk, Document, Passage, RunRecord, embed_key, label_terms, utc
from lore.schedule_history import run_to_json

try:
    import psycopg
    from psycopg import sql
    from psycopg.rows import TupleRow
    from psycopg.types.json import Jsonb
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

INDEX_NAME = re.compile(r"[a-z][a-z0-9_]{0,40}")
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
        return _mapping(self.index)

    def sql(self, template: str, **extra: sql.Composable) -> sql.Composed:
        if extra:
            return sql.SQL(template).format(**self.mapping(), **extra)
        return _statement(self.index, template)


@lru_cache(maxsize=4096)
def _statement(index: str, template: str) -> sql.Composed:
    """A statement composed once per index: composing one cost about as much client time
    as sending it (measured on ingest)."""
    return sql.SQL(template).format(**_mapping(index))


@lru_cache(maxsize=256)
def _mapping(index: str) -> Mapping[str, sql.Identifier]:
    def name(suffix: str) -> sql.Identifier:
        return sql.Identifier(f"{index}_{suffix}")

    return {
            "schema_version": name("schema_version"),
            "documents": name("documents"),
            "documents_source": name("documents_source"),
            "chunks": name("chunks"),
            "chunks_uri": name("chunks_uri"),
            "chunks_tsv": name("chunks_tsv"),
            "chunks_idents": name("chunks_idents"),
            "chunks_labels": name("chunks_labels"),
            "chunks_access": name("chunks_access"),
            "chunks_embed_key": name("chunks_embed_key"),
            "chunks_embedding": name("chunks_embedding"),
            "chunks_key": name("chunks_key"),
            # The BM25 channel (bm25.py).
            "postings": name("postings"),
            "postings_impact": name("postings_impact"),
            "postings_chunk": name("postings_chunk"),
            "terms": name("terms"),
            "bm25_stats": name("bm25_stats"),
            "state": name("state"),
            "embedder": name("embedder"),
            # Staging of `lore reembed` (reembed.py), present only while one is under way.
            "reembed": name("reembed"),
            "reembed_target": name("reembed_target"),
            # Sync run history (lore.schedule_history).
            "runs": name("runs"),
            "runs_started": name("runs_started"),
            "runs_sources": name("runs_sources"),
            # Retrieval events, feedback, alert suggestions (lore.backends.pgvector.events).
            "events": name("events"),
            "events_time": name("events_time"),
            "feedback": name("feedback"),
            "feedback_event": name("feedback_event"),
            "suggestions": name("suggestions"),
        }


#: A migration step: SQL (table names in braces), or a function for what SQL alone cannot
#: do (analysing stored text with tantivy's analyzers).
Step = str | Callable[[psycopg.Connection[TupleRow], "Tables"], object]

#: (version, description, steps). Append only; never edit an applied step.
MIGRATIONS: tuple[tuple[int, str, tuple[Step, ...]], ...] = (
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
    (
        2,
        "sync run history",
        (
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
    (
        3,
        "access: who may read each document, and its tenant (issue 12)",
        (
            # NULL access is unknown: admins only. Chunks carry lore.access.access_terms;
            # rows of an older index get the default tenant's term and no group, so they
            # are for admins until the next sync writes them afresh.
            "ALTER TABLE {documents} ADD COLUMN access text[], ADD COLUMN tenant text",
            f"ALTER TABLE {{chunks}} ADD COLUMN access_terms text[] NOT NULL "
            f"DEFAULT ARRAY['{tenant_term(None)}']::text[]",
            "CREATE INDEX {chunks_access} ON {chunks} USING gin (access_terms)",
        ),
    ),
    (
        4,
        "retrieval events, feedback and alert suggestions (issue 13)",
        (
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
    (
        5,
        "BM25: postings and term statistics built from the stored chunks; tsvector columns dropped",
        # The postings are built once the latest layout stands (``postings.mark_stale``).
        (*bm25.MIGRATION_STATEMENTS, postings.mark_stale),
    ),
    (
        6,
        "BM25: the path field (folder and file-name words), as in the SQLite backend",
        (
            "ALTER TABLE {chunks} ADD COLUMN len_path integer NOT NULL DEFAULT 0",
            "ALTER TABLE {postings} ADD COLUMN tf_path smallint NOT NULL DEFAULT 0, "
            "ADD COLUMN len_path smallint NOT NULL DEFAULT 0",
            "ALTER TABLE {terms} ADD COLUMN df_path integer NOT NULL DEFAULT 0",
            "ALTER TABLE {bm25_stats} ADD COLUMN len_path bigint NOT NULL DEFAULT 0",
            "DROP INDEX {postings_impact}",
            postings.IMPACT_INDEX,
            postings.mark_stale,
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
                if isinstance(statement, str):
                    conn.execute(tables.sql(statement))
                else:
                    statement(conn, tables)
            conn.execute(
                tables.sql("INSERT INTO {schema_version} (version, description) VALUES (%s, %s)"),
                (version, description),
            )
    return LATEST_VERSION


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


def drop_statements(tables: Tables) -> list[sql.Composed]:
    return [
        tables.sql(f"DROP TABLE IF EXISTS {{{name}}}")
        for name in (
            *("postings", "terms", "bm25_stats", "chunks", "documents", "state", "embedder"),
            *("schema_version", "reembed", "reembed_target", "runs", "events", "feedback", "suggestions"),
        )
    ]


# -- statements ----------------------------------------------------------------------------

_UPSERT_CHUNK = """
INSERT INTO {chunks} (id, uri, ordinal, text, section, content_hash, title, revision, updated_at,
                      labels, label_terms, embed_key, embedding, access_terms,
                      len_title, len_section, len_body, len_path, len_ident)
VALUES (%(id)s, %(uri)s, %(ordinal)s, %(text)s, %(section)s, %(content_hash)s, %(title)s, %(revision)s,
        %(updated_at)s, %(labels)s, %(label_terms)s, %(embed_key)s, %(embedding)s, %(access_terms)s,
        %(len_title)s, %(len_section)s, %(len_body)s, %(len_path)s, %(len_ident)s)
ON CONFLICT (id) DO UPDATE SET
    uri = EXCLUDED.uri, ordinal = EXCLUDED.ordinal, text = EXCLUDED.text, section = EXCLUDED.section,
    content_hash = EXCLUDED.content_hash, title = EXCLUDED.title, revision = EXCLUDED.revision,
    updated_at = EXCLUDED.updated_at, labels = EXCLUDED.labels, label_terms = EXCLUDED.label_terms,
    embed_key = EXCLUDED.embed_key, embedding = EXCLUDED.embedding, access_terms = EXCLUDED.access_terms,
    len_title = EXCLUDED.len_title, len_section = EXCLUDED.len_section, len_body = EXCLUDED.len_body,
    len_path = EXCLUDED.len_path, len_ident = EXCLUDED.len_ident
"""

UPSERT_DOCUMENT = """
INSERT INTO {documents} (uri, source, title, revision, updated_at, labels, media_type, chunk_count,
                         indexed_at, access, tenant)
VALUES (%(uri)s, %(source)s, %(title)s, %(revision)s, %(updated_at)s, %(labels)s, %(media_type)s,
        %(chunk_count)s, %(indexed_at)s, %(access)s, %(tenant)s)
ON CONFLICT (uri) DO UPDATE SET
    source = EXCLUDED.source, title = EXCLUDED.title, revision = EXCLUDED.revision,
    updated_at = EXCLUDED.updated_at, labels = EXCLUDED.labels, media_type = EXCLUDED.media_type,
    chunk_count = EXCLUDED.chunk_count, indexed_at = EXCLUDED.indexed_at, access = EXCLUDED.access,
    tenant = EXCLUDED.tenant
"""


@dataclass(frozen=True, slots=True)
class RowFilter:
    """What a channel's rows must pass: every label term, and the caller's access (its
    tenant's term, and one of its group terms unless it is an admin). Both are GIN-indexed
    array conditions inside the channel's own query, never applied to its result."""

    labels: Sequence[str] = ()
    access: AccessFilter | None = None

    @property
    def active(self) -> bool:
        return bool(self.labels) or self.access is not None

    def conditions(self, alias: str) -> list[sql.Composable]:
        prefix = f"{alias}." if alias else ""
        found: list[sql.Composable] = []
        if self.labels:
            found.append(sql.SQL(prefix + "label_terms @> %s::text[]"))
        if self.access is not None:
            found.append(sql.SQL(prefix + "access_terms @> %s::text[]"))
            if self.access.group_terms is not None:
                found.append(sql.SQL(prefix + "access_terms && %s::text[]"))
        return found

    def params(self) -> list[list[str]]:
        """The parameters of ``conditions``, in order."""
        found = [sorted(self.labels)] if self.labels else []
        if self.access is not None:
            found.append([self.access.tenant_term])
            if self.access.group_terms is not None:
                found.append(sorted(self.access.group_terms))
        return found


def upsert_chunk_statement(tables: Tables) -> sql.Composed:
    return tables.sql(_UPSERT_CHUNK)


def vector_channel_statement(tables: Tables, rows: RowFilter) -> sql.Composed:
    """Parameters: the query vector, ``rows.params()``, the limit."""
    conditions = rows.conditions("")
    where = sql.SQL("WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")
    return tables.sql(
        "SELECT id, embedding <=> %s AS distance FROM {chunks} {where} ORDER BY distance LIMIT %s",
        where=where,
    )


RECORD_RUN = """
INSERT INTO {runs} (run_id, started_at, finished_at, trigger, status, sources, record)
VALUES (%(run_id)s, %(started_at)s, %(finished_at)s, %(trigger)s, %(status)s, %(sources)s, %(record)s)
ON CONFLICT (run_id) DO UPDATE SET
    started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at, trigger = EXCLUDED.trigger,
    status = EXCLUDED.status, sources = EXCLUDED.sources, record = EXCLUDED.record
"""

#: Parameter: how many runs to keep.
EXPIRE_RUNS = """
DELETE FROM {runs} WHERE run_id IN (
    SELECT run_id FROM {runs} ORDER BY started_at DESC, run_id OFFSET %s
)
"""


def runs_statement(tables: Tables, *, of_source: bool) -> sql.Composed:
    """Parameters: the source when ``of_source``, the limit."""
    return tables.sql(
        "SELECT record FROM {runs} {where} ORDER BY started_at DESC, run_id LIMIT %s",
        where=sql.SQL("WHERE sources @> ARRAY[%s]::text[]") if of_source else sql.SQL(""),
    )


def run_row(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "started_at": utc(run.started_at),
        "finished_at": utc(run.finished_at),
        "trigger": run.trigger.value,
        "status": run.status.value,
        "sources": [part.source for part in run.sources],
        "record": run_to_json(run),
    }


# -- rows <-> records --------------------------------------------------------------------


def clean_fields(chunk: Chunk) -> tuple[str, str, str]:
    """Title, section and text as stored (and analysed for BM25)."""
    return lexical.clean_text(chunk.title), lexical.clean_text(chunk.section), lexical.clean_text(chunk.text)


def chunk_row(
    chunk: Chunk,
    fields: tuple[str, str, str],
    vector: npt.NDArray[np.float32],
    access: list[str],
    lengths: Sequence[int],
) -> dict[str, Any]:
    """A chunk's row: ``fields`` are its ``clean_fields``, ``access`` its document's sorted
    ``lore.access.access_terms``, ``lengths`` its BM25 field lengths (``postings.Postings``)."""
    title, section, text = fields
    return {
        "id": chunk.id,
        "uri": chunk.uri,
        "ordinal": chunk.ordinal,
        "text": text,
        "section": section,
        "content_hash": chunk.content_hash,
        "title": title,
        "revision": chunk.revision,
        "updated_at": utc(chunk.updated_at),
        "labels": Jsonb(dict(chunk.labels)),
        "label_terms": sorted(label_terms(chunk.labels)),
        "embed_key": embed_key(chunk),
        "embedding": vector,
        "access_terms": access,
        **{f"len_{name}": length for name, length in zip(bm25.FIELDS, lengths, strict=True)},
    }


def document_row(document: Document, chunk_count: int) -> dict[str, Any]:
    """The document's ledger row; its chunks' rows take ``access_terms`` from it too."""
    return {
        "uri": document.uri,
        "source": str(document.labels.get(SOURCE_LABEL, "")),
        "title": lexical.clean_text(document.title),
        "revision": document.revision,
        "updated_at": utc(document.updated_at),
        "labels": Jsonb(dict(document.labels)),
        "media_type": document.media_type,
        "chunk_count": chunk_count,
        "indexed_at": datetime.now(UTC),
        "access": None if document.access is None else sorted(document.access),
        "tenant": document.tenant,
    }





#: Columns ``chunk_from_row`` reads, in order.
EXPORT_CHUNK_COLUMNS = (
    "id, ordinal, text, section, content_hash, title, revision, updated_at, labels, embedding"
)


def chunk_from_row(uri: str, row: Sequence[Any]) -> Chunk:
    chunk_id, ordinal, text, section, content_hash, title, revision, updated_at, labels = row[:9]
    return Chunk(
        id=chunk_id,
        uri=uri,
        ordinal=ordinal,
        text=text,
        section=section,
        content_hash=content_hash,
        title=title,
        revision=revision,
        updated_at=utc(updated_at),
        labels=dict(labels),
    )


def vector_array(value: Any) -> npt.NDArray[np.float32]:
    """pgvector's loader gives ``pgvector.Vector`` (numpy arrays in older releases)."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)


#: Columns ``passage_from_row`` reads, in order.
PASSAGE_COLUMNS = "id, text, uri, title, section, revision, updated_at, labels"


def passage_from_row(row: tuple[Any, ...], score: float, ranks: Mapping[str, int]) -> Passage:
    chunk_id, text, uri, title, section, revision, updated_at, labels = row
    return Passage(
        text=text,
        uri=uri,
        title=title,
        section=section,
        revision=revision,
        updated_at=utc(updated_at),
        score=score,
        labels=dict(labels),
        chunk_id=chunk_id,
        channel_ranks=dict(ranks),
    )
