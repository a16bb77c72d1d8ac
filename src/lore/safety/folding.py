"""The matching view of a text: spellings a model reads as plain words, folded to them.

Injection screening runs its phrase rules a second time over this view
(``lore.safety.injection``); a span found here is replaced in the text as written. The
view is never shown to anyone, so it may fold aggressively: what matters is only that
no fold turns ordinary prose into an override phrase, and an override phrase needs a
verb of dismissal next to a target, which no fold of a file name, version or list makes.

Folds, in order:

- look-alike letters to the ASCII letter they imitate (Cyrillic "о", Greek "ο",
  Cherokee "Ꭵ", ...), from Unicode's confusables table, keeping the letter's case;
- digits and symbols inside words to the letters they stand for ("1gn0r3" is "ignore");
- letter-spaced words to words: "I g n o r e   a l l" is "Ignore all", "i.g.n.o.r.e" is
  "ignore" (a run of four or more single letters, each apart by the same separator);
- punctuation inside a word: "ig-nore", "instruc.tions", "prev_ious" are one word.

The first two change characters one for one; the last two delete separators, and the
``Folded`` record maps a position in the view back to the text as written. The joined
reading (``lore.safety.joined``, words run together) runs over the view too, but takes only
what maps back letter for letter: words the view joined by deleting the hyphens or dots
between them ("ignore-all-previous-instructions.md") are a name, not glued words.

Written here rather than taken from a library: ``confusable-homoglyphs`` gives the
confusables table but no folding that keeps case (its prototypes are the skeletons of
UTS #39, in which capital "I" and Cyrillic "І" both become "l"), and no library folds
letter spacing or leetspeak for matching with offsets back to the source.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass


@functools.cache
def homoglyphs() -> dict[int, str]:
    """Every non-ASCII character the confusables table (``confusables.txt``, via
    ``confusable-homoglyphs``) lists as a look-alike of one ASCII letter, to that letter
    in the character's own case. The table maps to skeletons, which are lower case and
    fold "I" to "l": Cyrillic "І" would read "lgnore" and miss "ignore". So a capital
    takes the upper case of its small letter's fold (І -> і -> i -> I)."""
    from confusable_homoglyphs import utils

    table: dict[int, str] = {}
    for character, entries in utils.load("confusables.json").items():
        if len(character) != 1 or character.isascii():
            continue
        for entry in entries:
            if len(entry["c"]) == 1 and entry["c"].isascii() and entry["c"].isalpha():
                table[ord(character)] = entry["c"]
                break
    for code, letter in list(table.items()):
        character = chr(code)
        small = character.lower()
        if small != character and len(small) == 1 and ord(small) in table:
            table[code] = table[ord(small)].upper()
        elif character.upper() != character and letter.isupper():
            table[code] = letter.lower()
    return table


#: What digits and symbols stand for inside a word ("pr3vi0us", "1gn0r3", "@ll").
_LEET = str.maketrans("0134578@$", "oieastbas")
_INNER = "\\-.·_*•~"
#: Where a word has punctuation inside ("ig-nore", "instruc.tions") or digits or
#: symbols among its letters ("pr3vi0us"); the word around it is then read whole.
_FOLDABLE = re.compile(rf"[^\W\d_](?:[{_INNER}]{{1,2}}[^\W\d_]|[0134578@$])|[0134578@$][^\W\d_]")
_TOKEN = re.compile(rf"[\w@$]+(?:[{_INNER}]{{1,2}}[\w@$]+)*")
_TOKEN_PUNCTUATION = "_@$-.·*•~"
_INNER_PUNCTUATION = re.compile(rf"(?<=[^\W\d_])[{_INNER}]{{1,2}}(?=[^\W\d_])")
#: Four or more single letters apart by separators: "I g n o r e", "i.g.n.o.r.e".
_SPACED_RUN = re.compile(r"(?<![^\W_])[^\W\d_](?:[ \t.\-_*·•~+|/]{1,3}[^\W\d_](?![^\W_])){3,}")
_SEPARATOR = re.compile(r"[ \t.\-_*·•~+|/]{1,3}")


@functools.cache
def phrase_words() -> dict[str, tuple[str, ...]]:
    """The words the phrase rules are made of ("ignor", "previous", "instruct", "negeer",
    "игнорируй", ...: every run of five or more letters in their patterns, role words
    too), by their first five letters. A view whose folds yield none of them holds no
    phrase its text lacks: "kube-system" is folded (a role word), "follow-up" and
    "sha256" are not, and most passages leave the view equal to the text and skip the
    second pass."""
    from lore.safety.override_phrases import WORD_PATTERNS

    source = re.sub(r"\\[a-zA-Z]", " ", " ".join(WORD_PATTERNS))
    words = {word.lower() for word in re.findall(r"[^\W\d_]{5,}", source)}
    words |= {
        "system",
        "assistant",
        "developer",
        "human",
        "instruction",
        "untrusted",
        "reference",
        "function",
    }
    by_prefix: dict[str, list[str]] = {}
    for word in words:
        by_prefix.setdefault(word[:5], []).append(word)
    return {prefix: tuple(found) for prefix, found in by_prefix.items()}


def _phrase_word_count(text: str) -> int:
    """How many of ``phrase_words`` follow one another in ``text``, longest first, apart."""
    words = phrase_words()
    lowered = text.lower()
    count, index = 0, 0
    while index < len(lowered) - 4:
        found = [
            word for word in words.get(lowered[index : index + 5], ()) if lowered.startswith(word, index)
        ]
        if found:
            count += 1
            index += max(map(len, found))
        else:
            index += 1
    return count


def _has_phrase_word(text: str) -> bool:
    """Whether ``text`` holds one of ``phrase_words`` (a set lookup per position: an
    alternation of 440 words in one regex costs 200 µs a call)."""
    words = phrase_words()
    lowered = text.lower()
    for index in range(len(lowered) - 4):
        found = words.get(lowered[index : index + 5])
        if found and any(lowered.startswith(word, index) for word in found):
            return True
    return False


@dataclass(frozen=True)
class Folded:
    #: The view; the text as given when the view is not ``interesting`` (never built).
    text: str
    #: Whether some fold yields a word the phrase rules use (or a look-alike letter was
    #: folded): otherwise no phrase can be found in the view that the text lacks.
    interesting: bool
    #: Spans of the text as written spelled out letter by letter with no word break
    #: ("i g n o r e a l l p r e v i o u s ..."), whose letters make two or more phrase
    #: words: the view reads the run as one long word, which no phrase rule matches,
    #: while a model reads the sentence.
    spelled_out: tuple[tuple[int, int], ...]
    #: Positions in ``text`` after which the view's characters come from further on in
    #: the original, and how much further: ``origin`` maps a view position back.
    _starts: tuple[int, ...]
    _shifts: tuple[int, ...]

    def origin(self, position: int) -> int:
        """The position in the text as written of the view's character at ``position``."""
        index = bisect.bisect_right(self._starts, position) - 1
        return position + (self._shifts[index] if index >= 0 else 0)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The span in the text as written that the view's ``[start, end)`` came from."""
        if end <= start:
            return self.origin(start), self.origin(start)
        return self.origin(start), self.origin(end - 1) + 1


def _despace(run: str) -> str:
    """A letter-spaced run without its spacing: the commonest separator sits inside
    words and goes, any other one ("   " between spaced words) becomes one space."""
    separators = _SEPARATOR.findall(run)
    inner = max(set(separators), key=separators.count)
    letters = _SEPARATOR.split(run)
    return letters[0] + "".join(
        ("" if separator == inner else " ") + letter
        for separator, letter in zip(separators, letters[1:], strict=True)
    )


def fold(text: str) -> Folded:
    """The matching view of ``text`` (see the module docstring)."""
    original = text
    if not text.isascii():
        text = text.translate(homoglyphs())
    # Every fold is made (a phrase may need "4ll" read as "all"), but the view is worth
    # matching only when a fold yields a word the phrase rules use, or a look-alike letter.
    interesting = text != original
    # (start, end, replacement) in the text, in order and apart.
    edits: list[tuple[int, int, str]] = []
    spelled_out: list[tuple[int, int]] = []
    for match in _SPACED_RUN.finditer(text):
        despaced = _despace(match[0])
        interesting = interesting or _has_phrase_word(despaced)
        edits.append((match.start(), match.end(), despaced))
        if " " not in despaced and _phrase_word_count(despaced) >= 2:
            spelled_out.append(match.span())
    spaced = [(start, end) for start, end, _ in edits]
    covered = 0
    tokens: list[tuple[int, str, str]] = []
    for spot in _FOLDABLE.finditer(text):
        if spot.start() < covered:
            continue
        start = spot.start()
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] in _TOKEN_PUNCTUATION):
            start -= 1
        while not (text[start].isalnum() or text[start] in "_@$"):
            start += 1
        found = _TOKEN.match(text, start)
        if found is None:  # pragma: no cover - the spot itself starts a token
            continue
        covered = found.end()
        token = found[0]
        if any(start < found.end() and found.start() < end for start, end in spaced):
            continue
        leet = token.translate(_LEET) if not token.isdigit() else token
        interesting = interesting or _has_phrase_word(_INNER_PUNCTUATION.sub("", leet))
        tokens.append((found.start(), token, leet))
    if not interesting:
        # Nothing to match the view for: spare building it (most passages end here).
        return Folded(original, False, (), (), ())
    leets: list[tuple[int, str]] = []
    for start, token, leet in tokens:
        if leet != token:  # one for one: positions do not move
            leets.append((start, leet))
        edits += [(start + m.start(), start + m.end(), "") for m in _INNER_PUNCTUATION.finditer(leet)]
    if leets:
        rebuilt: list[str] = []
        last = 0
        for start, leet in leets:
            rebuilt += [text[last:start], leet]
            last = start + len(leet)
        text = "".join(rebuilt) + text[last:]
    if not edits:
        return Folded(text, interesting, tuple(spelled_out), (), ())
    edits.sort()
    pieces: list[str] = []
    starts: list[int] = []
    shifts: list[int] = []
    last, length = 0, 0
    for start, end, replacement in edits:
        pieces.append(text[last:start])
        length += start - last
        # A despaced run maps each kept character back one by one; a deletion is a run
        # whose replacement is empty.
        position = start
        for character in replacement:
            while text[position] != character and not (character == " " and not text[position].isalpha()):
                position += 1
            starts.append(length)
            shifts.append(position - length)
            pieces.append(character)
            length += 1
            position += 1
        starts.append(length)
        shifts.append(end - length)
        last = end
    pieces.append(text[last:])
    return Folded("".join(pieces), interesting, tuple(spelled_out), tuple(starts), tuple(shifts))
