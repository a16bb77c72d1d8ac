"""The BM25 query of the SQLite backend's full-text index leaves out the clauses of terms
no chunk holds in a field (they score nothing, but tantivy-py walks every clause's
postings: bench/perf_million.py), and must rank exactly as the query of every clause did."""

from __future__ import annotations

from pathlib import Path

import pytest
import tantivy

from lore.access import AccessFilter
from lore.backends.sqlite.fulltext import FullTextIndex, FullTextRow, query_terms

_DB = frozenset({"team=db"})
_ROWS = [
    FullTextRow(1, "EtcdNoLeader", "Meaning", "etcd has no leader; check the raft quorum", _DB),
    FullTextRow(2, "Disk full", "Mitigation", "free disk on the etcd member, then restart it", frozenset()),
    FullTextRow(3, "Restart runbook", "Steps", "restart kube-apiserver.service; ERR_1234", frozenset()),
    FullTextRow(4, "Quorum lost", "Diagnosis", "etcdctl endpoint status shows no leader", _DB),
    FullTextRow(5, "Payments lag", "Impact", "payments-consumer-group lags", frozenset(), uri="rb/lag.md"),
]

_QUERIES = [
    "etcd no leader",
    "restart kube-apiserver.service",
    "ERR_1234 quorum",
    "payments-consumer-group lag rb",
    "EtcdNoLeader disk",
    "zzyzx quux",  # no chunk holds any of these: nothing to rank
]


@pytest.fixture
def index(tmp_path: Path) -> FullTextIndex:
    fulltext = FullTextIndex(tmp_path / "fulltext", title_boost=1.0, section_boost=1.0, identifier_boost=1.0)
    fulltext.recreate()
    fulltext.replace_all(_ROWS)
    return fulltext


def _every_clause(index: FullTextIndex, query: str, limit: int) -> list[tuple[int, float]]:
    """The ranking of the query of every (field, term) clause, absent terms included."""
    words, identifiers = query_terms(query)
    fields = ("title", "section", "body", "path")
    clauses = [index._clause(field, word, 1.0) for word in words for field in fields]
    clauses += [index._clause("ident", name, 1.0) for name in identifiers]
    if not clauses:
        return []
    searcher = index._require().searcher()
    hits = searcher.search(tantivy.Query.boolean_query(clauses), limit, count=False).hits
    rowids = searcher.fast_field_values("rowid", [address for _, address in hits])
    return [(int(rowid), float(score)) for (score, _), rowid in zip(hits, rowids, strict=True)]


@pytest.mark.parametrize("query", _QUERIES)
def test_leaving_out_absent_terms_ranks_as_every_clause_did(index: FullTextIndex, query: str) -> None:
    assert index.search(query, frozenset(), 10) == _every_clause(index, query, 10)


def test_a_query_of_absent_terms_finds_nothing_even_under_filters(index: FullTextIndex) -> None:
    assert index.search("zzyzx quux", frozenset({"team=db"}), 10) == []
    assert index.search("zzyzx", frozenset(), 10, AccessFilter(groups=None)) == []


def test_filters_still_restrict_the_pruned_query(index: FullTextIndex) -> None:
    found = index.search("etcd no leader", frozenset({"team=db"}), 10)
    assert {rowid for rowid, _ in found} == {1, 4}


def test_terms_no_chunk_holds_in_a_field_get_no_clause(index: FullTextIndex) -> None:
    searcher = index._require().searcher()
    query = index._scoring_query("zzyzx etcd", searcher)
    assert query is not None
    held = [
        field
        for field in ("title", "section", "body", "path", "ident")
        if searcher.doc_freq(field, "etcd")
    ]
    # "zzyzx" nowhere, "etcd" only where some chunk has it (not in a section or a path).
    assert "section" not in held
    assert "path" not in held
    assert repr(query).count("TermQuery") == len(held)
