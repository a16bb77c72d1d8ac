"""The terms of a chunk's fields, exactly ``lore.backends.sqlite.fulltext.field_terms``,
computed faster for ASCII text.

tantivy's analyzers are token-wise after tokenising: each token's term (lowercased, stop
words dropped, stemmed) depends on that token alone. For ASCII text both tokenisers have an
exact Python equivalent (the simple tokenizer splits at every character that is not
alphanumeric, ``[A-Za-z0-9]`` in ASCII; the identifier tokenizer's ``\\w`` is
``[A-Za-z0-9_]`` in ASCII for Rust's regex as for Python's), so the text is tokenised with
``re`` and each distinct token is analysed once by tantivy and remembered. A corpus repeats
its words (Zipf), so nearly every token is a dictionary hit. Measured on the benchmark's
synthetic chunks: tantivy's regex tokenizer alone cost three times its simple one, and this
path takes about a third off the analysis (0.48 -> 0.31 ms a chunk). Text with any
non-ASCII character (where Unicode word classes and lowercasing could differ) goes to
tantivy whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from itertools import chain

from lore.backends.sqlite.fulltext import field_terms as tantivy_field_terms
from lore.backends.sqlite.fulltext import field_texts, query_terms

#: tantivy's simple tokenizer on ASCII text.
_WORD = re.compile(r"[A-Za-z0-9]+")
#: ``fulltext.IDENT_PATTERN`` (tests/backends/test_pgvector_analysis.py checks they agree).
IDENT_PATTERN = r"\w+(?:[.\-]\w+)*"
_IDENT = re.compile(IDENT_PATTERN, re.ASCII)
#: Distinct tokens remembered per analyzer; past it the memory starts afresh (a pure
#: function of the token, so nothing is ever stale); at most some 20 MB each.
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


def field_terms(title: str, section: str, text: str, uri: str = "") -> dict[str, list[str]]:
    """``fulltext.field_terms`` of a chunk: the terms of each field, repeated as they occur."""
    if not (title.isascii() and section.isascii() and text.isascii() and uri.isascii()):
        return tantivy_field_terms(title, section, text, uri)
    texts = field_texts(title, section, text, uri)
    found = {name: _STEMMED.of(_WORD.findall(value)) for name, value in texts.items() if name != "ident"}
    found["ident"] = _IDENTS.of(_IDENT.findall(texts["ident"]))
    return found
