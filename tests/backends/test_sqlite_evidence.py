"""The coverage evidence of the SQLite backend's passages: which query terms each passage
holds is read from the full-text index's postings, and must be exactly what analysing the
passage's fields gives (the confidence calibration, lore.confidence, was fitted on that)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.backends.sqlite.evidence import EvidenceMaker
from lore.backends.sqlite.fulltext import chunk_terms
from lore.chunking import Chunker
from lore.embedders.hashing import HashingEmbedder
from lore.eval.datasets import load_golden_set
from lore.models import Passage, SearchMode, Visibility
from lore.sources.filesystem import FilesystemSource
from lore.sync import sync_sources
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder

#: Identifier-shaped names of every style the analyzers split or keep whole.
_IDENTIFIER_PAGE = """# KubeNodeNotReady and KubeAPIDown

Restart kube-apiserver.service on each master; check node_exporter on 10.0.0.1:9100 and
etcd.member.count. The image quay.io/coreos/kube-apiserver:v1.29 logs ERR_1234 and
CrashLoopBackOff; the consumer group payments-consumer-group lags (etcdNoLeader, IPv4, mRNA).
"""

_IDENTIFIER_QUERIES = [
    "KubeNodeNotReady",
    "kube-apiserver.service restart",
    "node_exporter 9100",
    "etcd.member.count below quorum",
    "quay.io/coreos/kube-apiserver:v1.29 ERR_1234",
    "CrashLoopBackOff payments-consumer-group",
    "Prometheus {{ $labels.instance }} is down ({{ $value | humanizePercentage }})",
    "etcdNoLeader IPv4 mRNA",
    "the of and",  # stop words only: no coverage at all
    "zzyzx quux",  # words no chunk holds
]


@pytest.fixture(scope="module")
def examples(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteBackend]:
    root = tmp_path_factory.mktemp("corpus")
    corpus = repo_root / "examples" / "runbooks"
    for page in corpus.rglob("*.md"):
        target = root / page.relative_to(corpus)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page.read_text(encoding="utf-8"), encoding="utf-8")
    (root / "alerts").mkdir(exist_ok=True)
    (root / "alerts" / "KubeNodeNotReady.md").write_text(_IDENTIFIER_PAGE, encoding="utf-8")
    embedder = HashingEmbedder()
    backend = SqliteBackend(tmp_path_factory.mktemp("index") / "lore.db", embedder)
    source = FilesystemSource("runbooks", root, visibility=Visibility.ALL_VIEWERS)
    report = asyncio.run(sync_sources([source], backend, embedder, Chunker.for_embedder(embedder)))
    assert report.ok
    yield backend
    backend.close()


def _queries(repo_root: Path) -> list[str]:
    golden = repo_root / "eval" / "golden"
    sets = ("examples.yaml", "no-answer-examples.yaml")
    asked = [question.text for name in sets for question in load_golden_set(golden / name)]
    # A pasted stack trace: more query terms than one evidence search tells apart.
    long = " ".join(sorted({word for question in asked[:40] for word in question.split()}))
    return [*asked, *_IDENTIFIER_QUERIES, long]


def _analysed(backend: SqliteBackend, query: str, passage: Passage) -> float | None:
    """The coverage as it was measured before: the passage's fields analysed again (an
    ``EvidenceMaker`` that is never prepared)."""
    maker = EvidenceMaker(backend._layout.current, query, None)
    return maker(0, passage.uri, passage.title, passage.section, passage.text).coverage


@pytest.mark.parametrize("mode", [SearchMode.BM25, SearchMode.HYBRID])
def test_coverage_from_the_index_is_exactly_the_analysed_coverage(
    examples: SqliteBackend, repo_root: Path, mode: SearchMode
) -> None:
    queries = _queries(repo_root)
    assert len(queries) > 60
    compared = covered = 0
    for query in queries:
        chunk_terms.cache_clear()
        passages = examples.search(query, top_k=10, mode=mode)
        assert chunk_terms.cache_info().misses == 0, "a passage's text was analysed again"
        for passage in passages:
            assert passage.evidence is not None
            assert passage.evidence.coverage == _analysed(examples, query, passage), (query, passage.uri)
            compared += 1
            covered += passage.evidence.coverage not in (None, 0.0, 1.0)
    # Not a trivial comparison: many passages, many of them covering part of their query.
    assert compared > 500
    assert covered > 100


def test_a_chunk_the_index_does_not_hold_falls_back_to_its_analysed_fields(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    with SqliteBackend(tmp_path / "lore.db", embedder) as backend:
        add_document(backend, embedder, "etcd.md", "# etcd quorum lost\n\nRestart the etcdNoLeader member.")
        found = backend.search("etcd quorum", top_k=3)
        assert found[0].evidence is not None
        assert found[0].evidence.coverage == 1.0  # both query terms are in the chunk
        maker = EvidenceMaker(backend._layout.current, "etcd leader", None)
        maker.prepare([10_000])  # no such chunk: nothing read, its fields are analysed
        passage = found[0]
        evidence = maker(10_000, passage.uri, passage.title, passage.section, passage.text)
        assert evidence.coverage == 1.0
        terms = chunk_terms.__wrapped__((passage.title, passage.section, passage.text))
        assert {"etcd", "quorum", "etcdnolead"} <= terms
