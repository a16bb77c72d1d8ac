"""Earlier layouts of a pgvector index, rebuilt from the current one, for migration tests."""

from __future__ import annotations

import psycopg


def to_schema_8(pg_dsn: str, index: str) -> None:
    """Turn an index back into the layout of schema 8: no replica sessions or sync queue."""
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {index}_sessions, {index}_sync_queue")
        conn.execute(f"DELETE FROM {index}_schema_version WHERE version > 8")


def to_schema_7(pg_dsn: str, index: str) -> None:
    """Turn an index back into the layout of schema 7: BM25 fields title, section, body,
    path and ident (migration 8 put ``content`` in the place of section and body). The
    postings keep the current rows: the migration rebuilds them."""
    to_schema_8(pg_dsn, index)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"DROP INDEX {index}_postings_impact")
        for table, kind in (("postings", "tf"), ("postings", "len"), ("chunks", "len"),
                            ("terms", "df"), ("bm25_stats", "len")):
            conn.execute(f"ALTER TABLE {index}_{table} RENAME COLUMN {kind}_content TO {kind}_body")
            width = "bigint" if table == "bm25_stats" else "integer" if table != "postings" else "smallint"
            conn.execute(
                f"ALTER TABLE {index}_{table} ADD COLUMN {kind}_section {width} NOT NULL DEFAULT 0"
            )
        conn.execute(
            f"CREATE INDEX {index}_postings_impact ON {index}_postings (term, impact DESC) "
            "INCLUDE (chunk, tf_title, tf_section, tf_body, tf_path, tf_ident,"
            " len_title, len_section, len_body, len_path, len_ident)"
        )
        conn.execute(f"DELETE FROM {index}_schema_version WHERE version > 7")


def to_schema_3(pg_dsn: str, index: str) -> None:
    """Turn an index back into the layout of schema 3: the ts_rank columns, no postings,
    no event tables."""
    to_schema_7(pg_dsn, index)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"DROP TABLE {index}_postings, {index}_terms, {index}_bm25_stats")
        conn.execute(f"DROP TABLE {index}_events, {index}_feedback, {index}_suggestions")  # migration 4
        conn.execute(
            f"ALTER TABLE {index}_chunks DROP COLUMN key, DROP COLUMN len_title, DROP COLUMN len_section,"
            " DROP COLUMN len_body, DROP COLUMN len_ident, DROP COLUMN len_path,"
            " ADD COLUMN tsv tsvector NOT NULL DEFAULT ''::tsvector,"
            " ADD COLUMN idents text[] NOT NULL DEFAULT '{}'::text[]"
        )
        conn.execute(f"UPDATE {index}_chunks SET tsv = to_tsvector('english', title || ' ' || text)")
        conn.execute(f"CREATE INDEX {index}_chunks_tsv ON {index}_chunks USING gin (tsv)")
        conn.execute(f"DELETE FROM {index}_schema_version WHERE version > 3")


def to_schema_5(pg_dsn: str, index: str) -> None:
    """Turn an index back into the layout of schema 5: BM25 postings without the path field."""
    to_schema_7(pg_dsn, index)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"DROP INDEX {index}_postings_impact")
        conn.execute(f"ALTER TABLE {index}_chunks DROP COLUMN len_path")
        conn.execute(f"ALTER TABLE {index}_postings DROP COLUMN tf_path, DROP COLUMN len_path")
        conn.execute(f"ALTER TABLE {index}_terms DROP COLUMN df_path")
        conn.execute(f"ALTER TABLE {index}_bm25_stats DROP COLUMN len_path")
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS {index}_postings_impact ON {index}_postings (term, impact DESC) "
            "INCLUDE (chunk, tf_title, tf_section, tf_body, tf_ident,"
            " len_title, len_section, len_body, len_ident)"
        )
        for table in ("postings", "terms"):  # migration 7's byte-wise terms
            conn.execute(f'ALTER TABLE {index}_{table} ALTER COLUMN term TYPE text COLLATE "default"')
        conn.execute(f"DELETE FROM {index}_schema_version WHERE version > 5")
