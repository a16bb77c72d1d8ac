"""The conformance suite's label filters and query texts (``lore.testing.conformance``
composes them into ``BackendConformance``)."""

from __future__ import annotations

import numpy as np
import pytest

from lore.errors import QueryError
from lore.models import SOURCE_LABEL, SOURCE_TYPE_LABEL, Passage, SearchMode
from lore.protocols import CopiedQueryFusion
from lore.testing import Store, add_document
from lore.testing.cases import HOSTILE_QUERIES
from lore.testing.embedders import CountingEmbedder
from lore.testing.suite import ALL_MODES, Suite, add_corpus, orthogonal_to, require_mode, uris


class FilterConformance(Suite):
    """Label filters apply inside every channel, with AND semantics over ``key=value``."""

    FILTER_CASES: list[tuple[dict[str, str], set[str]]] = [  # noqa: RUF012
        ({SOURCE_LABEL: "alpha"}, {"a.md", "c.md"}),
        ({SOURCE_TYPE_LABEL: "git"}, {"b.md"}),
        ({"team": "payments"}, {"a.md", "b.md"}),
        ({"tags": "etcd"}, {"a.md", "c.md"}),
        ({"tags": "kubernetes"}, {"a.md"}),
        ({"tags": "kube"}, set()),
        ({SOURCE_LABEL: "alpha", "team": "payments"}, {"a.md"}),
        ({"team": "nobody"}, set()),
        ({}, {"a.md", "b.md", "c.md"}),
    ]

    def _add_labelled(self, store: Store, embedder: CountingEmbedder) -> None:
        with store.write_lock():
            self._add_labelled_unlocked(store, embedder)

    def _add_labelled_unlocked(self, store: Store, embedder: CountingEmbedder) -> None:
        add_document(
            store,
            embedder,
            "a.md",
            "outage runbook for the ledger",
            source="alpha",
            labels={"team": "payments", "tags": "etcd,kubernetes"},
        )
        add_document(
            store,
            embedder,
            "b.md",
            "outage runbook for the queue",
            source="beta",
            source_type="git",
            labels={"team": "payments", "tags": "kafka"},
        )
        add_document(
            store,
            embedder,
            "c.md",
            "outage runbook for the store",
            source="alpha",
            labels={"team": "platform", "tags": "etcd"},
        )

    @pytest.mark.parametrize("mode", [None, *ALL_MODES])
    async def test_label_filters(
        self, store: Store, embedder: CountingEmbedder, mode: SearchMode | None
    ) -> None:
        if mode is not None:
            require_mode(store, mode)
        self._add_labelled(store, embedder)
        for labels, expected in self.FILTER_CASES:
            passages = (await store.retrieve("outage runbook", top_k=10, labels=labels, mode=mode)).passages
            assert set(uris(passages)) == expected, labels

    @pytest.mark.parametrize("mode", [None, *ALL_MODES])
    async def test_filter_applies_before_top_k(
        self, store: Store, embedder: CountingEmbedder, mode: SearchMode | None
    ) -> None:
        """The one matching document ranks below 150 better ones: filtering after a
        candidate cut would lose it."""
        if mode is not None:
            require_mode(store, mode)
        with store.write_lock():
            for i in range(150):
                add_document(
                    store,
                    embedder,
                    f"noise/{i}.md",
                    f"disk pressure eviction disk pressure node-{i}",
                    labels={"team": "noise"},
                )
            add_document(
                store,
                embedder,
                "target.md",
                "A long note on capacity planning, budgets, quarterly reviews and hiring, which "
                "mentions disk pressure once among many other unrelated words about staffing.",
                labels={"team": "target"},
            )
        passages = (await store.retrieve(
            "disk pressure eviction", top_k=1, labels={"team": "target"}, mode=mode
        )).passages
        assert uris(passages) == ["target.md"]


class QueryTextConformance(Suite):
    """Any query text gives a result or a ``QueryError``, never an engine error."""

    async def test_hostile_query_text(self, store: Store, embedder: CountingEmbedder) -> None:
        """Every ``HOSTILE_QUERIES`` entry in every mode (one test: one corpus to write)."""
        add_corpus(store, embedder, {"restart.md": "restart the pod; title: body AND OR NOT (x) [y] *"})
        failures: list[str] = []
        for query in HOSTILE_QUERIES:
            for mode in store.modes:
                try:
                    passages = (await store.retrieve(query, top_k=5, mode=mode)).passages
                except QueryError:
                    continue
                except Exception as err:
                    failures.append(f"{query[:40]!r} in {mode.value}: {type(err).__name__}: {err}")
                    continue
                if not isinstance(passages, list) or len(passages) > 5:
                    failures.append(f"{query[:40]!r} in {mode.value}: returned {passages!r:.80}")
                elif not all(isinstance(p, Passage) for p in passages):
                    failures.append(f"{query[:40]!r} in {mode.value}: returned non-Passage items")
        assert not failures, "\n".join(failures)

    @pytest.mark.parametrize("query", ["", "   ", "\n", "\t \r\n"])
    async def test_empty_query(self, store: Store, embedder: CountingEmbedder, query: str) -> None:
        """A blank query is refused with a ``QueryError`` that says so, in every mode and
        before anything is embedded: it is a mistake to report, not a search that found
        nothing (or, worse, whatever an embedded blank happens to be near)."""
        add_corpus(store, embedder)
        embedder.reset()
        for mode in [None, *store.modes]:
            with pytest.raises(QueryError, match=r"(?i)empty|blank"):
                await store.retrieve(query, top_k=5, mode=mode)
        assert embedder.query_calls == 0, "a blank query must not reach the embedder"

    async def test_operator_words_are_plain_words(self, store: Store, embedder: CountingEmbedder) -> None:
        require_mode(store, SearchMode.BM25)
        add_corpus(store, embedder, {"ops.md": "NEAR the OR gate NOT the AND gate"})
        passages = (await store.retrieve("NEAR OR gate", top_k=3, mode=SearchMode.BM25)).passages
        assert passages
        assert passages[0].uri == "ops.md"


#: A runbook sentence a user pastes whole (a copied query, ``lore.fusion.copied_from``).
_COPIED_SENTENCE = "drain the node before you restart the kubelet so that its pods reschedule cleanly"


class CopiedQueryConformance(Suite):
    """``CopiedQueryFusion``: a query copied from a page is answered by that page, however
    the vector channel votes; a question that is not copied still counts the vectors."""

    @pytest.mark.parametrize(
        ("query", "first"),
        [
            (_COPIED_SENTENCE, "source.md"),
            # Shares words with both pages but no run of eight: fused as any question.
            ("restart the kubelet node pods", "decoy.md"),
        ],
    )
    async def test_a_copied_query_is_answered_by_its_page(
        self, store: Store, embedder: CountingEmbedder, query: str, first: str
    ) -> None:
        if not (isinstance(store, CopiedQueryFusion) and store.fuses_copied_queries_lexically):
            pytest.skip(f"{type(store).__name__} does not declare fuses_copied_queries_lexically")
        require_mode(store, SearchMode.HYBRID)
        q = embedder.embed_queries([query])[0]
        with store.write_lock():
            # The vector channel's vote goes to the decoy (the query's own vector), none
            # to the page the sentence was copied from.
            add_document(
                store,
                embedder,
                "source.md",
                f"Upgrades. {_COPIED_SENTENCE}. Then uncordon it.",
                vectors=orthogonal_to(q, seed=3)[np.newaxis, :],
            )
            add_document(
                store,
                embedder,
                "decoy.md",
                "restart the kubelet on a node whose pods are stuck",
                vectors=q[np.newaxis, :],
            )
            for i, text in enumerate(("rotate the etcd certificates", "scale the ingress controllers")):
                add_document(
                    store,
                    embedder,
                    f"other-{i}.md",
                    text,
                    vectors=orthogonal_to(q, seed=10 + i)[np.newaxis, :],
                )
        passages = (await store.retrieve(query, top_k=3, mode=SearchMode.HYBRID)).passages
        assert uris(passages)[0] == first
