"""Sync against the real SQLite backend, the real chunker and a counting embedder.

Sources here are small in-memory implementations of the KnowledgeSource protocol (so a
test can script a failing listing or an incremental changelog); one test goes through
the real filesystem source with a lore.toml, and one syncs the example corpus.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.config import load_settings
from lore.errors import (
    ChunkingError,
    ConfigError,
    EmbedderMismatchError,
    EmbeddingError,
    IndexingError,
    IndexLockedError,
    SourceError,
    VisibilityError,
)
from lore.models import (
    SOURCE_LABEL,
    SOURCE_TYPE_LABEL,
    Chunk,
    Document,
    IndexedDocument,
    RefusedPrune,
    SearchMode,
    SourceFailure,
    SourceItem,
    Tombstone,
    Visibility,
    sha256_hex,
)
from lore.protocols import KnowledgeIndex, Vectors
from lore.resolve import resolve_retriever
from lore.sources.filesystem import FilesystemSource
from lore.sync import (
    LAST_SYNC_KEY,
    is_mass_delete,
    old_chunking_key,
    resume_token_key,
    run_sync,
    source_stats_key,
    sync_sources,
)
from lore.testing.embedders import CountingEmbedder

UPDATED = datetime(2026, 10, 1, tzinfo=UTC)


def doc(
    uri: str, text: str, *, title: str | None = None, labels: Mapping[str, str] | None = None
) -> Document:
    return Document(
        uri=uri,
        title=title or uri.rsplit("/", 1)[-1],
        text=text,
        revision=sha256_hex(text),
        updated_at=UPDATED,
        labels=dict(labels or {}),
    )


class ListSource:
    """A complete-listing source over a list of items; ``fail_after`` raises SourceError
    after that many items, like a wiki API dying halfway through a listing."""

    source_type = "memory"
    incremental = False

    def __init__(
        self,
        name: str,
        items: Sequence[SourceItem],
        *,
        visibility: Visibility | None = Visibility.ALL_VIEWERS,
        fail_after: int | None = None,
    ) -> None:
        self.name = name
        self.items = list(items)
        self.visibility = visibility
        self.fail_after = fail_after

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        for item in self.items[: self.fail_after]:
            yield item
        if self.fail_after is not None:
            raise SourceError("listing interrupted: HTTP 502 from the wiki")

    def resume_token(self) -> str | None:
        return None


class ChangelogSource:
    """An incremental source: each run yields the next batch of changes and expects the
    token it handed out last time."""

    source_type = "changelog"
    incremental = True
    visibility = Visibility.ALL_VIEWERS

    def __init__(self, name: str, batches: Sequence[Sequence[SourceItem]]) -> None:
        self.name = name
        self.batches = [list(b) for b in batches]
        self.run = 0
        self.since_seen: list[str | None] = []

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        self.since_seen.append(since)
        batch = self.batches[self.run]
        self.run += 1
        for item in batch:
            yield item

    def resume_token(self) -> str | None:
        return f"token-{self.run}"


class RecordingIndex:
    """Passes every call through to a real index and records which were made."""

    def __init__(self, inner: KnowledgeIndex) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.upserts: list[str] = []
        self.deletes: list[str] = []

    def check_embedder(self, model_id: str, dimension: int) -> None:
        self.calls.append("check_embedder")
        self.inner.check_embedder(model_id, dimension)

    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        self.calls.append("upsert")
        self.upserts.append(document.uri)
        self.inner.upsert(document, chunks, vectors)

    def delete_by_uri(self, uri: str) -> None:
        self.calls.append("delete_by_uri")
        self.deletes.append(uri)
        self.inner.delete_by_uri(uri)

    def held(self, source: str) -> Mapping[str, IndexedDocument]:
        self.calls.append("held")
        return self.inner.held(source)

    def cached_vectors(self, embed_keys: Sequence[str]) -> Mapping[str, npt.NDArray[np.float32]]:
        self.calls.append("cached_vectors")
        return self.inner.cached_vectors(embed_keys)

    def get_state(self, key: str) -> str | None:
        self.calls.append("get_state")
        return self.inner.get_state(key)

    def set_state(self, key: str, value: str) -> None:
        self.calls.append("set_state")
        self.inner.set_state(key, value)

    def write_lock(self) -> AbstractContextManager[None]:
        self.calls.append("write_lock")
        return self.inner.write_lock()

    def close(self) -> None:
        self.inner.close()


class RecordingProgress:
    def __init__(self) -> None:
        self.started: list[tuple[str, int | None]] = []
        self.seen: list[str] = []
        self.embedded = 0
        self.finished: list[str] = []

    def source_started(self, source: str, expected_documents: int | None) -> None:
        self.started.append((source, expected_documents))

    def document_seen(self, source: str, uri: str) -> None:
        self.seen.append(uri)

    def chunks_embedded(self, count: int) -> None:
        self.embedded += count

    def source_finished(self, source: str) -> None:
        self.finished.append(source)


class PoisonEmbedder(CountingEmbedder):
    """Refuses any batch containing the word POISON, like a remote API rejecting one input."""

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        if any("POISON" in text for text in texts):
            raise EmbeddingError("provider rejected an input (HTTP 400)")
        return super().embed_documents(texts)


class PickyChunker(Chunker):
    def chunk(self, document: Document) -> list[Chunk]:
        if document.uri.endswith("/unsplittable.md"):
            raise ChunkingError("unbalanced code fence")
        return super().chunk(document)


class FlakyWriteBackend(SqliteBackend):
    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        if document.uri.endswith("/unwritable.md"):
            raise IndexingError("disk I/O error")
        super().upsert(document, chunks, vectors)


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "lore.db"


@pytest.fixture
def index(db_path: Path, embedder: CountingEmbedder) -> Iterator[SqliteBackend]:
    backend = SqliteBackend(db_path, embedder)
    yield backend
    backend.close()


@pytest.fixture
def chunker(embedder: CountingEmbedder) -> Chunker:
    return Chunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)


def three_docs() -> list[Document]:
    return [
        doc("mem://notes/etcd.md", "# etcd\n\nRestore quorum with etcdutl snapshot restore.",
            labels={"tags": "etcd,kubernetes"}),
        doc("mem://notes/kafka.md", "# Kafka\n\nScale the consumers when lag grows."),
        doc("mem://notes/redis.md", "# Redis\n\nNever run FLUSHALL on the payments cache."),
    ]


async def test_first_sync_indexes_every_document_with_source_labels(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    report = await sync_sources([ListSource("notes", three_docs())], index, embedder, chunker)

    assert report.ok
    assert (report.seen, report.added, report.updated, report.unchanged) == (3, 3, 0, 0)
    assert report.chunks_embedded == embedder.documents_embedded > 0
    assert set(index.held("notes")) == {d.uri for d in three_docs()}
    passages = (await index.retrieve(
        "etcdutl snapshot",
        top_k=3,
        labels={SOURCE_LABEL: "notes", SOURCE_TYPE_LABEL: "memory", "tags": "etcd"},
    )).passages
    assert [p.uri for p in passages] == ["mem://notes/etcd.md"]


async def test_second_sync_of_an_unchanged_corpus_embeds_and_writes_nothing(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    await sync_sources([ListSource("notes", three_docs())], index, embedder, chunker)
    embedder.reset()
    recording = RecordingIndex(index)

    report = await sync_sources([ListSource("notes", three_docs())], recording, embedder, chunker)

    assert (report.seen, report.unchanged, report.added, report.updated, report.deleted) == (3, 3, 0, 0, 0)
    assert embedder.document_calls == 0
    assert recording.upserts == []
    assert recording.deletes == []
    assert "cached_vectors" not in recording.calls  # unchanged documents are not even chunked


async def test_changed_document_reuses_vectors_of_its_unchanged_chunks(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    sections = [f"## Step {n}\n\n" + " ".join(f"word{n}x{i}" for i in range(30)) for n in range(4)]
    original = doc("mem://notes/long.md", "\n\n".join(sections), title="Long runbook")
    await sync_sources([ListSource("notes", [original])], index, embedder, chunker)
    first_chunks = index.held("notes")[original.uri].chunk_count
    assert first_chunks >= 4
    embedder.reset()

    sections[2] = "## Step 2\n\nThis section was rewritten entirely."
    edited = doc(original.uri, "\n\n".join(sections), title="Long runbook")
    report = await sync_sources([ListSource("notes", [edited])], index, embedder, chunker)

    assert (report.updated, report.added) == (1, 0)
    assert report.chunks_reused >= 3
    assert report.chunks_embedded == embedder.documents_embedded >= 1
    assert report.chunks_embedded < first_chunks
    assert index.held("notes")[original.uri].revision == edited.revision


async def test_changed_chunking_settings_rechunk_every_document_once(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    body = "\n\n".join(f"## Step {n}\n\n" + " ".join(f"word{n}x{i}." for i in range(40)) for n in range(3))
    documents = [doc("mem://notes/long.md", body, title="Long runbook"), *three_docs()]
    first = await sync_sources([ListSource("notes", documents)], index, embedder, chunker)
    assert first.ok
    assert not first.rechunked  # a fresh index has nothing to re-chunk
    before = index.held("notes")["mem://notes/long.md"].chunk_count
    embedder.reset()

    smaller = Chunker.for_embedder(embedder, max_tokens=24, overlap_tokens=0)
    report = await sync_sources([ListSource("notes", documents)], index, embedder, smaller)

    assert report.rechunked
    assert (report.seen, report.updated, report.unchanged) == (4, 4, 0)
    assert index.held("notes")["mem://notes/long.md"].chunk_count > before
    # The three short notes are cut exactly as before: their vectors are reused.
    assert report.chunks_reused >= 3
    assert report.chunks_embedded == embedder.documents_embedded

    embedder.reset()
    again = await sync_sources([ListSource("notes", documents)], index, embedder, smaller)
    assert not again.rechunked
    assert (again.unchanged, embedder.document_calls) == (4, 0)


async def test_complete_listing_prunes_documents_gone_from_the_source(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    await sync_sources([ListSource("notes", three_docs())], index, embedder, chunker)

    report = await sync_sources([ListSource("notes", three_docs()[:2])], index, embedder, chunker)

    assert report.deleted == 1
    assert set(index.held("notes")) == {"mem://notes/etcd.md", "mem://notes/kafka.md"}


async def test_failed_listing_prunes_nothing_and_is_reported(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    await sync_sources([ListSource("notes", three_docs())], index, embedder, chunker)
    changed = doc("mem://notes/etcd.md", "# etcd\n\nA newer revision of the etcd page.")

    report = await sync_sources([ListSource("notes", [changed], fail_after=1)], index, embedder, chunker)

    assert not report.ok
    assert report.deleted == 0
    assert "HTTP 502" in report.failures[0].reason
    assert len(index.held("notes")) == 3
    assert index.held("notes")[changed.uri].revision == changed.revision  # what was listed is written


async def test_source_failure_is_reported_and_keeps_the_indexed_version(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    await sync_sources([ListSource("notes", three_docs())], index, embedder, chunker)
    unreadable = SourceFailure("mem://notes/redis.md", "permission denied")

    report = await sync_sources(
        [ListSource("notes", [*three_docs()[:2], unreadable])], index, embedder, chunker
    )

    assert [(f.uri, f.reason) for f in report.failures] == [("mem://notes/redis.md", "permission denied")]
    assert report.deleted == 0
    assert "mem://notes/redis.md" in index.held("notes")


async def test_undeclared_visibility_is_refused_before_the_index_is_touched(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    recording = RecordingIndex(index)
    sources = [ListSource("notes", three_docs()), ListSource("wiki", three_docs(), visibility=None)]

    with pytest.raises(VisibilityError, match=r"'wiki' does not declare who may read it"):
        await sync_sources(sources, recording, embedder, chunker)

    assert recording.calls == []
    assert embedder.document_calls == 0


async def test_restricted_source_is_skipped_and_reported(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    sources = [
        ListSource("notes", three_docs()),
        ListSource("hr", [doc("mem://hr/salaries.md", "confidential")], visibility=Visibility.RESTRICTED),
    ]

    report = await sync_sources(sources, index, embedder, chunker)

    assert report.skipped_sources == ["hr"]
    assert report.added == 3
    assert index.held("hr") == {}


async def test_duplicate_source_names_are_refused(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    with pytest.raises(ConfigError, match="two sources are named 'notes'"):
        await sync_sources([ListSource("notes", []), ListSource("notes", [])], index, embedder, chunker)


async def test_a_second_concurrent_sync_gets_index_locked(
    index: SqliteBackend, db_path: Path, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    other = SqliteBackend(db_path, embedder)
    try:
        with index.write_lock(), pytest.raises(IndexLockedError):
            await sync_sources([ListSource("notes", three_docs())], other, embedder, chunker)
    finally:
        other.close()
    assert embedder.document_calls == 0


async def test_another_embedder_is_refused(
    index: SqliteBackend, db_path: Path, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    await sync_sources([ListSource("notes", three_docs())], index, embedder, chunker)
    index.close()
    smaller = CountingEmbedder(dimension=32)

    async def sync_with_smaller_embedder() -> None:
        reopened = SqliteBackend(db_path, smaller)
        try:
            await sync_sources([ListSource("notes", three_docs())], reopened, smaller, chunker)
        finally:
            reopened.close()

    with pytest.raises(EmbedderMismatchError, match="reembed"):
        await sync_with_smaller_embedder()
    assert smaller.document_calls == 0


async def test_embedding_failure_fails_only_that_document(
    index: SqliteBackend, chunker: Chunker
) -> None:
    embedder = PoisonEmbedder()
    docs = [doc(f"mem://notes/{n}.md", f"# Page {n}\n\nOrdinary text number {n}.") for n in range(10)]
    docs[5] = doc("mem://notes/5.md", "# Page 5\n\nThis one contains POISON.")

    report = await sync_sources([ListSource("notes", docs)], index, embedder, chunker, batch_size=64)

    assert [(f.uri, f.reason) for f in report.failures] == [
        ("mem://notes/5.md", "embedding failed: provider rejected an input (HTTP 400)")
    ]
    assert report.added == 9
    assert "mem://notes/5.md" not in index.held("notes")


async def test_chunking_and_writing_failures_fail_only_that_document(
    db_path: Path, embedder: CountingEmbedder
) -> None:
    chunker = PickyChunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)
    backend = FlakyWriteBackend(db_path, embedder)
    docs = [
        *three_docs(),
        doc("mem://notes/unsplittable.md", "# Broken\n\n```\nno end"),
        doc("mem://notes/unwritable.md", "# Unlucky\n\nThe disk failed on this one."),
    ]
    try:
        report = await sync_sources([ListSource("notes", docs)], backend, embedder, chunker)
        held = set(backend.held("notes"))
    finally:
        backend.close()

    reasons = {f.uri: f.reason for f in report.failures}
    assert reasons == {
        "mem://notes/unsplittable.md": "chunking failed: unbalanced code fence",
        "mem://notes/unwritable.md": "writing failed: disk I/O error",
    }
    assert held == {d.uri for d in three_docs()}


async def test_texts_are_embedded_in_full_batches_across_documents(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    docs = [doc(f"mem://notes/{n}.md", f"Short note number {n}.", title=f"Note {n}") for n in range(100)]

    report = await sync_sources([ListSource("notes", docs)], index, embedder, chunker, batch_size=32)

    assert report.added == 100
    assert embedder.documents_embedded == 100
    assert embedder.document_calls == 4  # ceil(100 / 32), not one call per document


class BatchRecordingEmbedder(CountingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.batches.append(list(texts))
        return super().embed_documents(texts)


async def test_batches_group_texts_of_similar_token_counts_not_characters(index: SqliteBackend) -> None:
    """A model pads every text of a batch to the longest one's tokens; characters are a
    poor proxy (one long identifier, many short words), so batches follow the chunker's
    own token count."""

    def words(text: str) -> int:
        return len(text.split())

    chunker = Chunker(200, 0, words)
    few_long = [doc(f"mem://n/long{n}.md", "supercalifragilistic" * (n + 4), title="T") for n in range(4)]
    many_short = [doc(f"mem://n/short{n}.md", "a b " * (n + 4), title="T") for n in range(4)]
    embedder = BatchRecordingEmbedder()

    await sync_sources([ListSource("n", [*few_long, *many_short])], index, embedder, chunker, batch_size=2)

    counts = [words(text) for batch in embedder.batches for text in batch]
    assert len(counts) == 8
    assert counts == sorted(counts), "each batch holds the next texts by token count"
    by_characters = [len(text) for batch in embedder.batches for text in batch]
    assert by_characters != sorted(by_characters), "the corpus must tell the two orders apart"


async def test_identical_text_is_embedded_once_and_reused_later(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    twins = [doc(f"mem://notes/copy{n}.md", "Rotate the certificate.", title="Certs") for n in range(2)]
    await sync_sources([ListSource("notes", twins)], index, embedder, chunker)
    assert embedder.documents_embedded == 1
    embedder.reset()

    third = doc("mem://notes/copy2.md", "Rotate the certificate.", title="Certs")
    report = await sync_sources([ListSource("notes", [*twins, third])], index, embedder, chunker)

    assert (report.added, report.chunks_reused, report.chunks_embedded) == (1, 1, 0)
    assert embedder.document_calls == 0


async def test_incremental_source_resumes_and_applies_tombstones(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    a, b, c = (doc(f"mem://log/{n}.md", f"# {n}\n\nEntry {n}.") for n in "abc")
    source = ChangelogSource("log", [[a, b], [Tombstone(a.uri), c]])

    await sync_sources([source], index, embedder, chunker)
    assert index.get_state(resume_token_key("log")) == "token-1"
    report = await sync_sources([source], index, embedder, chunker)

    assert source.since_seen == [None, "token-1"]
    assert (report.added, report.deleted) == (1, 1)
    assert set(index.held("log")) == {b.uri, c.uri}  # b was not listed again, and is kept
    assert index.get_state(resume_token_key("log")) == "token-2"


async def test_incremental_token_is_not_advanced_past_a_failed_document(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    source = ChangelogSource("log", [[SourceFailure("mem://log/x.md", "timeout")]])

    report = await sync_sources([source], index, embedder, chunker)

    assert not report.ok
    assert index.get_state(resume_token_key("log")) is None


async def test_progress_and_state_for_status(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    progress = RecordingProgress()
    for _ in range(2):
        await sync_sources([ListSource("notes", three_docs())], index, embedder, chunker, progress=progress)
    first_embedded = embedder.documents_embedded

    assert progress.started == [("notes", None), ("notes", 3)]
    assert len(progress.seen) == 6
    assert progress.embedded == first_embedded
    assert progress.finished == ["notes", "notes"]
    assert index.get_state(LAST_SYNC_KEY) is not None
    stats = json.loads(index.get_state(source_stats_key("notes")) or "{}")
    assert (stats["seen"], stats["unchanged"], stats["failures"]) == (3, 3, 0)


def write_config(
    root: Path, *, visibility: str | None = "all-viewers", source_type: str = "filesystem"
) -> Path:
    docs = root / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "dns.md").write_text("---\ntitle: DNS\ntags: [dns]\n---\n\n# DNS\n\nForward to 10.0.0.1.\n")
    (docs / "tls.md").write_text("# TLS\n\nRenew with cmctl renew.\n")
    # Without the built-in playbook pack, which tests/test_vault.py covers, so that the
    # counts here are the folder's own.
    lines = ['backend = "sqlite"', 'db_path = "state/lore.db"', 'embedder = "hashing"', "",
             "[vault]", "enabled = false", "",
             "[[sources]]", 'name = "docs"', f'type = "{source_type}"', 'path = "docs"']
    if visibility is not None:
        lines.append(f'visibility = "{visibility}"')
    config = root / "lore.toml"
    config.write_text("\n".join(lines) + "\n")
    (root / "state").mkdir(exist_ok=True)
    return config


def test_run_sync_with_a_lore_toml_and_the_filesystem_source(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path))

    first = run_sync(settings)
    second = run_sync(settings)

    assert first.ok
    assert first.added == 2
    assert (second.unchanged, second.added, second.chunks_embedded) == (2, 0, 0)
    assert (tmp_path / "state" / "lore.db").is_file()


def test_run_sync_refuses_undeclared_visibility_without_creating_the_index(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path, visibility=None))

    with pytest.raises(VisibilityError, match="visibility"):
        run_sync(settings)
    assert not (tmp_path / "state" / "lore.db").exists()


def test_run_sync_without_sources_says_what_to_do(tmp_path: Path) -> None:
    config = tmp_path / "lore.toml"
    config.write_text('embedder = "hashing"\n\n[vault]\nenabled = false\n')

    with pytest.raises(ConfigError, match=r"no sources configured .*\[\[sources\]\]"):
        run_sync(load_settings(config))


def test_example_corpus_syncs_cleanly_and_identifiers_find_their_page(
    repo_root: Path, tmp_path: Path
) -> None:
    settings = load_settings(  # the examples alone: the playbook pack has pages on the same topics
        repo_root / "examples" / "lore.toml", db_path=tmp_path / "lore.db", embedder="hashing",
        vault={"enabled": False},
    )
    markdown_files = list((repo_root / "examples" / "runbooks").rglob("*.md"))

    report = run_sync(settings)

    assert report.ok, report.failures
    assert report.added == len(markdown_files) >= 20
    retriever = resolve_retriever(settings)
    assert isinstance(retriever, SqliteBackend)
    try:
        for identifier, page in [
            ("etcdNoLeader", "etcd-no-leader.md"),
            ("CrashLoopBackOff", "pod-crashloopbackoff.md"),
            ("ERR_1234", "err-1234-idempotency-conflict.md"),
            ("payments-consumer-group", "kafka-consumer-lag.md"),
            ("10.0.0.1", "dns-resolution-failures.md"),
        ]:
            passages = asyncio.run(retriever.retrieve(identifier, top_k=1, mode=SearchMode.BM25)).passages
            assert passages[0].uri.endswith(page), identifier
    finally:
        retriever.close()


# -- a failure costs that document only (issue 10, section 4) -------------------------------


def write_corpus(root: Path, count: int, *, words: int = 12) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        body = " ".join(f"term{number}x{i}" for i in range(words))
        (root / f"page-{number:04d}.md").write_text(f"# Page {number}\n\n{body}\n", encoding="utf-8")


async def test_a_permanently_failing_file_costs_only_that_file(
    tmp_path: Path, index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    """Before: the chunking signature was recorded only after a sync without failures, so
    every later sync re-chunked and rewrote every document ("chunking settings changed")."""
    root = tmp_path / "docs"
    write_corpus(root, 6)
    (root / "latin1.md").write_bytes("# Caf\u00e9\n".encode("latin-1"))  # never valid UTF-8
    folder = FilesystemSource("docs", root, visibility=Visibility.ALL_VIEWERS)
    first = await sync_sources([folder], index, embedder, chunker)
    assert (first.added, [f.uri for f in first.failures]) == (6, ["file://docs/latin1.md"])
    embedder.reset()
    recording = RecordingIndex(index)

    second = await sync_sources([folder], recording, embedder, chunker)

    assert not second.rechunked
    assert (second.unchanged, second.updated, second.added, len(second.failures)) == (6, 0, 0, 1)
    assert embedder.document_calls == 0
    assert recording.upserts == []


async def test_a_document_that_failed_during_a_rechunk_is_rechunked_next_time(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    body = "\n\n".join(f"## Step {n}\n\n" + " ".join(f"word{n}x{i}." for i in range(40)) for n in range(3))
    documents = [doc("mem://notes/unsplittable.md", body), *three_docs()]
    await sync_sources([ListSource("notes", documents)], index, embedder, chunker)
    before = index.held("notes")["mem://notes/unsplittable.md"].chunk_count

    picky = PickyChunker.for_embedder(embedder, max_tokens=24, overlap_tokens=0)
    changed = await sync_sources([ListSource("notes", documents)], index, embedder, picky)
    assert changed.rechunked
    assert (changed.updated, [f.uri for f in changed.failures]) == (3, ["mem://notes/unsplittable.md"])
    # The failed document keeps its old chunks, and is remembered as cut the old way.
    assert index.held("notes")["mem://notes/unsplittable.md"].chunk_count == before
    assert json.loads(index.get_state(old_chunking_key("notes")) or "") == ["mem://notes/unsplittable.md"]

    smaller = Chunker.for_embedder(embedder, max_tokens=24, overlap_tokens=0)
    assert smaller.signature == picky.signature
    healed = await sync_sources([ListSource("notes", documents)], index, embedder, smaller)

    assert not healed.rechunked
    assert (healed.updated, healed.unchanged, healed.failures) == (1, 3, [])
    assert index.held("notes")["mem://notes/unsplittable.md"].chunk_count > before
    assert json.loads(index.get_state(old_chunking_key("notes")) or "") == []
    embedder.reset()
    settled = await sync_sources([ListSource("notes", documents)], index, embedder, smaller)
    assert (settled.unchanged, settled.updated, embedder.document_calls) == (4, 0, 0)


# -- a source that suddenly lists nothing deletes nothing -----------------------------------


def ten_docs() -> list[Document]:
    return [doc(f"mem://notes/page-{n}.md", f"# Page {n}\n\nBody number {n}.") for n in range(10)]


@pytest.mark.parametrize(
    ("missing", "indexed", "refused"),
    [(1, 1, False), (2, 2, True), (1, 3, False), (2, 3, True), (2, 4, False), (3, 4, True),
     (5, 10, False), (6, 10, True), (0, 0, False)],
)
def test_mass_delete_rule(missing: int, indexed: int, refused: bool) -> None:
    assert is_mass_delete(missing, indexed, 0.5) is refused


async def test_an_emptied_source_deletes_nothing_unless_a_mass_delete_is_allowed(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    await sync_sources([ListSource("notes", ten_docs())], index, embedder, chunker)

    empty = await sync_sources([ListSource("notes", [])], index, embedder, chunker)
    most = await sync_sources([ListSource("notes", ten_docs()[:4])], index, embedder, chunker)

    assert (empty.deleted, empty.refused_prunes) == (0, [RefusedPrune("notes", 10, 10)])
    assert (most.deleted, most.refused_prunes) == (0, [RefusedPrune("notes", 6, 10)])
    assert len(index.held("notes")) == 10
    stats = json.loads(index.get_state(source_stats_key("notes")) or "{}")
    assert stats["prune_refused"] == 6

    half = await sync_sources([ListSource("notes", ten_docs()[:5])], index, embedder, chunker)
    assert (half.deleted, half.refused_prunes) == (5, [])
    allowed = await sync_sources(
        [ListSource("notes", [])], index, embedder, chunker, allow_mass_delete=True
    )
    assert (allowed.deleted, allowed.refused_prunes, dict(index.held("notes"))) == (5, [], {})


async def test_max_prune_fraction_is_configurable(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    await sync_sources([ListSource("notes", ten_docs())], index, embedder, chunker)

    strict = await sync_sources(
        [ListSource("notes", ten_docs()[:8])], index, embedder, chunker, max_prune_fraction=0.1
    )
    loose = await sync_sources(
        [ListSource("notes", [])], index, embedder, chunker, max_prune_fraction=1.0
    )

    assert strict.refused_prunes == [RefusedPrune("notes", 2, 10)]
    assert (loose.deleted, loose.refused_prunes) == (10, [])
    with pytest.raises(ConfigError, match="max_prune_fraction"):
        await sync_sources([ListSource("notes", [])], index, embedder, chunker, max_prune_fraction=1.5)


# -- a source path that does not exist is a configuration error -----------------------------


def test_a_missing_source_path_is_a_config_error_and_creates_nothing(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace('path = "docs"', 'path = "no-such-folder"'))

    with pytest.raises(ConfigError, match=r"source 'docs': path .*no-such-folder does not exist"):
        run_sync(load_settings(config))
    assert list((tmp_path / "state").iterdir()) == []


# -- the write-ahead log of a first sync stays small -----------------------------------------


class WalWatchingBackend(SqliteBackend):
    """Records the -wal file's size before every checkpoint: the peaks a sync reaches."""

    peaks: list[int]

    def checkpoint(self) -> None:
        self.peaks.append(wal_size(self.path))
        super().checkpoint()


def file_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def wal_size(db: Path) -> int:
    return file_size(db.with_name(db.name + "-wal"))


async def test_a_first_sync_checkpoints_so_the_wal_stays_small_next_to_the_database(
    tmp_path: Path, db_path: Path
) -> None:
    """Before: autocheckpoints (every 10,000 pages) never shrink the log, so a first sync's
    -wal file was as large as the database or larger."""
    embedder = CountingEmbedder(dimension=384)
    write_corpus(tmp_path / "docs", 600, words=60)
    index = WalWatchingBackend(db_path, embedder)
    index.peaks = []
    try:
        chunker = Chunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)
        folder = FilesystemSource("docs", tmp_path / "docs", visibility=Visibility.ALL_VIEWERS)
        report = await sync_sources([folder], index, embedder, chunker, batch_size=8)
        assert report.ok
        assert report.added == 600
        database, log = file_size(db_path), wal_size(db_path)
    finally:
        index.close()

    print(f"database {database:,} bytes, -wal after sync {log:,}, peaks {index.peaks}")
    assert len(index.peaks) >= 4
    assert log < database / 4, (log, database)
    assert max(index.peaks) < database / 2, (index.peaks, database)


# -- updated_at from git, end to end (issue 10, section 5) -------------------------------------


async def test_a_new_updated_at_rewrites_provenance_without_embedding(
    index: SqliteBackend, embedder: CountingEmbedder, chunker: Chunker
) -> None:
    await sync_sources([ListSource("notes", three_docs())], index, embedder, chunker)
    embedder.reset()
    redated = [replace(three_docs()[0], updated_at=datetime(2021, 1, 1, tzinfo=UTC)), *three_docs()[1:]]

    report = await sync_sources([ListSource("notes", redated)], index, embedder, chunker)

    assert (report.updated, report.unchanged, embedder.document_calls) == (1, 2, 0)
    assert index.held("notes")["mem://notes/etcd.md"].updated_at == datetime(2021, 1, 1, tzinfo=UTC)


def test_a_fresh_checkout_reads_commit_dates_so_old_runbooks_are_stale(tmp_path: Path) -> None:
    """Before: every file of a fresh clone had the clone's mtime, so nothing was stale."""
    if shutil.which("git") is None:
        pytest.skip("no git binary")
    origin = tmp_path / "origin"
    write_corpus(origin / "docs", 3)
    committed = datetime(2020, 2, 3, 4, 5, 6, tzinfo=UTC)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_AUTHOR_DATE": committed.isoformat(), "GIT_COMMITTER_DATE": committed.isoformat()}
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "runbooks"]):
        subprocess.run(["git", *args], cwd=origin, env=env, check=True, capture_output=True)
    checkout = tmp_path / "checkout"
    clone = ["git", "clone", "-q", str(origin), str(checkout)]
    subprocess.run(clone, env=env, check=True, capture_output=True)
    # write_config adds dns.md and tls.md: untracked files, so they keep their mtime (now).
    settings = load_settings(write_config(checkout))

    report = run_sync(settings)

    assert report.ok
    index = resolve_retriever(settings)
    assert isinstance(index, SqliteBackend)
    try:
        held = index.held("docs")
        assert {uri.rsplit("/", 1)[1]: held[uri].updated_at for uri in held if "page-" in uri} == {
            f"page-{n:04d}.md": committed for n in range(3)
        }
        assert held["file://docs/dns.md"].updated_at > committed
    finally:
        index.close()
