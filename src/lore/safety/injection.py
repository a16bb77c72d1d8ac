"""Prompt-injection screening of retrieved text.

Anyone who can edit a wiki page can write to the agent that reads it. This module finds
instruction-like spans in retrieved text and neutralises them: each is replaced by a
visible marker such as ``[lore: removed instruction-like text]`` (never silently dropped)
and counted per kind, so the agent and the operator both see that something was there.

Kinds, in the order they are screened:

- ``invisible_character``: zero-width, bidirectional-control and Unicode tag characters
  are stripped first, so they cannot hide a phrase from the patterns below;
- ``control_character``: terminal control characters (ANSI escapes, a lone carriage
  return) are stripped too: they can hide text from a human reading a terminal;
- ``html_comment``: hidden from a rendered page, fully visible to a model;
- ``fake_delimiter``: text imitating the fence lore puts around passages;
- ``role_marker``: chat-template tokens (``<|im_start|>``, ``[INST]``, ``<<SYS>>``), role
  prefixes at line start (``system:``, ``assistant:``), ``### Instruction`` headings;
- ``tool_call_imitation``: ``<tool_call>`` blocks, ``{"tool": ...}`` JSON, ``functions.x(``;
- ``instruction_override``: "ignore previous instructions" and its paraphrases, "you are
  now ...", "new instructions:", requests to reveal the prompt or hide things from the
  user. The rest of the line is removed with the phrase, since that is the payload;
- ``external_image`` / ``external_link``: Markdown or HTML images and links to hosts not
  in ``safety.allowed_link_hosts``. An image URL is fetched as soon as a client renders
  it, and a link can carry data out in its query string; the URL goes, the text stays.

The patterns are deliberately narrow, because runbooks say "ignore the warning if ..." and
"the system: ..." all the time: an override needs both a verb of dismissal and a target
such as "previous instructions", and a role marker must start a line.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from urllib.parse import urlsplit

#: Every marker starts with this, so tests and readers can recognise neutralised spans.
NEUTRALISED_MARKER = "[lore: removed"

#: The tag lore's renderer fences each passage with; text imitating it is neutralised.
FENCE_TAG = "untrusted-reference"


def marker(what: str) -> str:
    return f"{NEUTRALISED_MARKER} {what}]"


_INVISIBLE = re.compile(
    "["
    "\u00ad"  # soft hyphen
    "\u180e"  # Mongolian vowel separator
    "\u200b-\u200f"  # zero-width space/joiners, LRM, RLM
    "\u202a-\u202e"  # bidi embeddings and overrides
    "\u2060-\u2064"  # word joiner, invisible operators
    "\u2066-\u2069"  # bidi isolates
    "\ufeff"  # zero-width no-break space
    "\U000e0000-\U000e007f"  # Unicode tags: invisible ASCII look-alikes ("ASCII smuggling")
    "]+"
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


def _fixed(what: str) -> Callable[[re.Match[str]], str]:
    text = marker(what)
    return lambda _match: text


_REST_OF_LINE = r"[^\n]*"
_DISMISS = r"(?:ignore|disregard|forget|override|overrule|bypass|neglect|abandon|discard|throw\s+away)"
_EARLIER = (
    r"(?:previous|prior|above|earlier|preceding|foregoing|former|original|initial|system|"
    r"developer|safety|given|current)"
)
_ORDERS = (
    r"(?:instructions?|prompts?|directions|directives?|rules|guidelines|guidance|context|"
    r"constraints|restrictions|programming|commands)"
)
_MACHINE = r"(?:AI|A\.I\.|LLM|large\s+language\s+model|language\s+model|assistant|chat\s?bot|AI\s+agent)"

_OVERRIDE_PATTERNS = [
    # ignore (all) (of) (the|your) previous (safety) instructions
    rf"\b{_DISMISS}\s+(?:(?:all|any|every|each|of|the|your|my|these|those|its)\s+)*{_EARLIER}\s+"
    rf"(?:[\w-]+\s+)?{_ORDERS}\b",
    # ignore everything above / forget everything you were told
    rf"\b{_DISMISS}\s+(?:everything|anything|all)\s+(?:above|before|prior|previously|said|"
    rf"you\s+(?:were|have\s+been)\s+told|you\s+know)",
    # ignore (all) instructions above
    rf"\b{_DISMISS}\s+(?:all\s+|any\s+|the\s+|your\s+)?{_ORDERS}\s+(?:above|before|given|so\s+far)",
    rf"\b(?:do\s+not|don't|never)\s+(?:follow|obey)\s+(?:the\s+|your\s+|any\s+)?{_EARLIER}\s+{_ORDERS}",
    r"\byou\s+are\s+now\s+(?:a\s+|an\s+|the\s+|in\s+)?(?:new|different|unrestricted|unfiltered|"
    r"uncensored|jailbroken|evil|rogue|malicious|DAN\b|developer\s+mode|god\s+mode)",
    rf"\byou\s+are\s+now\s+(?:a|an)\s+{_MACHINE}\s+(?:that|who|with|named|called|without)\b",
    rf"\byou\s+are\s+no\s+longer\s+(?:an?\s+{_MACHINE}|bound|restricted|constrained|limited\s+by)",
    r"\b(?:new|real|actual|true|secret|hidden|override|overriding|system)\s+(?:system\s+)?"
    r"instructions?\s*:",
    r"\bsystem\s+prompt\s*:",
    r"\b(?:reveal|print|output|show|repeat|leak|disclose|display|dump)\s+(?:\w+\s+){0,3}?"
    r"(?:system\s+prompt|hidden\s+prompt|initial\s+instructions|original\s+instructions|"
    r"your\s+instructions|your\s+prompt)",
    rf"\bfrom\s+now\s+on,?\s+(?:you|the\s+{_MACHINE})\s+(?:must|will|shall|should|are\s+to)\s+"
    r"(?:only\s+)?(?:respond|reply|answer|act|obey|follow|ignore|pretend)",
    rf"\b(?:if|when)\s+you\s+are\s+(?:an?\s+)?{_MACHINE}\b",
    rf"\b(?:note|message|attention|instructions?|important)\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?"
    rf"{_MACHINE}s?\b",
    rf"\b(?:attention|hey|dear)\s*,?\s+{_MACHINE}s?\s*[:,!]",
    r"\b(?:do\s+not|don't|never)\s+(?:tell|inform|alert|notify|warn)\s+the\s+user\b",
    r"\b(?:do\s+not|don't|never)\s+(?:reveal|mention|disclose)\s+(?:this|these|that|it)\s+to\s+the\s+user\b",
    r"\b(?:act|behave)\s+as\s+(?:an?\s+)?(?:unrestricted|jailbroken|unfiltered|uncensored|evil|DAN\b)",
    r"\bpretend\s+(?:to\s+be|you\s+are|that\s+you\s+are)\s+(?:an?\s+)?(?:unrestricted|jailbroken|"
    r"unfiltered|uncensored|evil|different|DAN\b)",
    r"\b(?:developer|DAN|jailbreak)\s+mode\s+(?:enabled|activated|on)\b",
    r"\b(?:disable|bypass|ignore|turn\s+off|deactivate)\s+your\s+(?:safety\s+|content\s+|security\s+)?"
    r"(?:filters?|guardrails?|restrictions|guidelines|safeguards)",
]

_ROLE_WORDS = r"(?:system|assistant|developer)"

#: Upper bound on link texts and tag attributes the patterns scan: without it a crafted
#: page ("![![![..." with no closing bracket) makes matching quadratic in its length.
_MAX_SPAN = 500

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
        return (f"[image: {alt}] " if alt else "") + marker("external image")

    def link(match: re.Match[str]) -> str | None:
        if not is_outside(match["url"]):
            return None
        return f"{match['text']} {marker('external link')}"

    def bare_link(match: re.Match[str]) -> str | None:
        return marker("external link") if is_outside(match["url"]) else None

    def reference_definition(match: re.Match[str]) -> str | None:
        if not is_outside(match["url"]):
            return None
        return f"[{match['text']}]: {marker('external link')}"

    def html_anchor(match: re.Match[str]) -> str | None:
        if not is_outside(match["url"]):
            return None
        return f"{match['text']} {marker('external link')}"

    i, im, ims = re.IGNORECASE, re.IGNORECASE | re.MULTILINE, re.IGNORECASE | re.DOTALL
    return [
        _Rule("html_comment", re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL), _fixed("HTML comment")),
        _Rule("fake_delimiter", re.compile(rf"</?\s*{FENCE_TAG}\b[^>\n]*>?", i), _fixed("fake delimiter")),
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
                r"|^[ \t>]*#{1,6}[ \t]*(?:instruction\b[ \t]*:?|(?:instructions|response|system)[ \t]*:)",
                im,
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
            re.compile("(?:" + "|".join(_OVERRIDE_PATTERNS) + ")" + _REST_OF_LINE, i),
            _fixed("instruction-like text"),
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
            lambda m: marker("external image") if is_outside(m["url"]) else None,
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


def _rules(allowed_link_hosts: Collection[str]) -> list[_Rule]:
    key = tuple(sorted(allowed_link_hosts))
    if key not in _RULES_CACHE:
        _RULES_CACHE[key] = _build_rules(key)
    return _RULES_CACHE[key]


def screen_injections(text: str, *, allowed_link_hosts: Collection[str] = ()) -> tuple[str, Counter[str]]:
    """``text`` with instruction-like spans neutralised, and the findings per kind."""
    findings: Counter[str] = Counter()

    def strip_invisible(_match: re.Match[str]) -> str:
        findings["invisible_character"] += 1
        return ""

    def strip_control(_match: re.Match[str]) -> str:
        findings["control_character"] += 1
        return ""

    text = _INVISIBLE.sub(strip_invisible, text)
    text = _CONTROL.sub(strip_control, text)
    for rule in _rules(allowed_link_hosts):
        text = rule.pattern.sub(_counting(rule, findings), text)
    return text, findings


def _counting(rule: _Rule, findings: Counter[str]) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        replacement = rule.replace(match)
        if replacement is None:
            return match.group(0)
        findings[rule.kind] += 1
        return replacement

    return replace
