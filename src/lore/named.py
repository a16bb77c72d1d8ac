"""Named evidence: a passage the query (or an alert) names, which no confidence gate discards.

The confidence models (``lore.confidence``) weigh how much of a query's wording a passage
holds and how close its vector is. An identifier is a different kind of evidence: when
the alert ``KafkaConsumerLagHigh`` is the title, the file name, a front-matter ``alerts:``
entry or a heading of a section, that section is its runbook whatever the words around it
say; when the identifier appears whole in a section's text, the section is at least about
it. A query of one identifier has almost no wording to cover, so the models alone would
call such an answer "none" and withhold it, the worst failure an answerable question can
have (docs/quality.md, "Confidence"). Two strengths, strongest first:

- ``NAME``: one of the query's identifiers (or the whole of a short query) equals the
  passage's title, file name, one of its ``alerts:`` or a heading on its section path,
  compared on letters and digits only (``node-not-ready`` = ``Node not ready``); or a run
  of two to eight of the query's words spells the document's title, file name or an
  ``alerts:`` entry (not a heading: "check the logs" is a step many pages have), as an
  alert's description says its alert's name in words ("No ready virt-controller was
  detected" and ``NoReadyVirtController``, where its siblings ``NoLeadingVirtController``
  and ``VirtControllerDown`` share every other word);
- ``MENTION``: one of the query's identifiers appears whole in the passage's text.

Identifiers are tokens shaped like names (``lore.backends.lexical.is_identifier``: a
joiner, a camelCase joint, letters fused with digits), so a question's ordinary words never
name anything; a number alone is not an identifier either.

A passage's names and the identifiers of its text are pure functions of its fields, and the
same chunks come back search after search: they are remembered (a bounded cache keyed on
the whole field values, never a hash of them), as are a query's names, which a search
reads twice (``lore.arrange.named_first``, then the confidence of its answer).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

from lore.backends.lexical import NAME_WORDS, identifiers
from lore.confidence import Confidence, passage_confidence, raised
from lore.models import LABEL_VALUE_SEPARATOR, SECTION_SEPARATOR, Passage


class Named(enum.IntEnum):
    """How strongly a passage is named; ``NONE`` is falsy."""

    NONE = 0
    MENTION = 1
    NAME = 2


_NOT_ALPHANUMERIC = re.compile(r"[^0-9a-z]")


def normal(text: str) -> str:
    """Letters and digits only, lower case: how names are compared."""
    return _NOT_ALPHANUMERIC.sub("", text.lower())


def headings(passage: Passage) -> list[str]:
    return [part for part in passage.section.split(SECTION_SEPARATOR) if part]


def names_of(passage: Passage) -> list[str]:
    """What names a passage's document and section: its title, file name, front-matter
    ``alerts:`` and the headings of its section path."""
    listed = passage.labels.get("alerts", "").split(LABEL_VALUE_SEPARATOR)
    stem = _last_part(passage.uri.split("#", 1)[0])
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem
    return [passage.title, stem, *listed, *headings(passage)]


def _last_part(path: str) -> str:
    """``PurePosixPath(path).name`` without building the path: the last part that is
    neither empty nor ``.`` (read for every passage of every answer)."""
    return next((part for part in reversed(path.split("/")) if part and part != "."), "")


def query_names(query: str) -> list[str]:
    """The names a query may give: its identifiers, and the whole query when it is short
    enough to be a name itself (``node not ready``)."""
    found = identifiers(query)
    if 0 < len(query.split()) <= NAME_WORDS:
        found.append(query)
    return found


def is_named(passage: Passage, name: str) -> bool:
    """Whether ``name`` equals the passage's title, file name, an ``alerts:`` entry or a
    heading of its section path."""
    wanted = normal(name)
    return bool(wanted) and any(normal(candidate) == wanted for candidate in names_of(passage))


def mentions(passage: Passage, name: str) -> bool:
    """Whether the identifier ``name`` appears whole in the passage's text."""
    wanted = name.lower()
    return bool(wanted) and wanted in identifiers(passage.text)


def named(passage: Passage, names: Sequence[str]) -> Named:
    """How strongly any of ``names`` (``query_names``) names the passage."""
    return _Names(names).strength(passage)


#: Passages whose names and identifiers are remembered (``_passage_names``,
#: ``_text_identifiers``): the same chunks come back search after search, and reading them
#: again was a third of a search's CPU in the service.
_REMEMBERED = 4096


@lru_cache(maxsize=_REMEMBERED)
def _passage_names(title: str, uri: str, alerts: str, section: str) -> frozenset[str]:
    """The ``normal`` form of every name ``names_of`` gives a passage of these fields: a
    pure function of them, remembered by their whole values (never by a hash alone)."""
    listed = alerts.split(LABEL_VALUE_SEPARATOR)
    stem = _last_part(uri.split("#", 1)[0])
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem
    parts = [part for part in section.split(SECTION_SEPARATOR) if part]
    return frozenset(normal(name) for name in (title, stem, *listed, *parts))


@lru_cache(maxsize=_REMEMBERED)
def _text_identifiers(text: str) -> frozenset[str]:
    """``identifiers(text)`` as a set: a pure function of the text, remembered by the
    whole text."""
    return frozenset(identifiers(text))


#: A name spelled in a query's words is at least this many words and this many letters:
#: "No ready virt-controller was detected" holds the page ``NoReadyVirtController``;
#: one word is a topic ("redis"), and a short pair ("to do") names nothing by chance alone.
SPELLED_WORDS = 2
SPELLED_LETTERS = 8


def _spelled(query: str) -> frozenset[str]:
    """Every run of ``SPELLED_WORDS`` to ``NAME_WORDS`` consecutive words of ``query``,
    in ``normal`` form, of at least ``SPELLED_LETTERS`` letters: the names its words may
    spell out ("node not ready" for ``NodeNotReady``, "virt-controller" as written)."""
    words = query.split()
    runs = set()
    for start in range(len(words)):
        for end in range(start + SPELLED_WORDS, min(start + NAME_WORDS, len(words)) + 1):
            run = normal("".join(words[start:end]))
            if len(run) >= SPELLED_LETTERS:
                runs.add(run)
    return frozenset(runs)


class _Names:
    """One query's names as ``named`` compares them, worked out once for all the passages
    of its answer: each passage's own names and identifiers are then read once, not once
    per name, and are remembered across answers (``_passage_names``, ``_text_identifiers``)."""

    def __init__(self, names: Sequence[str], spelled: frozenset[str] = frozenset()) -> None:
        self._normal = frozenset(normal(name) for name in names) - {""}
        self._spelled = spelled
        self._identifiers = tuple(identifiers(" ".join(names)))
        self._identifier_names = frozenset(normal(name) for name in self._identifiers) - {""}

    def own_name(self, passage: Passage) -> bool:
        """Whether one of the identifiers (``ImagePullBackOff``, not a short query taken
        whole: "disk full" is a topic, which a team page answers in its own words) is the
        passage's title, file name or a heading of its section: a name of its own, not one
        of the ``alerts:`` it lists (a playbook lists every alert of its topic)."""
        return bool(self._identifier_names) and not self._identifier_names.isdisjoint(
            _passage_names(passage.title, passage.uri, "", passage.section)
        )

    def strength(self, passage: Passage) -> Named:
        if self._normal and not self._normal.isdisjoint(
            _passage_names(passage.title, passage.uri, passage.labels.get("alerts", ""), passage.section)
        ):
            return Named.NAME
        # A spelled name is the document's own (title, file name, alerts:), not a heading's.
        if self._spelled and not self._spelled.isdisjoint(
            _passage_names(passage.title, passage.uri, passage.labels.get("alerts", ""), "")
        ):
            return Named.NAME
        # A whole token of the text lower-cased is within the text lower-cased: a passage
        # holding none of the identifiers anywhere is not tokenised at all.
        lowered = passage.text.lower() if self._identifiers else ""
        if any(name in lowered for name in self._identifiers):
            mentioned = _text_identifiers(passage.text)
            if any(name in mentioned for name in self._identifiers):
                return Named.MENTION
        return Named.NONE


@lru_cache(maxsize=256)
def _names_of_query(query: str) -> _Names:
    """``_Names`` of ``query``'s names (immutable once made), remembered by the whole query:
    a search judges its query's names twice (ordering its answer, then its confidence)."""
    return _Names(query_names(query), _spelled(query))


#: The least confidence a named passage (``lore.named``) is given: its name is the page's
#: or section's own name (medium), or appears whole in its text (low).
NAMED_FLOOR: Mapping[Named, Confidence] = {Named.NAME: Confidence.MEDIUM, Named.MENTION: Confidence.LOW}


class QueryJudge:
    """The confidence of each passage of one query's answer, and whether the query names
    it (such a passage is never withheld, whatever ``min_confidence`` says)."""

    def __init__(self, query: str) -> None:
        self._names = _names_of_query(query)
        self._named: dict[str, Named] = {}

    def strength(self, passage: Passage) -> Named:
        found = self._named.get(passage.chunk_id)
        if found is None:
            found = self._named[passage.chunk_id] = self._names.strength(passage)
        return found

    def __call__(self, passage: Passage) -> Confidence:
        return raised(passage_confidence(passage), NAMED_FLOOR.get(self.strength(passage)))

    def anchored(self, passage: Passage) -> bool:
        return bool(self.strength(passage))

    def own_name(self, passage: Passage) -> bool:
        """Whether the query gives the passage's own name (``_Names.own_name``)."""
        return self._names.own_name(passage)
