"""``lore migrate``: copy an index to another backend with its stored embeddings.

    lore migrate --from sqlite:./lore.db --to pgvector:postgresql://lore@db.internal/lore
    lore migrate --from sqlite:./lore.db --to qdrant:./lore.qdrant      (local mode)
    lore migrate --from sqlite:./lore.db --to qdrant:http://qdrant.internal:6333

Documents, chunks, vectors, the sync ledger, the embedder's id and the sync state (resume
tokens, last-sync time) are copied, so moving to a bigger backend never re-embeds: both
ends are opened with a stand-in embedder that refuses to embed. The target must be empty
or a previous copy with the same embedder; running it again updates the copy in place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol

import typer

from lore.cli.app import app, console, settings
from lore.errors import ConfigError
from lore.models import SOURCE_LABEL, Chunk, Document
from lore.protocols import KnowledgeIndex, Vectors
from lore.reembed import StoredVectorsEmbedder
from lore.sync import (
    CHUNKING_STATE_KEY,
    EMBEDDER_STATE_KEY,
    LAST_SYNC_KEY,
    resume_token_key,
    source_stats_key,
)

#: ``--from`` / ``--to`` schemes.
KINDS = ("sqlite", "pgvector", "qdrant")


class ExportableIndex(Protocol):
    """What a source index offers for migration (every storing backend has it)."""

    def stored_embedder(self) -> tuple[str, int] | None: ...

    def export(self) -> Iterator[tuple[Document, list[Chunk], Vectors]]: ...

    def get_state(self, key: str) -> str | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Location:
    kind: str
    target: str

    @classmethod
    def parse(cls, spec: str) -> Location:
        kind, sep, target = spec.partition(":")
        if not sep or kind not in KINDS or not target:
            raise ConfigError(
                f"cannot read {spec!r}: write sqlite:<file>, pgvector:<postgresql dsn> or "
                "qdrant:<folder or http(s) url>"
            )
        return cls(kind, target)

    def __str__(self) -> str:
        # A DSN may hold a password: name only the scheme for PostgreSQL.
        return "pgvector:<dsn>" if self.kind == "pgvector" else f"{self.kind}:{self.target}"


@dataclass(frozen=True, slots=True)
class MigrationReport:
    documents: int
    chunks: int
    state_keys: int
    embedder: tuple[str, int]


def migrate_index(source: ExportableIndex, target: KnowledgeIndex) -> MigrationReport:
    """Copy everything ``source`` holds into ``target``, vectors included."""
    embedder = source.stored_embedder()
    if embedder is None:
        raise ConfigError("the source index records no embedder: it has never been synced")
    target.check_embedder(*embedder)
    documents = chunks = 0
    sources: set[str] = set()
    with target.write_lock():
        for document, document_chunks, vectors in source.export():
            target.upsert(document, document_chunks, vectors)
            documents += 1
            chunks += len(document_chunks)
            sources.add(str(document.labels.get(SOURCE_LABEL, "")))
        # The chunking signature too: the copied chunks were cut by it, so no re-chunk.
        keys = [LAST_SYNC_KEY, EMBEDDER_STATE_KEY, CHUNKING_STATE_KEY]
        for name in sorted(sources):
            keys += [resume_token_key(name), source_stats_key(name)]
        copied = 0
        for key in keys:
            value = source.get_state(key)
            if value is not None:
                target.set_state(key, value)
                copied += 1
    return MigrationReport(documents, chunks, copied, embedder)


def open_location(location: Location, embedder: StoredVectorsEmbedder, index_name: str) -> Any:
    """The backend at ``location``; imported here so only the chosen extras are needed."""
    if location.kind == "sqlite":
        from lore.backends.sqlite import SqliteBackend

        return SqliteBackend(Path(location.target), embedder)
    if location.kind == "pgvector":
        from lore.backends.pgvector import PgVectorBackend

        return PgVectorBackend(location.target, embedder, index_name=index_name)
    from lore.backends.qdrant import QdrantBackend

    if location.target.startswith(("http://", "https://")):
        return QdrantBackend(embedder, url=location.target, index_name=index_name)
    return QdrantBackend(embedder, path=Path(location.target), index_name=index_name)


def stored_embedder_at(location: Location, index_name: str) -> tuple[str, int]:
    if location.kind == "sqlite":
        path = Path(location.target)
        if not path.is_file():
            raise ConfigError(f"no SQLite index at {path}")
        from lore.backends.sqlite import read_stored_embedder

        found = read_stored_embedder(path)
    else:
        # These backends do not check the embedder on opening; the stand-in is never used.
        backend = open_location(location, StoredVectorsEmbedder("unknown", 1), index_name)
        try:
            found = backend.stored_embedder()
        finally:
            backend.close()
    if found is None:
        raise ConfigError(f"the index at {location} records no embedder: it has never been synced")
    return found


def migrate_between(source: Location, target: Location, index_name: str) -> MigrationReport:
    if source == target:
        raise ConfigError("--from and --to name the same index")
    embedder = StoredVectorsEmbedder(*stored_embedder_at(source, index_name))
    reader = open_location(source, embedder, index_name)
    try:
        writer = open_location(target, embedder, index_name)
        try:
            return migrate_index(reader, writer)
        finally:
            writer.close()
    finally:
        reader.close()


@app.command("migrate")
def migrate(
    from_: Annotated[
        str,
        typer.Option("--from", help="Source index: sqlite:<file>, pgvector:<dsn> or qdrant:<folder|url>."),
    ],
    to: Annotated[str, typer.Option("--to", help="Target index, in the same notation.")],
    index_name: Annotated[
        str | None,
        typer.Option(
            "--index-name", help="Table-set / collection name on server backends (default: settings)."
        ),
    ] = None,
) -> None:
    """Copy an index to another backend with its stored embeddings (nothing is re-embedded)."""
    source, target = Location.parse(from_), Location.parse(to)
    report = migrate_between(source, target, index_name or settings().index_name)
    model, dimension = report.embedder
    console.print(
        f"copied {report.documents} documents, {report.chunks} chunks and {report.state_keys} state "
        f"entries from {source} to {target} (embedder {model}, {dimension} dimensions; nothing re-embedded)",
        highlight=False,
    )
