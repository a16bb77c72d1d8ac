"""The terms of a chunk's fields, as ``lore.backends.sqlite.fulltext.field_terms`` gives
them, computed faster for ASCII text: the same terms, each as many times, in another order
where it means nothing (the postings count terms; they keep no positions).

tantivy's analyzers are token-wise after tokenising: each token's term (lowercased, stop
words dropped, stemmed) depends on that token alone, and for ASCII text both tokenisers
have an exact Python equivalent (the simple tokenizer splits at every character that is
not alphanumeric, ``[A-Za-z0-9]`` in ASCII; the identifier tokenizer's ``\\w`` is
``[A-Za-z0-9_]`` in ASCII for Rust's regex as for Python's). The texts the fields are given
(``fulltext_analysis.field_texts``) add to the chunk the words of its CamelCase names and the
names inside its compounds, and every one of those rules looks at one run of token
characters (``[\\w.\\-:/@]``) at a time (``lexical.camel_words``, ``sub_identifiers``). So a
chunk is cut into those runs by one regex pass, and each distinct run is analysed once,
all its fields' terms together, and remembered: a corpus repeats its words and names
(Zipf), so nearly every run is a dictionary hit. ``bench/pgvector_analysis.py``, on the
benchmark's synthetic chunks: 43 µs a chunk, where a pass per rule and per field took 96
and tantivy over the whole fields 132. Text with any non-ASCII character (where Unicode
word classes and lowercasing could differ) goes to tantivy whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from operator import attrgetter

from lore.backends import lexical
from lore.backends.fulltext_analysis import field_terms as tantivy_field_terms
from lore.backends.fulltext_analysis import query_terms

#: tantivy's simple tokenizer on ASCII text.
_WORD = re.compile(r"[A-Za-z0-9]+")
#: ``fulltext.IDENT_PATTERN`` (tests/backends/test_pgvector_analysis.py checks they agree).
IDENT_PATTERN = r"\w+(?:[.\-]\w+)*"
_IDENT = re.compile(IDENT_PATTERN, re.ASCII)
#: A run of token characters (``lexical._TOKEN``'s alphabet): every rule that adds words
#: to a field looks inside one run at a time, and both tokenisers' tokens lie inside one.
_RUN = re.compile(r"[\w.\-:/@]+", re.ASCII)
#: Distinct tokens (and runs) remembered per table; past it the memory starts afresh (a
#: pure function of the token, so nothing is ever stale); at most some 20 MB each.
CACHE_TOKENS = 1 << 17


class _Terms(dict[str, tuple[str, ...]]):
    """Token -> its terms, each token analysed by tantivy on its first lookup."""

    def __init__(self, analyse: Callable[[str], list[str]]) -> None:
        super().__init__()
        self._analyse = analyse

    def __missing__(self, token: str) -> tuple[str, ...]:
        terms = self[token] = tuple(self._analyse(token))
        return terms

    def of(self, tokens: Iterable[str]) -> list[str]:
        if len(self) > CACHE_TOKENS:
            self.clear()
        return list(chain.from_iterable(map(self.__getitem__, tokens)))


# One token is at most one term of either analyzer, so the query analysis of a token is
# its analysis.
_STEMMED = _Terms(lambda token: query_terms(token)[0])
_IDENTS = _Terms(lambda token: query_terms(token)[1])


@dataclass(frozen=True, slots=True)
class _Run:
    """What one run of token characters gives each field."""

    #: Its words and the words of its CamelCase names, stemmed (``content``, and ``title``
    #: or ``path`` where the run is in one that is a name).
    english: tuple[str, ...]
    #: Its identifier tokens, lowercased (``ident``).
    ident: tuple[str, ...]
    #: The names inside its compounds (``lexical.sub_identifiers``), each once; ``ident``
    #: holds each such name once per chunk.
    inner: tuple[str, ...]


class _Runs(dict[str, _Run]):
    def __missing__(self, run: str) -> _Run:
        camel = lexical.camel_words(run)
        words = _WORD.findall(run)
        if camel:
            words += _WORD.findall(" ".join(camel))
        found = self[run] = _Run(
            english=tuple(_STEMMED.of(words)),
            ident=tuple(_IDENTS.of(_IDENT.findall(run))),
            inner=tuple(lexical.sub_identifiers(run)),
        )
        return found


_RUNS = _Runs()


@lru_cache(maxsize=1024)
def _path(uri: str) -> str:
    # Every chunk of a document has its uri.
    return lexical.path_text(uri) if uri else ""


_ENGLISH = attrgetter("english")
_IDENT_TERMS = attrgetter("ident")


def _english(runs: list[_Run]) -> list[str]:
    return list(chain.from_iterable(map(_ENGLISH, runs)))


def field_terms(title: str, section: str, text: str, uri: str = "") -> dict[str, list[str]]:
    """``fulltext.field_terms`` of a chunk: the terms of each field, repeated as they occur."""
    if not (title.isascii() and section.isascii() and text.isascii() and uri.isascii()):
        return tantivy_field_terms(title, section, text, uri)
    if len(_RUNS) > CACHE_TOKENS:
        _RUNS.clear()
    lookup = _RUNS.__getitem__
    path = _path(uri)
    titled = list(map(lookup, _RUN.findall(title)))
    pathed = list(map(lookup, _RUN.findall(path)))
    runs = [*titled, *map(lookup, _RUN.findall(section)), *map(lookup, _RUN.findall(text)), *pathed]
    ident = list(chain.from_iterable(map(_IDENT_TERMS, runs)))
    inner = dict.fromkeys(chain.from_iterable(run.inner for run in runs if run.inner))
    if inner:
        ident += _IDENTS.of(chain.from_iterable(map(_IDENT.findall, inner)))
    return {
        "content": _english(runs),
        "title": _english(titled) if lexical.title_is_name(title) else [],
        "path": _english(pathed) if lexical.path_is_name(path) else [],
        "ident": ident,
    }
