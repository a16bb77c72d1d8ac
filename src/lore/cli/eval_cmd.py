"""``lore eval``: measure retrieval quality.

    lore eval beir DIR --split train          # a BEIR benchmark, in a temporary index
    lore eval golden FILE [--check-baseline]  # a golden set, against the configured index
    lore eval generate --provider URL ...     # write a synthetic golden set with an LLM

Modes are evaluated side by side in one run, sharing one batch of query vectors. Exit
status: 0 ok, 1 a metric fell below the baseline, 2 a usage or configuration error.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from lore.chunking import Chunker
from lore.cli.app import console
from lore.cli.eval_app import ConfigOption, JsonOption, check_not_empty, close, eval_app, eval_settings
from lore.cli.eval_progress import EvalProgress, run_modes
from lore.config import LoreSettings, SourceConfig
from lore.errors import ConfigError, DatasetError
from lore.eval.datasets import (
    BeirPaths,
    BeirSource,
    beir_doc_id,
    load_beir_queries,
    load_golden_set,
    write_golden_set,
)
from lore.eval.generate import ChatClient, GenerationResult, generate_golden_set, sample_chunks
from lore.eval.report import (
    DEFAULT_TOLERANCE,
    Baseline,
    render_run,
    write_baseline,
    write_json,
    write_run_files,
)
from lore.eval.runner import RERANK_MODE, EvalRun, QueryVectorCache, parse_modes
from lore.models import Chunk, Document, SearchMode, SyncReport
from lore.protocols import Embedder, KnowledgeIndex, KnowledgeRetriever, KnowledgeSource, Reranker
from lore.resolve import (
    open_backend,
    resolve_embedder,
    resolve_reranker,
    scratch_index,
    settings_chunker,
    source_weights,
)
from lore.safety.secrets import redact_document
from lore.sources import build_source, source_configs
from lore.sync import sync_sources

#: Display order of modes, whatever order a backend declares them in.
_MODE_ORDER = [SearchMode.BM25.value, SearchMode.VECTOR.value, SearchMode.HYBRID.value, RERANK_MODE]
_CORPUS_BATCH = 256

ModeOption = Annotated[
    str | None,
    typer.Option(
        "--mode",
        "-m",
        help="Comma-separated: bm25,vector,hybrid (and hybrid+rerank with a reranker configured); "
        "default: every mode offered.",
    ),
]
RunOutOption = Annotated[
    Path | None, typer.Option("--run-out", help="Write one TREC run file per mode into this directory.")
]
DepthOption = Annotated[int, typer.Option("--depth", min=10, max=200, help="Documents ranked per query.")]
def _ordered(modes: Sequence[str]) -> list[str]:
    return sorted(
        modes, key=lambda mode: _MODE_ORDER.index(mode) if mode in _MODE_ORDER else len(_MODE_ORDER)
    )


def _modes(spec: str | None, retriever: KnowledgeRetriever, reranker: Reranker | None) -> list[str]:
    return _ordered(parse_modes(spec or "all", retriever, reranker))


def _outputs(run: EvalRun, json_out: Path | None, run_out: Path | None, doc_id: Any, **extra: Any) -> None:
    render_run(console, run)
    if json_out is not None:
        write_json(json_out, run, **extra)
        console.print(f"metrics written to {json_out}", highlight=False)
    if run_out is not None:
        written = write_run_files(run_out, run, doc_id)
        console.print(f"run files written: {', '.join(str(path) for path in written)}", highlight=False)


# -- lore eval beir -----------------------------------------------------------------------


def _beir_paths(
    dataset: Path | None, split: str, corpus: Path | None, queries: Path | None, qrels: Path | None
) -> BeirPaths:
    if dataset is not None:
        if any(path is not None for path in (corpus, queries, qrels)):
            raise ConfigError("give either a BEIR directory or --corpus/--queries/--qrels, not both")
        if not dataset.is_dir():
            raise ConfigError(f"BEIR dataset directory not found: {dataset}")
        return BeirPaths.from_directory(dataset, split)
    if corpus is None or queries is None or qrels is None:
        raise ConfigError("give a BEIR directory (with --split) or all of --corpus, --queries and --qrels")
    paths = BeirPaths(corpus, queries, qrels)
    paths.check()
    return paths


def _chunker(current: LoreSettings, embedder: Embedder) -> Chunker:
    """Cut exactly as ``lore sync`` cuts, by the real embedder behind a query cache (its
    tokenizer counts for the chunker), so an index shared with sync is never re-chunked."""
    return settings_chunker(current, embedder.inner if isinstance(embedder, QueryVectorCache) else embedder)


async def _index_corpus(
    source: BeirSource,
    index: KnowledgeIndex,
    embedder: Embedder,
    current: LoreSettings,
    progress: EvalProgress,
) -> SyncReport:
    chunker = _chunker(current, embedder)
    progress.source_started(source.name, source.count())
    return await sync_sources(
        [source],
        index,
        embedder,
        chunker,
        progress=progress,
        batch_size=max(current.embedding_batch_size, _CORPUS_BATCH),
    )


@eval_app.command("beir")
def beir_command(
    dataset: Annotated[
        Path | None, typer.Argument(help="BEIR dataset directory (corpus.jsonl, queries.jsonl, qrels/).")
    ] = None,
    split: Annotated[str, typer.Option("--split", help="The qrels split: qrels/<split>.tsv.")] = "test",
    corpus: Annotated[
        Path | None, typer.Option("--corpus", help="corpus.jsonl (instead of a directory).")
    ] = None,
    queries: Annotated[Path | None, typer.Option("--queries", help="queries.jsonl.")] = None,
    qrels: Annotated[Path | None, typer.Option("--qrels", help="qrels .tsv.")] = None,
    mode: ModeOption = None,
    depth: DepthOption = 100,
    index_path: Annotated[
        Path | None,
        typer.Option(
            "--index",
            help="Keep the index in this SQLite file and reuse it next time (default: a temporary one).",
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Evaluate only the first N queries.")
    ] = None,
    json_out: JsonOption = None,
    run_out: RunOutOption = None,
    config: ConfigOption = None,
) -> None:
    """Evaluate on a BEIR benchmark, every judged query in every mode.

    The benchmark's corpus is indexed with the configured embedder first."""
    current = eval_settings(config)
    paths = _beir_paths(dataset, split, corpus, queries, qrels)
    questions = load_beir_queries(paths)[:limit]
    name = dataset.name if dataset is not None else paths.corpus.parent.name
    with tempfile.TemporaryDirectory(prefix="lore-beir-") as scratch:
        db_path = index_path if index_path is not None else Path(scratch) / "beir.db"
        db_path.parent.mkdir(parents=True, exist_ok=True)
        cache = QueryVectorCache(resolve_embedder(current))
        backend = scratch_index(current, db_path, cache)
        try:
            # Settings mistakes surface before the expensive indexing, not after it.
            reranker = resolve_reranker(current)
            modes = _modes(mode, backend, reranker)
            with EvalProgress() as progress:
                report = asyncio.run(
                    _index_corpus(BeirSource(paths.corpus), backend, cache, current, progress)
                )
                if report.failures:
                    console.print(
                        f"[yellow]{len(report.failures)} corpus documents could not be indexed[/yellow]"
                    )
                run = asyncio.run(
                    run_modes(
                        progress,
                        backend,
                        cache,
                        questions,
                        modes,
                        dataset=f"{name} ({paths.qrels.stem})",
                        depth=depth,
                        reranker=reranker,
                    )
                )
        finally:
            close(backend)
    console.print(
        f"indexed {report.seen} documents ({report.chunks_embedded} chunks embedded, "
        f"{report.chunks_reused} reused) in {report.seconds:.1f}s",
        highlight=False,
    )
    _outputs(
        run, json_out, run_out, beir_doc_id, index_seconds=round(report.seconds, 3), split=paths.qrels.stem
    )


# -- lore eval golden ---------------------------------------------------------------------


def _sync_first(current: LoreSettings, backend: Any, embedder: Embedder, progress: EvalProgress) -> None:
    if not current.sources:
        raise ConfigError("--sync needs [[sources]] in the configuration")
    if not isinstance(backend, KnowledgeIndex):
        raise ConfigError(f"backend {current.backend!r} cannot be written to; drop --sync")
    # What `lore sync` would index, the built-in playbook pack included unless switched off.
    sources = [build_source(config, current) for config in source_configs(current)]
    chunker = _chunker(current, embedder)
    with progress.step("syncing the configured sources"):
        report = asyncio.run(
            sync_sources(sources, backend, embedder, chunker, batch_size=current.embedding_batch_size)
        )
    if report.failures:
        console.print(f"[yellow]sync: {len(report.failures)} documents failed; see `lore sync`[/yellow]")


@eval_app.command("golden")
def golden_command(
    golden_set: Annotated[
        Path, typer.Argument(help="Golden set: YAML or JSONL of question -> expected uris.")
    ],
    mode: ModeOption = None,
    depth: DepthOption = 100,
    sync: Annotated[bool, typer.Option("--sync", help="Sync the configured sources first.")] = False,
    check_baseline: Annotated[
        Path | None,
        typer.Option(
            "--check-baseline", help="Exit 1 when a metric is more than the tolerance below this baseline."
        ),
    ] = None,
    tolerance: Annotated[
        float | None,
        typer.Option(
            "--tolerance", min=0.0, max=1.0, help=f"Override the baseline's tolerance ({DEFAULT_TOLERANCE})."
        ),
    ] = None,
    write_baseline_to: Annotated[
        Path | None, typer.Option("--write-baseline", help="Record this run as the baseline in this file.")
    ] = None,
    json_out: JsonOption = None,
    run_out: RunOutOption = None,
    config: ConfigOption = None,
) -> None:
    """Evaluate a golden set against the configured index."""
    current = eval_settings(config)
    questions = load_golden_set(golden_set)
    if not any(question.targets for question in questions):
        # Every metric would read 0.0000 and look like a broken index.
        raise DatasetError(
            f"{golden_set}: no question names an expected document, so nothing can be scored: "
            "give each question `expected: <uri>` "
            "(`lore eval verdict` measures questions the corpus cannot answer)"
        )
    baseline = Baseline.read(check_baseline) if check_baseline is not None else None
    cache = QueryVectorCache(resolve_embedder(current))
    backend = open_backend(current, cache)
    if backend is None or not isinstance(backend, KnowledgeRetriever):
        raise ConfigError(f"backend {current.backend!r} cannot answer searches")
    try:
        reranker = resolve_reranker(current)
        spec = mode if mode is not None or baseline is None else ",".join(baseline.modes)
        modes = _modes(spec, backend, reranker)
        with EvalProgress() as progress:
            if sync:
                _sync_first(current, backend, cache, progress)
            else:
                check_not_empty(current, backend)
            run = asyncio.run(
                run_modes(
                    progress,
                    backend,
                    cache,
                    questions,
                    modes,
                    dataset=golden_set.name,
                    depth=depth,
                    reranker=reranker,
                    weights=source_weights(current),
                )
            )
    finally:
        close(backend)
    _outputs(run, json_out, run_out, lambda uri: uri.replace(" ", "%20"))
    if write_baseline_to is not None:
        command = shlex.join(["lore", *sys.argv[1:]]) if sys.argv else "lore eval golden"
        write_baseline(
            write_baseline_to, run, tolerance if tolerance is not None else DEFAULT_TOLERANCE, command
        )
        console.print(f"baseline written to {write_baseline_to}", highlight=False)
    if baseline is not None:
        regressions = baseline.check(run, tolerance)
        allowed = baseline.tolerance if tolerance is None else tolerance
        if regressions:
            console.print(
                f"[red]{len(regressions)} metrics fell more than {allowed} below the baseline:[/red]"
            )
            for regression in regressions:
                console.print(f"  {regression}", highlight=False)
            raise typer.Exit(1)
        console.print(f"[green]baseline held[/green] (tolerance {allowed})", highlight=False)


# -- lore eval generate -------------------------------------------------------------------


async def _chunks_of(sources: Sequence[KnowledgeSource], chunker: Chunker) -> list[Chunk]:
    chunks: list[Chunk] = []
    for source in sources:
        async for item in source.documents():
            if isinstance(item, Document):
                # Redacted as sync redacts it: the same chunks, and no secret in a prompt.
                chunks.extend(chunker.chunk(redact_document(item)))
    return chunks


def _generation_sources(
    current: LoreSettings, corpus: Path | None, source_name: str | None
) -> list[KnowledgeSource]:
    if corpus is None:
        if not current.sources:
            raise ConfigError("no sources configured: pass --corpus DIR or add [[sources]] to lore.toml")
        return [build_source(config, current) for config in current.sources]
    if not corpus.is_dir():
        raise ConfigError(f"corpus directory not found: {corpus}")
    name = source_name or corpus.resolve().name
    config = SourceConfig.model_validate(
        {"name": name, "type": "filesystem", "path": corpus.resolve(), "visibility": "all-viewers"}
    )
    return [build_source(config, current)]


@eval_app.command("generate")
def generate_command(
    provider: Annotated[
        str,
        typer.Option(
            "--provider", help="Base URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1."
        ),
    ],
    model: Annotated[str, typer.Option("--model", help="Chat model name.")],
    out: Annotated[Path, typer.Option("--out", help="Golden-set file to write (.yaml or .jsonl).")],
    sample: Annotated[
        int, typer.Option("--sample", min=1, help="Chunks to sample (one question each).")
    ] = 50,
    corpus: Annotated[
        Path | None, typer.Option("--corpus", help="A folder of documents instead of the configured sources.")
    ] = None,
    source_name: Annotated[
        str | None,
        typer.Option(
            "--source-name", help="Source name for --corpus uris (file://<name>/...); default: folder name."
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="LORE_GENERATE_API_KEY", help="Bearer token, if the API needs one."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the chunk sample.")] = 0,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, max=32)] = 4,
    config: ConfigOption = None,
) -> None:
    """Write a synthetic golden set: an LLM asks one question per sampled chunk.

    The chunk's document is the expected answer. Chunks are cut exactly as sync cuts them."""
    current = eval_settings(config)
    sources = _generation_sources(current, corpus, source_name)
    chunker = _chunker(current, resolve_embedder(current))
    chunks = sample_chunks(asyncio.run(_chunks_of(sources, chunker)), sample, seed=seed)
    if not chunks:
        raise ConfigError("no chunk long enough to ask a question about")

    async def generate(progress: EvalProgress) -> GenerationResult:
        task = progress.bar.add_task("writing questions", total=len(chunks))
        client = ChatClient(provider, model, api_key)
        try:
            return await generate_golden_set(
                chunks, client, concurrency=concurrency, on_chunk=lambda: progress.bar.advance(task)
            )
        finally:
            await client.aclose()

    with EvalProgress() as progress:
        result = asyncio.run(generate(progress))
    write_golden_set(out, result.entries)
    console.print(
        f"{len(result.entries)} questions written to {out}; {result.skipped_total} chunks skipped",
        highlight=False,
    )
    for reason, count in result.skipped.most_common():
        console.print(f"  skipped {count}: {reason}", highlight=False)


# ``lore eval from-feedback`` lives with the other event commands (lore.cli.events_cmd).
from lore.cli.events_cmd import from_feedback_command  # noqa: E402

eval_app.command("from-feedback")(from_feedback_command)

# `lore eval verdict` lives in its own module (this one is long enough); it registers on eval_app.
from lore.cli import verdict_cmd as _verdict_cmd  # noqa: E402,F401
