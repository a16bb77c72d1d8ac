"""One tantivy index directory: the BM25 channel of the SQLite backend below the shard
threshold, and each shard of it above (``fulltext_shards.py``).

It holds derived data only (SQLite is the source of truth) and knows chunks by their
SQLite rowid. What each field holds and how text is analysed is in ``lore.backends.fulltext_analysis``.

Queries are built from our own tokenisation (the same analyzers as the index) as term
queries, never by handing user text to tantivy's query parser, so no query text can be
a syntax error. Why tantivy and not SQLite FTS5: at 100k chunks FTS5 OR-queries took 67 ms
p50 here, against 3-5 ms for this channel's full multi-field top-100 query over the bench's
Zipf-distributed words (bench/perf_query.py; a single-term query takes 0.2 ms).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import tantivy

from lore.access import AccessFilter
from lore.backends.fulltext_analysis import (
    ENGLISH_FIELDS,
    FIELD_ANALYZERS,
    FULLTEXT_VERSION,
    IDENT_PATTERN,
    MAX_QUERY_TERMS,
    STEMMED,
    FullTextRow,
    analyzers,
    chunk_terms,
    field_terms,
    field_texts,
    ident_weights,
    query_terms,
    schema,
    unique_terms,
    with_identifier_words,
)
from lore.errors import IndexingError, LoreError, RetrievalError

__all__ = [
    "FIELD_ANALYZERS",
    "FULLTEXT_VERSION",
    "IDENT_PATTERN",
    "MAX_QUERY_TERMS",
    "PAUSE_ENV",
    "FullTextIndex",
    "FullTextRow",
    "chunk_terms",
    "field_terms",
    "field_texts",
    "ident_weights",
    "query_terms",
    "with_identifier_words",
]

_MARKER = "lore-fulltext.json"
#: Query terms whose presence one evidence search tells apart (``held_terms``): one bit
#: each of a score that tantivy keeps as an f32, exact for integers below 2**24.
_TERMS_PER_SEARCH = 20
_WRITER_HEAP_BYTES = 64_000_000
#: Test-only: seconds to pause a rebuild after its rows are added and before its commit,
#: so a test can kill the process exactly there (tests/backends/test_sqlite_robustness.py).
PAUSE_ENV = "LORE_TEST_PAUSE_FULLTEXT_REBUILD"
#: What the tantivy bindings raise (tantivy errors arrive as ValueError).
_TANTIVY_ERRORS = (ValueError, OSError, RuntimeError)
#: The field whose document frequencies ``statistics`` gives: ``content`` holds every English
#: term a chunk has, so its frequency is the largest of the English fields'.
FIELDS = ("content",)


def pause_for_tests(count: int) -> None:
    pause = os.environ.get(PAUSE_ENV)
    if pause:
        print(f"lore-test: full-text rebuild paused before commit ({count} rows)", flush=True)
        time.sleep(float(pause))


@contextmanager
def _translated(
    error: type[LoreError], what: str, *, undo: Callable[[], object] | None = None
) -> Iterator[None]:
    """tantivy's errors raised in the block as ``error("<what>: <reason>")``, the one place
    they become lore's; ``undo`` first (a rollback, a writer dropped)."""
    try:
        yield
    except _TANTIVY_ERRORS as err:
        if undo is not None:
            undo()
        raise error(f"{what}: {err}") from err


def mark_usable(directory: Path, marker: dict[str, int], name: str = _MARKER) -> None:
    """Write the marker atomically (a partial marker must not count as one)."""
    path, partial = directory / name, directory / (name + ".partial")
    try:
        partial.write_text(json.dumps(marker), encoding="utf-8")
        os.replace(partial, path)
    except OSError as err:
        raise IndexingError(f"cannot finish the full-text index {directory}: {err}") from err


def unmark(directory: Path, name: str = _MARKER) -> None:
    try:
        (directory / name).unlink(missing_ok=True)
    except OSError as err:
        raise IndexingError(f"cannot retire the full-text index {directory}: {err}") from err


def weighted_tokens(query: str) -> list[str]:
    """The stemmed terms of ``query`` that coverage evidence weighs."""
    return unique_terms(analyzers()[STEMMED].analyze(with_identifier_words(query)))


def idf(total: int, frequency: int) -> float:
    """BM25's idf, as tantivy computes it."""
    return math.log(1.0 + (total - frequency + 0.5) / (frequency + 0.5))


def idf_weights(total: int, freqs: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """BM25 idf of each token, from its largest document frequency over the fields."""
    return {token: idf(total, max(df)) for token, df in freqs.items()}


class FullTextIndex:
    """One tantivy index directory. Writes need the backend's write lock (tantivy allows
    one writer per directory); searches may run in any process at any time."""

    #: The indexes the layout is made of (``fulltext_shards.ShardedFullText`` has more).
    shards = 1

    def __init__(
        self,
        directory: Path,
        *,
        title_boost: float,
        identifier_boost: float,
        path_boost: float | None = None,
    ) -> None:
        self._directory = directory
        # The path is a second title (a runbook's file name is often its alert's name,
        # or says more than a generic first heading such as "Steps to check"): it takes
        # the title's boost unless given one (eval/tuning/sweep.py measures it apart).
        path_weight = title_boost if path_boost is None else path_boost
        # In ``ENGLISH_FIELDS`` order: the whole chunk, then its names.
        self._boosts = dict(zip(ENGLISH_FIELDS, (1.0, title_boost, path_weight), strict=True))
        self._identifier_boost = identifier_boost
        self._analyzers = analyzers()
        self._schema = schema()
        self._writer: tantivy.IndexWriter | None = None
        # Not ready (None) when missing, of an older layout or unreadable: the backend
        # then rebuilds it from SQLite.
        self._index = self._open() if self.usable(directory) else None

    @staticmethod
    def usable(directory: Path) -> bool:
        """True when the directory holds an index of the current layout."""
        marker = directory / _MARKER
        try:
            version = json.loads(marker.read_text(encoding="utf-8")).get("version")
            return version == FULLTEXT_VERSION and tantivy.Index.exists(str(directory))
        except (OSError, ValueError, AttributeError):
            return False

    @property
    def ready(self) -> bool:
        return self._index is not None

    def _open(self) -> tantivy.Index | None:
        try:
            index = tantivy.Index.open(str(self._directory))
        except _TANTIVY_ERRORS:
            return None
        for name, analyzer in self._analyzers.items():
            index.register_tokenizer(name, analyzer)
        return index

    def _require(self) -> tantivy.Index:
        if self._index is None:
            raise RetrievalError(f"the full-text index {self._directory} is missing: run `lore reindex`")
        return self._index

    # -- writing (caller holds the backend's write lock) ---------------------------------

    def recreate(self) -> None:
        """Start from an empty directory of the current layout. It is not marked usable
        (no marker file) until ``replace_all`` has committed its content: a rebuild that
        is killed or runs out of disk must not leave an empty index that the next open
        takes for a complete one."""
        self.release_writer()
        self._index = None
        shutil.rmtree(self._directory, ignore_errors=True)
        with _translated(IndexingError, f"cannot create the full-text index {self._directory}"):
            self._directory.mkdir(parents=True)
            index = tantivy.Index(self._schema, str(self._directory))
        for name, analyzer in self._analyzers.items():
            index.register_tokenizer(name, analyzer)
        self._index = index

    def _failed(self, action: str) -> str:
        return f"cannot {action} the full-text index {self._directory}"

    def _forget_writer(self) -> None:
        self._writer = None

    def _writer_for(self) -> tantivy.IndexWriter:
        if self._writer is None:
            index = self._index
            if index is None:
                raise IndexingError(f"the full-text index {self._directory} is missing: run `lore reindex`")
            with _translated(IndexingError, f"cannot write the full-text index {self._directory}"):
                self._writer = index.writer(heap_size=_WRITER_HEAP_BYTES, num_threads=1)
        return self._writer

    def stage(self, ops: Sequence[tuple[str, int]], rows: Mapping[int, FullTextRow]) -> None:
        """Hand journal operations, in order, to the writer without committing: tantivy
        indexes them on its own thread meanwhile, and nobody sees them before ``commit``.
        Idempotent: an ``add`` first deletes any copy of the row, so replaying a journal
        twice is harmless. An ``add`` whose row is not in ``rows`` was deleted since: skipped.
        On error everything staged since the last commit is discarded."""
        writer = self._writer_for()
        with _translated(IndexingError, self._failed("update"), undo=writer.rollback):
            for op, rowid in ops:
                writer.delete_documents_by_term("rowid", rowid)
                row = rows.get(rowid)
                if op == "add" and row is not None:
                    writer.add_document(self._document(row))

    def commit(self) -> None:
        """Make everything staged visible to searches (in every process); on error it is
        discarded."""
        writer = self._writer_for()
        with _translated(IndexingError, self._failed("update"), undo=writer.rollback):
            writer.commit()
        self._require().reload()

    def replace_all(self, rows: Iterable[FullTextRow]) -> int:
        """Replace the whole content with ``rows`` in one commit; returns the count."""
        self.start_replacing()
        count = 0
        for row in rows:
            self.add_replacement(row)
            count += 1
        pause_for_tests(count)
        self.finish_replacing()
        return count

    def start_replacing(self) -> None:
        """Begin ``replace_all`` in steps (a shard set feeds its shards from one pass):
        everything is deleted, invisibly until ``finish_replacing``."""
        with _translated(IndexingError, self._failed("rebuild"), undo=self._forget_writer):
            self._writer_for().delete_all_documents()

    def add_replacement(self, row: FullTextRow) -> None:
        with _translated(IndexingError, self._failed("rebuild"), undo=self._forget_writer):
            self._writer_for().add_document(self._document(row))

    def finish_replacing(self) -> None:
        """Commit the replacement, then mark the directory usable."""
        writer = self._writer_for()
        try:
            with _translated(IndexingError, f"cannot rebuild the full-text index {self._directory}"):
                writer.commit()
                writer.wait_merging_threads()
        finally:
            self._writer = None
        mark_usable(self._directory, {"version": FULLTEXT_VERSION})
        self._require().reload()

    def rollback(self) -> None:
        """Discard what was staged since the last commit."""
        if self._writer is not None:
            with _translated(IndexingError, f"cannot update the full-text index {self._directory}"):
                self._writer.rollback()

    def unmark(self) -> None:
        """No longer usable for the next open (it stays searchable here until closed): the
        step that makes another layout the current one (``fulltext_shards.py``)."""
        unmark(self._directory)

    def destroy(self) -> None:
        """Close and delete the directory."""
        self.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    def document_count(self) -> int:
        """Documents the committed index holds (what searches see)."""
        index = self._require()
        with _translated(RetrievalError, f"cannot read the full-text index {self._directory}"):
            index.reload()
            return int(index.searcher().num_docs)

    @property
    def directory(self) -> Path:
        return self._directory

    def release_writer(self) -> None:
        """Let merges finish and drop the writer, which frees tantivy's directory lock."""
        if self._writer is not None:
            try:
                with _translated(IndexingError, "cannot finish merging the full-text index"):
                    self._writer.wait_merging_threads()
            finally:
                self._writer = None

    def _document(self, row: FullTextRow) -> tantivy.Document:
        document = tantivy.Document()
        document.add_integer("rowid", row.rowid)
        for field, value in field_texts(row.title, row.section, row.text, row.uri).items():
            document.add_text(field, value)
        for term in sorted(row.label_terms):
            document.add_text("labels", term)
        for term in sorted(row.access_terms):
            document.add_text("access", term)
        return document

    # -- reading ------------------------------------------------------------------------

    def reload(self) -> None:
        if self._index is not None:
            self._index.reload()

    def search(
        self,
        query: str,
        label_filter: frozenset[str],
        limit: int,
        access: AccessFilter | None = None,
        idf_scale: Mapping[tuple[str, str], float] | None = None,
    ) -> list[tuple[int, float]]:
        """``(rowid, bm25 score)`` best first; only chunks carrying every filter term and
        passing ``access``. ``idf_scale`` multiplies the boost of each ``(field, term)``
        clause: a shard set's way to score with the whole set's idf (``fulltext_shards.py``)."""
        index = self._require()
        scoring = self._scoring_query(query, idf_scale or {})
        if scoring is None:
            return []
        # Filters score nothing (constant 0), so they only restrict, inside the search.
        must = [(tantivy.Occur.Must, self._filter("labels", term)) for term in sorted(label_filter)]
        if access is not None:
            must.append((tantivy.Occur.Must, self._filter("access", access.tenant_term)))
            groups = access.group_terms
            if groups is not None:
                anyone = [(tantivy.Occur.Should, self._term("access", term)) for term in sorted(groups)]
                must.append((tantivy.Occur.Must, tantivy.Query.const_score_query(
                    tantivy.Query.boolean_query(anyone), 0.0)))
        if must:
            scoring = tantivy.Query.boolean_query([(tantivy.Occur.Must, scoring), *must])
        with _translated(RetrievalError, "full-text search failed"):
            searcher = index.searcher()
            hits = searcher.search(scoring, limit, count=False).hits
            rowids = searcher.fast_field_values("rowid", [address for _, address in hits])
        return [
            (int(rowid), float(score))
            for (score, _), rowid in zip(hits, rowids, strict=True)
            if rowid is not None
        ]

    def _term(self, field: str, value: str | int, index_option: str = "position") -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, field, value, index_option=index_option)

    def _filter(self, field: str, value: str) -> tantivy.Query:
        return tantivy.Query.const_score_query(self._term(field, value), 0.0)

    def _clause(self, field: str, token: str, boost: float) -> tuple[tantivy.Occur, tantivy.Query]:
        term = self._term(field, token)
        # One flat disjunction of term queries, boosted or bare: a boost on a clause costs
        # nothing measurable, a nested disjunction 1.66x the CPU (bench/bm25_clauses.py).
        # Not block-max WAND: tantivy-py 0.27 wraps every search in a MultiCollector,
        # which scores every matching posting (at 1M chunks top 1 costs what top 100
        # does, with or without counting: docs/benchmarks.md).
        return tantivy.Occur.Should, term if boost == 1.0 else tantivy.Query.boost_query(term, boost)

    def _scoring_query(self, query: str, scale: Mapping[tuple[str, str], float]) -> tantivy.Query | None:
        words, identifiers = query_terms(query)
        clauses = [
            self._clause(field, token, boost * scale.get((field, token), 1.0))
            for token in words
            for field, boost in self._boosts.items()
        ]
        clauses.extend(
            self._clause("ident", token, self._identifier_boost * weight * scale.get(("ident", token), 1.0))
            for token, weight in ident_weights(query, identifiers).items()
        )
        if not clauses:
            return None
        return clauses[0][1] if len(clauses) == 1 else tantivy.Query.boolean_query(clauses)

    # -- relevance evidence (``lore.backends.sqlite.evidence``) ---------------------------

    def query_weights(self, query: str) -> dict[str, float]:
        """Each stemmed term of ``query`` (CamelCase words included) with its BM25 idf over
        the index; a term no chunk holds gets the largest idf, so a query about something
        the corpus never mentions covers little of itself anywhere."""
        total, freqs = self.statistics(weighted_tokens(query))
        return idf_weights(total, freqs)

    def statistics(self, tokens: Sequence[str]) -> tuple[int, dict[str, list[int]]]:
        """The documents held and, for each token, how many hold it in each field of
        ``FIELDS`` (``content``, every English term of a chunk): what the idf of
        ``query_weights`` is made of, summed over shards by a set."""
        if not tokens:
            return 0, {}
        with _translated(RetrievalError, "full-text search failed"):
            searcher = self._require().searcher()
            total = int(searcher.num_docs)
            freqs = {token: [int(searcher.doc_freq(field, token)) for field in FIELDS] for token in tokens}
        return total, freqs

    def clause_frequencies(self, query: str) -> tuple[int, dict[tuple[str, str], int]]:
        """The documents held and how many hold each ``(field, term)`` clause of ``query``'s
        scoring query: what tantivy's idf of each clause is made of."""
        words, identifiers = query_terms(query)
        keys = [(field, token) for token in words for field in self._boosts]
        keys.extend(("ident", token) for token in identifiers)
        with _translated(RetrievalError, "full-text search failed"):
            searcher = self._require().searcher()
            return int(searcher.num_docs), {key: int(searcher.doc_freq(*key)) for key in keys}

    def terms_of(self, *texts: str) -> frozenset[str]:
        """The stemmed terms the index holds for a chunk with these fields."""
        return chunk_terms(texts)

    def held_terms(self, rowids: Sequence[int], terms: Sequence[str]) -> dict[int, frozenset[str]]:
        """Which of ``terms`` (stemmed) each chunk of ``rowids`` holds (in ``content``),
        read from the index's postings instead of analysing the chunks' text again (that
        analysis was two thirds of a bm25 search's time at 10k chunks: docs/benchmarks.md).
        The same terms as ``chunk_terms`` of the chunk's fields, as the index was built from
        exactly those texts; a chunk the index does not hold (yet) is left out.

        One search per ``_TERMS_PER_SEARCH`` terms: term ``i`` of a batch scores a constant
        2**i in a chunk whose English fields hold it, so a chunk's summed score is the bit
        set of the terms it holds (exact in tantivy's f32 scores below 2**24). The rowid
        clause scores 0 and is required, so every indexed chunk of ``rowids`` comes back,
        even one holding none. Each term's clause is itself restricted to ``rowids``: an
        intersection led by the few chosen chunks skips through a common word's postings,
        where a bare disjunction of them walked them all (twice the time, measured)."""
        if not rowids:
            return {}
        index = self._require()
        chosen = tantivy.Query.const_score_query(
            tantivy.Query.boolean_query(
                [(tantivy.Occur.Should, self._term("rowid", rowid, "basic")) for rowid in rowids]
            ),
            0.0,
        )
        held: dict[int, set[str]] = {}
        with _translated(RetrievalError, "full-text search failed"):
            searcher = index.searcher()
            for start in range(0, max(len(terms), 1), _TERMS_PER_SEARCH):
                batch = terms[start : start + _TERMS_PER_SEARCH]
                clauses = [(tantivy.Occur.Must, chosen)]
                clauses.extend(
                    (tantivy.Occur.Should, self._held_by(chosen, term, 2**bit))
                    for bit, term in enumerate(batch)
                )
                hits = searcher.search(tantivy.Query.boolean_query(clauses), len(rowids), count=False).hits
                found = searcher.fast_field_values("rowid", [address for _, address in hits])
                for (score, _), rowid in zip(hits, found, strict=True):
                    if rowid is not None:
                        bits = round(score)
                        terms_held = held.setdefault(int(rowid), set())
                        terms_held.update(term for bit, term in enumerate(batch) if bits >> bit & 1)
        return {rowid: frozenset(found_terms) for rowid, found_terms in held.items()}

    def _held_by(self, chosen: tantivy.Query, term: str, score: float) -> tantivy.Query:
        """The ``chosen`` chunks that hold ``term`` (``content`` holds every English term of a
        chunk's title, section, body and path), all scoring ``score``."""
        anywhere = self._term("content", term, "basic")
        both = tantivy.Query.boolean_query([(tantivy.Occur.Must, chosen), (tantivy.Occur.Must, anywhere)])
        return tantivy.Query.const_score_query(both, score)

    def close(self) -> None:
        self.release_writer()
        self._index = None
