"""Per-principal access in the conformance suite: what a caller may not read never appears.

Part of ``BackendConformance`` (so a backend's test module needs no fixture beyond
``store``); ``AccessConformance`` can also be subclassed alone. A backend passes when its
``retrieve(..., access=AccessFilter)`` filters inside every channel:

- no passage of a document the caller may not read, whatever the query (queries drawn by
  hypothesis over a corpus mixing groups and tenants, in every mode the store offers);
- a document whose access is unknown (``Document.access`` None) only for admins;
- tenants isolated, admins included; ``access=None`` (the local admin view) sees all;
- ``top_k`` filled from readable documents when many unreadable ones rank higher, which
  fails a backend that cuts a channel's candidates before filtering them;
- the ledger (``held``) gives back the access list and tenant it stored, which is how sync
  notices a changed access configuration, and so does ``export`` (``lore migrate``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from itertools import product

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lore.access import ALL_VIEWERS, AccessFilter, access_terms, user_entry
from lore.errors import QueryError
from lore.models import Passage, SearchMode
from lore.protocols import StoringBackend
from lore.testing import DEFAULT_SOURCE, Store, add_document
from lore.testing.embedders import CountingEmbedder

TENANTS: tuple[str | None, ...] = (None, "acme", "globex")
ALICE = "alice@example.com"
#: Access lists of the corpus: everyone, one group, two groups, one person, a group and a
#: person, nobody named, unknown.
ACCESS_LISTS: tuple[frozenset[str] | None, ...] = (
    ALL_VIEWERS,
    frozenset({"sre"}),
    frozenset({"dba"}),
    frozenset({"sre", "dba"}),
    frozenset({user_entry(ALICE)}),
    frozenset({"dba", user_entry(ALICE)}),
    frozenset(),
    None,
)
#: Callers: viewers with and without groups, admins of a tenant, one tenant's viewer.
FILTERS: tuple[AccessFilter, ...] = (
    AccessFilter(None, frozenset()),
    AccessFilter(None, frozenset({"sre"})),
    AccessFilter(None, frozenset({"dba", "ops"})),
    AccessFilter("acme", frozenset({"sre"})),
    AccessFilter("acme", frozenset({"sre", "dba"})),
    AccessFilter("globex", frozenset({"ops"})),
    # A person, and a group that spells that person's entry (which must grant nothing).
    AccessFilter(None, frozenset(), ALICE),
    AccessFilter("acme", frozenset({"ops"}), ALICE),
    AccessFilter(None, frozenset({user_entry(ALICE)})),
    AccessFilter(None, frozenset({"sre"}), "bob@example.com"),
    AccessFilter(None, None),
    AccessFilter("acme", None),
    AccessFilter("nobody-here", None),
)
#: The corpus's words: queries drawn from them match many documents in every channel.
WORDS = ("disk", "pressure", "etcd", "quorum", "kafka", "lag", "restart", "failover", "certificate")


def _uri(tenant: str | None, access: frozenset[str] | None, copy: int) -> str:
    who = "unknown" if access is None else "+".join(sorted(access)).replace(":", "-") or "none"
    return f"{tenant or 'default'}/{who}/{copy}.md"


class _Doc:
    def __init__(self, uri: str, access: frozenset[str] | None, tenant: str | None) -> None:
        self.uri, self.access, self.tenant = uri, access, tenant


def _mixed_corpus(store: Store, embedder: CountingEmbedder) -> list[_Doc]:
    """Two documents per (tenant, access list), each with a different subset of ``WORDS``."""
    docs: list[_Doc] = []
    with store.write_lock():
        for number, (tenant, access, copy) in enumerate(product(TENANTS, ACCESS_LISTS, range(2))):
            words = [word for i, word in enumerate(WORDS) if (number + i) % 3 != copy]
            uri = _uri(tenant, access, copy)
            text = f"Runbook {number}: {' '.join(words)}. {' '.join(reversed(words))}."
            add_document(store, embedder, uri, text, title=f"runbook {number}", access=access, tenant=tenant)
            docs.append(_Doc(uri, access, tenant))
    return docs


def _readable(docs: Sequence[_Doc], access: AccessFilter | None) -> set[str]:
    return {doc.uri for doc in docs if access is None or access.admits(access_terms(doc.access, doc.tenant))}


def _uris(passages: Sequence[Passage]) -> set[str]:
    return {passage.uri for passage in passages}


class AccessConformance:
    """Expects the ``store`` and ``embedder`` fixtures of ``BackendConformance``."""

    def test_unreadable_passages_never_appear(self, store: Store, embedder: CountingEmbedder) -> None:
        """Whatever the query, mode and caller: only passages the caller may read."""
        docs = _mixed_corpus(store, embedder)
        queries = st.one_of(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
            st.text(min_size=1, max_size=40),
        )

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(
            query=queries,
            access=st.sampled_from(FILTERS),
            mode=st.sampled_from(store.modes),
            top_k=st.integers(1, 30),
        )
        def check(query: str, access: AccessFilter, mode: SearchMode, top_k: int) -> None:
            try:
                passages = asyncio.run(store.retrieve(query, top_k=top_k, mode=mode, access=access)).passages
            except QueryError:
                return
            shown = _uris(passages) - _readable(docs, access)
            assert not shown, f"{access} was shown {sorted(shown)} for {query!r} in {mode.value}"

        check()

    @pytest.mark.parametrize("access", FILTERS, ids=str)
    async def test_each_caller_sees_exactly_what_it_may_read(
        self, store: Store, embedder: CountingEmbedder, access: AccessFilter
    ) -> None:
        """Every readable document is found too (a filter that hides everything passes the
        test above): the corpus holds 48 chunks, so top_k 50 returns every match."""
        docs = _mixed_corpus(store, embedder)
        expected = _readable(docs, access)
        for mode in store.modes:
            passages = (await store.retrieve(" ".join(WORDS), top_k=50, mode=mode, access=access)).passages
            assert _uris(passages) == expected, mode.value

    async def test_unknown_access_is_for_admins_only(self, store: Store, embedder: CountingEmbedder) -> None:
        _mixed_corpus(store, embedder)
        for access in FILTERS:
            for mode in store.modes:
                passages = (
                    await store.retrieve("disk etcd kafka", top_k=50, mode=mode, access=access)
                ).passages
                unknown = {uri for uri in _uris(passages) if "/unknown/" in uri or "/none/" in uri}
                if access.groups is not None:
                    assert not unknown, (access, mode.value)
                elif access.tenant in TENANTS:
                    assert unknown, (access, mode.value)

    async def test_tenants_are_isolated(self, store: Store, embedder: CountingEmbedder) -> None:
        _mixed_corpus(store, embedder)
        for tenant in TENANTS:
            admin = AccessFilter(tenant, None)
            for mode in store.modes:
                passages = (
                    await store.retrieve("disk etcd kafka", top_k=50, mode=mode, access=admin)
                ).passages
                assert passages, (tenant, mode.value)
                assert {uri.split("/", 1)[0] for uri in _uris(passages)} == {tenant or "default"}

    async def test_no_filter_is_the_local_admin_view(self, store: Store, embedder: CountingEmbedder) -> None:
        docs = _mixed_corpus(store, embedder)
        for mode in store.modes:
            passages = (await store.retrieve(" ".join(WORDS), top_k=50, mode=mode)).passages
            assert _uris(passages) == {doc.uri for doc in docs}, mode.value

    async def test_top_k_is_filled_from_readable_documents(
        self, store: Store, embedder: CountingEmbedder
    ) -> None:
        """150 restricted documents match the query far better than the three the caller
        may read: a channel that cut its candidates before filtering would come back short."""
        with store.write_lock():
            for i in range(150):
                add_document(
                    store,
                    embedder,
                    f"secret/{i}.md",
                    f"disk pressure eviction disk pressure eviction node-{i}",
                    access=frozenset({"dba"}),
                )
            for i in range(3):
                add_document(
                    store,
                    embedder,
                    f"open/{i}.md",
                    f"Notes {i} on capacity planning and budgets, which mention disk pressure once "
                    "among many other words about staffing and quarterly reviews.",
                    access=ALL_VIEWERS if i else frozenset({"sre"}),
                )
        viewer = AccessFilter(None, frozenset({"sre"}))
        for mode in store.modes:
            passages = (
                await store.retrieve("disk pressure eviction", top_k=3, mode=mode, access=viewer)
            ).passages
            assert _uris(passages) == {"open/0.md", "open/1.md", "open/2.md"}, mode.value

    def test_ledger_keeps_access_and_tenant(self, store: Store, embedder: CountingEmbedder) -> None:
        add_document(store, embedder, "a.md", "alpha", access=frozenset({"sre", "dba"}), tenant="acme")
        add_document(store, embedder, "b.md", "beta", access=ALL_VIEWERS)
        add_document(store, embedder, "c.md", "gamma")
        held = store.held(DEFAULT_SOURCE)
        assert (held["a.md"].access, held["a.md"].tenant) == (frozenset({"sre", "dba"}), "acme")
        assert (held["b.md"].access, held["b.md"].tenant) == (ALL_VIEWERS, None)
        assert (held["c.md"].access, held["c.md"].tenant) == (None, None)

    def test_export_keeps_access_and_tenant(self, store: Store, embedder: CountingEmbedder) -> None:
        """``lore migrate`` copies what ``export`` yields: access must survive the move."""
        if not isinstance(store, StoringBackend):
            pytest.skip(f"{type(store).__name__} is not a StoringBackend (no export)")
        add_document(store, embedder, "a.md", "alpha", access=frozenset({"sre"}), tenant="acme")
        add_document(store, embedder, "b.md", "beta")
        exported = {document.uri: document for document, _, _ in store.export()}
        assert (exported["a.md"].access, exported["a.md"].tenant) == (frozenset({"sre"}), "acme")
        assert (exported["b.md"].access, exported["b.md"].tenant) == (None, None)

    async def test_rewriting_a_document_changes_who_sees_it(
        self, store: Store, embedder: CountingEmbedder
    ) -> None:
        """A new access list replaces the old one in every channel (sync re-writes a
        document whose configured access changed)."""
        add_document(store, embedder, "a.md", "etcd quorum lost", access=frozenset({"dba"}))
        sre = AccessFilter(None, frozenset({"sre"}))
        for mode in store.modes:
            assert (await store.retrieve("etcd quorum", top_k=5, mode=mode, access=sre)).passages == []
        add_document(store, embedder, "a.md", "etcd quorum lost", access=frozenset({"sre"}))
        for mode in store.modes:
            passages = (await store.retrieve("etcd quorum", top_k=5, mode=mode, access=sre)).passages
            assert _uris(passages) == {"a.md"}, mode.value
