"""``embedder = "none"``: no embedding model at all, for keyword (BM25) search only.

The first step on a cluster a team already runs (Elasticsearch, OpenSearch) is keyword
search with nothing to download or pay for. Vectors have no columns (dimension 0), so
sync stores chunks without vectors and a backend that honours it declares ``bm25`` as
its only mode. Only backends that search text on their own accept it
(``lore.resolve.EMBEDDERLESS_BACKENDS``); the others need vectors for every chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lore.config import LoreSettings
from lore.errors import EmbeddingError
from lore.protocols import Vectors

MODEL_ID = "none"


class NoEmbedder:
    """Documents get empty vectors (nothing is computed); a query cannot be embedded."""

    model_id = MODEL_ID
    dimension = 0
    #: The chunker sizes chunks from this; the default model's window keeps chunks as
    #: small as with the default embedder, so passages read the same.
    max_input_tokens = 256
    degraded = False

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return np.zeros((len(texts), 0), dtype=np.float32)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        raise EmbeddingError(
            "no embedder is configured (embedder = 'none'): only keyword (BM25) search is possible"
        )


def from_settings(settings: LoreSettings) -> NoEmbedder:
    return NoEmbedder()
