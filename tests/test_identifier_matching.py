"""Identifier-aware lexical matching: snake_case, kebab-case, dotted and CamelCase names
match whole and by their words, on SQLite and in the shared ``lexical`` module."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lore.backends import lexical
from lore.backends.sqlite import SqliteBackend
from lore.embedders.hashing import HashingEmbedder
from lore.models import SearchMode
from lore.testing import add_document

_WORD = st.from_regex(r"[a-z]{2,8}", fullmatch=True)


def test_identifier_words_split_every_style() -> None:
    assert lexical.identifier_words("kube-apiserver") == ["kube", "apiserver"]
    assert lexical.identifier_words("node_exporter is down") == ["node", "exporter"]
    assert lexical.identifier_words("etcd.member.count") == ["etcd", "member", "count"]
    assert lexical.identifier_words("KubeNodeNotReady") == ["Kube", "Node", "Not", "Ready"]
    assert lexical.identifier_words("kube_apiDown") == ["kube", "api", "Down"]
    # Names, not words: one-letter splits, acronyms with digits, numbers, plain words.
    assert lexical.identifier_words("mRNA over IPv4, BRCA1 at 10.0.0.1, plain words") == []


def test_sub_identifiers_are_the_names_inside_compounds() -> None:
    assert lexical.sub_identifiers("quay.io/openshift/kube-apiserver:v1.29") == [
        "quay.io", "kube-apiserver", "v1.29", "v1",
    ]  # fmt: skip
    assert lexical.sub_identifiers("restart kube-apiserver.service") == ["kube-apiserver"]
    assert lexical.sub_identifiers("kube-apiserver node_exporter 10.0.0.1") == []


def test_path_text() -> None:
    assert lexical.path_text("file://gitlab/docs/patroni/patroni-lag.md") == "gitlab docs patroni patroni-lag"
    assert lexical.path_text("file://openshift/alerts/KubeNodeNotReady.md#meaning") == (
        "openshift alerts KubeNodeNotReady"
    )
    # A benchmark's numeric ids and dated folders are not words anyone searches for.
    assert lexical.path_text("beir://4983") == ""
    assert lexical.path_text("file://pm/2026/07/etcd.v2") == "pm etcd"
    # A postmortem's date is not a name: 10.0.0.1 must not match the 10 of 2025-10-03.
    assert lexical.path_text("file://pm/2025-10-03-certificate-expiry.md") == "pm certificate-expiry"
    assert lexical.path_text("file://pm/incident_20250103.md") == "pm incident"
    assert lexical.path_text("file://kb/err-1234-idempotency.md") == "kb err-1234-idempotency"


@given(st.lists(_WORD, min_size=2, max_size=5), st.sampled_from(["-", "_", "."]))
def test_a_joined_name_yields_its_words_and_stays_whole(words: list[str], joiner: str) -> None:
    name = joiner.join(words)
    assert lexical.identifier_words(name) == words
    assert name in lexical.terms(name)
    assert lexical.identifiers(f"see {name} now") == [name]


@given(st.lists(_WORD, min_size=2, max_size=5))
def test_a_camel_case_name_yields_its_words(words: list[str]) -> None:
    name = words[0] + "".join(word.capitalize() for word in words[1:])
    assert [word.lower() for word in lexical.identifier_words(name)] == words
    assert name.lower() in lexical.terms(name)


@given(st.text(max_size=80))
def test_split_words_come_from_the_text(text: str) -> None:
    lowered = text.lower()
    for word in lexical.identifier_words(text):
        assert word.lower() in lowered
    for name in lexical.sub_identifiers(text):
        assert name in lowered
    assert lexical.terms(text) == lexical.terms(text)  # deterministic


@given(st.lists(st.from_regex(r"[A-Za-z0-9_\-.]{1,12}", fullmatch=True), min_size=1, max_size=4))
def test_path_text_keeps_only_segments_with_a_letter(segments: list[str]) -> None:
    for part in lexical.path_text("file://" + "/".join(segments)).split():
        assert re.search(r"[A-Za-z]", part)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[SqliteBackend]:
    embedder = HashingEmbedder()
    store = SqliteBackend(tmp_path / "lore.db", embedder)
    pages = {
        "runbooks/control-plane/apiserver-restart.md": (
            "Restarting", "Restart kube-apiserver.service on each master."
        ),
        "runbooks/kube/api-notes.md": ("API notes", "The kube scheduler talks to the apiserver."),
        "runbooks/alerts/KubeNodeNotReady.md": ("KubeNodeNotReady", "Drain it and restart the kubelet."),
        "runbooks/metrics/exporters.md": ("Exporters", "Check that node_exporter answers on 9100."),
        "runbooks/etcd/members.md": ("Members", "Alert when etcd.member.count drops below quorum."),
        "runbooks/monitoring/prometheus-is-down.md": ("Steps to check", "Log in and check the service."),
        "runbooks/notes/unrelated.md": ("Unrelated", "Water the office plants on Fridays."),
    }
    for uri, (title, text) in pages.items():
        add_document(store, embedder, uri, text, title=title)
    yield store
    store.close()


def _top(backend: SqliteBackend, query: str) -> str:
    found = asyncio.run(backend.retrieve(query, top_k=3, mode=SearchMode.BM25)).passages
    return found[0].uri if found else ""


@pytest.mark.parametrize(
    ("query", "uri"),
    [
        ("kube-apiserver", "runbooks/control-plane/apiserver-restart.md"),  # inside a dotted compound
        ("KubeNodeNotReady", "runbooks/alerts/KubeNodeNotReady.md"),
        ("node is not ready", "runbooks/alerts/KubeNodeNotReady.md"),
        ("node_exporter", "runbooks/metrics/exporters.md"),
        ("exporter answers", "runbooks/metrics/exporters.md"),
        ("etcd.member.count", "runbooks/etcd/members.md"),
        ("etcd member count", "runbooks/etcd/members.md"),
        # Only the file name says what this page is about.
        ("Prometheus is down", "runbooks/monitoring/prometheus-is-down.md"),
    ],
)
def test_identifiers_match_whole_and_by_parts_on_sqlite(backend: SqliteBackend, query: str, uri: str) -> None:
    assert _top(backend, query) == uri


def test_the_exact_identifier_outranks_its_scattered_words(backend: SqliteBackend) -> None:
    answer = asyncio.run(backend.retrieve("kube-apiserver", top_k=5, mode=SearchMode.BM25))
    found = [p.uri for p in answer.passages]
    assert found[:2] == ["runbooks/control-plane/apiserver-restart.md", "runbooks/kube/api-notes.md"]
    assert asyncio.run(backend.retrieve("apiserver", top_k=5, mode=SearchMode.BM25)).passages


def test_identifier_share_leaves_template_placeholders_out() -> None:
    assert lexical.identifier_share("ERR_5002 on kube-apiserver") == pytest.approx(2 / 3)
    assert lexical.identifier_share("the node is not ready") == 0.0
    assert lexical.identifier_share("Node {{ $labels.node }} is down ({{ $value | humanize }})") == 0.0
    assert lexical.identifier_share("") == 0.0


def test_sparse_query_vectors_leave_a_rules_placeholders_out() -> None:
    """Qdrant's lexical channel searches what SQLite's and pgvector's search."""
    weights = lexical.BM25Weights()
    rule = weights.query("Node {{ $labels.node }} is down ({{ $value | humanize }})")
    assert rule == weights.query("Node is down")
    helm = weights.query("what sets {{ .Values.replicaCount }}")
    assert lexical.term_id("values.replicacount") in helm.indices


def _coverage(backend: SqliteBackend, query: str, uri: str) -> float:
    found = asyncio.run(backend.retrieve(query, top_k=7, mode=SearchMode.BM25)).passages
    evidence = next(p.evidence for p in found if p.uri == uri)
    assert evidence is not None
    assert evidence.coverage is not None
    return evidence.coverage


def test_coverage_counts_the_path_and_leaves_template_placeholders_out(backend: SqliteBackend) -> None:
    """The verdict's coverage (lore.confidence): a page named for the failure covers the
    words its file name holds, and a pasted rule's placeholders are not query words that
    no page could hold (they hid a real answer as "none": docs/quality.md, "Confidence")."""
    page = "runbooks/monitoring/prometheus-is-down.md"
    assert _coverage(backend, "prometheus down", page) == pytest.approx(1.0)
    templated = "Prometheus {{ $labels.instance }} is down ({{ $value | humanizePercentage }})"
    assert _coverage(backend, templated, page) == pytest.approx(1.0)
