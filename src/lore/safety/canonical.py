"""The canonical view: the one reading of a text that every detector of the safety chain
runs over, mapped back to the text as written.

A model does not read Markdown source: it reads "ig*nore*" as "ignore", "&#105;gnore" as
"ignore", a table cell with its column's header, an image's alt text and a link's title,
two lines a shell continuation joins as one command. A detector that reads the source
misses every such spelling, one form at a time. So detectors read this view instead, and
what they find there is mapped back to a span of the source, which is what gets replaced.

Layers, each a ``View`` over the one before (``View.span`` maps through all of them):

1. ``render``: Markdown to plain text with markdown-it-py's tokens (emphasis, inline
   formatting tags and ``<br>`` dropped; a paragraph's lines one block, with the
   blockquote and list markers between them gone, and shell ``\\``-continuations joined
   into one line; table cells as ``header: cell``; image alt text, link titles and
   destinations, reference definitions and front matter included; code and HTML blocks
   verbatim, less their formatting tags), then escapes decoded in place (HTML entities,
   JSON ``\\u``/``\\/``, ``\\x`` bytes, percent-encoding, spaced hex bytes) and encoded
   runs that read as text (base64, also wrapped across lines; base32; hex) followed by
   their reading. Case and characters are kept: secret detectors read this layer.
2. ``fold``: the matching view for wording. Default-ignorable code points removed; NFKC
   (superscripts, subscripts and fractions kept: "10⁶" is not "106"); accents and other
   combining marks of the Latin, Greek and Cyrillic blocks stripped; look-alike letters
   folded to Latin inside words that hold Latin letters (Unicode's confusables); small
   capitals to letters; camelCase and dotted or underscored slugs split into words; case
   folded.
3. ``canonical`` = ``fold(render(text))``.

Alternative readings, built only when a detector asks (they cost a second scan):
``rot13(view)`` and ``reversed_view(view)``.

API (stable; other detectors build on it):

- ``render(text) -> View``, ``fold(view) -> View``, ``canonical(text) -> View``,
  ``fold_pattern(regex) -> regex`` (a pattern folded as the view is);
- ``View.text`` (the reading), ``View.source`` (the text as written),
  ``View.span(start, end) -> (start, end)`` in the source, ``View.links`` (every link,
  image, ``srcset`` entry and bare URL as a ``Link``: its url and the source span of the
  url as written, when it can be found there), ``View.decoded`` (source spans read
  decoded: escapes and encoded runs);
- ``replace_spans(source, spans) -> str``: the source with each span replaced (spans may
  overlap; the union of overlapping ones is replaced once).

A span in the view maps to the smallest source span that produced it: exactly, character
for character, where the view copies the source; the whole construct where it decodes or
renders one (an entity, a base64 run, an inline token markdown-it rewrote).

Written here rather than taken from a library: markdown-it-py gives the tokens, but no
renderer keeps offsets back to the source, and no library folds text for matching with a
map back to it (see ``lore.safety.folding``).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import codecs
import functools
import html
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import regex
from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = [
    "Link",
    "View",
    "canonical",
    "fold",
    "fold_pattern",
    "render",
    "replace_spans",
    "reversed_view",
    "rot13",
]


@dataclass(frozen=True)
class Link:
    """A URL a client could fetch or a reader follow."""

    #: "link", "image", "reference", "srcset", "html", "bare" (a URL in prose) or
    #: "code" (a URL in code: a command's argument, which no client renders as a link).
    kind: str
    url: str
    #: The url's span in the source as written; None when it is not there verbatim
    #: (decoded from an escape or rewritten by the parser).
    span: tuple[int, int] | None


class View:
    """A reading of ``source`` with a map from each of its spans back to the source."""

    __slots__ = ("_base", "_ends", "_exact", "_origins", "_starts", "decoded", "links", "source", "text")

    def __init__(
        self,
        text: str,
        source: str,
        segments: Sequence[tuple[int, int, int, bool]],
        base: View | None = None,
        links: tuple[Link, ...] = (),
    ) -> None:
        self.text = text
        self.source = source
        self._base = base
        #: One segment per run of the view: where it starts in the view, the span of the
        #: layer below it came from, and whether it copies that span character for character.
        self._starts = [segment[0] for segment in segments]
        self._origins = [segment[1] for segment in segments]
        self._ends = [segment[2] for segment in segments]
        self._exact = [segment[3] for segment in segments]
        self.links: tuple[Link, ...] = links if base is None else base.links
        #: Source spans the view reads decoded (an escape, an encoded run): a finding
        #: there is an encoded one.
        self.decoded: tuple[tuple[int, int], ...] = () if base is None else base.decoded

    def _below(self, position: int, *, end: bool) -> int:
        index = bisect.bisect_right(self._starts, position) - 1
        if index < 0:
            return 0
        if self._exact[index]:
            return self._origins[index] + (position - self._starts[index]) + (1 if end else 0)
        return self._ends[index] if end else self._origins[index]

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The span of the source that the view's ``[start, end)`` came from."""
        if not self._starts:
            low, high = start, end
        elif end <= start:
            low = high = self._below(start, end=False)
        else:
            low, high = self._below(start, end=False), self._below(end - 1, end=True)
        if self._base is not None:
            return self._base.span(low, high)
        return low, max(low, high)

    def __repr__(self) -> str:
        return f"View({self.text!r})"


class _Builder:
    """Appends runs to a view, each with the span of the layer below it came from."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.segments: list[tuple[int, int, int, bool]] = []
        self.length = 0

    def exact(self, text: str, origin: int) -> None:
        if text:
            self.segments.append((self.length, origin, origin + len(text), True))
            self.pieces.append(text)
            self.length += len(text)

    def coarse(self, text: str, start: int, end: int) -> None:
        if text:
            self.segments.append((self.length, start, max(start, end), False))
            self.pieces.append(text)
            self.length += len(text)

    def drop_inserted_newline(self) -> None:
        """Drop a trailing newline the renderer inserted (not one of the source's)."""
        if self.pieces and self.pieces[-1] == "\n" and not self.segments[-1][3]:
            self.pieces.pop()
            self.segments.pop()
            self.length -= 1

    def ends_with(self, suffix: str) -> bool:
        return bool(self.pieces) and self.pieces[-1].endswith(suffix)

    def view(self, source: str, base: View | None = None, links: tuple[Link, ...] = ()) -> View:
        return View("".join(self.pieces), source, self.segments, base, links)


def _with_edits(view: View, edits: Iterable[tuple[int, int, str]]) -> View:
    """A view over ``view`` with each ``(start, end, replacement)`` applied (sorted, apart;
    an insertion has start == end); the rest is copied exactly."""
    builder = _Builder()
    text = view.text
    last = 0
    changed = False
    for start, end, replacement in edits:
        if start < last:
            continue
        builder.exact(text[last:start], last)
        builder.coarse(replacement, start, end)
        last = end
        changed = True
    if not changed:
        return view
    builder.exact(text[last:], last)
    return builder.view(view.source, base=view)


# --- rendering ---------------------------------------------------------------------------

_MD = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
#: Front matter: a YAML block at the very start, between "---" lines.
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(?:.*\n)*?(?:---|\.\.\.)[ \t]*(?:\n|\Z)")
#: Inline HTML that only formats text: dropped from the view ("ig<b>nore</b>" is "ignore").
#: Any other tag stays as written, so role and tool markup (``<system>``) is still seen.
_FORMATTING_TAG = re.compile(
    r"</?(?:b|i|u|s|em|strong|span|font|mark|small|big|sup|sub|del|ins|strike|tt|kbd|code|var|samp|"
    r"abbr|q|cite|dfn|bdi|bdo|wbr|nobr|p|div|center|blockquote|pre|li|ul|ol|h[1-6]|td|th|tr|"
    r"table|thead|tbody|br|hr|section|article|details|summary|label|a|img|source|picture)\b[^<>]*?/?>",
    re.IGNORECASE,
)
_BREAK_TAG = re.compile(r"<[bh]r\b[^<>]*>|</?(?:p|div|li|tr|h[1-6]|blockquote|pre)\b[^<>]*>", re.IGNORECASE)
#: Attributes a reader sees or a client fetches, from any tag.
_ATTRIBUTE = re.compile(
    r"""\b(?P<name>alt|title|href|src|srcset|aria-label|data-src|poster|action|formaction|cite|background)"""
    r"""\s*=\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s"'<>`=]+))""",
    re.IGNORECASE,
)
_URL_ATTRIBUTES = frozenset(
    {"href", "src", "data-src", "poster", "action", "formaction", "cite", "background"}
)
#: A bare URL, with one slash or none after the scheme as browsers accept ("https:/host").
_BARE_URL = re.compile(r"(?<![\w/])(?:https?|ftp|wss?):/{0,3}(?=[\w\[])[^\s<>\"'`)\]|]+", re.IGNORECASE)
_SHELL_CONTINUATION = re.compile(r"[ \t]*\\\n[ \t]*")


def render(text: str) -> View:
    """``text`` read as a person or model reads it rendered (layer 1 of the module note)."""
    plain = _plain_view(text)
    return _decode(plain if plain is not None else _render_markdown(text))


#: What makes Markdown read differently from its source: an inline markup character
#: anywhere, an underscore at a word's edge (emphasis), a block marker or an indent at a
#: line's start, blanks at a line's end (a hard break), an empty line (a paragraph break),
#: and characters the parser rewrites (CR, NUL).
_NOT_PLAIN = re.compile(
    r"[`*\[\]!<&\\|~\r\x00]|(?<![^\W_])_|_(?![^\W_])|^[ \t]|[ \t]$|^$|^(?:[#>=+\-]|\d{1,9}[.)](?:[ \t]|$))",
    re.MULTILINE,
)


def _plain_view(text: str) -> View | None:
    """The view of a text with no Markdown in it (a title, a uri, an id, a line of prose):
    the text itself, exactly, with its bare URLs; None when it holds any markup. What
    markdown-it would render for such a text is the text (``tests/test_safety_canonical``
    holds the two to each other), without the parse, which is most of a short text's cost."""
    if _NOT_PLAIN.search(text):
        return None
    links = tuple(Link("bare", match[0], (match.start(), match.end())) for match in _BARE_URL.finditer(text))
    return View(text, text, [(0, 0, len(text), True)], links=links)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts += [match.end() for match in re.finditer("\n", text)]
    return starts


class _Renderer:
    def __init__(self, source: str) -> None:
        self.source = source
        self.out = _Builder()
        self.lines = _line_starts(source)
        self.cursor = 0
        self.links: list[Link] = []
        self.covered: list[tuple[int, int]] = []
        #: Segments rewritten by the parser, whose source span ends where the next
        #: thing is found.
        self.pending: list[int] = []
        self.rewritten: list[int] = []
        #: Source spans of code (fences, indented blocks, code spans): a URL there is a
        #: command's argument, not a link a client renders.
        self.code: list[tuple[int, int]] = []

    def settle(self, found: int) -> None:
        for index in self.pending:
            start, origin, _end, exact = self.out.segments[index]
            self.out.segments[index] = (start, origin, max(origin, found), exact)
        self.pending.clear()

    def offset(self, line: int) -> int:
        return self.lines[line] if line < len(self.lines) else len(self.source)

    def newline(self, position: int) -> None:
        if self.out.length and not self.out.ends_with("\n"):
            self.out.coarse("\n", position, position)

    def locate(self, content: str, limit: int) -> int:
        """Where ``content`` next occurs in the source from the cursor, or -1."""
        if not content:
            return self.cursor
        return self.source.find(content, self.cursor, max(limit, self.cursor))

    def emit(self, content: str, limit: int, *, join_continuations: bool = False) -> None:
        """``content`` as found in the source from the cursor (exactly), or in the span up
        to the next thing found (coarsely) when the parser rewrote it."""
        at = self.locate(content, limit)
        if at < 0:
            words = [word for word in re.split(r"(\s+)", content) if word]
            if len(words) > 1:
                for word in words:
                    self.emit(word, limit)
                return
            if not content.strip():
                self.out.coarse(content, self.cursor, self.cursor)
                return
            # Rewritten by the parser (an entity decoded, a backslash escape dropped):
            # mapped to the source up to the next thing found.
            self.pending.append(len(self.out.segments))
            self.rewritten.append(len(self.out.segments))
            self.out.coarse(content, self.cursor, limit)
            return
        self.settle(at)
        if join_continuations and "\\\n" in content:
            for piece_start, piece_end, replacement in _spans_and_gaps(content, _SHELL_CONTINUATION, " "):
                if replacement is None:
                    self.out.exact(content[piece_start:piece_end], at + piece_start)
                else:
                    self.out.coarse(replacement, at + piece_start, at + piece_end)
        else:
            self.out.exact(content, at)
        self.cursor = at + len(content)

    def url(self, kind: str, url: str, limit: int) -> None:
        at = self.locate(url, limit)
        if at >= 0:
            self.settle(at)
        span = None if at < 0 else (at, at + len(url))
        self.links.append(Link(kind, url, span))
        if at >= 0:
            self.out.coarse(" ", at, at)
            self.out.exact(url, at)
            self.cursor = at + len(url)
        else:
            self.out.coarse(" " + url, self.cursor, limit)

    def attribute(self, value: str, limit: int) -> None:
        if value:
            self.out.coarse(" ", self.cursor, self.cursor)
            self.emit(value, limit)

    def html(self, content: str, limit: int, *, block: bool) -> None:
        """HTML as read: formatting tags dropped, line-breaking ones a space (inline) or a
        newline (block), every seen or fetched attribute included."""
        at = self.locate(content, limit)
        if at < 0:
            self.out.coarse(content, self.cursor, limit)
            return
        self.settle(at)
        last = 0
        for tag in _FORMATTING_TAG.finditer(content):
            self.out.exact(content[last : tag.start()], at + last)
            if _BREAK_TAG.fullmatch(tag[0]):
                self.out.coarse("\n" if block else " ", at + tag.start(), at + tag.end())
            for attribute in _ATTRIBUTE.finditer(tag[0]):
                value_group = next(g for g in ("dq", "sq", "bare") if attribute[g] is not None)
                value_start = at + tag.start() + attribute.start(value_group)
                value = attribute[value_group]
                name = attribute["name"].lower()
                if name == "srcset":
                    for entry in re.finditer(r"[^\s,]+(?:\s+[\d.]+[wx])?", value):
                        url = entry[0].split()[0]
                        offset = value_start + entry.start()
                        self.links.append(Link("srcset", url, (offset, offset + len(url))))
                        self.out.coarse(" ", offset, offset)
                        self.out.exact(url, offset)
                    continue
                if name in _URL_ATTRIBUTES:
                    self.links.append(Link("html", value, (value_start, value_start + len(value))))
                self.out.coarse(" ", value_start, value_start)
                self.out.exact(value, value_start)
            last = tag.end()
        self.out.exact(content[last:], at + last)
        self.cursor = at + len(content)

    def inline(self, token: Token) -> None:
        start = self.offset(token.map[0]) if token.map else self.cursor
        limit = self.offset(token.map[1]) if token.map else len(self.source)
        self.cursor = max(self.cursor, start)
        link_after: list[tuple[str, str]] = []
        for child in token.children or []:
            kind = child.type
            if kind == "code_inline":
                before = self.cursor
                self.emit(child.content, limit)
                self.code.append((before, self.cursor))
            elif kind == "text":
                self.emit(child.content, limit)
            elif kind in ("softbreak", "hardbreak"):
                # A newline, not a blank: line-anchored rules still see the source's
                # lines, and every phrase rule matches across one (``\s+``).
                self.out.coarse("\n", self.cursor, self.cursor)
            elif kind == "html_inline":
                self.html(child.content, limit, block=False)
            elif kind == "link_open":
                link_after.append((str(child.attrs.get("href", "")), str(child.attrs.get("title", "") or "")))
            elif kind == "link_close" and link_after:
                href, title = link_after.pop()
                if href:
                    self.url("link", href, limit)
                self.attribute(title, limit)
            elif kind == "image":
                for grandchild in child.children or []:
                    if grandchild.type in ("text", "code_inline"):
                        self.emit(grandchild.content, limit)
                src = str(child.attrs.get("src", ""))
                if src:
                    self.url("image", src, limit)
                self.attribute(str(child.attrs.get("title", "") or ""), limit)
        self.pending.clear()

    def block(self, tokens: Sequence[Token], offset: int) -> None:
        header_texts: list[str] = []
        cell = 0
        in_head = False
        for token in tokens:
            if token.map:
                self.covered.append((self.offset(token.map[0]), self.offset(token.map[1])))
            kind = token.type
            if kind == "thead_open":
                in_head, header_texts = True, []
            elif kind == "thead_close":
                in_head = False
            elif kind == "tr_open":
                cell = 0
                self.newline(self.cursor)
            elif kind in ("td_open", "th_open"):
                if not in_head and cell < len(header_texts) and header_texts[cell]:
                    # The cell read with its column's header: "password: hunter2".
                    self.out.coarse(header_texts[cell] + ": ", self.cursor, self.cursor)
                elif cell:
                    self.out.coarse(" | ", self.cursor, self.cursor)
            elif kind in ("td_close", "th_close"):
                cell += 1
                if not in_head:
                    self.out.coarse("\n", self.cursor, self.cursor)
            elif kind == "inline":
                if in_head:
                    header_texts.append(token.content.strip())
                self.inline(token)
            elif kind in ("fence", "code_block"):
                start = self.offset(token.map[0]) if token.map else self.cursor
                limit = self.offset(token.map[1]) if token.map else len(self.source)
                self.cursor = max(self.cursor, start)
                self.newline(self.cursor)
                self.code.append((start, limit))
                self.emit(token.content, limit, join_continuations=True)
            elif kind == "html_block":
                start = self.offset(token.map[0]) if token.map else self.cursor
                limit = self.offset(token.map[1]) if token.map else len(self.source)
                self.cursor = max(self.cursor, start)
                self.newline(self.cursor)
                self.html(token.content, limit, block=True)
            elif (kind.endswith("_close") and kind not in ("td_close", "th_close")) or kind == "hr":
                self.newline(self.cursor)

    def uncovered(self, start: int, end: int) -> None:
        """Lines no block token covers (reference definitions), verbatim, with any URL."""
        spans = sorted(self.covered)
        position = start
        for covered_start, covered_end in spans:
            if covered_end <= position:
                continue
            if covered_start > position:
                self._verbatim(position, min(covered_start, end))
            position = max(position, covered_end)
            if position >= end:
                return
        if position < end:
            self._verbatim(position, end)

    def _verbatim(self, start: int, end: int) -> None:
        chunk = self.source[start:end]
        if not chunk.strip():
            return
        self.newline(start)
        self.out.exact(chunk, start)


def _spans_and_gaps(
    text: str, pattern: re.Pattern[str], replacement: str
) -> list[tuple[int, int, str | None]]:
    """``text`` cut at each match of ``pattern``: ``(start, end, None)`` for the text
    between matches, ``(start, end, replacement)`` for each match."""
    pieces: list[tuple[int, int, str | None]] = []
    last = 0
    for match in pattern.finditer(text):
        pieces.append((last, match.start(), None))
        pieces.append((match.start(), match.end(), replacement))
        last = match.end()
    pieces.append((last, len(text), None))
    return [piece for piece in pieces if piece[0] < piece[1] or piece[2] is not None]


def _render_markdown(text: str) -> View:
    renderer = _Renderer(text)
    body_start = 0
    front = _FRONT_MATTER.match(text)
    if front:
        # Front matter is data, not Markdown: its lines verbatim (a title or label in it
        # is shown in every citation).
        renderer.out.exact(text[: front.end()], 0)
        body_start = front.end()
    env: dict[str, object] = {}
    # Parsed from the front matter's end, in the source's own offsets: blank it out
    # rather than cut it, so line numbers stay the source's.
    body = "\n" * text.count("\n", 0, body_start) + text[body_start:] if front else text
    tokens = _MD.parse(body, env)
    renderer.covered.append((0, body_start))
    renderer.cursor = body_start
    renderer.block(tokens, 0)
    renderer.uncovered(body_start, len(text))
    renderer.out.drop_inserted_newline()
    # Bare URLs anywhere in the view (linkifying clients make them links).
    links = list(renderer.links)
    seen = {link.span for link in links if link.span}
    for match in _BARE_URL.finditer(text):
        span = (match.start(), match.end())
        if not any(s[0] <= span[0] < s[1] for s in seen):
            in_code = any(start <= span[0] < end for start, end in renderer.code)
            links.append(Link("code" if in_code else "bare", match[0], span))
    references = env.get("references")
    if isinstance(references, dict):
        for definition in references.values():
            href = str(definition.get("href", "")) if isinstance(definition, dict) else ""
            if href:
                at = text.find(href)
                links.append(Link("reference", href, (at, at + len(href)) if at >= 0 else None))
    view = renderer.out.view(text, links=tuple(links))
    segments = renderer.out.segments
    view.decoded = tuple((segments[i][1], segments[i][2]) for i in renderer.rewritten if i < len(segments))
    return view


# --- escapes and encodings -----------------------------------------------------------------

_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_JSON_ESCAPES = re.compile(r"(?:\\u[0-9a-fA-F]{4}|\\/)+")
_X_ESCAPES = re.compile(r"(?:\\x[0-9a-fA-F]{2})+")
_PERCENT = re.compile(r"(?:%[0-9a-fA-F]{2})+")
#: Eight or more hex bytes apart by one blank, colon or comma ("69 67 6e 6f ...").
_SPACED_HEX = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}[ :,]){7,}[0-9A-Fa-f]{2}(?![0-9A-Fa-f])")
#: base64, possibly wrapped across lines (each line the same length but the last).
_BASE64 = re.compile(
    r"(?<![A-Za-z0-9+/_\-])(?=[A-Za-z0-9+/_\-]*[a-z])(?=[A-Za-z0-9+/_\-]*[A-Z0-9])"
    r"[A-Za-z0-9+/_\-]{16,}(?:\n[ \t>]*[A-Za-z0-9+/_\-]{4,})*={0,2}(?![A-Za-z0-9+/=_\-])"
)
_BASE32 = re.compile(
    # One run, or groups of four to eight apart by blanks, as base32 keys are written.
    r"(?<![A-Za-z0-9])(?:[A-Z2-7]{16,}|(?:[A-Z2-7]{4,8}[ ]){3,}[A-Z2-7]{1,8})={0,6}(?![A-Za-z0-9=])"
)
_HEX = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{16,}(?![0-9A-Za-z])")
_TEXTLIKE = regex.compile(r"[\p{L}\p{N}\s.,:;!?'\"()\-/@_]")


def _text_like(raw: bytes) -> str | None:
    """``raw`` as text when it is printable UTF-8 that reads like words or a credential
    (letters, digits, blanks and common punctuation), else None (key material, digests)."""
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(decoded) < 6 or not decoded.replace("\n", " ").replace("\t", " ").isprintable():
        return None
    return decoded if len(_TEXTLIKE.findall(decoded)) >= 0.8 * len(decoded) else None


def _decode_base64(run: str) -> str | None:
    compact = re.sub(r"\s|>", "", run).rstrip("=")
    if len(compact) % 4 == 1:
        return None
    altchars = b"-_" if ("-" in compact or "_" in compact) else None
    try:
        raw = base64.b64decode(compact + "=" * (-len(compact) % 4), altchars=altchars, validate=True)
    except (binascii.Error, ValueError):
        return None
    return _text_like(raw)


def _decode_base32(run: str) -> str | None:
    compact = run.replace(" ", "").rstrip("=")
    try:
        raw = base64.b32decode(compact + "=" * (-len(compact) % 8))
    except (binascii.Error, ValueError):
        return None
    return _text_like(raw)


def _decode_hex(run: str) -> str | None:
    compact = re.sub(r"[ :,]", "", run)
    return None if len(compact) % 2 else _text_like(bytes.fromhex(compact))


def _decode_escapes(text: str) -> list[tuple[int, int, str]]:
    edits: list[tuple[int, int, str]] = []

    def add(pattern: re.Pattern[str], decode: object) -> None:
        assert callable(decode)
        for match in pattern.finditer(text):
            decoded = decode(match[0])
            if decoded is not None and decoded != match[0]:
                edits.append((match.start(), match.end(), decoded))

    if "&" in text:
        add(_ENTITY, html.unescape)
    if "\\" in text:
        add(_JSON_ESCAPES, _json_unescape)
        add(_X_ESCAPES, _x_unescape)
    if "%" in text:
        add(_PERCENT, _percent_unescape)
    add(_SPACED_HEX, _decode_hex)
    return edits


def _json_unescape(run: str) -> str | None:
    try:
        decoded: str = codecs.decode(run.replace("\\/", "/"), "unicode_escape")
    except UnicodeDecodeError:
        return None
    # Surrogate pairs ("\\ud83d\\ude00") come out as two lone surrogates: join them.
    return decoded.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _x_unescape(run: str) -> str | None:
    raw = bytes(int(run[i + 2 : i + 4], 16) for i in range(0, len(run), 4))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _percent_unescape(run: str) -> str | None:
    if len(run) < 3:
        return None
    try:
        return unquote(run, errors="strict")
    except UnicodeDecodeError:
        return None


def _readings(text: str) -> list[tuple[int, int, str]]:
    """Encoded runs that read as text: the run kept, its reading after it."""
    edits: list[tuple[int, int, str]] = []
    for pattern, decode in ((_BASE64, _decode_base64), (_BASE32, _decode_base32), (_HEX, _decode_hex)):
        for match in pattern.finditer(text):
            decoded = decode(match[0])
            if decoded is not None:
                edits.append((match.start(), match.end(), f"{match[0]} ({decoded})"))
    return edits


def _decode(view: View) -> View:
    """Escapes decoded in place, twice (an entity inside percent-encoding), then encoded
    runs followed by their reading."""
    decoded: list[tuple[int, int]] = []
    for _ in range(2):
        edits = _decode_escapes(view.text)
        if not edits:
            break
        decoded += [view.span(start, end) for start, end, _ in edits]
        view = _with_edits(view, _apart(edits))
    edits = _readings(view.text)
    decoded += [view.span(start, end) for start, end, _ in edits]
    if edits:
        view = _with_edits(view, _apart(edits))
    view.decoded = tuple(decoded) + view.decoded
    return view


def _apart(edits: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The edits sorted, each overlapping an earlier one dropped."""
    kept: list[tuple[int, int, str]] = []
    last = -1
    for edit in sorted(edits, key=lambda e: (e[0], -e[1])):
        if edit[0] >= last:
            kept.append(edit)
            last = max(edit[1], edit[0] + 1) if edit[0] == edit[1] else edit[1]
    return kept


# --- folding -------------------------------------------------------------------------------

_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}")
_KEEP_FROM_NFKC = regex.compile(
    r"[\p{Decomposition_Type=Super}\p{Decomposition_Type=Sub}\p{Decomposition_Type=Fraction}]"
)
#: Combining marks of the Latin, Greek and Cyrillic blocks: accents, Zalgo stacking.
#: Hebrew points and Arabic harakat too: optional vowel marks, and a way to split a word.
_DIACRITIC = re.compile(
    "[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
    "\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7\u064b-\u065f\u0670]"
)
_NON_ASCII_WORD = re.compile(r"[^\s]*[^\x00-\x7f][^\s]*")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z][a-z])")
#: A dot, underscore or hyphen between two words of two or more letters ("ignore.previous").
_JOINER = re.compile(r"(?<=[^\W\d_]{2})[._](?=[^\W\d_]{2})")
_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


@functools.cache
def _small_capitals() -> dict[str, str]:
    table: dict[str, str] = {}
    ranges = [range(0x0260, 0x02B0), range(0x1D00, 0x1D2C), range(0xA730, 0xA733), range(0xA7F0, 0xA800)]
    for code_range in ranges:
        for code in code_range:
            name = unicodedata.name(chr(code), "")
            if name.startswith("LATIN LETTER SMALL CAPITAL "):
                letter = name.rsplit(" ", 1)[-1]
                if len(letter) == 1:
                    table[chr(code)] = letter.lower()
    return table


@functools.cache
def _fold_char(character: str, latinise: bool) -> str:
    if _IGNORABLE.match(character):
        return ""
    if not _KEEP_FROM_NFKC.match(character):
        character = unicodedata.normalize("NFKC", character)
    out: list[str] = []
    if latinise:
        from lore.safety.folding import homoglyphs

        table = homoglyphs()
    for piece in character:
        if _DIACRITIC.match(piece):
            continue
        decomposed = unicodedata.normalize("NFD", piece)
        if len(decomposed) > 1 and all(_DIACRITIC.match(mark) for mark in decomposed[1:]):
            piece = decomposed[0]
        piece = _small_capitals().get(piece, piece)
        if latinise:
            piece = table.get(ord(piece), piece)
        out.append(piece.casefold())
    return "".join(out)


def fold(view: View) -> View:
    """The matching view for wording over ``view`` (layer 2 of the module note)."""
    text = view.text
    edits: list[tuple[int, int, str]] = [(m.start(), m.start(), " ") for m in _CAMEL.finditer(text)]
    edits += [(m.start(), m.end(), " ") for m in _JOINER.finditer(text)]
    if not text.isascii():
        from lore.safety.folding import homoglyphs

        table = homoglyphs()
        small = _small_capitals()
        for word in _NON_ASCII_WORD.finditer(text):
            token = word[0]
            # Look-alike letters are folded to Latin in a word that holds Latin letters
            # ("Ignоre"), or whose every letter is a look-alike ("ІОЅ"): a Greek or Russian
            # word stays in its script, for its own language's patterns.
            letters = [c for c in token if c.isalpha()]
            latinise = any(c.isascii() for c in letters) or all(
                ord(c) in table or c in small or c.isascii() for c in letters
            )
            for offset, character in enumerate(token):
                if character.isascii():
                    continue
                folded = _fold_char(character, latinise)
                if folded != character:
                    edits.append((word.start() + offset, word.start() + offset + 1, folded))
    if edits:
        edits.sort(key=lambda edit: (edit[0], edit[1]))
        view = _with_edits(view, _apart(edits))
    lowered = view.text.translate(_ASCII_LOWER)
    if lowered == view.text:
        return view
    return View(lowered, view.source, [(0, 0, len(lowered), True)], base=view)


def fold_pattern(pattern: str) -> str:
    """A regex written for the view, folded as the view is (NFKC, marks stripped), so
    that "नज़रअंदाज़" or "προηγούμενες" in a pattern matches the view's spelling."""
    decomposed = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", pattern))
    return unicodedata.normalize("NFC", _DIACRITIC.sub("", decomposed)) if not pattern.isascii() else pattern


def canonical(text: str) -> View:
    """The view every wording detector reads: ``fold(render(text))``."""
    return fold(render(text))


# --- alternative readings ------------------------------------------------------------------


def rot13(view: View) -> View:
    """``view`` read through rot13 (letters shifted, positions unchanged)."""
    return View(codecs.decode(view.text, "rot13"), view.source, [(0, 0, len(view.text), True)], base=view)


class _Reversed(View):
    __slots__ = ()

    def span(self, start: int, end: int) -> tuple[int, int]:
        length = len(self.text)
        assert self._base is not None
        return self._base.span(length - end, length - start)


def reversed_view(view: View) -> View:
    """``view`` read backwards ("snoitcurtsni suoiverp erongi")."""
    return _Reversed(view.text[::-1], view.source, [], base=view)


def replace_spans(source: str, spans: Iterable[tuple[int, int, str]]) -> str:
    """``source`` with each ``(start, end, replacement)`` applied; overlapping spans are
    merged and the first one's replacement stands for the union."""
    merged: list[tuple[int, int, str]] = []
    for start, end, replacement in sorted(spans, key=lambda s: (s[0], -s[1])):
        if merged and start < merged[-1][1]:
            first = merged[-1]
            merged[-1] = (first[0], max(first[1], end), first[2])
            continue
        merged.append((start, end, replacement))
    pieces: list[str] = []
    last = 0
    for start, end, replacement in merged:
        pieces += [source[last:start], replacement]
        last = end
    return "".join(pieces) + source[last:]
