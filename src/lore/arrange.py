"""From a retriever's ranking of chunks to the passages an answer shows, on every backend.

A retriever ranks chunks; a person or an agent reads sections. Five rules turn the one
into the other, in this order, applied by every consumer of a ranking (``knowledge_search``,
``lore eval``, the verdict's figures) so each backend and search mode answers alike:

1. **Source priority** (``lore.priority``): each score times its source's weight, so the
   team's page comes before the built-in pack's when both answer comparably.
2. **One section, one passage**: chunks of one section that follow each other in their
   document (consecutive ordinals, the chunker's overlap between them) are merged into one
   passage at the rank of the best of them, rather than competing for slots as two cards
   cut mid-section ("its Mitigation split in two cards ranked 4 and 7"). The merged text
   drops the repeated overlap and stays within ``max_chars`` (the output cap per passage),
   beyond which the run is left in pieces.
3. **The page the query names** (``named_first``): a document whose title, file name,
   ``alerts:`` entry or heading equals one of the query's identifiers, or whose name the
   query's words spell (``lore.named``), goes before the documents it does not name, from
   sources of no higher priority. An
   exact name is evidence of another kind than shared wording: a notification for
   ``PrometheusOperatorNotReady`` is answered by that alert's page, which the lexical
   channel finds by its name, not by a sibling page (PrometheusOperatorRejectedResources)
   that the vector channel ranks first because the two describe the same operator. The
   pack's playbooks name every alert of their topic, so a pack page named by its
   ``alerts:`` lifts only over other pack pages, never over a team page the retriever put
   above it. A page one of the query's identifiers gives its own name (title, file name,
   heading: "pod stuck in ImagePullBackOff" and the pack's ``image-pull-backoff.md``; not
   a short query taken whole, a topic a team page answers in its own words) also goes past
   a team passage holding none of the query's names: the two do not answer comparably.
4. **The section the question asks for** (``lore.intent``): inside each document, a
   "how do I fix" question's Mitigation, a notification's or an alert description's
   Meaning, before the document's other sections.
5. **Diversity by document**: one document takes at most ``PER_DOCUMENT`` passages ahead of
   another document's passage that answers too (scores at least ``ANSWERS_TOO`` of the best
   passage's); its further passages follow those. A long playbook then cannot take every
   slot of an answer when another page answers the question; when nothing else comes
   close, its sections keep their places. A document's first passage never moves here;
   only a name the query gives (rule 3) changes the ranking of documents retrieval gave.

A rule over the ranking rather than inside each backend's fusion: the same code for
SQLite, PostgreSQL, Qdrant, Elasticsearch and the managed engines, measured once
(docs/quality.md, "Current figures").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from operator import itemgetter
from typing import TypeVar

from lore.intent import by_intent
from lore.models import Passage
from lore.named import Named, QueryJudge
from lore.priority import MIN_EXTRA_CANDIDATES, Weights, prioritised, weight_of
from lore.text_blocks import joined_to

T = TypeVar("T")

#: Passages of one document ahead of another document's passage that answers too.
PER_DOCUMENT = 3
#: "Answers too": a passage scoring at least this share of the best passage's score.
ANSWERS_TOO = 0.5


def candidates(top_k: int) -> int:
    """Chunks to ask a retriever for to show ``top_k`` passages after merging and
    prioritising: the answer's size again, at least ``MIN_EXTRA_CANDIDATES`` more."""
    return top_k + max(top_k, MIN_EXTRA_CANDIDATES)


def ordinal(passage: Passage) -> int | None:
    """The chunk's position in its document, from its id (``uri#ordinal#hash``, as
    ``lore.models.make_chunk_id`` makes it); None for an id of another shape."""
    parts = passage.chunk_id.rsplit("#", 2)
    if len(parts) != 3 or parts[0] != passage.uri or not parts[1].isdigit():
        return None
    return int(parts[1])


def runs(located: Iterable[tuple[str, str, int, T]]) -> list[list[T]]:
    """Rule 2's runs: the items of ``(uri, section, ordinal, item)`` grouped by section of
    a document, each group cut where an ordinal is missing, in document order. An ordinal
    given again keeps its first item only (the later ones are in no run)."""
    by_section: dict[tuple[str, str], list[tuple[int, T]]] = {}
    for uri, section, number, item in located:
        by_section.setdefault((uri, section), []).append((number, item))
    found: list[list[T]] = []
    for members in by_section.values():
        if len(members) == 1:
            found.append([members[0][1]])
            continue
        members.sort(key=itemgetter(0))  # stable: a repeated ordinal's first first
        run: list[T] = []
        last = members[0][0]
        for number, item in members:
            if run and number == last:
                continue
            if run and number != last + 1:
                found.append(run)
                run = []
            run.append(item)
            last = number
        found.append(run)
    return found


def grown(texts: Iterable[str], max_chars: int | None = None) -> Iterator[str]:
    """Rule 2's text: a run's chunks joined (``lore.text_blocks.joined``, the overlap kept
    once) one more at a time, from its first chunk alone, while the text fits in
    ``max_chars``. A search shows the longest from a run's first chunk, then starts again
    from the next; sync keeps every one (``lore.tool.cleaning.merged_texts``)."""
    text = ""
    for count, piece in enumerate(texts):
        longer = joined_to(text, piece)
        if count and max_chars is not None and len(longer) > max_chars:
            return
        text = longer
        yield text


def merged(passages: Sequence[Passage], *, max_chars: int | None = None) -> list[Passage]:
    """``passages`` (best first) with each run of consecutive chunks of one section made one
    passage, at the rank, score, id and evidence of its best chunk, its text in document
    order; a run whose text would exceed ``max_chars`` is cut into pieces that fit."""
    located = [
        (passage.uri, passage.section, number, index)
        for index, passage in enumerate(passages)
        if (number := ordinal(passage)) is not None
    ]
    into: dict[int, str] = {}  # the best chunk of a piece of several -> the piece's text
    absorbed = {index for *_, index in located}  # the same chunk twice: kept at its better rank
    for run in runs(located):
        absorbed.difference_update(run)
        if len(run) > 1:
            _close(run, passages, max_chars, into, absorbed)
    if not into:
        return list(passages)
    shown: list[Passage] = []
    for index, passage in enumerate(passages):
        if index in absorbed:
            continue
        text = into.get(index)
        shown.append(passage if text is None else replace(passage, text=text))
    return shown


def _close(
    run: list[int],
    passages: Sequence[Passage],
    max_chars: int | None,
    into: dict[int, str],
    absorbed: set[int],
) -> None:
    """File one run of consecutive chunks (indices in document order) as passages of at
    most ``max_chars`` characters each: from its first chunk as many as fit, then again."""
    start = 0
    while start < len(run):
        piece: list[int] = []
        text = ""
        for longer in grown((passages[index].text for index in run[start:]), max_chars):
            piece.append(run[start + len(piece)])
            text = longer
        if len(piece) > 1:
            best = min(piece)
            into[best] = text
            absorbed.update(index for index in piece if index != best)
        start += len(piece)


def diversified(
    passages: Sequence[Passage], *, per_document: int = PER_DOCUMENT, answers_too: float = ANSWERS_TOO
) -> list[Passage]:
    """``passages`` (best first) with a document's passages beyond its first
    ``per_document`` moved after every other document's passage that scores at least
    ``answers_too`` of the best score; each position keeps its place otherwise, and no
    document's first passage moves. Each place keeps its score, so scores still fall."""
    if not passages or passages[0].score <= 0:
        return list(passages)  # no positive best score to measure "answers too" against
    floor = answers_too * passages[0].score
    close = next((i for i, passage in enumerate(passages) if passage.score < floor), len(passages))
    seen: Counter[str] = Counter()
    ahead: list[Passage] = []  # the passages that answer, at most per_document per document
    deferred: list[Passage] = []
    for passage in passages[:close]:
        seen[passage.uri] += 1
        (ahead if seen[passage.uri] <= per_document else deferred).append(passage)
    if not deferred:
        return list(passages)
    # A document's further passages follow every passage that answers too, and come before
    # everything below the floor: alone near the top, a document keeps its sections' places.
    # Each place keeps its score (as ``lore.intent`` does), so scores still fall down the list.
    moved = [*ahead, *deferred]
    return [
        passage if passage.score == place.score else replace(passage, score=place.score)
        for passage, place in zip(moved, passages, strict=False)
    ] + list(passages[close:])


def named_first(passages: Sequence[Passage], query: str, weights: Weights | None = None) -> list[Passage]:
    """``passages`` (best first) with every passage of a document the query names
    (``lore.named``: an identifier of the query is the document's title, file name or an
    ``alerts:`` entry, or a heading of the passage's section) moved ahead of the passages of
    documents it does not name, from sources of no higher priority; each place keeps its
    score. A named page of the pack (``[vault] weight`` below 1) therefore goes first among
    the pack's pages but not ahead of a team page the retriever put above it, unless one
    of the query's identifiers is the page's own name (not an ``alerts:`` entry) and the
    team passage holds none of the query's names."""
    judge = QueryJudge(query)
    named_uris = {passage.uri for passage in passages if judge.strength(passage) is Named.NAME}
    if not named_uris:
        return list(passages)
    own_named = {passage.uri for passage in passages if passage.uri in named_uris and judge.own_name(passage)}
    order: list[Passage] = []
    for passage in passages:
        if passage.uri not in named_uris:
            order.append(passage)
            continue
        weight = weight_of(passage, weights or {})
        place = len(order)
        while place > 0 and order[place - 1].uri not in named_uris:
            above = order[place - 1]
            # A page of a yielding source goes past a higher source's passage only when the
            # query gives the page's own name (not an ``alerts:`` entry) and that passage
            # holds none of the query's names: the two do not answer comparably.
            if weight_of(above, weights or {}) > weight and not (
                passage.uri in own_named and judge.strength(above) is Named.NONE
            ):
                break
            place -= 1
        order.insert(place, passage)
    return [
        passage if passage.score == place.score else replace(passage, score=place.score)
        for passage, place in zip(order, passages, strict=True)
    ]


def arranged(
    passages: Sequence[Passage], query: str, weights: Weights | None = None, *, max_chars: int | None = None
) -> list[Passage]:
    """The rules (module docstring) over a retriever's ranking of chunks, best first."""
    ranked = merged(prioritised(passages, weights or {}), max_chars=max_chars)
    return diversified(by_intent(named_first(ranked, query, weights), query))
