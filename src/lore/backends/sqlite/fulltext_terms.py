"""What the SQLite backend's BM25 channel indexes and searches for: its analyzers, the
text each field is given, the terms of a query, and the tantivy schema (``fulltext.py``
holds one index, ``fulltext_shards.py`` a set of them; pgvector's postings reuse the
analysis to rank exactly as tantivy does).

Fields:

- ``content``: the chunk's title, section, body and path (the document's folders and file
  name as words, ``lexical.path_text``) as one English text, stemmed, stop words removed:
  BM25 over one document field, as it was defined. The analyzer splits snake_case,
  kebab-case and dotted names into their words; CamelCase identifiers add theirs
  (``KubeNodeNotReady`` also as "Kube Node Not Ready"), so an alert's description meets
  the runbook named for it.
- ``title``, ``path``: the same analysis of the title and the path again, but only where
  they are a *name* (``lexical.title_is_name``, ``path_is_name``: a few words, no sentence
  ending), empty otherwise. A page's name is evidence of its own (a runbook named for its
  alert), and a short field's length normalisation lets it count on a long page; a title
  that is a sentence restating the body (a paper's claim, a postmortem's headline) would
  count its words twice. Searched beside ``content`` at the title's and path's boosts.
  Measured against a field per part (title, section, body, path): bench/history/quality.md, "A
  document's name by its shape".
- ``ident``: the same text split only at whitespace and most punctuation, lowercased and
  not stemmed, so ``kube-apiserver``, ``etcdNoLeader``, ``ERR_1234``, ``10.0.0.1`` and
  ``payments-consumer-group`` are single terms and match whole; the names inside dotted
  compounds (``kube-apiserver.service``) are added whole too.
- ``labels``: raw ``key=value`` terms (lore.models.label_terms) for filtering.
- ``access``: raw tenant and group terms (lore.access.access_terms) for the caller's
  ``AccessFilter``, applied inside the search like the labels, never after its cut.
"""

from __future__ import annotations

import re
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
    "content": STEMMED,
    "title": STEMMED,
    "path": STEMMED,
    "ident": IDENT,
}
#: The English fields a query's words are looked up in; ``content`` holds every term of the
#: other two.
ENGLISH_FIELDS = ("content", "title", "path")


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
    """What each text field of a chunk is given to index: ``content`` the whole chunk with its
    title and path, ``title`` and ``path`` again where they are names (empty where not),
    ``ident`` the whole chunk with identifiers kept whole. The English fields also get
    CamelCase identifiers' words, so "node is not ready" meets a runbook titled
    KubeNodeNotReady."""
    path = lexical.path_text(uri) if uri else ""
    whole = f"{title}\n{section}\n{text}\n{path}"
    return {
        "content": with_identifier_words(whole),
        "title": with_identifier_words(title) if lexical.title_is_name(title) else "",
        "path": with_identifier_words(path) if lexical.path_is_name(path) else "",
        "ident": _identifier_text(whole),
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
    """The distinct terms a query searches for: English ones (looked up in ``ENGLISH_FIELDS``)
    and identifier ones (in ``ident``), each list capped at ``MAX_QUERY_TERMS``. A pasted
    alert rule's placeholders are not searched for (``lexical.without_rule_placeholders``)."""
    chosen = analyzers()
    text = lexical.without_rule_placeholders(query)
    return unique_terms(chosen[STEMMED].analyze(text)), unique_terms(chosen[IDENT].analyze(text))


#: What a plain word's exact form counts in ``ident``, against an identifier's whole form.
#: An identifier whole (``kube-apiserver``, ``etcdNoLeader``, ``ERR_5002``, ``BRCA1``) is
#: evidence the English fields cannot hold, as their analysis takes it apart; a plain word
#: is counted there already, stemmed, and its exact form only tells ``partition`` from the
#: ``partitions`` its stem also matches. At full weight every plain word counted twice
#: against the names and identifiers of a query (bench/history/quality.md, "A plain word's exact
#: form": SciFact train hybrid nDCG@10 0.7257 -> 0.7348).
PLAIN_EXACT_FORM = 0.5
_IDENT_TOKEN = re.compile(IDENT_PATTERN)


def ident_weights(query: str, identifiers: Iterable[str]) -> dict[str, float]:
    """Each ``ident`` term of ``query`` (``query_terms``' second list) with its weight
    against the identifier boost: 1 for a token shaped like an identifier as typed (a
    joiner, a CamelCase joint, letters with digits: ``lexical.is_identifier``),
    ``PLAIN_EXACT_FORM`` for a plain word."""
    tokens = (match.group() for match in _IDENT_TOKEN.finditer(query))
    shaped = {token.lower() for token in tokens if lexical.is_identifier(token)}
    return {term: 1.0 if term in shaped else PLAIN_EXACT_FORM for term in identifiers}


def schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    # A signed field: the bindings build delete terms from Python ints as i64, which
    # never match an unsigned field (checked with tantivy 0.27).
    builder.add_integer_field("rowid", indexed=True, fast=True)
    # Term frequencies without positions: no phrase queries are built, and positions
    # would cost indexing time and disk.
    for field in ENGLISH_FIELDS:
        builder.add_text_field(field, tokenizer_name=STEMMED, index_option="freq")
    builder.add_text_field("ident", tokenizer_name=IDENT, index_option="freq")
    builder.add_text_field("labels", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("access", tokenizer_name="raw", index_option="basic")
    return builder.build()


def unique_terms(tokens: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(tokens))[:MAX_QUERY_TERMS]

