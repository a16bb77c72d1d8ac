"""A local cross-encoder (sentence-transformers ``CrossEncoder``) loaded from a directory.

Nothing is downloaded: the model must already lie on disk (``local_files_only``), e.g.
a ``cross-encoder/ms-marco-MiniLM-L-6-v2`` snapshot copied beside the index.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lore.errors import MissingExtraError, RerankError
from lore.models import Passage
from lore.rerankers.http import passage_document


class CrossEncoderReranker:
    """Scores (query, passage) pairs with a cross-encoder; the model loads on first use."""

    def __init__(self, model_path: str | Path, *, batch_size: int = 32, device: str = "cpu") -> None:
        self._path = Path(model_path)
        if not self._path.is_dir():
            raise RerankError(f"cross-encoder model directory not found: {self._path}")
        self._batch_size = batch_size
        self._device = device
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return f"cross-encoder:{self._path.name}"

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                try:
                    from sentence_transformers import CrossEncoder
                except ImportError as err:
                    raise MissingExtraError("local-torch", "sentence-transformers") from err
                try:
                    self._model = CrossEncoder(str(self._path), device=self._device, local_files_only=True)
                except (OSError, ValueError) as err:
                    raise RerankError(f"cannot load the cross-encoder at {self._path}: {err}") from err
            return self._model

    def _scores(self, query: str, passages: Sequence[Passage]) -> list[float]:
        model = self._load()
        pairs = [(query, passage_document(passage)) for passage in passages]
        try:
            scores = model.predict(pairs, batch_size=self._batch_size, show_progress_bar=False)
        except (RuntimeError, ValueError) as err:
            raise RerankError(f"cross-encoder {self._path.name} failed: {err}") from err
        return [float(score) for score in scores]

    async def rerank(self, query: str, passages: Sequence[Passage], *, top_k: int) -> list[Passage]:
        if not passages or top_k <= 0:
            return []
        # CPU-bound inference must not stall the event loop serving other requests.
        scores = await asyncio.to_thread(self._scores, query, passages)
        order = sorted(range(len(passages)), key=lambda i: scores[i], reverse=True)
        return [dataclasses.replace(passages[i], score=scores[i]) for i in order[:top_k]]
