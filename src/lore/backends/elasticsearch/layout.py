"""What lore keeps in an Elasticsearch/OpenSearch cluster, and the requests it searches with.

An index named ``lore`` is:

- alias ``lore`` -> concrete index ``lore_g1`` (then ``lore_g2``, ... after a
  ``lore reembed``): one document per chunk, its ``_source`` the shared chunk payload
  (``lore.backends.payloads``) plus ``vector``. Searches and sync go through the alias;
  re-embedding builds the next generation beside it and swaps the alias in one
  ``_aliases`` request, so searches never see a half-built index.
- index ``lore_meta``: the sync ledger (one document per uri), the key/value state and
  the embedder record, which names the live generation. Small, and read before any
  vector size is known, hence an index of its own.

Text is analysed twice: ``title``, ``section`` and ``text`` by ``lore_text`` (standard
words, camelCase split, English stop words and stemming) and each again in an ``.ids``
subfield by ``lore_identifier``, which keeps ``kube-apiserver``, ``KubeNodeNotReady`` or
``10.0.0.1`` whole (lowercased), so an exact identifier outranks its scattered parts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from lore.access import AccessFilter
from lore.backends.elasticsearch.dialect import Dialect
from lore.backends.lexical import without_rule_placeholders

#: The chunk documents' vector field.
VECTOR = "vector"
TEXT_FIELDS = ("title", "section", "text")
#: Version of the layout, kept in the meta index.
LAYOUT_VERSION = 1
#: The chunk fields searches read back (everything but the vector).
PASSAGE_FIELDS = [
    "chunk_id",
    "uri",
    "ordinal",
    "text",
    "section",
    "title",
    "revision",
    "updated_at",
    "labels",
]

# The same token shape as lore.backends.lexical: a word character, then word characters
# and the punctuation identifiers are joined with, ending on a word character.
_IDENTIFIER_PATTERN = r"\w(?:[\w.\-:/@]*\w)?"

ANALYSIS: dict[str, Any] = {
    "tokenizer": {
        "lore_identifier": {
            "type": "pattern",
            "pattern": _IDENTIFIER_PATTERN,
            "group": 0,
            "flags": "UNICODE_CHARACTER_CLASS",
        },
    },
    "filter": {
        "lore_camel": {
            "type": "word_delimiter",
            "split_on_case_change": True,
            "split_on_numerics": False,
            "preserve_original": True,
            "stem_english_possessive": True,
        },
        "lore_stop": {"type": "stop", "stopwords": "_english_"},
        "lore_stem": {"type": "stemmer", "language": "english"},
    },
    "analyzer": {
        "lore_text": {
            "type": "custom",
            "tokenizer": "standard",
            "filter": ["lore_camel", "lowercase", "lore_stop", "lore_stem"],
        },
        "lore_identifier": {"type": "custom", "tokenizer": "lore_identifier", "filter": ["lowercase"]},
    },
}

_KEYWORD = {"type": "keyword"}


def generation_index(alias: str, generation: int) -> str:
    return f"{alias}_g{generation}"


def meta_index(alias: str) -> str:
    return f"{alias}_meta"


def doc_id(key: str) -> str:
    """Document ids are capped at 512 bytes and uris are not: a digest of the key."""
    return hashlib.blake2b(key.encode("utf-8"), digest_size=16).hexdigest()


def _text_field() -> dict[str, Any]:
    return {
        "type": "text",
        "analyzer": "lore_text",
        "fields": {"ids": {"type": "text", "analyzer": "lore_identifier"}},
    }


def chunk_index_body(dialect: Dialect, dimension: int, shards: int, replicas: int) -> dict[str, Any]:
    """Settings and mappings of one generation. ``dimension`` 0 (``embedder = "none"``):
    no vector field, keyword search only."""
    properties: dict[str, Any] = {name: _text_field() for name in TEXT_FIELDS}
    properties.update(
        {
            "chunk_id": _KEYWORD,
            "uri": _KEYWORD,
            "embed_key": _KEYWORD,
            "label_terms": _KEYWORD,
            "access_terms": _KEYWORD,
            "source": _KEYWORD,
            "source_type": _KEYWORD,
            "content_hash": {"type": "keyword", "index": False},
            "revision": {"type": "keyword", "index": False},
            "ordinal": {"type": "integer"},
            "updated_at": {"type": "date"},
            # Kept whole for provenance; filters use label_terms.
            "labels": {"type": "object", "enabled": False},
        }
    )
    if dimension:
        properties[VECTOR] = dialect.vector_mapping(dimension)
    return {
        "settings": {"index": dialect.index_settings(shards, replicas), "analysis": ANALYSIS},
        "mappings": {"dynamic": "strict", "properties": properties},
    }


def meta_index_body(shards: int, replicas: int) -> dict[str, Any]:
    return {
        "settings": {"index": {"number_of_shards": shards, "number_of_replicas": replicas}},
        # Only what lookups filter or sort on is indexed; the rest stays in _source.
        "mappings": {
            "dynamic": False,
            "properties": {"kind": _KEYWORD, "source": _KEYWORD, "uri": _KEYWORD, "key": _KEYWORD},
        },
    }


# -- queries -------------------------------------------------------------------------------


def filter_clauses(terms: Iterable[str], access: AccessFilter | None = None) -> list[dict[str, Any]]:
    """The filter every channel of a search carries: each required ``key=value`` label
    term (AND), and the caller's access (its tenant's term, and one of its groups' terms
    unless it is an admin; ``lore.access.AccessFilter``). One function for both channels,
    so BM25 and kNN filter alike, inside the search, before any cut to ``top_k``."""
    clauses: list[dict[str, Any]] = [{"term": {"label_terms": term}} for term in sorted(terms)]
    if access is not None:
        clauses.append({"term": {"access_terms": access.tenant_term}})
        groups = access.group_terms
        if groups is not None:
            clauses.append({"terms": {"access_terms": sorted(groups)}})
    return clauses


def bm25_body(
    text: str, size: int, filters: list[dict[str, Any]], boosts: Mapping[str, float]
) -> dict[str, Any]:
    """``multi_match`` over the text fields and their identifier subfields; ``most_fields``
    adds an exact identifier's match to its words' so it ranks first. The query text is
    analysed, never parsed: operators and brackets are plain characters. A pasted alert
    rule's placeholders are left out, as the other backends leave them
    (``lexical.without_rule_placeholders``)."""
    fields = [f"title^{boosts['title']}", f"section^{boosts['section']}", "text"]
    fields += [f"{name}.ids^{boosts['identifier']}" for name in TEXT_FIELDS]
    searched = without_rule_placeholders(text)
    match = {"multi_match": {"query": searched, "type": "most_fields", "fields": fields}}
    return {
        "query": {"bool": {"must": [match], "filter": filters}},
        "size": size,
        "_source": PASSAGE_FIELDS,
        "track_total_hits": False,
    }
