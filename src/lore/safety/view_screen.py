"""Injection screening over the canonical view, and links neutralised by structure.

``lore.safety.injection`` first screens the text as written (its phrase rules, the folded
matching view, encoded runs). This pass then reads the text as a model does
(``lore.safety.canonical``: Markdown rendered, escapes decoded, encoded runs read, words
joined and split, scripts folded) and runs over that view:

- every wording rule of the first pass again (a phrase split by emphasis, an inline tag,
  a ``<br>``, a blockquote marker, an entity, written in camelCase or small capitals is
  whole here);
- the rules of ``lore.safety.addressed_phrases``: directives addressed to a machine,
  persona switches, summary directives, the fence closed in words, role markers where
  a turn could begin (a list item, a table cell), JSON chat messages, forged tool results,
  ReAct traces, and the languages the phrase lists lack;
- the same wording rules over the text read through rot13 and read backwards, when that
  reading holds more of the phrase rules' words than the text does.

A match maps back to a span of the text as written (``View.span``), which is replaced by
a marker, with the rest of its line for a wording (the payload), and with the rest of its
section for a heading addressed to machines.

Links are neutralised by structure, not by wording: every URL the view lists (inline,
reference-style with the destination on the next line, ``srcset``, HTML attributes, bare
URLs in prose, ``https:/host`` with one slash) whose host is outside
``safety.allowed_link_hosts`` becomes an inert marker naming the host; a URL whose query
or path is a template filled from the conversation (``?q={conversation}``) goes whatever
its host. A URL inside code is a command's argument and stays unless it is such a
template.
"""

from __future__ import annotations

import codecs
import functools
import re
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from lore.safety.addressed_phrases import (
    ADDRESSED,
    ANSWER,
    FENCE_WORDS,
    JSON_ROLE,
    LANGUAGE_NEEDS,
    LANGUAGES,
    PERSONA,
    REACT_LABEL,
    REACT_TRACE,
    ROLE_ANYWHERE,
    SUMMARY,
    TOOL_RESULT,
)
from lore.safety.canonical import Link, View, canonical, fold_pattern, replace_spans
from lore.safety.override_phrases import ENGLISH
from lore.safety.pattern_shortcuts import required_literals, selective

#: A view-rule: its finding kind, pattern, and how far a match's replacement reaches.
_LINE, _MATCH, _SECTION = "line", "match", "section"


@dataclass(frozen=True)
class ViewRule:
    kind: str
    pattern: re.Pattern[str]
    reach: str
    #: The marker's words ("instruction-like text").
    what: str
    #: What the view must hold for the rule to run (a script, a verb), if anything.
    needs: re.Pattern[str] | None = None
    #: Words of which the view must hold one for the rule to run (each of its patterns
    #: needs one): Python's ``re`` tries an alternation at every position, a substring
    #: test is one C scan, and most texts hold none of them.
    words: tuple[str, ...] = ()

    @functools.cached_property
    def literals(self) -> tuple[str, ...] | None:
        """Strings of which every match holds one (``lore.safety.pattern_shortcuts``)."""
        return selective(required_literals(self.pattern))


def _compile(patterns: list[str], flags: int = 0) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fold_pattern(pattern)})" for pattern in patterns), flags)


_OVERRIDE = "instruction_override"


@functools.cache
def _wording_rules() -> list[ViewRule]:
    """Compiled on first use, not at import: every command imports the chain (a sync
    redacts, ``lore --help`` lists every command), and only a search screens."""
    return [
        ViewRule(_OVERRIDE, _compile(ADDRESSED[:3] + ADDRESSED[4:]), _LINE, "instruction-like text"),
        ViewRule(_OVERRIDE, _compile(ADDRESSED[3:4]), _SECTION, "instruction-like text"),
        ViewRule(_OVERRIDE, _compile(PERSONA), _LINE, "instruction-like text"),
        ViewRule(_OVERRIDE, _compile(SUMMARY), _LINE, "instruction-like text"),
        ViewRule(
            _OVERRIDE, _compile(ANSWER[:3] + ANSWER[4:]), _LINE, "instruction-like text", words=("your",)
        ),
        ViewRule(
            _OVERRIDE,
            _compile(ANSWER[3:4]),
            _LINE,
            "instruction-like text",
            words=("reply", "respond", "answer"),
        ),
        *(
            ViewRule(_OVERRIDE, _compile([pattern]), _LINE, "instruction-like text", re.compile(needs))
            for pattern, needs in zip(LANGUAGES, LANGUAGE_NEEDS, strict=True)
        ),
        ViewRule(
            "fake_delimiter",
            _compile([FENCE_WORDS[0], FENCE_WORDS[1], FENCE_WORDS[3]]),
            _LINE,
            "fake delimiter",
            words=("untrusted", "retrieved", "quoted", "search"),
        ),
        ViewRule(
            "fake_delimiter",
            _compile(FENCE_WORDS[2:3]),
            _LINE,
            "fake delimiter",
            words=("trusted", "verified", "genuine", "real", "official"),
        ),
        ViewRule(
            "fake_delimiter",
            _compile(FENCE_WORDS[4:5]),
            _LINE,
            "fake delimiter",
            words=("instructions", "prompt", "conversation", "input"),
        ),
        ViewRule("role_marker", _compile(ROLE_ANYWHERE), _MATCH, "role marker"),
        ViewRule("role_marker", re.compile(JSON_ROLE), _MATCH, "role marker"),
        ViewRule("tool_call_imitation", re.compile(TOOL_RESULT, re.DOTALL), _MATCH, "tool-call imitation"),
    ]


_REACT_TRACE = re.compile(REACT_TRACE)
_REACT_LABEL = re.compile(REACT_LABEL)


@functools.cache
def _english() -> re.Pattern[str]:
    """The English phrase rules, for the rot13 and backwards readings (compiled on first use)."""
    return re.compile("(?:" + "|".join(ENGLISH) + ")", re.IGNORECASE)


_WORD = re.compile(r"[a-z]{5,}")


class FirstPassRule(Protocol):
    """A rule of the first pass (``lore.safety.injection``), compiled for the view."""

    @property
    def kind(self) -> str: ...
    @property
    def pattern(self) -> re.Pattern[str]: ...
    @property
    def lowered(self) -> re.Pattern[str] | None: ...
    @property
    def literals(self) -> tuple[str, ...] | None: ...
    def replace(self, match: re.Match[str]) -> str | None: ...
    def applies(self, text: str, lowered: str) -> bool: ...


def screen_view(
    text: str,
    findings: Counter[str],
    first_pass: Sequence[FirstPassRule],
    allowed_link_hosts: Collection[str],
    on_removed: Callable[[str], object] | None = None,
) -> str:
    """``text`` with what the canonical view shows replaced (see the module note).
    ``on_removed`` is shown the lines of each span removed (the chain reports the secrets
    in them, so that a webhook URL removed as a link is still reported as the secret it
    held)."""
    view = canonical(text)
    spans: list[tuple[int, int, str]] = []
    taken: list[tuple[int, int]] = []

    def add(start: int, end: int, kind: str, replacement: str, reach: str, on: View = view) -> None:
        if reach == _LINE:
            line_end = on.text.find("\n", end)
            end = len(on.text) if line_end < 0 else line_end
        low, high = on.span(start, end)
        if reach == _SECTION:
            heading = re.compile(r"^#{1,6}[ \t]", re.MULTILINE).search(text, high)
            high = heading.start() if heading else len(text)
        if high <= low or any(a <= low and high <= b for a, b in taken):
            return
        if "[lore: removed" in text[low:high] and not text[low:high].replace("[lore: removed", "").strip():
            return
        if kind == "instruction_override" and any(a < high and low < b for a, b in view.decoded):
            kind, replacement = "encoded_instruction", _marker("encoded instruction")
        taken.append((low, high))
        spans.append((low, high, replacement))
        findings[kind] += 1

    lowered = view.text
    regions = _changed_regions(view)
    # The hints are tested on the changed regions alone: the rest was screened as written.
    changed = "\n".join(lowered[start:end] for start, end in regions)
    # The view is in lower case; when it is ASCII too, a case-insensitive rule runs as its
    # case-sensitive copy, which finds the same matches (``lore.safety.pattern_shortcuts``).
    plain = lowered.isascii() and lowered == lowered.lower()
    for first in first_pass if regions else ():
        if not first.applies(changed, changed):
            continue
        pattern = (first.lowered if plain else None) or first.pattern
        literals = first.literals if pattern is not first.pattern else None
        if literals is not None and not any(map(changed.__contains__, literals)):
            continue
        for start, end in regions:
            for match in pattern.finditer(lowered, start, end):
                replacement = first.replace(match)
                if replacement is not None:
                    add(match.start(), match.end(), first.kind, replacement, _MATCH)
    for rule in _wording_rules():
        if rule.needs is not None and not rule.needs.search(lowered):
            continue
        if rule.words and not any(map(lowered.__contains__, rule.words)):
            continue
        if rule.literals is not None and not any(map(lowered.__contains__, rule.literals)):
            continue
        for match in rule.pattern.finditer(lowered):
            add(match.start(), match.end(), rule.kind, _marker(rule.what), rule.reach)
    if "thought" in lowered and _REACT_TRACE.search(lowered):
        for match in _REACT_LABEL.finditer(lowered):
            add(match.start(), match.end(), "tool_call_imitation", _marker("tool-call imitation"), _MATCH)
    _screen_readings(view, add)
    _neutralise_links(view, spans, findings, allowed_link_hosts)
    if on_removed is not None:
        for start, end, _replacement in spans:
            # With its whole lines: a secret's detector may need the words around it
            # ("https://user:pass@host" reads as a URL password only whole).
            line_start = text.rfind("\n", 0, start) + 1
            line_end = text.find("\n", end)
            on_removed(text[line_start : len(text) if line_end < 0 else line_end])
    return replace_spans(text, spans) if spans else text


def _changed_regions(view: View) -> list[tuple[int, int]]:
    """The spans of the view (whole lines, with the line before and the line after) that
    the text as written does not hold as they are: a line that differs (folded) from the
    source it maps back to, and the junction of two lines the source keeps apart by more
    than blanks (a list or quote marker). The first pass's rules already ran over the
    rest, with the same result: most of a runbook's lines are prose the view copies, and
    a heading's or a list item's text is copied without its marker."""
    text, source = view.text, view.source
    lines: list[tuple[int, int]] = []
    changed: list[bool] = []
    position = 0
    previous_end: int | None = None
    for line in text.split("\n"):
        start, position = position, position + len(line) + 1
        lines.append((start, start + len(line)))
        if not line.strip():
            changed.append(False)
            continue
        low, high = view.span(start, start + len(line))
        differs = line != source[low:high].casefold()
        joined = previous_end is not None and (low < previous_end or bool(source[previous_end:low].strip()))
        if joined and not differs:
            changed[-1] = True
        changed.append(differs or joined)
        previous_end = high
    regions: list[tuple[int, int]] = []
    for index, (start, end) in enumerate(lines):
        if not changed[index]:
            continue
        start = lines[index - 1][0] if index else start
        end = lines[index + 1][1] if index + 1 < len(lines) else end
        if regions and start <= regions[-1][1] + 1:
            regions[-1] = (regions[-1][0], max(regions[-1][1], end))
        else:
            regions.append((start, end))
    return regions


def _marker(what: str) -> str:
    return f"[lore: removed {what}]"


def _phrase_words(text: str) -> int:
    from lore.safety.folding import phrase_words

    words = phrase_words()
    return sum(
        1 for word in _WORD.findall(text) if any(word.startswith(known) for known in words.get(word[:5], ()))
    )


@functools.cache
def _disguised_words() -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """The phrase words as rot13 and backwards spell them, by their first five letters."""
    from lore.safety.folding import phrase_words

    rotated: dict[str, list[str]] = {}
    backwards: dict[str, list[str]] = {}
    for found in phrase_words().values():
        for word in found:
            if word.isascii():
                spelled = codecs.encode(word, "rot13")
                rotated.setdefault(spelled[:5], []).append(spelled)
                backwards.setdefault(word[::-1][:5], []).append(word[::-1])
    return (
        {key: tuple(words) for key, words in rotated.items()},
        {key: tuple(words) for key, words in backwards.items()},
    )


def _count(words: list[str], table: dict[str, tuple[str, ...]]) -> int:
    return sum(1 for word in words if any(word.startswith(known) for known in table.get(word[:5], ())))


def _screen_readings(view: View, add: Callable[..., None]) -> None:
    """The English phrase rules over each line read through rot13 and read backwards,
    when that reading holds two or more phrase words more than the line as written.
    Most texts hold no phrase word spelled so, and skip the per-line readings."""
    words = _WORD.findall(view.text)
    rot13_words, backward_words = _disguised_words()
    if _count(words, rot13_words) < 2 and _count(words, backward_words) < 2:
        return
    position = 0
    for line in view.text.split("\n"):
        start, position = position, position + len(line) + 1
        if len(line) < 16:
            continue
        baseline = _phrase_words(line)
        rotated = codecs.decode(line, "rot13")
        if _phrase_words(rotated) >= baseline + 2:
            for match in _english().finditer(rotated):
                add(
                    start + match.start(),
                    start + len(line),
                    "encoded_instruction",
                    _marker("encoded instruction"),
                    _MATCH,
                )
        backwards = line[::-1]
        if _phrase_words(backwards) >= baseline + 2 and _english().search(backwards):
            # A line written backwards goes whole: the payload is all of it.
            add(start, start + len(line), "encoded_instruction", _marker("encoded instruction"), _MATCH)


#: A template in a URL filled from the conversation: "{conversation}", "[SUMMARY]", "$TOKEN".
_TEMPLATE = re.compile(
    r"[{\[<$%]+[^}\]>\s]{0,40}?(?:conversation|chat|history|summary|secret|token|password|passwd|key|prompt|"
    r"answer|context|message|session|credential|cookie|kubeconfig|env)",
    re.IGNORECASE,
)
_IMAGE_PATH = re.compile(r"\.(?:png|jpe?g|gif|svg|webp|bmp|ico)(?:[?#]|$)", re.IGNORECASE)


def link_host(url: str) -> str | None:
    """The host a URL reaches, or None for a relative one; ``https:/host`` (one slash)
    reaches ``host``, as browsers read it."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return "(unparsable)"
    if parts.scheme.lower() in ("javascript", "data", "vbscript"):
        return parts.scheme.lower() + ":"
    if parts.netloc:
        return (parts.hostname or parts.netloc).lower()
    if parts.scheme and parts.path.startswith("/"):
        return parts.path.lstrip("/").split("/", 1)[0].lower() or None
    if parts.scheme in ("http", "https", "ftp", "ws", "wss"):
        return parts.path.split("/", 1)[0].lower() or None
    return None


def shown_host(host: str | None) -> str:
    """A link's destination as its inert marker names it: the host; for a URL with none,
    its kind ("a javascript URL": the scheme itself, written, would be the payload)."""
    if host is None:
        return "a relative URL"
    return f"a {host.rstrip(':')} URL" if host.endswith(":") else host


def is_allowed(host: str, allowed_link_hosts: Collection[str]) -> bool:
    return any(
        host == ok or host.endswith("." + ok) for ok in (h.lower().strip(".") for h in allowed_link_hosts)
    )


def _neutralise_links(
    view: View, spans: list[tuple[int, int, str]], findings: Counter[str], allowed_link_hosts: Collection[str]
) -> None:
    text = view.source
    done: set[tuple[int, int]] = set()
    for link in view.links:
        host = link_host(link.url)
        templated = bool(_TEMPLATE.search(link.url.split("//", 1)[-1].split("/", 1)[-1])) and host is not None
        if host is None or (link.kind == "code" and not templated):
            continue
        if not templated and is_allowed(host, allowed_link_hosts):
            continue
        image = link.kind in ("image", "srcset") or bool(_IMAGE_PATH.search(link.url))
        kind = "external_image" if image else "external_link"
        what = f"external {'image' if image else 'link'} to {shown_host(host)}"
        for span in _link_spans(text, link):
            if span in done:
                continue
            done.add(span)
            spans.append((span[0], span[1], _marker(what)))
            findings[kind] += 1


def _link_spans(text: str, link: Link) -> list[tuple[int, int]]:
    if link.span is not None:
        return [link.span]
    return [(match.start(), match.end()) for match in re.finditer(re.escape(link.url), text)]
