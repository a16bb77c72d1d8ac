"""Sync's index when ``[fallback]`` is configured: every write goes to the primary and to
the fallback index, so the fallback stays in step without a second sync.

Sync redacts, chunks and embeds each document once and hands both indexes the same
chunks and vectors. The two writes are independent: a failure writing one never undoes
or skips the other. A document either side failed to take is reported as a sync failure
naming that side, and comes back at the next sync, because the ledger sync compares
against (``held``) marks every document the two sides do not hold alike as changed.
State (resume tokens, chunking settings, last sync) is written to both and read from the
primary, so each side alone also describes itself (``lore status`` of the fallback).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from lore.errors import BackendUnavailableError, IndexingError, LoreError
from lore.models import Chunk, Document, IndexedDocument, RunRecord
from lore.protocols import Checkpointing, KnowledgeIndex, RunHistory, Vectors

logger = logging.getLogger(__name__)

_Action = Callable[[KnowledgeIndex], None]

#: The revision a ledger row gets when the two sides disagree: no document has it, so
#: sync rewrites the document (its unchanged chunk texts are not embedded again).
OUT_OF_STEP = "\x00out-of-step"


class MirroredIndex:
    """``KnowledgeIndex`` (with ``Checkpointing`` and ``RunHistory``) over two indexes."""

    def __init__(
        self, primary: KnowledgeIndex, fallback: KnowledgeIndex | None, *, fallback_problem: str | None = None
    ) -> None:
        """``fallback`` None: it could not be opened (``fallback_problem`` says why), and
        the run writes the primary alone; sync reports the problem."""
        self.primary = primary
        self.fallback: KnowledgeIndex = fallback if fallback is not None else _Absent()
        self.fallback_problem = fallback_problem if fallback is None else None
        #: Why the primary stopped answering during this run: later writes skip it at
        #: once (each would wait for a connection timeout) and go to the fallback alone.
        self.primary_down: str | None = None

    def check_embedder(self, model_id: str, dimension: int) -> None:
        self.primary.check_embedder(model_id, dimension)
        self.fallback.check_embedder(model_id, dimension)

    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        self._both("writing", lambda index: index.upsert(document, chunks, vectors))

    def delete_by_uri(self, uri: str) -> None:
        self._both("removing", lambda index: index.delete_by_uri(uri))

    def _both(self, what: str, action: _Action) -> None:
        problems = []
        if self.primary_down is not None:
            problems.append(f"the primary index: {self.primary_down}")
        else:
            try:
                action(self.primary)
            except BackendUnavailableError as err:
                self.primary_down = f"unreachable since earlier in this run ({err})"
                problems.append(f"the primary index: {err}")
            except LoreError as err:
                problems.append(f"the primary index: {err}")
        if self.fallback_problem is None:
            try:
                action(self.fallback)
            except LoreError as err:
                problems.append(f"the fallback index: {err}")
        if problems:
            # The other side's write stands; the report names what failed, and the
            # out-of-step ledger row brings the document back next time.
            raise IndexingError(f"{what} failed in " + "; ".join(problems))

    def held(self, source: str) -> Mapping[str, IndexedDocument]:
        primary = self.primary.held(source)
        if self.fallback_problem is not None:
            return primary  # not rewritten for a fallback that is not there
        fallback = self.fallback.held(source)
        ledger: dict[str, IndexedDocument] = {}
        for uri in primary.keys() | fallback.keys():
            first, second = primary.get(uri), fallback.get(uri)
            chosen = first if first is not None else second
            assert chosen is not None
            agree = first is not None and second is not None and _same(first, second)
            ledger[uri] = chosen if agree else replace(chosen, revision=OUT_OF_STEP)
        return ledger

    def cached_vectors(self, embed_keys: Sequence[str]) -> Mapping[str, npt.NDArray[np.float32]]:
        found = dict(self.primary.cached_vectors(embed_keys))
        missing = [key for key in embed_keys if key not in found]
        if missing:
            found.update(self.fallback.cached_vectors(missing))
        return found

    def get_state(self, key: str) -> str | None:
        return self.primary.get_state(key)

    def set_state(self, key: str, value: str) -> None:
        try:
            self.fallback.set_state(key, value)
        except LoreError as err:  # the fallback's own bookkeeping only; its ledger decides
            logger.warning("could not record %s in the fallback index: %s", key, err)
        self.primary.set_state(key, value)

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        with ExitStack() as stack:
            stack.enter_context(self.primary.write_lock())
            stack.enter_context(self.fallback.write_lock())
            yield

    def checkpoint(self) -> None:
        for index in (self.primary, self.fallback):
            if isinstance(index, Checkpointing):
                index.checkpoint()

    def record_run(self, run: RunRecord) -> None:
        for index in (self.primary, self.fallback):
            if isinstance(index, RunHistory):
                index.record_run(run)

    def runs(self, limit: int = 20, *, source: str | None = None) -> list[RunRecord]:
        return self.primary.runs(limit, source=source) if isinstance(self.primary, RunHistory) else []

    def close(self) -> None:
        try:
            self.primary.close()
        finally:
            self.fallback.close()


def _same(first: IndexedDocument, second: IndexedDocument) -> bool:
    return (first.revision, first.updated_at, first.access, first.tenant, first.chunk_count) == (
        second.revision,
        second.updated_at,
        second.access,
        second.tenant,
        second.chunk_count,
    )




class _Absent:
    """Stands in for a fallback that could not be opened: holds nothing, takes nothing."""

    def check_embedder(self, model_id: str, dimension: int) -> None:
        pass

    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        pass

    def delete_by_uri(self, uri: str) -> None:
        pass

    def held(self, source: str) -> Mapping[str, IndexedDocument]:
        return {}

    def cached_vectors(self, embed_keys: Sequence[str]) -> Mapping[str, npt.NDArray[np.float32]]:
        return {}

    def get_state(self, key: str) -> str | None:
        return None

    def set_state(self, key: str, value: str) -> None:
        pass

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        yield

    def close(self) -> None:
        pass
