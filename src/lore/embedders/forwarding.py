"""A base for embedders that change how queries are embedded and nothing else: the model's
identity, sizes and documents are the wrapped embedder's (the servers' query batcher,
``lore.embedders.query_batching``; the evaluation's query cache, ``lore.eval.runner``)."""

from __future__ import annotations

from collections.abc import Sequence

from lore.protocols import Embedder, Vectors


class ForwardingEmbedder:
    def __init__(self, inner: Embedder) -> None:
        self.inner = inner

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def max_input_tokens(self) -> int:
        return self.inner.max_input_tokens

    @property
    def degraded(self) -> bool:
        return self.inner.degraded

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self.inner.embed_documents(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self.inner.embed_queries(texts)
