"""Identifier-aware BM25 on the SQLite backend: alert text meets CamelCase runbook names."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lore.backends.sqlite import SqliteBackend
from lore.backends.sqlite.fulltext import with_identifier_words
from lore.embedders.hashing import HashingEmbedder
from lore.models import SearchMode
from lore.testing import add_document


def test_camel_case_identifiers_gain_their_words() -> None:
    assert with_identifier_words("KubeAPIDown fired") == "KubeAPIDown fired\nKube API Down"
    assert with_identifier_words("etcdNoLeader, CPUThrottlingHigh") == (
        "etcdNoLeader, CPUThrottlingHigh\netcd No Leader CPU Throttling High"
    )
    # Nothing to split: acronyms with digits, snake/kebab case (the English analyzer splits those).
    # A one-letter part makes it a name (mRNA, IPv4), not words.
    for plain in ("BRCA1 and kube-apiserver", "node_exporter", "Plain words only", "mRNA over IPv4"):
        assert with_identifier_words(plain) == plain


def test_words_of_an_alert_name_find_its_runbook_and_the_name_still_matches_whole(tmp_path: Path) -> None:
    embedder = HashingEmbedder()
    backend = SqliteBackend(tmp_path / "lore.db", embedder)
    try:
        add_document(backend, embedder, "alerts/KubeNodeNotReady.md", "Drain it and restart the kubelet.",
                     title="KubeNodeNotReady")  # fmt: skip
        add_document(backend, embedder, "alerts/KubeletDown.md", "The kubelet process is gone.",
                     title="KubeletDown")  # fmt: skip
        add_document(
            backend, embedder, "notes/drain.md", "Drain a node before maintenance.", title="Draining"
        )

        def found(query: str) -> list[str]:
            return [
                p.uri for p in asyncio.run(backend.retrieve(query, top_k=3, mode=SearchMode.BM25)).passages
            ]

        def top(query: str) -> str:
            return (found(query) or [""])[0]

        # Without the split, no field of the runbook holds "node" or "ready" as a word.
        assert "alerts/KubeNodeNotReady.md" in found("Node is not ready")
        assert top("not ready") == "alerts/KubeNodeNotReady.md"
        assert top("KubeNodeNotReady") == "alerts/KubeNodeNotReady.md"
        assert top("kubelet down") == "alerts/KubeletDown.md"
    finally:
        backend.close()
