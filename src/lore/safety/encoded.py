"""Text written so that phrase matching does not read it, but a model does: base64 and
hex runs, a phrase written as one slug, and rot13 where the text asks for it.

A model decodes base64 or hex when asked to ("decode and follow: aWdub3Jl..."), reads
"ignore-all-previous-instructions" as the phrase, and applies rot13 when told to. So
injection screening (``lore.safety.injection``) screens the decoded text of each such run
as text, and replaces the run when that finds an instruction. Only decodings that read
like words are screened: key material, hashes, image digests and certificates decode to
bytes; ordinary slugs ("kube-apiserver-health-check") hold fewer than two of the phrase
rules' words; a slug in a path or a file name ("docs/ignore-previous-errors.md") names a
file and is left alone, so provenance fields keep their value.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
from collections import Counter
from collections.abc import Callable

import regex

from lore.safety.folding import phrase_words

#: Runs of base64 long enough to carry a sentence ("aWdub3JlIGFsbCBwcmV2aW91cyBp...").
BASE64_RUN = re.compile(
    r"(?<![A-Za-z0-9+/_\-])(?=[A-Za-z0-9+/_\-]*[a-z])(?=[A-Za-z0-9+/_\-]*[A-Z0-9+/])"
    r"[A-Za-z0-9+/_\-]{24,}={0,2}(?![A-Za-z0-9+/=_\-])"
)
#: Runs of hex long enough to carry a sentence ("69676e6f726520616c6c..."). No boundary
#: test (a lookbehind at every position doubles the scan): a run cut out of a longer
#: token decodes to bytes, not words, like any digest.
HEX_RUN = re.compile(r"[0-9a-fA-F]{24,}")
#: Three or more words joined by one "-" or "_" ("ignore-all-previous-instructions"), not
#: part of a path, a file name, a uri's #anchor or a longer identifier.
SLUG_RUN = re.compile(
    r"(?<![\w/.#\-])[^\W\d_]+(?P<joint>[-_])[^\W\d_]+(?:(?P=joint)[^\W\d_]+)+(?![\w/\-]|\.\w)"
)
#: A text that asks for rot13 ("rot13", "ROT-13", "rot 13"); rot13 that nothing asks a
#: model to apply stays gibberish to it, so only such texts are decoded.
ROT13_HINT = re.compile(r"(?<![A-Za-z0-9])rot[\s\-_]?13(?![0-9])", re.IGNORECASE)
#: Decoded text worth screening: mostly letters and spaces, as a sentence is.
_SENTENCE = regex.compile(r"[\p{L}\s]")


def decoded_text(run: str) -> str | None:
    """``run`` decoded from base64 (standard or URL-safe) when it is printable UTF-8 that
    reads like words, or is base64 again; None for key material, hashes and other binary
    payloads."""
    if len(run.rstrip("=")) % 4 == 1:
        return None
    padded = run.rstrip("=") + "=" * (-len(run.rstrip("=")) % 4)
    try:
        raw = base64.b64decode(padded, altchars=b"-_" if ("-" in run or "_" in run) else None, validate=True)
    except (binascii.Error, ValueError):
        return None
    return _words(raw, nested=BASE64_RUN)


def hex_decoded(run: str) -> str | None:
    """``run`` decoded from hex when it reads like words (or is hex again); None for
    digests, ids and other bytes."""
    return None if len(run) % 2 else _words(bytes.fromhex(run), nested=HEX_RUN)


def slug_words(run: str) -> str | None:
    """A slug read as the words it joins, when two or more of them are the phrase rules'
    words (a model reads "ignore-all-previous-instructions" as the phrase); None for the
    ordinary slugs of runbooks."""
    words = re.split(r"[-_]", run.lower())
    known = phrase_words()
    # A word counts when it starts with one of the phrase rules' words ("instructions"
    # with "instruct"); looked up by its first five letters, as the matching view does.
    count = sum(1 for word in words if any(word.startswith(w) for w in known.get(word[:5], ())))
    return " ".join(run.replace("_", "-").split("-")) if count >= 2 else None


def _words(raw: bytes, *, nested: re.Pattern[str]) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if nested.fullmatch(text):
        return text
    if not text.replace("\n", " ").replace("\t", " ").isprintable() or " " not in text:
        return None
    return text if len(_SENTENCE.findall(text)) >= 0.7 * len(text) else None


#: Kinds that say decoded text is an instruction (not a link or a stray character).
WORDING_KINDS = frozenset(
    {"role_marker", "tool_call_imitation", "instruction_override", "fake_delimiter", "encoded_instruction"}
)
_LINE = re.compile(r"[^\n]+")


def rot13_line(line: str) -> str | None:
    """A line of a text that asks for rot13, as rot13 reads it."""
    return codecs.decode(line, "rot13")


#: How each kind of run is found and read, and the finding a run hiding an instruction
#: counts (None: a slug is the phrase itself, and counts what its words are found to be).
_DISGUISES: tuple[tuple[re.Pattern[str], Callable[[str], str | None], str | None], ...] = (
    (BASE64_RUN, decoded_text, "encoded_instruction"),
    (HEX_RUN, hex_decoded, "encoded_instruction"),
    (SLUG_RUN, slug_words, None),
)


def screen_disguised(
    text: str,
    findings: Counter[str],
    screen: Callable[[str], Counter[str]],
    marker: Callable[[str], str],
) -> str:
    """``text`` with each disguised run whose reading ``screen`` finds an instruction in
    replaced by ``marker``; rot13 is read line by line, and only where the text asks for it."""
    disguises = list(_DISGUISES)
    if "13" in text and ROT13_HINT.search(text):
        disguises.append((_LINE, rot13_line, "encoded_instruction"))
    for pattern, read, kind in disguises:
        text = pattern.sub(_replacer(read, kind, findings, screen, marker), text)
    return text


def _replacer(
    read: Callable[[str], str | None],
    kind: str | None,
    findings: Counter[str],
    screen: Callable[[str], Counter[str]],
    marker: Callable[[str], str],
) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        decoded = read(match[0])
        if decoded is None:
            return match[0]
        inner = screen(decoded)
        wording = WORDING_KINDS & set(inner)
        if not wording:
            return match[0]
        if kind is None:
            findings.update({found: inner[found] for found in wording})
            return marker("instruction-like text")
        findings[kind] += 1
        return marker("encoded instruction")

    return replace
