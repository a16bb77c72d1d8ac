"""Prompt-injection screening of retrieved text.

Anyone who can edit a wiki page can write to the agent that reads it. This module finds
instruction-like spans in retrieved text and neutralises them: each is replaced by a
visible marker such as ``[lore: removed instruction-like text]`` (never silently dropped)
and counted per kind, so the agent and the operator both see that something was there.

First the text is normalised, so that no spelling a model reads as a phrase hides it from
the patterns: every default-ignorable code point is removed (the Unicode property, via
``regex``), then NFKC folds fullwidth, mathematical and other compatibility letters into
plain ones (superscripts, subscripts and fractions excepted: "10⁶" must not read "106").
The text returned is the normalised text: what the agent reads is what was screened.
A run of invisible characters between two words is read two ways, removed ("IG\u200bNORE")
and as a space ("IGNORE\u200bALL PREVIOUS INSTRUCTIONS"): the chain runs over the spaced
reading, then over the removed one (``_screen``); a text without such a run is read once.
Runs inside words and between them at once ("Ig\u200bnore\u200ball\u200bprev\u200bious
instructions") give neither reading the phrase with its spaces; the joined reading below
finds it in the removed one.

Kinds, in the order they are screened:

- ``invisible_character``: default-ignorable code points (zero-width characters, bidi
  controls, the combining grapheme joiner, variation selectors, Hangul fillers, tag
  characters, ...), stripped during normalisation; emoji glue (a joiner or variation
  selector right after a pictograph) is stripped without being reported;
- ``control_character``: terminal control characters (ANSI escapes, a lone carriage
  return) are stripped too: they can hide text from a human reading a terminal;
- ``html_comment``: hidden from a rendered page, fully visible to a model;
- ``fake_delimiter``: text imitating the fence lore puts around passages;
- ``role_marker``: chat-template tokens (``<|im_start|>``, ``[INST]``, ``<<SYS>>``), role
  prefixes at line start (``system:``, ``assistant:``, ``Human:``, ``User:``),
  ``### Instruction`` headings, bracketed labels (``[SYSTEM]``) and banners
  (``=== SYSTEM ===``);
- ``tool_call_imitation``: ``<tool_call>`` blocks, ``{"tool": ...}`` JSON, ``functions.x(``;
- ``instruction_override``: "ignore previous instructions", "disregard everything above"
  and their paraphrases, in English and sixteen other languages
  (``lore.safety.override_phrases``), "you are now ...", "new instructions:", requests to
  reveal the prompt or hide things from the user. The rest of the line is removed with
  the phrase, since that is the payload;
- ``external_image`` / ``external_link``: Markdown or HTML images and links to hosts not
  in ``safety.allowed_link_hosts``. An image URL is fetched as soon as a client renders
  it, and a link can carry data out in its query string; the URL goes, the text stays.

Then the override phrases led by a verb of dismissal are read with their words run
together (``lore.safety.joined``: "IGNOREALLPREVIOUSINSTRUCTIONS", "pleaseignore all
previous instructions", "vergiss alle vorherigenanweisungen"), tried only where a verb
occurs; a match and the rest of its line go, as ``instruction_override``.

Then the phrase kinds run again over a matching view of the text in which letter spacing,
punctuation inside words, leetspeak and look-alike letters are folded away
(``lore.safety.folding``), the joined reading too where the view's folds are letter for
letter ("1gn0reall previous instructions"; not words the view joined by dropping a hyphen
or a dot, as in a file name), and base64 runs that decode to words are screened as text
(``encoded_instruction``).

Last, the text is read as a model reads it, through the canonical view
(``lore.safety.canonical``: Markdown rendered from its tokens, escapes decoded, encoded
runs read, words split, scripts folded), and ``lore.safety.view_screen`` runs the wording
rules again over it, with its own (directives addressed to a machine, persona switches,
forged turns and tool results anywhere in a line, more languages), and neutralises every
link outside the allow-list by structure, whatever its syntax.

The patterns are deliberately narrow, because runbooks say "ignore the warning if ..." and
"the system: ..." all the time: an override needs both a verb of dismissal and a target
such as "previous instructions", and a role marker must start a line.
``bench/injection_false_positives.py`` measures how often they fire on real runbooks.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import regex

from lore.safety.canonical import fold_pattern
from lore.safety.encoded import screen_disguised
from lore.safety.fence import FENCE_TAG as FENCE_TAG
from lore.safety.folding import fold
from lore.safety.joined import find_joined
from lore.safety.override_phrases import CJK_PATTERNS, ENGLISH, OTHER_LANGUAGES
from lore.safety.pattern_shortcuts import lowered_copy, selective
from lore.safety.view_screen import link_host, screen_view, shown_host

#: Every marker starts with this, so tests and readers can recognise neutralised spans.
NEUTRALISED_MARKER = "[lore: removed"

#: The tag as the folded view spells it too (``lore.safety.folding`` drops inner hyphens).
_FENCE_PATTERN = r"untrusted-?reference"


def marker(what: str) -> str:
    return f"{NEUTRALISED_MARKER} {what}]"


#: Every default-ignorable code point (the Unicode property, not a hand list: zero-width
#: characters, bidi controls, the combining grapheme joiner, variation selectors, Hangul
#: fillers, tag characters, ...). A renderer draws none of them, so they serve only to
#: split a phrase for a pattern while a model still reads it whole. ``regex`` carries the
#: property table; the standard ``re`` module has no ``\p{...}``.
_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}+")
#: Joiners and variation selectors straight after a pictograph (⚠️, 👩‍💻) are ordinary
#: emoji spelling: they are removed like the others but not reported as findings.
_EMOJI_GLUE = regex.compile(r"[\u200d\ufe0e\ufe0f]+")
_PICTOGRAPH = regex.compile(r"\p{Extended_Pictographic}")

#: Characters NFKC would fold that carry meaning in runbooks ("10⁶", "H₂O", "½"): kept as
#: written. No attack phrase is spelled in superscripts, and "10⁶" must not become "106".
#: ``regex``'s property table, not a scan of every code point at import (0.1 s of a cold
#: search); its Unicode may be newer than ``unicodedata``'s, and NFKC leaves a code point
#: it does not know unchanged anyway, so the extra ones change nothing.
_KEEP_FROM_NFKC = regex.compile(
    r"([\p{Decomposition_Type=Super}\p{Decomposition_Type=Sub}\p{Decomposition_Type=Fraction}])"
)


def _nfkc(text: str) -> str:
    """NFKC except for superscripts, subscripts and vulgar fractions: fullwidth
    ``ｉｇｎｏｒｅ``, mathematical ``𝐢𝐠𝐧𝐨𝐫𝐞``, ligatures and other compatibility letters
    become the plain letters a model reads them as."""
    if text.isascii():
        return text
    parts = _KEEP_FROM_NFKC.split(text)
    return "".join(
        part if index % 2 else unicodedata.normalize("NFKC", part) for index, part in enumerate(parts)
    )


#: Terminal control characters (ESC starts ANSI sequences that can hide or rewrite what
#: a terminal shows; a lone CR overwrites a line). Tabs and newlines stay.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]+|\r(?!\n)")


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    #: Returns the replacement, or None to leave the match as it is (not a finding).
    replace: Callable[[re.Match[str]], str | None]
    #: Strings (lower case) of which the text must hold one for the rule to run.
    hints: tuple[str, ...] = ()
    #: A character the text must hold for the rule to run.
    needs: re.Pattern[str] | None = None

    def applies(self, text: str, lowered: str) -> bool:
        if self.needs is not None and not self.needs.search(text):
            return False
        return not self.hints or any(map(lowered.__contains__, self.hints))

    @functools.cached_property
    def _shortcuts(self) -> tuple[re.Pattern[str] | None, tuple[str, ...] | None]:
        copy, literals = lowered_copy(self.pattern)
        return copy, selective(literals)

    @property
    def lowered(self) -> re.Pattern[str] | None:
        """The pattern without ``IGNORECASE``, for ASCII text in lower case: the same
        matches at a fraction of the cost (``lore.safety.pattern_shortcuts``)."""
        return self._shortcuts[0]

    @property
    def literals(self) -> tuple[str, ...] | None:
        """What every match of the lowered copy holds, tested where the copy runs."""
        return self._shortcuts[1]

    def matches(self, text: str, lowered: str | None) -> list[re.Match[str]]:
        """Every match of the pattern in ``text``, as ``finditer`` gives them; ``lowered``
        is ``text.lower()`` when ``text`` is ASCII (else None). Over ASCII text the lowered
        copy finds where the matches are and the pattern takes each one there, so the
        match (its groups, its text) is the pattern's own over the text as written."""
        fast = self.lowered if lowered is not None else None
        if fast is not None and lowered is not None:
            if self.literals is not None and not any(map(lowered.__contains__, self.literals)):
                return []
            found: list[re.Match[str]] = []
            for hit in fast.finditer(lowered):
                match = self.pattern.match(text, hit.start())
                if match is None or match.end() != hit.end():
                    break  # never seen; should it happen, the pattern alone decides
                found.append(match)
            else:
                return found
        return list(self.pattern.finditer(text))

    def substitute(self, text: str, findings: Counter[str]) -> str:
        """``self.pattern.sub`` with the rule's replacement, each replaced match counted."""
        pieces: list[str] = []
        last = 0
        ascii_lowered = text.lower() if self.lowered is not None and text.isascii() else None
        for match in self.matches(text, ascii_lowered):
            replacement = self.replace(match)
            if replacement is None:
                continue
            findings[self.kind] += 1
            pieces += [text[last : match.start()], replacement]
            last = match.end()
        return "".join(pieces) + text[last:] if pieces else text


def _fixed(what: str) -> Callable[[re.Match[str]], str]:
    text = marker(what)
    return lambda _match: text


_REST_OF_LINE = r"[^\n]*"
#: Han, kana and Hangul: the CJK phrases need one, and a search for one is cheaper than
#: trying them at every position of English text.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")

_ROLE_WORDS = r"(?:system|assistant|developer)"
#: What follows a role word in a label or heading that names a chat message.
#: The rules around a banner line ("=== SYSTEM ==="); not "#" ("## System ##" is a heading).
_BANNER = r"(?:={2,}|-{2,}|~{2,}|\*{3,})"
_ROLE_NOUNS = r"(?:message|prompt|note|notice|override|instructions?|command|turn)"

#: Upper bound on link texts and tag attributes the patterns scan: without it a crafted
#: page ("![![![..." with no closing bracket) makes matching quadratic in its length.
_MAX_SPAN = 500


def _removed(what: str, url: str) -> str:
    """The inert stand-in for a link or image to an outside host: the host shown (where the
    reader would have been sent, or what an image would have fetched), nothing to follow."""
    return marker(f"external {what} to {shown_host(link_host(url))}")


_LINK_TARGET = r"<?(?P<url>(?:[a-z][a-z0-9+.\-]*:)?//[^\s)>]+|(?:javascript|data|vbscript):[^\s)>]+)>?"
_LINK_TITLE = r"""(?:\s+(?:"[^"\n]*"|'[^'\n]*'|\([^)\n]*\)))?"""


def _build_rules(allowed_link_hosts: Collection[str]) -> list[_Rule]:
    allowed = tuple(host.lower().strip(".") for host in allowed_link_hosts if host.strip("."))

    def is_outside(url: str) -> bool:
        lowered = url.lower()
        if lowered.startswith(("javascript:", "data:", "vbscript:")):
            return True
        try:
            host = (urlsplit(url).hostname or "").lower()
        except ValueError:
            return True
        return not any(host == ok or host.endswith("." + ok) for ok in allowed)

    def image(match: re.Match[str]) -> str | None:
        if not is_outside(match["url"]):
            return None
        alt = match["text"].strip()
        return (f"[image: {alt}] " if alt else "") + _removed("image", match["url"])

    def link(match: re.Match[str]) -> str | None:
        if not is_outside(match["url"]):
            return None
        return f"{match['text']} {_removed('link', match['url'])}"

    def bare_link(match: re.Match[str]) -> str | None:
        return _removed("link", match["url"]) if is_outside(match["url"]) else None

    def reference_definition(match: re.Match[str]) -> str | None:
        if not is_outside(match["url"]):
            return None
        return f"[{match['text']}]: {_removed('link', match['url'])}"

    def html_anchor(match: re.Match[str]) -> str | None:
        if not is_outside(match["url"]):
            return None
        return f"{match['text']} {_removed('link', match['url'])}"

    i, im, ims = re.IGNORECASE, re.IGNORECASE | re.MULTILINE, re.IGNORECASE | re.DOTALL
    return [
        _Rule("html_comment", re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL), _fixed("HTML comment")),
        _Rule(
            "fake_delimiter", re.compile(rf"</?\s*{_FENCE_PATTERN}\b[^>\n]*>?", i), _fixed("fake delimiter")
        ),
        _Rule(
            "role_marker",
            re.compile(
                r"<\|[a-z_]{2,24}\|>|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>"
                rf"|</?\s*(?:{_ROLE_WORDS}|system[_-]prompt|instructions?|im_start|im_end)\s*>",
                i,
            ),
            _fixed("role marker"),
        ),
        _Rule(
            "role_marker",
            re.compile(
                rf"^[ \t>]*(?:\*\*|__)?{_ROLE_WORDS}(?:\*\*|__)?[ \t]*:(?:\*\*|__)?"
                r"|^[ \t>]*#{1,6}[ \t]*(?:instruction\b[ \t]*:?"
                r"|(?:instructions|response|system|assistant|developer)[ \t]*:"
                rf"|{_ROLE_WORDS}[ \t]+{_ROLE_NOUNS}\b)"
                # a banner: "=== SYSTEM ===", "--- system message ---"
                rf"|^[ \t>]*{_BANNER}[ \t]*(?:{_ROLE_WORDS}|user|human)(?:[ \t]+{_ROLE_NOUNS})?"
                rf"[ \t]*{_BANNER}",
                im,
            ),
            _fixed("role marker"),
        ),
        _Rule(
            "role_marker",
            # A role word as a bracketed label: "[SYSTEM] ...", "[[assistant]]", "【system】".
            # Not a Markdown link or reference ("[system](system.md)"), nor an INI section
            # header ("[system]" alone on its line).
            re.compile(
                rf"(?:\[\[?|【)[ \t]*{_ROLE_WORDS}(?:[ \t_-]*{_ROLE_NOUNS})?[ \t]*(?:\]\]?|】)"
                r"(?![(\[]|:[ \t]*\S*//)(?=(?P<rest>[^\n]*))",
                i,
            ),
            _bracketed_role,
        ),
        _Rule(
            "role_marker",
            # "Human:" / "User:" turns: capitalised, not indented and followed by a sentence
            # (three words after "Human:", five after "User:"), because YAML (kubeconfig
            # "  user:") and field lists ("User: replication_user (read only)") have the
            # same words at line start.
            re.compile(
                r"^>?[ \t]{0,3}(?:\*\*|__)?(?:(?:Human|HUMAN)(?:\*\*|__)?[ \t]*:(?:\*\*|__)?"
                r"(?=[ \t]*[^\s:]+(?:[ \t]+[^\s]+){2,})"
                r"|(?:User|USER)(?:\*\*|__)?[ \t]*:(?:\*\*|__)?(?=[ \t]*[^\s:]+(?:[ \t]+[^\s]+){4,}))",
                re.MULTILINE,
            ),
            _fixed("role marker"),
        ),
        _Rule(
            "tool_call_imitation",
            re.compile(
                r"<(?P<tag>(?:[a-z]+:)?(?:tool_calls?|function_calls?|tool_use|tool_code|tool_result|invoke))"
                r"\b[^>]*>.*?(?:</(?P=tag)\s*>|\Z)"
                r"|<function=[^>]*>.*?(?:</function>|\Z)",
                ims,
            ),
            _fixed("tool-call imitation"),
        ),
        _Rule(
            "tool_call_imitation",
            re.compile(
                # The whole JSON object (up to three levels deep) when it is balanced,
                # else just its opening, which is enough to break the imitation.
                r"\{(?=\s*\"(?:tool|tool_name|tool_calls|tool_use|function|function_call|recipient_name)\"\s*:"
                r"|\s*\"name\"\s*:\s*\"[^\"\n]*\"\s*,\s*\"(?:arguments|args|parameters)\"\s*:)"
                r"(?:(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\}|\s*\"[^\"\n]*\"\s*:)"
                r"|\bfunctions\.[a-z_][\w.]*\s*\([^\n]*",
                i,
            ),
            lambda _m: marker("tool-call imitation"),
        ),
        _Rule(
            "instruction_override",
            # Tried only where a word starts: the same matches as each pattern's own \b,
            # but the engine skips the other positions instead of trying ~50 alternatives
            # at each (about 3x faster on ordinary prose).
            re.compile(r"(?<!\w)(?=\w)(?:" + "|".join(ENGLISH) + ")" + _REST_OF_LINE, i),
            _fixed("instruction-like text"),
        ),
        *(
            _Rule(
                "instruction_override",
                re.compile(r"(?<!\w)(?=\w)(?:" + "|".join(patterns) + ")" + _REST_OF_LINE, i),
                _fixed("instruction-like text"),
                hints,
            )
            for patterns, hints in OTHER_LANGUAGES
        ),
        _Rule(
            "instruction_override",
            re.compile("(?:" + "|".join(CJK_PATTERNS) + ")" + _REST_OF_LINE, i),
            _fixed("instruction-like text"),
            needs=_CJK,
        ),
        _Rule(
            "external_image",
            re.compile(rf"!\[(?P<text>[^\]\n]{{0,{_MAX_SPAN}}})\]\(\s*{_LINK_TARGET}{_LINK_TITLE}\s*\)", i),
            image,
        ),
        _Rule(
            "external_image",
            re.compile(
                rf"<img\b[^>]{{0,{_MAX_SPAN}}}?\bsrc\s*=\s*[\"']?(?P<url>[^\"'\s>]+)[^>]{{0,{_MAX_SPAN}}}>", i
            ),
            lambda m: _removed("image", m["url"]) if is_outside(m["url"]) else None,
        ),
        _Rule(
            "external_link",
            re.compile(rf"\[(?P<text>[^\]\n]{{1,{_MAX_SPAN}}})\]\(\s*{_LINK_TARGET}{_LINK_TITLE}\s*\)", i),
            link,
        ),
        _Rule(
            "external_link",
            re.compile(
                rf"<a\b[^>]{{0,{_MAX_SPAN}}}?\bhref\s*=\s*[\"']?(?P<url>[^\"'\s>]+)[^>]{{0,{_MAX_SPAN}}}>"
                rf"(?P<text>.{{0,{_MAX_SPAN}}}?)</a\s*>",
                ims,
            ),
            html_anchor,
        ),
        _Rule(
            "external_link",
            re.compile(r"<(?P<url>(?:https?|ftp)://[^\s>]+)>", i),
            bare_link,
        ),
        _Rule(
            "external_link",
            re.compile(
                rf"^[ \t]{{0,3}}\[(?P<text>[^\]\n]{{1,{_MAX_SPAN}}})\]:[ \t]*{_LINK_TARGET}{_REST_OF_LINE}",
                im,
            ),
            reference_definition,
        ),
    ]


_RULES_CACHE: dict[tuple[str, ...], list[_Rule]] = {}


def _bracketed_role(match: re.Match[str]) -> str | None:
    """A bracketed role label where a turn would begin (a line's or a sentence's start), or
    shouted anywhere ("[SYSTEM]"); not an INI section header alone on its line, nor a name
    in running prose ("the section [System] in config.ini")."""
    shouted = match[0].isupper()
    if not match["rest"].strip():
        return marker("role marker") if shouted else None
    line = match.string[match.string.rfind("\n", 0, match.start()) + 1 : match.start()].rstrip()
    if shouted or not line or line[-1] in ".!?:;>*-|\"'`)":
        return marker("role marker")
    return None


def _rules(allowed_link_hosts: Collection[str]) -> list[_Rule]:
    key = tuple(sorted(allowed_link_hosts))
    if key not in _RULES_CACHE:
        _RULES_CACHE[key] = _build_rules(key)
    return _RULES_CACHE[key]


def screen_injections(
    text: str,
    *,
    allowed_link_hosts: Collection[str] = (),
    on_removed: Callable[[str], object] | None = None,
) -> tuple[str, Counter[str]]:
    """``text`` with instruction-like spans neutralised, and the findings per kind;
    ``on_removed`` is shown the spans the canonical-view pass removes."""
    findings: Counter[str] = Counter()
    return _screen(text, findings, allowed_link_hosts, 0, on_removed), findings


#: A run of characters that draw nothing between two letters or digits: default-ignorable
#: and format (Cf) code points, terminal controls, and the braille blank (which draws as a
#: space but is no space to a pattern). "IGNORE\u200bALL PREVIOUS INSTRUCTIONS" reads as
#: four words; removing the run, as normalisation does, joins them into "IGNOREALL".
_INVISIBLE_SEPARATOR = regex.compile(
    r"(?<=[\p{L}\p{N}\p{M}])"
    r"[\p{Default_Ignorable_Code_Point}\p{Cf}\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2800]+"
    r"(?=[\p{L}\p{N}])"
)
#: Any character ``_INVISIBLE_SEPARATOR`` can match: ASCII text without one skips the search.
_ASCII_INVISIBLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: What such a run becomes in the spaced reading: a space to every pattern (``\s``, and not
#: a word character), which NFKC and folding leave as it is, so the runs still stand apart
#: from the text's own spaces when the spaced reading's result is joined back.
_SPACED = "\u1680"
_ALL_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]+")


def _screen(
    text: str,
    findings: Counter[str],
    allowed_link_hosts: Collection[str],
    depth: int,
    on_removed: Callable[[str], object] | None = None,
) -> str:
    """The chain over both readings of invisible characters between two words.

    A run of them is read two ways: removed ("IG\u200bNORE" is "IGNORE", the reading
    normalisation gives) and as a space ("IGNORE\u200bALL" is "IGNORE ALL"). Only a text
    holding such a run pays for the second reading: the chain runs first over the spaced
    reading (each run a placeholder space, ``_SPACED``), then the placeholders left (in
    text nothing was found in) are removed and the chain runs again over that, the removed
    reading. A text with no wording in either reading comes out as the removed reading
    alone would give it. Each run is counted once, as an invisible or control character."""
    if (text.isascii() and not _ASCII_INVISIBLE.search(text)) or not _INVISIBLE_SEPARATOR.search(text):
        return _screen_reading(text, findings, allowed_link_hosts, depth, on_removed)
    # The text's own U+1680 (a space mark) is read as the space it is: the placeholder then
    # stands for the runs alone, and the removed reading always follows the spaced one (a
    # planted U+1680 must not switch the removed reading off).
    text = text.replace(_SPACED, " ")

    def spaced(match: regex.Match[str]) -> str:
        kind = "control_character" if _ALL_CONTROL.fullmatch(match[0]) else "invisible_character"
        findings[kind] += 1
        return _SPACED

    def removed_lines(lines: str) -> object:
        assert on_removed is not None
        return on_removed(lines.replace(_SPACED, " "))

    text = _INVISIBLE_SEPARATOR.sub(spaced, text)
    text = _screen_reading(text, findings, allowed_link_hosts, depth, on_removed and removed_lines)
    return _screen_reading(text.replace(_SPACED, ""), findings, allowed_link_hosts, depth, on_removed)


def _screen_reading(
    text: str,
    findings: Counter[str],
    allowed_link_hosts: Collection[str],
    depth: int,
    on_removed: Callable[[str], object] | None = None,
) -> str:
    def strip_invisible(match: re.Match[str] | regex.Match[str]) -> str:
        start = match.start()
        emoji = start > 0 and _PICTOGRAPH.match(match.string[start - 1]) and _EMOJI_GLUE.fullmatch(match[0])
        if not emoji:
            findings["invisible_character"] += 1
        return ""

    def strip_control(_match: re.Match[str]) -> str:
        findings["control_character"] += 1
        return ""

    text = _IGNORABLE.sub(strip_invisible, text)
    text = _CONTROL.sub(strip_control, text)
    # NFKC can compose what the removals left apart, or produce a filler of its own
    # (halfwidth U+FFA0 becomes U+3164), so it sits between two removal passes.
    text = _IGNORABLE.sub(strip_invisible, _nfkc(text))
    lowered = _lower(text)
    # The languages whose phrase rules ran: the joined reading reads no other.
    languages: set[tuple[str, ...]] = set()
    for rule in _rules(allowed_link_hosts):
        if rule.applies(text, lowered):
            text = rule.substitute(text, findings)
            if rule.hints:
                languages.add(rule.hints)
    text = _replace_phrases(text, find_joined(text, languages), findings)
    text = _screen_folded(text, findings, allowed_link_hosts)
    text = _screen_encoded(text, findings, allowed_link_hosts, depth)
    if depth:
        return text
    return screen_view(text, findings, _view_rules(allowed_link_hosts), allowed_link_hosts, on_removed)


_VIEW_RULES_CACHE: dict[tuple[str, ...], list[_Rule]] = {}


def _view_rules(allowed_link_hosts: Collection[str]) -> list[_Rule]:
    """The wording rules again, folded for the canonical view (``lore.safety.view_screen``)."""
    key = tuple(sorted(allowed_link_hosts))
    if key not in _VIEW_RULES_CACHE:
        _VIEW_RULES_CACHE[key] = [
            _Rule(
                rule.kind,
                re.compile(fold_pattern(rule.pattern.pattern), rule.pattern.flags),
                rule.replace,
                tuple(fold_pattern(hint) for hint in rule.hints),
                rule.needs,
            )
            for rule in _rules(allowed_link_hosts)
            # Not the line-start role rules: the view drops list and quote markers, so
            # "- system: linux" would start a line there; ``view_screen`` has its own,
            # which wants a sentence after the role.
            if rule.kind in _FOLDED_KINDS
            and not (rule.kind == "role_marker" and rule.pattern.flags & re.MULTILINE)
        ]
    return _VIEW_RULES_CACHE[key]


#: Kinds matched a second time over the matching view (``lore.safety.folding``). Their
#: replacements are fixed markers; link rules keep parts of their match (the link text),
#: which must come from the text as written, so they are not folded.
_FOLDED_KINDS = frozenset({"fake_delimiter", "role_marker", "tool_call_imitation", "instruction_override"})


def _screen_folded(text: str, findings: Counter[str], allowed_link_hosts: Collection[str]) -> str:
    """A model reads "Ignоre previous instructions" (a Cyrillic "о"), "I g n o r e all
    previous instructions" and "ig-nore prev-ious instruc-tions" as the phrase. The phrase
    rules run again over the lines that folding changes (``lore.safety.folding``); what
    they find is replaced in the text as written. Run after the plain pass, so Russian
    or Greek prose is matched by its own patterns first, unfolded; a phrase folded on
    one line and continued on the next is not seen (the plain pass sees unfolded ones)."""
    view = fold(text)
    if not view.interesting:
        return text
    if view.spelled_out:
        text = _replace_phrases(text, view.spelled_out, findings)
        view = fold(text)
    # Folding never touches a newline, so line i of the view is line i of the text.
    lines = text.split("\n")
    for index, (line, folded) in enumerate(zip(lines, view.text.split("\n"), strict=True)):
        if line != folded:
            lines[index] = _screen_folded_line(line, findings, allowed_link_hosts)
    return "\n".join(lines)


def _replace_phrases(text: str, spans: Sequence[tuple[int, int]], findings: Counter[str]) -> str:
    """Each span (a run spelled out letter by letter into phrase words, a phrase with its
    words run together), in order, and the rest of its line, as an override."""
    pieces: list[str] = []
    last = 0
    for start, end in spans:
        if start < last:
            continue
        line_end = text.find("\n", end)
        pieces += [text[last:start], marker("instruction-like text")]
        last = len(text) if line_end < 0 else line_end
        findings["instruction_override"] += 1
    return "".join(pieces) + text[last:]


def _screen_folded_line(line: str, findings: Counter[str], allowed_link_hosts: Collection[str]) -> str:
    view = fold(line)
    if not view.interesting:
        return line
    lowered = _lower(view.text)
    languages: set[tuple[str, ...]] = set()
    for rule in _rules(allowed_link_hosts):
        if rule.kind not in _FOLDED_KINDS or not rule.applies(view.text, lowered):
            continue
        if rule.hints:
            languages.add(rule.hints)
        pieces: list[str] = []
        last = 0
        ascii_lowered = lowered if view.text.isascii() else None
        for match in rule.matches(view.text, ascii_lowered):
            replacement = rule.replace(match)
            start, end = view.span(match.start(), match.end())
            if replacement is None or start < last:
                continue
            findings[rule.kind] += 1
            pieces += [line[last:start], replacement]
            last = end
        if pieces:
            line = "".join(pieces) + line[last:]
            view = fold(line)
            if not view.interesting:
                break
            lowered = _lower(view.text)
    if view.interesting:
        # Joined words the view spells letter for letter (look-alikes, leetspeak: "1gn0reall"),
        # not words the view joined by dropping a hyphen or dot between them: a file named
        # "ignore-all-previous-instructions.md" is a name, and the canonical view reads a
        # hyphenated phrase in prose.
        found = [(view.span(start, end), end - start) for start, end in find_joined(view.text, languages)]
        spans = [span for span, length in found if span[1] - span[0] == length]
        line = _replace_phrases(line, spans, findings)
    return line


def _screen_encoded(
    text: str, findings: Counter[str], allowed_link_hosts: Collection[str], depth: int
) -> str:
    """Runs disguised as base64, hex, a slug or rot13 (``lore.safety.encoded``), screened
    as the text they read as; nested encodings are followed two levels deep."""
    if depth >= 2:
        return text

    def screen(decoded: str) -> Counter[str]:
        inner: Counter[str] = Counter()
        _screen(decoded, inner, allowed_link_hosts, depth + 1)
        return inner

    return screen_disguised(text, findings, screen, marker)


def _lower(text: str) -> str:
    """``text`` in lower case for the hint test; Turkish "İ" lowers to "i" and a combining
    dot, which would hide "talimat" in "TALİMAT"."""
    return text.lower().replace("\u0307", "")
