"""The BM25 channel of the SQLite backend: a tantivy index in a directory beside the db.

It holds derived data only (SQLite is the source of truth) and knows chunks by their
SQLite rowid. Fields:

- ``title``, ``section``, ``body``, ``path``: English text, stemmed, stop words removed;
  each field may be boosted at query time (equal weights by default: docs/quality.md;
  ``path`` takes the title's). ``path`` is the document's uri as words (its folders and
  file name, ``lexical.path_text``). The analyzer splits snake_case, kebab-case and dotted
  names into their words; CamelCase identifiers add theirs here (``KubeNodeNotReady`` also
  as "Kube Node Not Ready"), so an alert's description meets the runbook named for it.
- ``ident``: the same text and path split only at whitespace and most punctuation,
  lowercased and not stemmed, so ``kube-apiserver``, ``etcdNoLeader``, ``ERR_1234``,
  ``10.0.0.1`` and ``payments-consumer-group`` are single terms and match whole; the
  names inside dotted compounds (``kube-apiserver.service``) are added whole too.
- ``labels``: raw ``key=value`` terms (lore.models.label_terms) for filtering.
- ``access``: raw tenant and group terms (lore.access.access_terms) for the caller's
  ``AccessFilter``, applied inside the search like the labels, never after its cut.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import tantivy

from lore.access import AccessFilter
from lore.backends import lexical
from lore.errors import IndexingError, RetrievalError

#: Bump when fields or analyzers change: the directory is then rebuilt from SQLite.
#: 2: the ``access`` field; 3: CamelCase identifiers also indexed as their words;
#: 4: the ``path`` field (the document's file name and folders), inner names of compounds.
FULLTEXT_VERSION = 4
_MARKER = "lore-fulltext.json"
_STEMMED = "lore_en_stem"
_IDENT = "lore_ident"
#: Words joined by ``.`` or ``-`` (``_`` is a word character) form one identifier.
_IDENT_PATTERN = r"\w+(?:[.\-]\w+)*"
#: A pasted stack trace should still be searchable, but not become 10,000 clauses.
MAX_QUERY_TERMS = 128
#: Query terms whose presence one evidence search tells apart (``held_terms``): one bit
#: each of a score that tantivy keeps as an f32, exact for integers below 2**24.
_TERMS_PER_SEARCH = 20
_WRITER_HEAP_BYTES = 64_000_000
#: Test-only: seconds to pause a rebuild after its rows are added and before its commit,
#: so a test can kill the process exactly there (tests/backends/test_sqlite_robustness.py).
PAUSE_ENV = "LORE_TEST_PAUSE_FULLTEXT_REBUILD"
#: What the tantivy bindings raise (tantivy errors arrive as ValueError).
_TANTIVY_ERRORS = (ValueError, OSError, RuntimeError)


@dataclass(frozen=True, slots=True)
class FullTextRow:
    rowid: int
    title: str
    section: str
    text: str
    label_terms: frozenset[str]
    #: ``lore.access.access_terms`` of the chunk's document.
    access_terms: frozenset[str] = frozenset()
    #: The chunk's document uri, indexed as its path words (``lexical.path_text``).
    uri: str = ""


@cache
def _analyzers() -> dict[str, tantivy.TextAnalyzer]:
    stemmed = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stopword("english"))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )
    ident = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(_IDENT_PATTERN))
        .filter(tantivy.Filter.remove_long(100))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stopword("english"))
        .build()
    )
    return {_STEMMED: stemmed, _IDENT: ident}


def with_identifier_words(text: str) -> str:
    """``text`` and, after it, the words of each CamelCase identifier in it (snake_case,
    kebab-case and dotted names are split by the English analyzer already). A split that
    leaves a one-letter word (``mRNA``, ``IPv4``, ``iPhone``) is a name, not words: kept whole."""
    words = lexical.camel_words(text)
    return f"{text}\n{' '.join(words)}" if words else text


#: The analyzer of each text field.
FIELD_ANALYZERS = {
    "title": _STEMMED,
    "section": _STEMMED,
    "body": _STEMMED,
    "path": _STEMMED,
    "ident": _IDENT,
}


def _identifier_text(text: str) -> str:
    """What the ``ident`` field holds: ``text`` (its analyzer keeps ``kube-apiserver``,
    ``node_exporter`` and ``etcd.member.count`` whole) and the names inside its dotted
    compounds, which that analyzer would keep glued (``kube-apiserver.service`` also gives
    ``kube-apiserver``), so an exact search for the inner name matches whole."""
    inner = lexical.sub_identifiers(text)
    return f"{text}\n{' '.join(inner)}" if inner else text


@lru_cache(maxsize=1024)
def chunk_terms(texts: tuple[str, ...]) -> frozenset[str]:
    """The stemmed terms of a chunk's fields, kept for the last chunks asked about. A
    search reads its passages' query terms from the index (``FullTextIndex.held_terms``);
    this analysis is the fallback for a chunk the index does not hold yet, and the
    definition ``held_terms`` must agree with (tests/backends/test_sqlite_evidence.py).
    A pure function of the texts (the analyzers are fixed), so nothing can go stale."""
    analyzer = _analyzers()[_STEMMED]
    return frozenset(term for text in texts for term in analyzer.analyze(with_identifier_words(text)))


def field_texts(title: str, section: str, text: str, uri: str = "") -> dict[str, str]:
    """What each text field of a chunk is given to index. The English fields also get
    CamelCase identifiers' words, so "node is not ready" meets a runbook titled
    KubeNodeNotReady; ``path`` holds the document's folder and file-name words
    (``lexical.path_text``); ``ident`` keeps identifiers whole, the path's too."""
    path = lexical.path_text(uri) if uri else ""
    return {
        "title": with_identifier_words(title),
        "section": with_identifier_words(section),
        "body": with_identifier_words(text),
        "path": with_identifier_words(path),
        "ident": _identifier_text(f"{title}\n{section}\n{text}\n{path}"),
    }


def field_terms(title: str, section: str, text: str, uri: str = "") -> dict[str, list[str]]:
    """The terms each text field of a chunk holds, repeated as often as they occur: the
    token stream this index is built from, for a backend that keeps its own postings
    (pgvector) and must rank exactly as this one does."""
    analyzers = _analyzers()
    return {
        field: analyzers[FIELD_ANALYZERS[field]].analyze(value)
        for field, value in field_texts(title, section, text, uri).items()
    }


def query_terms(query: str) -> tuple[list[str], list[str]]:
    """The distinct terms a query searches for: English ones (looked up in title, section,
    body and path) and identifier ones (in ``ident``), each list capped at ``MAX_QUERY_TERMS``."""
    analyzers = _analyzers()
    return _unique(analyzers[_STEMMED].analyze(query)), _unique(analyzers[_IDENT].analyze(query))


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    # A signed field: the bindings build delete terms from Python ints as i64, which
    # never match an unsigned field (checked with tantivy 0.27).
    builder.add_integer_field("rowid", indexed=True, fast=True)
    # Term frequencies without positions: no phrase queries are built, and positions
    # would cost indexing time and disk.
    builder.add_text_field("title", tokenizer_name=_STEMMED, index_option="freq")
    builder.add_text_field("section", tokenizer_name=_STEMMED, index_option="freq")
    builder.add_text_field("body", tokenizer_name=_STEMMED, index_option="freq")
    builder.add_text_field("path", tokenizer_name=_STEMMED, index_option="freq")
    builder.add_text_field("ident", tokenizer_name=_IDENT, index_option="freq")
    builder.add_text_field("labels", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("access", tokenizer_name="raw", index_option="basic")
    return builder.build()


def _unique(tokens: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(tokens))[:MAX_QUERY_TERMS]


class FullTextIndex:
    """One tantivy index directory. Writes need the backend's write lock (tantivy allows
    one writer per directory); searches may run in any process at any time."""

    def __init__(
        self,
        directory: Path,
        *,
        title_boost: float,
        section_boost: float,
        identifier_boost: float,
        path_boost: float | None = None,
    ) -> None:
        self._directory = directory
        # The path is a second title (a runbook's file name is often its alert's name,
        # or says more than a generic first heading such as "Steps to check"): it takes
        # the title's boost unless given one (eval/tuning/sweep.py measures it apart).
        path_weight = title_boost if path_boost is None else path_boost
        self._boosts = {"title": title_boost, "section": section_boost, "body": 1.0, "path": path_weight}
        self._identifier_boost = identifier_boost
        self._analyzers = _analyzers()
        self._schema = _schema()
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
        try:
            self._directory.mkdir(parents=True)
            index = tantivy.Index(self._schema, str(self._directory))
        except _TANTIVY_ERRORS as err:
            raise IndexingError(f"cannot create the full-text index {self._directory}: {err}") from err
        for name, analyzer in self._analyzers.items():
            index.register_tokenizer(name, analyzer)
        self._index = index

    def _mark_usable(self) -> None:
        """Write the marker atomically (a partial marker must not count as one)."""
        marker, partial = self._directory / _MARKER, self._directory / (_MARKER + ".partial")
        try:
            partial.write_text(json.dumps({"version": FULLTEXT_VERSION}), encoding="utf-8")
            os.replace(partial, marker)
        except OSError as err:
            raise IndexingError(f"cannot finish the full-text index {self._directory}: {err}") from err

    def _writer_for(self) -> tantivy.IndexWriter:
        if self._writer is None:
            index = self._index
            if index is None:
                raise IndexingError(f"the full-text index {self._directory} is missing: run `lore reindex`")
            try:
                self._writer = index.writer(heap_size=_WRITER_HEAP_BYTES, num_threads=1)
            except _TANTIVY_ERRORS as err:
                raise IndexingError(f"cannot write the full-text index {self._directory}: {err}") from err
        return self._writer

    def stage(self, ops: Sequence[tuple[str, int]], rows: Mapping[int, FullTextRow]) -> None:
        """Hand journal operations, in order, to the writer without committing: tantivy
        indexes them on its own thread meanwhile, and nobody sees them before ``commit``.
        Idempotent: an ``add`` first deletes any copy of the row, so replaying a journal
        twice is harmless. An ``add`` whose row is not in ``rows`` was deleted since: skipped.
        On error everything staged since the last commit is discarded."""
        writer = self._writer_for()
        try:
            for op, rowid in ops:
                writer.delete_documents_by_term("rowid", rowid)
                row = rows.get(rowid)
                if op == "add" and row is not None:
                    writer.add_document(self._document(row))
        except _TANTIVY_ERRORS as err:
            writer.rollback()
            raise IndexingError(f"cannot update the full-text index {self._directory}: {err}") from err

    def commit(self) -> None:
        """Make everything staged visible to searches (in every process); on error it is
        discarded."""
        writer = self._writer_for()
        try:
            writer.commit()
        except _TANTIVY_ERRORS as err:
            writer.rollback()
            raise IndexingError(f"cannot update the full-text index {self._directory}: {err}") from err
        self._require().reload()

    def replace_all(self, rows: Iterable[FullTextRow]) -> int:
        """Replace the whole content with ``rows`` in one commit; returns the count."""
        writer = self._writer_for()
        count = 0
        try:
            writer.delete_all_documents()
            for row in rows:
                writer.add_document(self._document(row))
                count += 1
            pause = os.environ.get(PAUSE_ENV)
            if pause:
                print(f"lore-test: full-text rebuild paused before commit ({count} rows)", flush=True)
                time.sleep(float(pause))
            writer.commit()
            writer.wait_merging_threads()
        except _TANTIVY_ERRORS as err:
            raise IndexingError(f"cannot rebuild the full-text index {self._directory}: {err}") from err
        finally:
            self._writer = None
        self._mark_usable()
        self._require().reload()
        return count

    def document_count(self) -> int:
        """Documents the committed index holds (what searches see)."""
        index = self._require()
        try:
            index.reload()
            return int(index.searcher().num_docs)
        except _TANTIVY_ERRORS as err:
            raise RetrievalError(f"cannot read the full-text index {self._directory}: {err}") from err

    @property
    def directory(self) -> Path:
        return self._directory

    def release_writer(self) -> None:
        """Let merges finish and drop the writer, which frees tantivy's directory lock."""
        if self._writer is not None:
            try:
                self._writer.wait_merging_threads()
            except _TANTIVY_ERRORS as err:
                raise IndexingError(f"cannot finish merging the full-text index: {err}") from err
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
        self, query: str, label_filter: frozenset[str], limit: int, access: AccessFilter | None = None
    ) -> list[tuple[int, float]]:
        """``(rowid, bm25 score)`` best first; only chunks carrying every filter term and
        passing ``access``."""
        index = self._require()
        scoring = self._scoring_query(query)
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
        try:
            searcher = index.searcher()
            hits = searcher.search(scoring, limit, count=False).hits
            rowids = searcher.fast_field_values("rowid", [address for _, address in hits])
        except _TANTIVY_ERRORS as err:
            raise RetrievalError(f"full-text search failed: {err}") from err
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
        # A bare term query where the boost is 1: tantivy answers a disjunction of plain
        # term queries with its specialised term union, which any wrapper (a boost, a
        # nested boolean) rules out. Not block-max WAND: tantivy-py 0.27 wraps every
        # search in a MultiCollector, which scores every matching posting (at 1M chunks
        # top 1 costs what top 100 does, with or without counting: docs/benchmarks.md).
        return tantivy.Occur.Should, term if boost == 1.0 else tantivy.Query.boost_query(term, boost)

    def _scoring_query(self, query: str) -> tantivy.Query | None:
        words, identifiers = query_terms(query)
        clauses = [
            self._clause(field, token, boost) for token in words for field, boost in self._boosts.items()
        ]
        clauses.extend(self._clause("ident", token, self._identifier_boost) for token in identifiers)
        if not clauses:
            return None
        return clauses[0][1] if len(clauses) == 1 else tantivy.Query.boolean_query(clauses)

    # -- relevance evidence (``lore.backends.sqlite.evidence``) ---------------------------

    def query_weights(self, query: str) -> dict[str, float]:
        """Each stemmed term of ``query`` (CamelCase words included) with its BM25 idf over
        the index; a term no chunk holds gets the largest idf, so a query about something
        the corpus never mentions covers little of itself anywhere."""
        tokens = _unique(self._analyzers[_STEMMED].analyze(with_identifier_words(query)))
        if not tokens:
            return {}
        try:
            searcher = self._require().searcher()
            total = int(searcher.num_docs)
            freqs = {
                token: max(int(searcher.doc_freq(field, token)) for field in self._boosts)
                for token in tokens
            }
        except _TANTIVY_ERRORS as err:
            raise RetrievalError(f"full-text search failed: {err}") from err
        return {token: math.log(1.0 + (total - df + 0.5) / (df + 0.5)) for token, df in freqs.items()}

    def terms_of(self, *texts: str) -> frozenset[str]:
        """The stemmed terms the index holds for a chunk with these fields."""
        return chunk_terms(texts)

    def held_terms(self, rowids: Sequence[int], terms: Sequence[str]) -> dict[int, frozenset[str]]:
        """Which of ``terms`` (stemmed) each chunk of ``rowids`` holds in its English fields,
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
        try:
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
        except _TANTIVY_ERRORS as err:
            raise RetrievalError(f"full-text search failed: {err}") from err
        return {rowid: frozenset(found_terms) for rowid, found_terms in held.items()}

    def _held_by(self, chosen: tantivy.Query, term: str, score: float) -> tantivy.Query:
        """The ``chosen`` chunks whose title, section, body or path holds ``term``, all
        scoring ``score``."""
        fields = [(tantivy.Occur.Should, self._term(field, term, "basic")) for field in self._boosts]
        anywhere = tantivy.Query.boolean_query(fields)
        both = tantivy.Query.boolean_query([(tantivy.Occur.Must, chosen), (tantivy.Occur.Must, anywhere)])
        return tantivy.Query.const_score_query(both, score)

    def close(self) -> None:
        self.release_writer()
        self._index = None
