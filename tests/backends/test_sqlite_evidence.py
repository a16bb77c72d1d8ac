"""The coverage evidence of the SQLite backend's passages comes from the terms each chunk
holds; a server asks for the same chunks' terms on search after search, so they are kept."""

from __future__ import annotations

from pathlib import Path

from lore.backends.sqlite import SqliteBackend
from lore.backends.sqlite.fulltext import chunk_terms
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder


def test_the_same_passages_are_not_analysed_again_and_their_evidence_is_the_same(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    with SqliteBackend(tmp_path / "lore.db", embedder) as backend:
        add_document(backend, embedder, "etcd.md", "# etcd quorum lost\n\nRestart the etcdNoLeader member.")
        first = backend.search("etcd quorum", top_k=3)
        analysed = chunk_terms.cache_info().misses
        again = backend.search("why is etcd quorum lost", top_k=3)
        assert chunk_terms.cache_info().misses == analysed  # the passage's terms were kept
        assert [p.uri for p in again] == [p.uri for p in first]
        assert first[0].evidence is not None
        assert again[0].evidence is not None
        assert first[0].evidence.coverage == 1.0  # both query terms are in the chunk
        # The kept terms are those the index holds for the chunk's fields.
        terms = chunk_terms.__wrapped__((first[0].title, first[0].section, first[0].text))
        assert {"etcd", "quorum", "etcdnolead"} <= terms
