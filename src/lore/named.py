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
  compared on letters and digits only (``node-not-ready`` = ``Node not ready``);
- ``MENTION``: one of the query's identifiers appears whole in the passage's text.

Identifiers are tokens shaped like names (``lore.backends.lexical.is_identifier``: a
joiner, a camelCase joint, letters fused with digits), so a question's ordinary words never
name anything; a number alone is not an identifier either.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from lore.backends.lexical import NAME_WORDS, identifiers
from lore.models import LABEL_VALUE_SEPARATOR, SECTION_SEPARATOR, Passage


class Named(enum.IntEnum):
    """How strongly a passage is named; ``NONE`` is falsy."""

    NONE = 0
    MENTION = 1
    NAME = 2


def normal(text: str) -> str:
    """Letters and digits only, lower case: how names are compared."""
    return re.sub(r"[^0-9a-z]", "", text.lower())


def headings(passage: Passage) -> list[str]:
    return [part for part in passage.section.split(SECTION_SEPARATOR) if part]


def names_of(passage: Passage) -> list[str]:
    """What names a passage's document and section: its title, file name, front-matter
    ``alerts:`` and the headings of its section path."""
    listed = passage.labels.get("alerts", "").split(LABEL_VALUE_SEPARATOR)
    stem = PurePosixPath(passage.uri.split("#", 1)[0]).name
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem
    return [passage.title, stem, *listed, *headings(passage)]


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
    if any(is_named(passage, name) for name in names):
        return Named.NAME
    if any(mentions(passage, name) for name in identifiers(" ".join(names))):
        return Named.MENTION
    return Named.NONE
