"""The conformance suite every knowledge source passes (a pytest mixin class).

A source's test module subclasses ``SourceConformance`` and provides ONE fixture,
``upstream``: an object with the ``SourceUpstream`` methods below, over an empty place
the test owns (a folder, a repository served on 127.0.0.1, a wiki space on a loopback
server)::

    class TestFilesystemConformance(SourceConformance):
        @pytest.fixture
        def upstream(self, tmp_path):
            return FolderUpstream(tmp_path / "docs")

The contract, in the words of the suite:

- ``put(key, title, body)`` creates or edits one document upstream, so that the next
  listing sees it: ``key`` names it (the suite's keys look like ``alerts/etcd.md``; a
  source without paths maps them to whatever it has), ``title`` is its title, ``body`` a
  few plain sentences (no markup). Each call must make the upstream record a change time
  in the past (before the listing), as a real upstream does; a file source sets the file's
  time, a git upstream commits (and pushes) with that date.
- ``put_unreadable(key)`` creates a document the source must report as a
  ``SourceFailure`` (a binary file, a body that cannot be converted), never fatal.
- ``delete(key)`` removes it upstream.
- ``uri(key)`` is the uri the source gives that document.
- ``updated_at(key)`` is the change time upstream recorded for the document's last
  ``put``, which the source's ``updated_at`` must equal.
- ``source(visibility)`` builds the source over the upstream as it is now; every call
  must share one local state (a clone, a cache) so that an incremental source resumes.
  ``visibility=None`` means undeclared.

Optional capabilities are class attributes the subclass sets, never probed:

- ``supports_incremental = True``: ``documents(since=token)`` lists changes only, with
  tombstones for deletions, and the source implements ``CompleteListing``;
- ``visibility_configurable = False``: the source fixes its own visibility (the built-in
  playbook pack), so ``source(None)`` is never asked for; its visibility must be declared.

Each test syncs into a real embedded (SQLite) index with the counting test embedder (the ``index``
and ``embedder`` fixtures, which a subclass may override).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import pytest

from lore.chunking import Chunker
from lore.config import LoreSettings
from lore.errors import VisibilityError
from lore.models import (
    SOURCE_LABEL,
    SOURCE_TYPE_LABEL,
    Document,
    SearchMode,
    SourceItem,
    Tombstone,
    Visibility,
)
from lore.protocols import CompleteListing, KnowledgeSource, StoringBackend
from lore.resolve import scratch_index
from lore.sync import resume_token_key, sync_sources
from lore.testing.embedders import CountingEmbedder

__all__ = ["SourceConformance", "SourceUpstream", "listing"]

#: The suite's documents: key -> (title, body). Each body carries a word no other has,
#: so that a BM25 search for it finds that document alone.
PAGES: dict[str, tuple[str, str]] = {
    "alerts/etcd-no-leader.md": ("etcd has no leader", "Restart the quorumzebra member, then check raft."),
    "alerts/kafka-lag.md": ("Kafka consumer lag", "Scale the lagwombat consumers of the group."),
    "disk-full.md": ("Disk full", "Find the largest diskotter directories with du."),
}
ADDED = ("alerts/redis-memory.md", ("Redis memory", "Evict the keys memferret names."))
EDITED_BODY = "Restart the quorumzebra member, then check raft and the WAL fsync times."


class SourceUpstream(Protocol):
    """What a source's test provides: see the module docstring."""

    def put(self, key: str, title: str, body: str) -> None: ...

    def put_unreadable(self, key: str) -> None: ...

    def delete(self, key: str) -> None: ...

    def uri(self, key: str) -> str: ...

    def updated_at(self, key: str) -> datetime: ...

    def source(self, visibility: Visibility | None = Visibility.ALL_VIEWERS) -> KnowledgeSource: ...


async def listing(source: KnowledgeSource, since: str | None = None) -> dict[str, SourceItem]:
    """One listing, consumed whole, by uri."""
    items: dict[str, SourceItem] = {}
    async for item in source.documents(since=since):
        assert item.uri not in items, f"{item.uri} listed twice"
        items[item.uri] = item
    return items


def _documents(items: dict[str, SourceItem]) -> dict[str, Document]:
    return {uri: item for uri, item in items.items() if isinstance(item, Document)}


def _seed(upstream: SourceUpstream) -> None:
    for key, (title, body) in PAGES.items():
        upstream.put(key, title, body)


class SourceConformance:
    """Subclass with an ``upstream`` fixture; see the module docstring."""

    supports_incremental: bool = False
    visibility_configurable: bool = True

    @pytest.fixture
    def embedder(self) -> CountingEmbedder:
        return CountingEmbedder()

    @pytest.fixture
    def index(self, tmp_path: Path, embedder: CountingEmbedder) -> Iterator[StoringBackend]:
        # The embedded default backend, as the composition root builds it.
        backend = scratch_index(LoreSettings(), tmp_path / "conformance-index" / "lore.db", embedder)
        yield backend
        backend.close()

    @pytest.fixture
    def chunker(self, embedder: CountingEmbedder) -> Chunker:
        return Chunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)

    @pytest.fixture
    def seeded(self, upstream: SourceUpstream) -> SourceUpstream:
        _seed(upstream)
        return upstream

    # -- listing -------------------------------------------------------------------------

    async def test_a_complete_listing_has_every_document_with_provenance(
        self, seeded: SourceUpstream
    ) -> None:
        source = seeded.source()
        assert isinstance(source, KnowledgeSource)
        assert source.name
        assert source.source_type
        before = datetime.now(UTC)

        docs = _documents(await listing(source))

        assert set(docs) == {seeded.uri(key) for key in PAGES}
        for key, (title, body) in PAGES.items():
            document = docs[seeded.uri(key)]
            assert document.title == title
            assert body in document.text
            assert document.revision
            assert document.updated_at.tzinfo is not None, "updated_at must be timezone-aware"
            assert document.updated_at == seeded.updated_at(key)
            # From the source, not the moment of the listing.
            assert document.updated_at < before - timedelta(minutes=1)

    async def test_revision_changes_exactly_when_the_content_changes(self, seeded: SourceUpstream) -> None:
        first = _documents(await listing(seeded.source()))
        again = _documents(await listing(seeded.source()))
        assert {uri: doc.revision for uri, doc in again.items()} == {
            uri: doc.revision for uri, doc in first.items()
        }

        edited = "alerts/etcd-no-leader.md"
        seeded.put(edited, PAGES[edited][0], EDITED_BODY)
        after = _documents(await listing(seeded.source()))

        changed = {uri for uri, doc in after.items() if doc.revision != first[uri].revision}
        assert changed == {seeded.uri(edited)}
        assert after[seeded.uri(edited)].updated_at == seeded.updated_at(edited)

    async def test_one_unreadable_document_costs_only_itself(
        self, seeded: SourceUpstream, index: StoringBackend, embedder: CountingEmbedder, chunker: Chunker
    ) -> None:
        seeded.put_unreadable("broken.md")
        source = seeded.source()

        report = await sync_sources([source], index, embedder, chunker)

        assert [failure.uri for failure in report.failures] == [seeded.uri("broken.md")]
        assert report.failures[0].reason
        held = index.held(source.name)
        assert set(held) == {seeded.uri(key) for key in PAGES}
        passages = (await index.retrieve("lagwombat", top_k=3, mode=SearchMode.BM25)).passages
        assert passages[0].uri == seeded.uri("alerts/kafka-lag.md")
        assert passages[0].labels[SOURCE_LABEL] == source.name
        assert passages[0].labels[SOURCE_TYPE_LABEL] == source.source_type

    # -- incremental ---------------------------------------------------------------------

    async def test_an_incremental_listing_has_the_changes_and_tombstones(
        self, seeded: SourceUpstream
    ) -> None:
        if not self.supports_incremental:
            pytest.skip("the source lists completely every time")
        source = seeded.source()
        assert source.incremental
        assert isinstance(source, CompleteListing), "an incremental source declares CompleteListing"
        await listing(source)
        token = source.resume_token()
        assert token is not None
        assert source.listing_was_complete()  # no token: everything was listed

        seeded.put("alerts/etcd-no-leader.md", PAGES["alerts/etcd-no-leader.md"][0], EDITED_BODY)
        seeded.delete("disk-full.md")
        seeded.put(ADDED[0], *ADDED[1])
        later = seeded.source()
        assert isinstance(later, CompleteListing)
        items = await listing(later, since=token)

        assert set(_documents(items)) == {seeded.uri("alerts/etcd-no-leader.md"), seeded.uri(ADDED[0])}
        assert {uri for uri, item in items.items() if isinstance(item, Tombstone)} == {
            seeded.uri("disk-full.md")
        }
        assert not later.listing_was_complete()
        assert later.resume_token() not in (None, token)

    async def test_a_failed_listing_prunes_nothing_and_keeps_the_token(
        self, seeded: SourceUpstream, index: StoringBackend, embedder: CountingEmbedder, chunker: Chunker
    ) -> None:
        """Also for complete sources: what a source does not list after an error stays."""
        source = seeded.source()
        await sync_sources([source], index, embedder, chunker)
        held = dict(index.held(source.name))
        token = index.get_state(resume_token_key(source.name))

        # Mass deletes allowed: only the failed listing may stand between held documents and pruning.
        broken = _FailsMidway(seeded.source())
        report = await sync_sources([broken], index, embedder, chunker, allow_mass_delete=True)

        assert any("listing failed" in failure.reason for failure in report.failures)
        assert dict(index.held(source.name)) == held
        assert index.get_state(resume_token_key(source.name)) == token

    # -- visibility and forgetting -------------------------------------------------------

    async def test_undeclared_visibility_is_refused_before_the_index_is_touched(
        self, seeded: SourceUpstream, index: StoringBackend, embedder: CountingEmbedder, chunker: Chunker
    ) -> None:
        if not self.visibility_configurable:
            assert seeded.source().visibility is not None
            return
        source = seeded.source(visibility=None)
        assert source.visibility is None
        with pytest.raises(VisibilityError, match=source.name):
            await sync_sources([source], index, embedder, chunker)
        assert dict(index.held(source.name)) == {}
        assert embedder.document_calls == 0

    async def test_a_deleted_document_is_unretrievable_after_the_next_sync(
        self, seeded: SourceUpstream, index: StoringBackend, embedder: CountingEmbedder, chunker: Chunker
    ) -> None:
        first = await sync_sources([seeded.source()], index, embedder, chunker)
        assert first.ok, first.failures
        found = (await index.retrieve("diskotter", top_k=3, mode=SearchMode.BM25)).passages
        assert [passage.uri for passage in found][:1] == [seeded.uri("disk-full.md")]

        seeded.delete("disk-full.md")
        second = await sync_sources([seeded.source()], index, embedder, chunker)

        assert second.ok, second.failures
        assert second.deleted == 1
        gone = (await index.retrieve("diskotter", top_k=3, mode=SearchMode.BM25)).passages
        assert seeded.uri("disk-full.md") not in {passage.uri for passage in gone}

    async def test_a_complete_listing_of_an_incremental_source_prunes_what_it_lacks(
        self, seeded: SourceUpstream, index: StoringBackend, embedder: CountingEmbedder, chunker: Chunker
    ) -> None:
        """No token (here: the stored one reset to empty, which sync passes as None): the
        source lists everything and says so, and sync prunes the document it no longer has."""
        if not self.supports_incremental:
            pytest.skip("the source lists completely every time")
        source = seeded.source()
        await sync_sources([source], index, embedder, chunker)
        seeded.delete("disk-full.md")
        index.set_state(resume_token_key(source.name), "")

        report = await sync_sources([seeded.source()], index, embedder, chunker)

        assert report.deleted == 1
        assert seeded.uri("disk-full.md") not in index.held(source.name)


class _FailsMidway:
    """A source whose listing breaks after its first item, as a network drop would."""

    def __init__(self, source: KnowledgeSource) -> None:
        self.inner = source
        self.name = source.name
        self.source_type = source.source_type
        self.visibility = source.visibility
        self.incremental = source.incremental

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        async for item in self.inner.documents(since=since):
            yield item
            break
        raise OSError("connection reset while listing")

    def resume_token(self) -> str | None:
        return None

    def listing_was_complete(self) -> bool:
        return True  # claims completeness: a failed listing must still prune nothing
