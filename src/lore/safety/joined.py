r"""The override phrases with their words run together.

A model reads "IGNOREALLPREVIOUSINSTRUCTIONS", "pleaseignore all previous instructions",
"ignore all previousinstructions" and "vergiss alle vorherigenanweisungen" as the phrases
they spell; the phrase patterns (``lore.safety.override_phrases``) join their words with
``\s+`` and start where a word starts, so they miss them. Injection screening
(``lore.safety.injection``) runs this reading after its phrase rules, over the text and over
the lines its matching view folds.

The reading. Each phrase led by a verb of dismissal (``DISMISSAL_VERBS``: a pattern that
starts with ``\b`` and one of them; Turkish, which puts the verb last, ends with it) gets
a relaxed copy, made from the pattern itself, not from a word list of its own:

- every ``\s+`` between the phrase's words becomes ``\s*``, except inside the verb as
  written ("throw away", "set aside": "throwaway" is a word) and after a free word (the
  ``[\w-]+`` slot of "previous (safety) instructions"): a free word glued to a target is
  any identifier ending in "rules" ("recording_rules", "PrometheusRules"), not a phrase;
- the ``\b`` in front goes, so the verb may be glued to what precedes it
  ("pleaseignore"); the other ``\b`` stay, so a target word still ends where a word
  ends ("rulesets" is not "rules").

A glued verb must still be followed by a real target of the phrase rules: "ignorecase",
"overridePolicy: all", "bypassmode", "ignoreDaemonSets" have none.

Where it is tried. A relaxed pattern is never searched through a text: it is tried with
``match`` at each place its lead (the verb; for Turkish the phrase's first word) occurs,
in the lines holding one of the verb's required literals (``required_literals``: the
pattern's own strings, tested as substrings of the lowered text, so a passage with no verb
of dismissal pays a few C scans and nothing else), and each try sees at most ``WINDOW``
characters from there (the next lines too: a phrase's words may be apart by a line break,
as the phrase rules' ``\s+`` allow). The work is then at most one bounded try per
character: no crafted line makes a relaxed pattern backtrack over more than a window,
however its ``\s*`` between optional words could split a run of blanks.

What it costs. A language after English is read only in a text its phrase rules ran on
(their hints, ``OTHER_LANGUAGES``: its verbs' stems, which a verb run together with its
words still holds): the caller passes the hints of the rules that ran, and an English
passage pays for the English verbs' literals alone. Over ASCII text a verb is looked for
with its case-sensitive copy over the lowered text (``lore.safety.pattern_shortcuts``).

It runs after the phrase rules have replaced every phrase spelled with its spaces, so
what it finds is glued somewhere; the caller replaces each match and the rest of its
line, as the phrase rules do, and counts it as ``instruction_override``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from lore.safety.override_phrases import DISMISSAL_VERBS, OTHER_LANGUAGES, WORD_PATTERNS
from lore.safety.pattern_shortcuts import lowered_pattern, required_literals

#: The most characters one try of a relaxed pattern sees, from where it starts.
#: The longest phrase spelled with single spaces is under 120 characters.
WINDOW = 400

_NEWLINE = re.compile(r"\n")
_SPACES = re.compile(r"\\s\+")
#: A free word right before a ``\s+``: the ``[\w-]+`` slot, or a ``\w+`` / ``\w*`` that opens
#: a group or follows a space, not one that ends a word of the pattern's own ("instr\w+",
#: "poprzedni\w*", "(?:tidigare|system)\w*").
_FREE_WORD = re.compile(r"(?:\[\\w-\]\+|(?:\(\?:|\(|\\s[+*])\\w[+*])\Z")


def relax(source: str) -> str:
    r"""``source`` (a pattern's text after its lead) with ``\s+`` made ``\s*`` between its
    words, not after a free word (module note)."""
    pieces: list[str] = []
    last = 0
    for spaces in _SPACES.finditer(source):
        free = _FREE_WORD.search(source, 0, spaces.start()) is not None
        pieces += [source[last : spaces.start()], r"\s+" if free else r"\s*"]
        last = spaces.end()
    return "".join(pieces) + source[last:]


def _leading_group(source: str) -> str | None:
    """The group ``source`` starts with (``(?:...)``, balanced), unquantified, or None."""
    if not source.startswith("(?:"):
        return None
    depth, index, in_set = 0, 0, False
    while index < len(source):
        character = source[index]
        if character == "\\":
            index += 2
            continue
        if in_set:
            in_set = character != "]"
        elif character == "[":
            in_set = True
        elif character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
            if depth == 0:
                following = source[index + 1 : index + 2]
                return None if following in ("?", "*", "+", "{") else source[: index + 1]
        index += 1
    return None


@dataclass(frozen=True)
class Group:
    """The relaxed phrases that start with one lead."""

    #: Where one of them can start (the lead as the patterns write it).
    lead: re.Pattern[str]
    #: The lead and the relaxed rests, tried with ``match`` where the lead occurs.
    phrase: re.Pattern[str]
    #: Lower-case strings a line must hold for the group to be tried there (its verb's).
    literals: tuple[str, ...]
    #: The hints of its language's phrase rules (``OTHER_LANGUAGES``); None for English.
    hints: tuple[str, ...] | None = None


def _verb_literals(verb: str) -> tuple[str, ...]:
    found = required_literals(re.compile(verb))
    if not found:  # pragma: no cover - every verb has some (a test checks)
        raise ValueError(f"a verb of dismissal with no required literal: {verb!r}")
    return tuple(literal.lower() for literal in found)


@functools.cache
def groups() -> tuple[Group, ...]:
    """One group per lead: each verb-led phrase under its verb, each verb-last one under
    its first word."""
    rests: dict[str, list[str]] = {}
    literals: dict[str, tuple[str, ...]] = {}
    hints: dict[str, tuple[str, ...]] = {}
    language = {pattern: found for patterns, found in OTHER_LANGUAGES for pattern in patterns}
    for spelled, verb in DISMISSAL_VERBS:
        for pattern in WORD_PATTERNS:
            if pattern.startswith(r"\b" + spelled):
                lead, rest = verb, relax(pattern[2 + len(spelled) :])
            elif pattern.endswith(spelled) and pattern.startswith(r"\b"):
                group = _leading_group(pattern[2:])
                if group is None:
                    continue
                lead = group
                rest = relax(pattern[2 + len(group) : len(pattern) - len(spelled)]) + verb
            else:
                continue
            rests.setdefault(lead, []).append(rest)
            literals[lead] = tuple(sorted({*literals.get(lead, ()), *_verb_literals(verb)}))
            if pattern in language:
                hints[lead] = language[pattern]
    flags = re.IGNORECASE
    return tuple(
        Group(
            re.compile(lead, flags),
            re.compile(lead + "(?:" + "|".join(found) + ")", flags),
            literals[lead],
            hints.get(lead),
        )
        for lead, found in rests.items()
    )


@functools.cache
def _scan(active: frozenset[int]) -> tuple[tuple[str, frozenset[int]], ...]:
    """The strings a text is searched for when the groups ``active`` (by index) are read,
    and for each the active groups one of whose literals holds it: every literal holds one
    of these strings, which hold no other of them ("ignor" stands for "ignore", "ignora",
    "ignorera", ...), so one pass of substring searches serves every group."""
    every = {literal for index in active for literal in groups()[index].literals}
    shortest = sorted(word for word in every if not any(other in word for other in every - {word}))

    def holders(literal: str) -> frozenset[int]:
        return frozenset(index for index in active if any(literal in own for own in groups()[index].literals))

    return tuple((literal, holders(literal)) for literal in shortest)


@functools.cache
def _lowered_lead(index: int) -> re.Pattern[str] | None:
    """The group's lead as a case-sensitive copy for lower-case ASCII text (faster, the
    same matches: ``lore.safety.pattern_shortcuts``), or None."""
    return lowered_pattern(groups()[index].lead)


def _lower(text: str) -> str:
    return text.lower().replace("\u0307", "")


def tries(
    text: str, languages: Collection[tuple[str, ...]] | None = None
) -> Iterator[tuple[Group, int, int]]:
    """Each try the reading makes of ``text``: a group, where its lead starts, and the
    end of the window the try sees (module note). ``languages``: the hints of the
    languages to read (None: every language)."""
    every = groups()
    active = frozenset(
        index
        for index, group in enumerate(every)
        if languages is None or group.hints is None or group.hints in languages
    )
    lowered = _lower(text)
    lines: dict[int, set[int]] = {}
    for literal, holders in _scan(active):
        found = lowered.find(literal)
        while found >= 0:
            line_start = lowered.rfind("\n", 0, found) + 1
            lines.setdefault(line_start, set()).update(holders)
            found = lowered.find(literal, found + 1)
    if not lines:
        return
    if len(lowered) != len(text):  # positions differ: every line, for every group found
        found_groups = set().union(*lines.values())
        starts = (0, *(newline.end() for newline in _NEWLINE.finditer(text)))
        lines = {start: found_groups for start in starts}
    ascii_lowered = lowered if lowered.isascii() and len(lowered) == len(text) else None
    for line_start in sorted(lines):
        line_end = text.find("\n", line_start)
        line_end = len(text) if line_end < 0 else line_end
        for index in sorted(lines[line_start]):
            group = every[index]
            copy = _lowered_lead(index) if ascii_lowered is not None else None
            lead, subject = (
                (copy, ascii_lowered)
                if copy is not None and ascii_lowered is not None
                else (group.lead, text)
            )
            found_lead = lead.search(subject, line_start, line_end)
            while found_lead is not None:
                yield group, found_lead.start(), min(len(text), found_lead.start() + WINDOW)
                found_lead = lead.search(subject, found_lead.start() + 1, line_end)


def find_joined(text: str, languages: Collection[tuple[str, ...]] | None = None) -> list[tuple[int, int]]:
    """The spans of ``text`` that the relaxed phrases match, by start, at most one a line
    (the caller removes the rest of the line with it); ``languages`` as for ``tries``."""
    spans: dict[int, tuple[int, int]] = {}
    for group, start, end in tries(text, languages):
        line_start = text.rfind("\n", 0, start) + 1
        if line_start in spans and spans[line_start][0] <= start:
            continue
        match = group.phrase.match(text, start, end)
        if match is not None:
            spans[line_start] = (start, match.end())
    return sorted(spans.values())
