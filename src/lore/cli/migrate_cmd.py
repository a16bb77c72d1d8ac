"""``lore migrate``: copy an index to another backend with its stored embeddings.

    lore migrate --from sqlite:./lore.db --to pgvector:postgresql://lore@db.internal/lore
    lore migrate --from sqlite:./lore.db --to qdrant:./lore.qdrant      (local mode)
    lore migrate --from sqlite:./lore.db --to qdrant:http://qdrant.internal:6333
    lore migrate --from sqlite:./lore.db --to elasticsearch:https://es.internal:9200

Documents, chunks, vectors, the sync ledger, the embedder's id and the sync state (resume
tokens, last-sync time) are copied, so moving to a bigger backend never re-embeds: both
ends are opened with a stand-in embedder that refuses to embed. The target must be empty
or a previous copy with the same embedder; running it again updates the copy in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from lore.backends import StoredVectorsEmbedder
from lore.cli.app import app, console, settings
from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.models import CHUNKING_STATE_KEY, EMBEDDER_STATE_KEY, LAST_SYNC_KEY, SOURCE_LABEL
from lore.protocols import KnowledgeIndex, StoringBackend
from lore.resolve import BACKENDS, RETRIEVAL_ONLY, backend_module, retrieval_only_refusal, shown_location
from lore.sync import resume_token_key, source_stats_key

#: ``--from`` / ``--to`` schemes: the backends' names.
KINDS = tuple(BACKENDS)


@dataclass(frozen=True, slots=True)
class Location:
    kind: str
    target: str

    @classmethod
    def parse(cls, spec: str) -> Location:
        kind, sep, target = spec.partition(":")
        if kind in RETRIEVAL_ONLY:
            raise ConfigError(f"cannot migrate to or from {kind!r}: {retrieval_only_refusal(kind)}")
        if not sep or kind not in KINDS or not target:
            raise ConfigError(
                f"cannot read {spec!r}: write sqlite:<file>, pgvector:<postgresql dsn>, "
                "qdrant:<folder or http(s) url>, elasticsearch:<url> or opensearch:<url>"
            )
        return cls(kind, target)

    def __str__(self) -> str:
        return shown_location(self.kind, self.target)


@dataclass(frozen=True, slots=True)
class MigrationReport:
    documents: int
    chunks: int
    state_keys: int
    embedder: tuple[str, int]


def migrate_index(source: StoringBackend, target: KnowledgeIndex) -> MigrationReport:
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


def located_settings(location: Location, base: LoreSettings) -> LoreSettings:
    """Settings naming ``location``; the rest (``qdrant_api_key``, fusion) are ``base``'s."""
    # The kind names the backend: one module serves both elasticsearch and opensearch.
    return backend_module(location.kind).at_location(
        location.target, base.model_copy(update={"backend": location.kind})
    )


def open_location(location: Location, embedder: StoredVectorsEmbedder, base: LoreSettings) -> StoringBackend:
    """The backend at ``location``; imported on use, so only the chosen extras are needed."""
    return backend_module(location.kind).from_settings(located_settings(location, base), embedder)


def stored_embedder_at(location: Location, base: LoreSettings) -> tuple[str, int]:
    at = located_settings(location, base)
    module = backend_module(location.kind)
    missing = module.missing_index(at)
    if missing is not None:
        raise ConfigError(f"{location}: {missing}")
    found = module.stored_embedder_of(at)
    if found is None:
        raise ConfigError(f"the index at {location} records no embedder: it has never been synced")
    return found


def migrate_between(
    source: Location, target: Location, index_name: str, base: LoreSettings | None = None
) -> MigrationReport:
    """``base``: the settings both ends start from (default: defaults and ``LORE_*``)."""
    if source == target:
        raise ConfigError("--from and --to name the same index")
    common = (base if base is not None else LoreSettings()).model_copy(update={"index_name": index_name})
    embedder = StoredVectorsEmbedder(*stored_embedder_at(source, common))
    reader = open_location(source, embedder, common)
    try:
        writer = open_location(target, embedder, common)
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
        typer.Option(
            "--from",
            help="Source index: sqlite:<file>, pgvector:<dsn>, qdrant:<folder|url>, elasticsearch:<url> "
            "or opensearch:<url>.",
        ),
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
    current = settings()
    report = migrate_between(source, target, index_name or current.index_name, current)
    model, dimension = report.embedder
    console.print(
        f"copied {report.documents} documents, {report.chunks} chunks and {report.state_keys} state "
        f"entries from {source} to {target} (embedder {model}, {dimension} dimensions; nothing re-embedded)",
        highlight=False,
    )
