"""What the SQLite backend's BM25 channel indexes and searches for: its analyzers, the
text each field is given, the terms of a query, and the tantivy schema (``fulltext.py``
holds one index, ``fulltext_shards.py`` a set of them; pgvector's postings reuse the
analysis to rank exactly as tantivy does).

Fields:

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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache

import tantivy

from lore.backends import lexical

STEMMED = "lore_en_stem"
IDENT = "lore_ident"
#: Words joined by ``.`` or ``-`` (``_`` is a word character) form one identifier.
IDENT_PATTERN = r"\w+(?:[.\-]\w+)*"
#: A pasted stack trace should still be searchable, but not become 10,000 clauses.
MAX_QUERY_TERMS = 128


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
def analyzers() -> dict[str, tantivy.TextAnalyzer]:
    stemmed = lexical.english_analyzer()
    ident = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(IDENT_PATTERN))
        .filter(tantivy.Filter.remove_long(100))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stopword("english"))
        .build()
    )
    return {STEMMED: stemmed, IDENT: ident}


def with_identifier_words(text: str) -> str:
    """``text`` and, after it, the words of each CamelCase identifier in it (snake_case,
    kebab-case and dotted names are split by the English analyzer already). A split that
    leaves a one-letter word (``mRNA``, ``IPv4``, ``iPhone``) is a name, not words: kept whole."""
    words = lexical.camel_words(text)
    return f"{text}\n{' '.join(words)}" if words else text


#: The analyzer of each text field.
FIELD_ANALYZERS = {
    "title": STEMMED,
    "section": STEMMED,
    "body": STEMMED,
    "path": STEMMED,
    "ident": IDENT,
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
    search reads its passages' query terms from the index (``fulltext.FullTextIndex.held_terms``);
    this analysis is the fallback for a chunk the index does not hold yet, and the
    definition ``held_terms`` must agree with (tests/backends/test_sqlite_evidence.py).
    A pure function of the texts (the analyzers are fixed), so nothing can go stale."""
    analyzer = analyzers()[STEMMED]
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
    chosen = analyzers()
    return {
        field: chosen[FIELD_ANALYZERS[field]].analyze(value)
        for field, value in field_texts(title, section, text, uri).items()
    }


def query_terms(query: str) -> tuple[list[str], list[str]]:
    """The distinct terms a query searches for: English ones (looked up in title, section,
    body and path) and identifier ones (in ``ident``), each list capped at ``MAX_QUERY_TERMS``."""
    chosen = analyzers()
    return unique_terms(chosen[STEMMED].analyze(query)), unique_terms(chosen[IDENT].analyze(query))


def schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    # A signed field: the bindings build delete terms from Python ints as i64, which
    # never match an unsigned field (checked with tantivy 0.27).
    builder.add_integer_field("rowid", indexed=True, fast=True)
    # Term frequencies without positions: no phrase queries are built, and positions
    # would cost indexing time and disk.
    builder.add_text_field("title", tokenizer_name=STEMMED, index_option="freq")
    builder.add_text_field("section", tokenizer_name=STEMMED, index_option="freq")
    builder.add_text_field("body", tokenizer_name=STEMMED, index_option="freq")
    builder.add_text_field("path", tokenizer_name=STEMMED, index_option="freq")
    builder.add_text_field("ident", tokenizer_name=IDENT, index_option="freq")
    builder.add_text_field("labels", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("access", tokenizer_name="raw", index_option="basic")
    return builder.build()


def unique_terms(tokens: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(tokens))[:MAX_QUERY_TERMS]

