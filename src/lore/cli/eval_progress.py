"""The progress display of ``lore eval`` and the evaluation of its modes under it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from lore.cli.app import console
from lore.eval.datasets import EvalQuery
from lore.eval.runner import EvalRun, QueryVectorCache, evaluate
from lore.models import SearchMode
from lore.protocols import KnowledgeRetriever, Reranker


class EvalProgress:
    """One rich progress display for the whole run: indexing, query embedding, modes."""

    def __init__(self) -> None:
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self._tasks: dict[str, TaskID] = {}
        self._corpus: TaskID | None = None

    def __enter__(self) -> EvalProgress:
        self.bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.bar.stop()

    # SyncProgress, while a corpus is indexed
    def source_started(self, source: str, expected_documents: int | None) -> None:
        self._corpus = self.bar.add_task(f"indexing {source}", total=expected_documents)

    def document_seen(self, source: str, uri: str) -> None:
        if self._corpus is not None:
            self.bar.advance(self._corpus)

    def chunks_embedded(self, count: int) -> None:
        pass

    def source_finished(self, source: str) -> None:
        pass

    def modes(self, modes: Sequence[str], queries: int) -> None:
        self._tasks = {mode: self.bar.add_task(f"evaluating {mode}", total=queries) for mode in modes}

    def query_done(self, mode: str, qid: str) -> None:
        self.bar.advance(self._tasks[mode])

    @contextmanager
    def step(self, description: str) -> Iterator[None]:
        task = self.bar.add_task(description, total=None)
        yield
        self.bar.update(task, total=1, completed=1)


async def run_modes(
    progress: EvalProgress,
    retriever: KnowledgeRetriever,
    cache: QueryVectorCache,
    queries: Sequence[EvalQuery],
    modes: Sequence[str],
    *,
    dataset: str,
    depth: int,
    reranker: Reranker | None,
    weights: Mapping[str, float] | None = None,
) -> EvalRun:
    if any(mode != SearchMode.BM25.value for mode in modes):
        with progress.step(f"embedding {len(queries)} queries"):
            await asyncio.to_thread(cache.prime, [query.text for query in queries])
    progress.modes(modes, len(queries))
    return await evaluate(
        retriever,
        queries,
        modes,
        dataset=dataset,
        embedder=cache,
        depth=depth,
        reranker=reranker,
        on_query=progress.query_done,
        weights=weights,
    )
