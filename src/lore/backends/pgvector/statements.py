"""The statements the pgvector backend runs against an index's tables (``schema.py``),
the filter every retrieval channel applies, and the mapping of lore's records to and from
rows, so ``backend.py`` holds only connection handling and the search logic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter
from lore.backends import lexical
from lore.backends.pgvector.tables import Tables
from lore.errors import MissingExtraError
from lore.models import SOURCE_LABEL, Chunk, Document, Passage, RunRecord, utc
from lore.schedule_history import run_to_json

try:
    from psycopg import sql
    from psycopg.types.json import Jsonb
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err


# -- statements ----------------------------------------------------------------------------

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
