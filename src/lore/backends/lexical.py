"""Lexical analysis shared by the server backends: exact identifiers, sparse BM25 vectors,
and the validation of search arguments.

SRE text is full of identifiers that ordinary full-text analysis takes apart: a stemmer turns
``kube-apiserver`` into ``kube`` + ``apiserv``, ``ERR_1234`` into ``err`` + ``1234``, and a
word splitter never sees ``etcd`` inside ``etcdNoLeader``. This module finds such tokens so a
backend can index them whole (an exact match then outranks a scattered one) and also emit
their camelCase parts (so "etcd no leader" still reaches ``etcdNoLeader``).

Word analysis (tokenise, lowercase, drop stop words, Snowball-stem) is tantivy's, a core
dependency already; only the identifier rules and the sparse weighting are written here.
The SQLite backend's ``fulltext.py`` analyses inside its tantivy index and exposes no
terms; PostgreSQL and Qdrant need the terms in Python, hence this module.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache

import tantivy

from lore.errors import QueryError, UnsupportedModeError
from lore.models import SearchMode, filter_terms

#: Longer tokens are base64 blobs or hashes, not names anyone searches for.
IDENTIFIER_MAX_CHARS = 128

# A run of word characters, possibly joined by the punctuation identifiers are built with.
_TOKEN = re.compile(r"\w(?:[\w.\-:/@]*\w)?")
_JOINERS = re.compile(r"[.\-:/@_]")
_CAMEL = re.compile(r"[a-z0-9][A-Z]|[A-Z]{2}[a-z]")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_HAS_LETTER = re.compile(r"[^\W\d_]")
_HAS_DIGIT = re.compile(r"\d")


def is_identifier(token: str) -> bool:
    """Whether a token as typed is shaped like a name rather than a word: a joiner
    (``kube-apiserver``, ``ERR_5002``, ``etcd.member``), a CamelCase joint (``etcdNoLeader``),
    or letters fused with digits (``k8s``, ``BRCA1``)."""
    if len(token) < 2 or len(token) > IDENTIFIER_MAX_CHARS:
        return False
    if _JOINERS.search(token) or _CAMEL.search(token):
        return True
    # ``k8s``, ``ipv6``, ``p99``: letters and digits fused into one name.
    return bool(_HAS_LETTER.search(token) and _HAS_DIGIT.search(token))


def identifiers(text: str) -> list[str]:
    """Identifier-shaped tokens of ``text``, lowercased, each once, in order of appearance:
    ``kube-apiserver``, ``etcdnoleader``, ``10.0.0.1``, ``err_1234``."""
    found: dict[str, None] = {}
    for match in _TOKEN.finditer(text):
        token = match.group()
        if is_identifier(token):
            found.setdefault(token.lower(), None)
    return list(found)


def camel_parts(text: str) -> list[str]:
    """The words hidden inside camelCase tokens: ``etcdNoLeader`` -> etcd, No, Leader."""
    parts: list[str] = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        if _CAMEL.search(token):
            for piece in _JOINERS.split(token):
                parts.extend(p for p in _CAMEL_BOUNDARY.split(piece) if p)
    return parts


#: Where one word of a CamelCase name ends and the next begins: ``eN`` (etcdNoLeader),
#: ``IDo`` (KubeAPIDown). ``BRCA1``-style names have none and are left alone.
_CAMEL_JOINT = re.compile(r"[a-z][A-Z]|[A-Z][A-Z][a-z]")
_CAMEL_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
#: The joiners between the names of a compound (a path, a URL, ``host:port``, an image
#: reference), as opposed to those inside one name (``-``, ``_``, ``.``).
_OUTER_JOINERS = re.compile(r"[/:@]+")
_COMPOUND = re.compile(r"[./:@]")
#: Token characters (``_TOKEN``'s alphabet), as many as follow.
_RUN = re.compile(r"[\w.\-:/@]*")
#: From a run's first upper-case letter, or first compound joiner, to the run's end.
_FROM_UPPER = re.compile(r"[A-Z][\w.\-:/@]*")
_FROM_JOINER = re.compile(r"[./:@][\w.\-:/@]*")


def _runs_from(mark: re.Pattern[str], text: str) -> list[str]:
    """The whole runs of token characters of ``text`` in which ``mark`` (a character class
    and then the rest of the run) matches, in order: each match grown leftwards to its
    run's start on the reversed text. One regex that matched whole runs tested its pattern
    at every character and took most of a sync's analysis time; a leading character class
    lets the regex engine skip to the next candidate."""
    runs: list[str] = []
    reversed_text = ""
    for match in mark.finditer(text):
        at = match.start()
        if not reversed_text:
            reversed_text = text[::-1]
        before = _RUN.match(reversed_text, len(text) - at)
        start = at - (before.end() - before.start()) if before else at
        runs.append(text[start : match.end()])
    return runs


def _runs_with_joint(text: str) -> list[str]:
    """The whole runs of token characters that hold a CamelCase joint (which holds an
    upper-case letter)."""
    return [run for run in _runs_from(_FROM_UPPER, text) if _CAMEL_JOINT.search(run)]


def _runs_with_joiner(text: str) -> list[str]:
    """The whole runs of token characters that hold one of ``_COMPOUND``."""
    return _runs_from(_FROM_JOINER, text)


def _camel_words(name: str) -> list[str]:
    """``KubeAPIDown`` -> Kube, API, Down. A split that leaves a one-letter word (``mRNA``,
    ``IPv4``, ``iPhone``) means a name, not words: no split (measured, docs/quality.md)."""
    if not _CAMEL_JOINT.search(name):
        return [name]
    parts = _CAMEL_WORD.findall(name)
    if any(len(part) == 1 and part.isalpha() for part in parts):
        return [name]
    return parts


def identifier_words(text: str) -> list[str]:
    """The words every identifier of ``text`` is made of, in order (case kept, repeats
    kept): ``kube-apiserver`` -> kube, apiserver; ``node_exporter`` -> node, exporter;
    ``etcd.member.count`` -> etcd, member, count; ``KubeNodeNotReady`` -> Kube, Node, Not,
    Ready; numbers left out (``10.0.0.1`` gives nothing). Plain words give nothing, so
    indexing text plus these words counts each identifier's words once more, never a
    plain word."""
    words: list[str] = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        if not is_identifier(token):
            continue
        split: list[str] = []
        for piece in _JOINERS.split(token):
            split.extend(_camel_words(piece) if piece else [])
        if len(split) > 1:
            words.extend(word for word in split if not word.isdigit())
    return words


def camel_words(text: str) -> list[str]:
    """Only the words of CamelCase names (``KubeAPIDown`` -> Kube, API, Down), for an
    analyzer that already splits at ``-``, ``_`` and ``.`` itself; same one-letter rule."""
    words: list[str] = []
    # A joint is letters only, so it lies inside one piece of one token: only the runs of
    # token characters that hold one are tokenised (most of a sync's analysis time was
    # spent tokenising runs that hold none).
    for run in _runs_with_joint(text):
        for match in _TOKEN.finditer(run):
            words.extend(_token_camel_words(match.group()))
    return words


#: Distinct tokens whose analysis is kept: a corpus names the same identifiers again and
#: again (Zipf), and each costs several regex calls; a pure function, so never stale.
_TOKEN_CACHE = 1 << 15


@lru_cache(maxsize=_TOKEN_CACHE)
def _token_camel_words(token: str) -> tuple[str, ...]:
    words: list[str] = []
    for piece in _JOINERS.split(token):
        split = _camel_words(piece) if piece else []
        if len(split) > 1:
            words.extend(split)
    return tuple(words)


def sub_identifiers(text: str) -> list[str]:
    """The names inside compound identifiers, lowercased, each once: a path, URL, image
    reference or ``host:port`` yields its identifier-shaped pieces
    (``quay.io/coreos/kube-apiserver:v1.29`` -> quay.io, kube-apiserver, v1.29), and a dotted
    name its identifier-shaped parts (``kube-apiserver.service`` -> kube-apiserver), so a
    search for the inner name matches it whole too. The compound itself is not repeated."""
    found: dict[str, None] = {}
    for run in _runs_with_joiner(text):
        for match in _TOKEN.finditer(run):
            found.update(dict.fromkeys(_inner_names(match.group())))
    return list(found)


@lru_cache(maxsize=_TOKEN_CACHE)
def _inner_names(token: str) -> tuple[str, ...]:
    """``sub_identifiers`` of one token, in order, repeats left to the caller."""
    # Only a token with an outer joiner or a dot has a name inside that differs from it.
    if not _COMPOUND.search(token) or not is_identifier(token):
        return ()
    names: list[str] = []
    whole = token.lower()
    for piece in _OUTER_JOINERS.split(whole):
        candidates = [piece, *piece.split(".")] if "." in piece else [piece]
        names.extend(c for c in candidates if c != whole and is_identifier(c))
    return tuple(names)


def path_text(uri: str) -> str:
    """A document's address as searchable text: the uri without its scheme and file
    extension, one name per path segment (``file://gitlab/docs/patroni/patroni-lag.md`` ->
    "gitlab docs patroni patroni-lag"). Segments without a letter (``beir://4983``, dates)
    are left out, and so are dates inside a name (``2025-10-03-certificate-expiry`` ->
    "certificate-expiry", as postmortems are named): a number in a query (``10.0.0.1``)
    should not match a document's id or the day it was written."""
    _, _, rest = uri.partition("://")
    segments = [segment for segment in (rest or uri).split("?")[0].split("#")[0].split("/") if segment]
    if segments:
        stem, dot, extension = segments[-1].rpartition(".")
        if dot and stem and extension.isalnum() and len(extension) <= 5:
            segments[-1] = stem
    named = (_DATE.sub("", segment).strip("-_. ") for segment in segments)
    return " ".join(segment for segment in named if _HAS_LETTER.search(segment))


#: A name is at most this many words. A page's name is a noun phrase that labels it
#: (``KubeNodeNotReady``, "Disk full on the primary", "Steps to check"), where a sentence
#: stating a claim (a paper's title, a design doc's thesis) runs 10-25 words (English prose
#: averages 15-20). Fixed before it was measured (bench/history/quality.md, "A document's name by
#: its shape").
NAME_WORDS = 8
_SENTENCE_END = re.compile(r"[.!?]\s*$")
_NAME_JOINERS = re.compile(r"[-_.\s]+")


def title_is_name(title: str) -> bool:
    """Whether a title names its page (few words, no sentence ending) rather than states
    what the body says. An identifier counts as one word, as a name is one."""
    words = title.split()
    return 0 < len(words) <= NAME_WORDS and not _SENTENCE_END.search(title)


def path_is_name(path: str) -> bool:
    """Whether a path (``path_text``) ends in a name: its file name, split at joiners, has
    at most ``NAME_WORDS`` words (``pgbouncer-connections``: 2; the slug of a sentence,
    ``why-we-moved-billing-off-mysql-to-postgres-in-2023``, is not one)."""
    if not path:
        return False
    words = [word for word in _NAME_JOINERS.split(path.split()[-1]) if word]
    return 0 < len(words) <= NAME_WORDS


#: A calendar date in a file or folder name, with the separator that joins it to the rest.
_DATE = re.compile(r"(?<![0-9])(?:19|20)\d\d[-_.]?[01]\d[-_.]?[0-3]\d(?![0-9])[-_.]?")


#: A Go-template reference (``{{ $labels.instance }}``, ``{{ $value | humanize }}``): a
#: pasted alert rule's placeholder, not a name the alert carries.
_TEMPLATE = re.compile(r"\{\{.*?\}\}", re.DOTALL)


def without_templates(text: str) -> str:
    """``text`` with its Go-template placeholders blanked out: in a pasted alert rule
    ``{{ $value | humanizePercentage }}`` names the templating, not the failure."""
    return _TEMPLATE.sub(" ", text)


#: A placeholder of Prometheus's rule templating: it reads the alert's ``$labels``, its
#: ``$value`` or the server's ``$externalLabels`` / ``$externalURL``, the variables the
#: Prometheus documentation gives alert and recording rule templates.
_RULE_PLACEHOLDER = re.compile(r"\{\{[^{}]*\$(?:labels|value|externalLabels|externalURL)\b[^{}]*\}\}")


def without_rule_placeholders(text: str) -> str:
    """``text`` with a pasted alert rule's placeholders blanked out (``{{ $labels.device }}``,
    ``{{ $value | humanizePercentage }}``): what the rule is rendered with, not what it is
    about, and as ``labels.device`` whole they would count as identifiers the alert
    carries. Other templates stay (Helm's ``{{ .Values.replicaCount }}``: a runbook may be
    about that very value)."""
    return _RULE_PLACEHOLDER.sub(" ", text)


def identifier_share(text: str) -> float:
    """The share of a query's tokens that are identifiers (0.0 to 1.0), template
    placeholders left out: ``ERR_5002 on kube-apiserver`` is 2/3, prose 0."""
    tokens = [match.group() for match in _TOKEN.finditer(without_templates(text))]
    if not tokens:
        return 0.0
    return sum(1 for token in tokens if is_identifier(token)) / len(tokens)


@cache
def english_analyzer() -> tantivy.TextAnalyzer:
    """Stemmed English words: the analyzer of these terms and of the SQLite full-text
    index's text fields (``fulltext_terms.analyzers``), so both meet the same words."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stopword("english"))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def terms(text: str) -> list[str]:
    """Every lexical term of ``text``, repeated as often as it occurs: stemmed words, the
    words inside camelCase identifiers, each identifier whole, and the names inside
    compound identifiers (``sub_identifiers``) once each."""
    analyzer = english_analyzer()
    words: list[str] = analyzer.analyze(text)
    parts = camel_parts(text)
    if parts:
        words.extend(analyzer.analyze(" ".join(parts)))
    for match in _TOKEN.finditer(text):
        token = match.group()
        if is_identifier(token):
            words.append(token.lower())
    words.extend(sub_identifiers(text))
    return words


def term_id(term: str) -> int:
    """A stable 32-bit id for a term: sparse vectors index by hashed term, not a vocabulary,
    so no vocabulary has to be stored or kept in step across writers."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "little")


@dataclass(frozen=True, slots=True)
class SparseVector:
    indices: list[int]
    values: list[float]


@dataclass(frozen=True, slots=True)
class BM25Weights:
    """The document side of BM25 (term-frequency saturation and length normalisation).

    IDF is left to the store, which knows the collection (Qdrant's ``Modifier.IDF``). The
    average length is a fixed guess because chunks are sized to a token budget anyway.
    """

    k1: float = 1.2
    b: float = 0.75
    average_length: float = 256.0

    def document(self, text: str) -> SparseVector:
        counts = Counter(term_id(term) for term in terms(text))
        length = sum(counts.values())
        norm = self.k1 * (1.0 - self.b + self.b * length / self.average_length)
        ids = sorted(counts)
        return SparseVector(ids, [counts[i] * (self.k1 + 1.0) / (counts[i] + norm) for i in ids])

    def query(self, text: str) -> SparseVector:
        """A pasted alert rule's placeholders are not searched for (``without_rule_placeholders``)."""
        counts = Counter(term_id(term) for term in terms(without_rule_placeholders(text)))
        ids = sorted(counts)
        return SparseVector(ids, [float(counts[i]) for i in ids])


def query_words(text: str) -> list[str]:
    """The words of a query as typed (identifiers intact), then camelCase parts; each once."""
    return list(dict.fromkeys([m.group() for m in _TOKEN.finditer(text)] + camel_parts(text)))


# -- search arguments, validated the same way by every server backend ---------------------

#: The same limits as the SQLite backend, so a query valid for one engine is valid for all.
MAX_TOP_K = 1_000
MAX_QUERY_CHARS = 50_000


def clean_text(text: str) -> str:
    """Drop NUL characters and lone surrogates, which no server's wire format carries."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def check_search(
    engine: str,
    modes: tuple[SearchMode, ...],
    query: str,
    top_k: int,
    labels: Mapping[str, str] | None,
    mode: SearchMode | str | None,
) -> tuple[SearchMode, frozenset[str]]:
    """The mode to run and the label terms to require; ``QueryError`` for bad arguments."""
    if mode is None:
        chosen: SearchMode | None = modes[0]
    else:
        try:
            chosen = SearchMode(mode)
        except ValueError:
            chosen = None
    if chosen is None or chosen not in modes:
        offered = ", ".join(m.value for m in modes)
        raise UnsupportedModeError(f"unknown search mode {mode!r}; the {engine} backend offers: {offered}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise QueryError(f"top_k must be a whole number from 1 to {MAX_TOP_K}, got {top_k!r}")
    if not isinstance(query, str):
        raise QueryError(f"the query must be text, got {type(query).__name__}")
    if not clean_text(query).strip():
        raise QueryError("the query is empty: ask a question or paste the error message")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")
    for key, value in (labels or {}).items():
        if not isinstance(key, str) or not isinstance(value, str) or not key or not value:
            raise QueryError(f"a label filter needs a non-empty key and value, got {key!r}={value!r}")
    return chosen, filter_terms(labels)
