"""Raw relevance evidence of the SQLite backend's passages (``lore.models.Evidence``).

Coverage comes from the full-text index (the query's terms with their idf, and which of
them a passage holds, read from the index's postings: the same analyzer as BM25); the
cosine is the vector channel's own score. Both are measured on the passages returned,
whatever channel found them, so the verdict ``lore.confidence`` draws does not depend on
the fused score, which every search normalises to the same maximum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lore.backends import lexical
from lore.backends.sqlite.fulltext_shards import FullText
from lore.models import Evidence


class EvidenceMaker:
    """``Evidence`` for the passages of one search."""

    def __init__(
        self, fulltext: FullText, query: str, vector_hits: Sequence[tuple[int, float]] | None
    ) -> None:
        self._fulltext = fulltext
        # A pasted rule's placeholders are rare words (``humanizePercentage``) that no
        # runbook holds: counted, they made half of such a query's idf weight
        # uncoverable, and its own runbook looked like no match (docs/quality.md).
        self._weights = fulltext.query_weights(lexical.without_templates(query))
        self._total = sum(self._weights.values())
        self._held: dict[int, frozenset[str]] = {}
        self._cosines: Mapping[int, float] | None = None
        self._floor: float | None = None
        if vector_hits is not None:
            self._cosines = dict(vector_hits)
            # A chunk below the channel's cut scores at most its lowest hit: an upper
            # bound, so an unseen chunk is never made to look more relevant than it is.
            self._floor = min(self._cosines.values(), default=None)

    def prepare(self, rowids: Sequence[int]) -> None:
        """Read which query terms these chunks hold from the index, in one search for a
        few terms, before their evidence is asked for."""
        if self._total > 0:
            self._held.update(self._fulltext.held_terms(rowids, list(self._weights)))

    def __call__(self, rowid: int, uri: str, title: str, section: str, text: str) -> Evidence:
        coverage: float | None = None
        if self._total > 0:
            held = self._held.get(rowid)
            if held is None:
                # Not prepared, or not in the index yet: the chunk's own fields analysed.
                # The path is searched like the title (a runbook named for its alert), so
                # a query term it holds is evidence as well.
                held = self._fulltext.terms_of(lexical.path_text(uri), title, section, text)
            coverage = sum(weight for term, weight in self._weights.items() if term in held) / self._total
        cosine: float | None = None
        if self._cosines is not None:
            cosine = self._cosines.get(rowid, self._floor)
        return Evidence(coverage=coverage, cosine=cosine)
