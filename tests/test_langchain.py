"""The LangChain retriever: Documents from the safe tool result, with provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from optional_extras import require_extra

require_extra("langchain_core", "langchain")

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

import agent_corpus
from lore.config import load_settings
from lore.errors import RetrievalError
from lore.integrations.langchain import KnowledgeSearchRetriever
from lore.resolve import build_knowledge_search
from lore.tool.core import UNTRUSTED_NOTICE, KnowledgeSearch

RUNBOOKS = {
    "etcd-no-leader.md": (
        "---\ntitle: etcd has no leader\n---\n# etcd has no leader\n\n## Meaning\n\n"
        "The alert etcdNoLeader fires when a member reports no leader.\n"
    ),
    "deploy-keys.md": (
        "---\ntitle: Deploy keys\n---\n# Deploy keys\n\n## Rotation\n\n"
        "The plantedrotation deploy token was GITHUB_TOKEN={token} until it was revoked.\n"
    ),
}
FAKE_TOKEN = "ghp_" + "x" * 36


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runbooks = {name: text.replace("{token}", FAKE_TOKEN) for name, text in RUNBOOKS.items()}
    return agent_corpus.synced_config(tmp_path_factory.mktemp("langchain"), runbooks)


@pytest.fixture
def search(config: Path) -> KnowledgeSearch:
    search = build_knowledge_search(load_settings(config))
    assert search is not None
    return search


def last_audit(config: Path) -> dict[str, Any]:
    return agent_corpus.audit_entries(config)[-1]


async def test_ainvoke_returns_documents_with_provenance(search: KnowledgeSearch, config: Path) -> None:
    retriever = KnowledgeSearchRetriever(search=search, principal="lc-agent", top_k=1)
    assert isinstance(retriever, BaseRetriever)
    docs = await retriever.ainvoke("etcdNoLeader")
    assert len(docs) == 1
    doc = docs[0]
    assert isinstance(doc, Document)
    assert "etcdNoLeader" in doc.page_content
    assert doc.metadata["uri"].endswith("etcd-no-leader.md")
    assert doc.metadata["title"] == "etcd has no leader"
    assert doc.metadata["rank"] == 1
    assert doc.metadata["engine"] == "sqlite"
    provenance = {"section", "revision", "updated_at", "age_days", "stale", "score", "chunk_id"}
    assert provenance <= doc.metadata.keys()
    assert doc.id == doc.metadata["chunk_id"]
    assert doc.metadata["untrusted"] is True
    assert doc.metadata["notice"] == UNTRUSTED_NOTICE
    audit = last_audit(config)
    assert audit["principal"] == "lc-agent"
    assert audit["top_k"] == 1


def test_invoke_from_synchronous_code(search: KnowledgeSearch) -> None:
    docs = KnowledgeSearchRetriever(search=search, top_k=1).invoke("etcdNoLeader")
    assert docs[0].metadata["uri"].endswith("etcd-no-leader.md")


async def test_invoke_inside_a_running_loop(search: KnowledgeSearch) -> None:
    # The synchronous API called from async code (a notebook, a sync callback).
    docs = KnowledgeSearchRetriever(search=search, top_k=1).invoke("etcdNoLeader")
    assert docs[0].metadata["title"] == "etcd has no leader"


async def test_documents_are_the_redacted_text(search: KnowledgeSearch) -> None:
    docs = await KnowledgeSearchRetriever(search=search, top_k=1).ainvoke("plantedrotation")
    assert docs[0].metadata["uri"].endswith("deploy-keys.md")
    assert FAKE_TOKEN not in docs[0].page_content
    assert "[REDACTED:" in docs[0].page_content


async def test_filters_become_tool_arguments(search: KnowledgeSearch, config: Path) -> None:
    retriever = KnowledgeSearchRetriever(
        search=search, source_type="filesystem", labels={"source": "runbooks"}
    )
    docs = await retriever.ainvoke("etcdNoLeader")
    assert docs
    assert last_audit(config)["filters"] == {"source": "runbooks", "source_type": "filesystem"}


async def test_an_unanswered_search_raises(search: KnowledgeSearch) -> None:
    with pytest.raises(RetrievalError, match="query"):
        await KnowledgeSearchRetriever(search=search).ainvoke("   ")
