"""Cut a document body into blocks, and blocks into smaller spans, by format.

Everything here works on character offsets into one body string: a block or a piece is a
``(start, end)`` span, trimmed of surrounding whitespace. Chunks are therefore always
verbatim slices of the body, and because block boundaries are only ever *start*
positions (each block runs to where the next begins), no text can fall between blocks —
not even markdown link-reference definitions, which markdown-it emits no token for.

The chunker (``lore.chunking``) decides how blocks are packed; this module only knows
where the natural boundaries of each format are.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lore.models import SECTION_SEPARATOR, Chunk

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

Span = tuple[int, int]
#: Finds the natural sub-spans of ``text[start:end]``; one span back means "cannot split".
Splitter = Callable[[str, int, int], list[Span]]

# Block kinds. Heading, code, table and JSON pieces are atomic for overlap: a chunk never
# starts in the middle of one just to repeat its tail.
HEADING = "heading"
PROSE = "prose"
LIST = "list"
CODE = "code"
TABLE = "table"
#: Indentation-structured data: YAML and TOML.
DATA = "data"
JSON = "json"
ATOMIC_KINDS = frozenset({HEADING, CODE, TABLE, JSON})


@dataclass(frozen=True, slots=True)
class Block:
    start: int
    end: int
    kind: str
    #: Heading path the block sits under, joined with ``SECTION_SEPARATOR``.
    section: str
    #: A data document's top-level key: the section its pieces get if it must be split.
    key: str = ""


# -- spans ---------------------------------------------------------------------------


def trim(text: str, start: int, end: int) -> Span | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _pieces(text: str, cuts: Sequence[int], start: int, end: int) -> list[Span]:
    bounds = [start, *cuts, end]
    return [span for a, b in itertools.pairwise(bounds) if (span := trim(text, a, b))]


_NEWLINE = re.compile("\n")
_WORD = re.compile(r"\S+")


def line_starts(text: str, start: int = 0, end: int | None = None) -> list[int]:
    """Offsets of the lines of ``text[start:end]``, the first being ``start``."""
    end = len(text) if end is None else end
    return [start, *(m.end() for m in _NEWLINE.finditer(text, start, end) if m.end() < end)]


# A sentence ends at . ! ? (plus closing quotes/brackets) before whitespace; the next
# sentence must not start lowercase, which spares most "e.g. foo" and "v1.2 is".
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*\s+")


def sentence_cuts(text: str, start: int, end: int) -> list[int]:
    return [
        m.end()
        for m in _SENTENCE_END.finditer(text, start, end)
        if m.end() < end and not text[m.end()].islower()
    ]


def sentence_spans(text: str, start: int, end: int) -> list[Span]:
    return _pieces(text, sentence_cuts(text, start, end), start, end)


def line_spans(text: str, start: int, end: int) -> list[Span]:
    return _pieces(text, line_starts(text, start, end)[1:], start, end)


def word_spans(text: str, start: int, end: int) -> list[Span]:
    return [m.span() for m in _WORD.finditer(text, start, end)]


def indented_item_spans(text: str, start: int, end: int) -> list[Span]:
    """Split at the lines indented least (after the first): list items, YAML keys, TOML
    keys. Closing brackets and comments never start an item."""
    starts = line_starts(text, start, end)
    candidates: list[tuple[int, int]] = []
    for offset, next_offset in zip(starts[1:], [*starts[2:], end], strict=False):
        line = text[offset:next_offset].rstrip("\n")
        stripped = line.lstrip(" \t")
        if stripped.strip() and stripped[0] not in "}]#":
            candidates.append((offset, len(line) - len(stripped)))
    if not candidates:
        return [(start, end)]
    base = min(indent for _, indent in candidates)
    return _pieces(text, [offset for offset, indent in candidates if indent == base], start, end)


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},]')


def json_member_spans(text: str, start: int, end: int) -> list[Span]:
    """Split after the commas nearest the outside: members of the outermost object or
    array. Strings are skipped whole, so a comma inside one never counts."""
    depth = 0
    commas: list[tuple[int, int]] = []
    for match in _JSON_TOKEN.finditer(text, start, end):
        char = match.group()
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth > 0:  # a member's own trailing comma sits at depth 0
            commas.append((depth, match.end()))
    if not commas:
        return [(start, end)]
    outer = min(depth for depth, _ in commas)
    return _pieces(text, [cut for depth, cut in commas if depth == outer], start, end)


#: How a too-large block of each kind is broken down, coarsest boundary first.
SPLITTERS: dict[str, tuple[Splitter, ...]] = {
    HEADING: (word_spans,),
    PROSE: (sentence_spans, line_spans, word_spans),
    LIST: (indented_item_spans, sentence_spans, line_spans, word_spans),
    CODE: (line_spans, word_spans),
    TABLE: (line_spans, word_spans),
    DATA: (indented_item_spans, line_spans, word_spans),
    JSON: (json_member_spans, line_spans, word_spans),
}


_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})")


def _fenced_ranges(text: str, start: int, end: int) -> list[Span]:
    """Code fences nested inside a list or quote: (opening line end, closing line end)."""
    ranges: list[Span] = []
    opener: tuple[str, int] | None = None
    starts = line_starts(text, start, end)
    for offset, next_offset in zip(starts, [*starts[1:], end], strict=True):
        match = _FENCE.match(text, offset, next_offset)
        if match is None:
            continue
        if opener is None:
            opener = (match.group(1), next_offset)
        elif match.group(1).startswith(opener[0]):
            ranges.append((opener[1], next_offset))
            opener = None
    if opener is not None:
        ranges.append((opener[1], end))
    return ranges


_ITEM_START = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]")


def _starts_item(text: str, offset: int) -> bool:
    """A line that opens a list item or follows a blank line (a new paragraph)."""
    previous_line = text[text.rfind("\n", 0, offset - 1) + 1 : offset]
    return bool(_ITEM_START.match(text, offset)) or previous_line.isspace()


def overlap_cuts(text: str, start: int, end: int, kind: str) -> list[int]:
    """Where an overlap may begin inside a non-atomic piece: a sentence, list item or
    paragraph start (any line start for data), never inside a code fence, always on a
    non-blank character. Soft-wrapped lines are not starts, so an overlap never opens
    mid-sentence."""
    if kind in ATOMIC_KINDS:
        return []
    fenced = _fenced_ranges(text, start, end)
    lines = line_starts(text, start, end)[1:]
    if kind != DATA:
        lines = [offset for offset in lines if _starts_item(text, offset)]
    cuts: set[int] = set()
    for cut in {*sentence_cuts(text, start, end), *lines}:
        if any(low <= cut < high for low, high in fenced):
            continue
        if (span := trim(text, cut, end)) is not None:
            cuts.add(span[0])
    return sorted(cuts)


# -- headings ------------------------------------------------------------------------


def _normalised(text: str) -> str:
    return re.sub(r"[\W_]+", "", text).casefold()


def is_title(heading: str, title: str) -> bool:
    """``# NodeRAIDDiskFailure`` is the title "Node RAID Disk Failure"."""
    key = _normalised(heading)
    return bool(key) and key == _normalised(title)


class _SectionPath:
    """The heading path at the current position. A top-level heading that merely repeats
    the document's title is left out: the title is already in every chunk's header."""

    def __init__(self, title: str) -> None:
        self._title = title
        self._stack: list[tuple[int, str | None]] = []

    def enter(self, level: int, heading: str) -> None:
        self._stack = [(lvl, name) for lvl, name in self._stack if lvl < level]
        self._stack.append((level, None if level == 1 and is_title(heading, self._title) else heading))

    def __str__(self) -> str:
        return SECTION_SEPARATOR.join(name for _, name in self._stack if name)


# -- markdown ------------------------------------------------------------------------


@functools.cache
def _markdown() -> tuple[MarkdownIt, MarkdownIt]:
    """The block parser and the inline one, built at first use: importing markdown-it and
    compiling its rules would fall on every process importing this module, where a search
    only joins passages with it (``joined``).

    Only block structure is needed; inline parsing (links, emphasis) would double the cost
    and is run just for heading text."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").disable("inline"), MarkdownIt("commonmark")


_MARKDOWN_KINDS = {
    "heading_open": HEADING,
    "fence": CODE,
    "code_block": CODE,
    "html_block": CODE,
    "table_open": TABLE,
    "bullet_list_open": LIST,
    "ordered_list_open": LIST,
}


def _heading_text(source: str) -> str:
    """``Check `etcd` [logs](url)`` -> "Check etcd logs"."""
    parts = [
        " " if child.type in ("softbreak", "hardbreak") else child.content
        for token in _markdown()[1].parseInline(source)
        for child in token.children or []
        if child.type in ("text", "code_inline", "softbreak", "hardbreak")
    ]
    return " ".join("".join(parts).split())


def _markdown_starts(text: str) -> list[tuple[int, str, tuple[int, str] | None]]:
    """(offset, kind, (level, heading text) for headings) of each top-level block."""
    offsets = line_starts(text)
    tokens = _markdown()[0].parse(text)
    starts: list[tuple[int, str, tuple[int, str] | None]] = []
    for index, token in enumerate(tokens):
        if token.level != 0 or token.map is None or token.nesting < 0:
            continue
        heading = None
        if token.type == "heading_open":
            heading = (int(token.tag[1:]), _heading_text(tokens[index + 1].content))
        starts.append((offsets[token.map[0]], _MARKDOWN_KINDS.get(token.type, PROSE), heading))
    return starts


def markdown_blocks(text: str, title: str) -> list[Block]:
    starts = _markdown_starts(text)
    if not starts or starts[0][0] > 0:
        starts.insert(0, (0, PROSE, None))
    path = _SectionPath(title)
    blocks: list[Block] = []
    ends = [offset for offset, _, _ in starts[1:]] + [len(text)]
    for (offset, kind, heading), end in zip(starts, ends, strict=True):
        if heading is not None:
            path.enter(*heading)
        if span := trim(text, offset, end):
            blocks.append(Block(*span, kind, str(path)))
    return blocks


#: A line that may open or underline a top-level title: ``# ...`` or ``===``.
_TITLE_LINE = re.compile(r"^ {0,3}(?:#(?:[ \t]|$)|=+[ \t]*$)", re.MULTILINE)


def markdown_title(text: str) -> str | None:
    """The first top-level ``#`` or ``===`` heading.

    A source looks up the title of every file on every sync, changed or not, so only as
    much is parsed as it takes: a prefix through the line after the next candidate line,
    doubling. Markdown settles a line's block structure from the lines up to it and the
    one after (a setext underline, a table's delimiter row), so a heading that ends
    before the last line of a prefix is the same heading in the whole text.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # as markdown-it reads line ends
    searched, size = 0, 0
    while (candidate := _TITLE_LINE.search(text, searched)) is not None:
        end = max(_line_end(text, _line_end(text, candidate.start())), _line_end(text, size))
        complete = end >= len(text)
        tokens = _markdown()[0].parse(text[:end])
        lines = text.count("\n", 0, end)
        for index, token in enumerate(tokens):
            if token.type != "heading_open" or token.level != 0 or token.tag != "h1" or not token.map:
                continue
            if not complete and token.map[1] >= lines:
                break  # it ends on the prefix's last line: settle it with a longer prefix
            if title := _heading_text(tokens[index + 1].content):
                return title
        if complete:
            return None
        searched, size = text.rfind("\n", 0, end - 1) + 1, 2 * end
    return None


def _line_end(text: str, offset: int) -> int:
    """The offset just past the line holding ``offset`` (past its newline)."""
    found = text.find("\n", offset)
    return len(text) if found < 0 else found + 1


# -- reStructuredText ----------------------------------------------------------------

# Any run of one non-alphanumeric printable ASCII character (docutils' adornment rule).
_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1+[ \t]*")


def _rst_heading(lines: Sequence[str], i: int) -> tuple[int, str, tuple[str, bool]] | None:
    """(lines used, title, style) when a section title starts at line ``i``."""
    line = lines[i].rstrip()
    if _ADORNMENT.fullmatch(line) and i + 2 < len(lines):
        title, under = lines[i + 1].strip(), lines[i + 2].rstrip()
        if title and not _ADORNMENT.fullmatch(title) and under == line and len(line) >= len(title):
            return 3, title, (line[0], True)
    if line and not line[0].isspace() and not _ADORNMENT.fullmatch(line) and i + 1 < len(lines):
        under = lines[i + 1].rstrip()
        if _ADORNMENT.fullmatch(under) and len(under) >= len(line):
            return 2, line.strip(), (under[0], False)
    return None


def _is_literal_body(text: str, previous: Block, first_line: str) -> bool:
    """An indented paragraph after ``::`` or a directive is that block's literal body."""
    return (
        first_line[:1].isspace()
        and previous.kind != HEADING
        and (previous.kind == CODE or text.endswith("::", previous.start, previous.end))
    )


def rst_blocks(text: str, title: str) -> list[Block]:
    lines = text.split("\n")
    offsets = line_starts(text)
    styles: list[tuple[str, bool]] = []
    path = _SectionPath(title)
    blocks: list[Block] = []
    paragraph: int | None = None

    def close_paragraph(upto: int) -> None:
        nonlocal paragraph
        if paragraph is None:
            return
        first, paragraph = paragraph, None
        span = trim(text, offsets[first], offsets[upto] if upto < len(offsets) else len(text))
        if span is None:
            return
        if blocks and _is_literal_body(text, blocks[-1], lines[first]):
            blocks[-1] = Block(blocks[-1].start, span[1], CODE, blocks[-1].section)
        else:
            kind = CODE if text.startswith("..", span[0]) else PROSE
            blocks.append(Block(*span, kind, str(path)))

    i = 0
    while i < len(lines):
        heading = _rst_heading(lines, i) if paragraph is None else None
        if heading is not None:
            used, name, style = heading
            if style not in styles:
                styles.append(style)
            path.enter(styles.index(style) + 1, name)
            end = offsets[i + used] if i + used < len(offsets) else len(text)
            if span := trim(text, offsets[i], end):
                blocks.append(Block(*span, HEADING, str(path)))
            i += used
            continue
        if not lines[i].strip():
            close_paragraph(i)
        elif paragraph is None:
            paragraph = i
        i += 1
    close_paragraph(len(lines))
    return blocks


def rst_title(text: str) -> str | None:
    lines = text.split("\n")
    for i in range(len(lines)):
        if heading := _rst_heading(lines, i):
            return heading[1]
    return None


# -- plain text ----------------------------------------------------------------------


def plain_blocks(text: str, title: str) -> list[Block]:
    cuts = [m.end() for m in re.finditer(r"\n[ \t]*\n", text)]
    return [Block(start, end, PROSE, "") for start, end in _pieces(text, cuts, 0, len(text))]


# -- data: YAML, TOML, JSON ------------------------------------------------------------

_YAML_KEY = re.compile(r"""(?:"([^"]*)"|'([^']*)'|([^\s#'"-][^:#]*?))[ \t]*:(?:\s|$)""")
_TOML_TABLE = re.compile(r"\[\[?\s*([^\]\n]+?)\s*\]\]?[ \t]*(?:#.*)?")
_JSON_KEY = re.compile(r'[{\[]?\s*"((?:[^"\\]|\\.)*)"\s*:')


def _top_level_blocks(
    text: str, is_boundary: Callable[[str], bool], key_of: Callable[[str], str], kind: str
) -> list[Block]:
    """Blocks starting at each boundary line; comment lines directly above a boundary
    belong to the block below them."""
    offsets = line_starts(text)
    lines = text.split("\n")
    cuts: list[int] = []
    for i, line in enumerate(lines):
        if i and is_boundary(line):
            first = i
            while first > 0 and lines[first - 1].startswith("#"):
                first -= 1
            cuts.append(offsets[first])
    blocks = []
    for start, end in _pieces(text, sorted(set(cuts)), 0, len(text)):
        body_line = next(
            (line for line in text[start:end].split("\n") if line.strip() and not line.startswith("#")), ""
        )
        blocks.append(Block(start, end, kind, "", key_of(body_line)))
    return blocks


def _yaml_key(line: str) -> str:
    match = _YAML_KEY.match(line)
    return next((group for group in match.groups() if group), "") if match else ""


def yaml_blocks(text: str, title: str) -> list[Block]:
    content = [line for line in text.split("\n") if line.strip() and not line.startswith(("#", "---"))]
    top_is_list = bool(content) and (content[0] == "-" or content[0].startswith("- "))

    def is_boundary(line: str) -> bool:
        if not line.strip() or line[0].isspace() or line[0] in "#}]":
            return False
        return top_is_list or not (line == "-" or line.startswith("- "))

    return _top_level_blocks(text, is_boundary, _yaml_key, DATA)


def toml_blocks(text: str, title: str) -> list[Block]:
    def key_of(line: str) -> str:
        match = _TOML_TABLE.fullmatch(line.strip())
        return match.group(1) if match else ""

    return _top_level_blocks(text, lambda line: bool(_TOML_TABLE.fullmatch(line)), key_of, DATA)


def json_blocks(text: str, title: str) -> list[Block]:
    blocks = []
    for start, end in json_member_spans(text, 0, len(text)):
        match = _JSON_KEY.match(text, start, end)
        blocks.append(Block(start, end, JSON, "", match.group(1) if match else ""))
    return blocks


# -- a document back from its chunks -------------------------------------------------


def merge_chunks(chunks: Sequence[Chunk]) -> str:
    """A document's Markdown rebuilt from its chunks: verbatim slices of the body in order,
    each opening with a little of the one before (the chunker's overlap), cut where one
    chunk's end repeats as the next one's start (the documents reader, skills)."""
    return joined([chunk.text for chunk in chunks])


def joined(texts: Sequence[str]) -> str:
    """Consecutive chunks' texts as one, each overlap kept once (a paragraph break where the
    chunker left none): a document rebuilt, or a run of one section's chunks merged into one
    passage (``lore.arrange``)."""
    text = ""
    for piece in texts:
        text = joined_to(text, piece)
    return text


def joined_to(text: str, piece: str) -> str:
    """``joined([*texts, piece])`` given ``text = joined(texts)``: one more chunk joined,
    without joining the ones before it again."""
    if not text:
        return piece
    shared = _overlap(text, piece)
    return text + (piece[shared:] if shared else "\n\n" + piece)


#: The fewest characters taken for an overlap, so a lone repeated letter is not.
_MIN_OVERLAP = 8


def _overlap(before: str, after: str) -> int:
    """The longest start of ``after`` that ``before`` ends with (at least ``_MIN_OVERLAP``
    characters).

    Only where ``before`` holds the first ``_MIN_OVERLAP`` characters of ``after`` can such
    an overlap begin, so those places alone are tried, leftmost (longest) first: a
    search in C instead of comparing every length, which cost a merged passage a
    number of comparisons growing with the square of its length."""
    if len(after) < _MIN_OVERLAP:
        return 0
    opening = after[:_MIN_OVERLAP]
    start = before.find(opening, max(0, len(before) - len(after)))
    while start != -1:
        if after.startswith(before[start:]):
            return len(before) - start
        start = before.find(opening, start + 1)
    return 0
