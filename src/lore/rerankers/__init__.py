"""Rerankers: reorder a retriever's candidates with a stronger relevance model.

Off by default. ``settings.reranker`` picks one (``lore.resolve.resolve_reranker`` builds
it):

- ``http``: any endpoint speaking Cohere's ``/v1/rerank`` format (Cohere, Jina, Voyage,
  text-embeddings-inference, infinity, ...); needs ``reranker_url`` and ``reranker_model``,
  sends ``reranker_api_key`` as a bearer token.
- ``cohere``: the same, with ``reranker_url`` defaulting to Cohere's API.
- ``cross-encoder``: a local sentence-transformers cross-encoder; ``reranker_model`` is
  its directory (relative to the config file).
"""

from __future__ import annotations

#: The names ``reranker`` takes (besides ``none``).
RERANKERS = ("http", "cohere", "cross-encoder")

__all__ = ["RERANKERS"]
