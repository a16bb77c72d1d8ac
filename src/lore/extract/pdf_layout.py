"""Lines of a PDF page, with their font size, to Markdown with headings.

Library-agnostic on purpose: the PDF reader (``pdf.py``) only has to produce ``Box``es of
``Line``s in reading order. Headings come from the outline (bookmarks) when the file has
one that matches its text, because the author put the structure there; else from font
sizes: lines set larger than the body text, ranked by size, are levels 1..6.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

#: A line at least this much larger than the body text (points) may be a heading.
HEADING_MIN_GAIN = 1.0
#: A heading is a short box; a long one set large is a pull quote or a cover page.
HEADING_MAX_CHARS = 150
HEADING_MAX_LINES = 3
#: A bold line at body size is a heading only when short: a longer one is emphasis.
BOLD_HEADING_MAX_CHARS = 90
#: A short line at the top or foot of at least this share of the pages (of a document of at
#: least this many pages) is a running header or footer, and left out.
RUNNING_SHARE = 0.6
RUNNING_MIN_PAGES = 3
RUNNING_MAX_CHARS = 80

_BULLET = re.compile(r"^\s*(?:[•◦▪▫‣⁃●○■□–\-*\x7f]|\(cid:\d+\))\s+")
_NUMBERED = re.compile(r"^\s*(\d{1,3})[.)]\s+")
_CID = re.compile(r"\(cid:\d+\)")
_MARKDOWN_START = re.compile(r"^([#>+=|`~])")
_WORD = re.compile(r"\w+")
_DIGITS = re.compile(r"\d+")
#: A box that is only a page number ("7", "Page 7", "7 / 12", "Page 7 of 12"): page furniture.
_PAGE_NUMBER = re.compile(r"^(?:page\s+)?\d{1,5}(?:\s*(?:/|of)\s*\d{1,5})?$", re.IGNORECASE)


@dataclass(frozen=True)
class Line:
    text: str
    size: float
    mono: bool = False
    bold: bool = False


@dataclass
class Box:
    """Lines the reader grouped together (a paragraph, a list, a heading)."""

    lines: list[Line] = field(default_factory=list)
    page: int = 0
    #: Baseline of the first line, from the foot of the page: finds running headers and
    #: footers wherever the producer wrote them in the content stream.
    y: float = 0.0

    @property
    def text(self) -> str:
        return " ".join(line.text.strip() for line in self.lines).strip()


def normalise(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def body_size(boxes: Sequence[Box]) -> float:
    """The font size most characters are set in."""
    sizes: Counter[float] = Counter()
    for box in boxes:
        for line in box.lines:
            sizes[round(line.size * 2) / 2] += len(line.text)
    return sizes.most_common(1)[0][0] if sizes else 0.0


def heading_levels(
    boxes: Sequence[Box], outline: Sequence[tuple[int, str]]
) -> dict[int, int]:
    """``{box index: heading level}``; from the outline when any of its titles is found,
    else from font sizes."""
    if outline:
        found = _outline_levels(boxes, outline)
        if found:
            return found
    return _size_levels(boxes)


def _outline_levels(boxes: Sequence[Box], outline: Sequence[tuple[int, str]]) -> dict[int, int]:
    # Each title is matched once, to the first box with the same words after the last
    # match, so a heading repeated in a running header is not taken twice.
    unused = [(level, normalise(title)) for level, title in outline if normalise(title)]
    levels: dict[int, int] = {}
    for number, box in enumerate(boxes):
        if len(box.lines) > HEADING_MAX_LINES:
            continue
        words = normalise(box.text)
        for position, (level, title) in enumerate(unused):
            if title == words:
                levels[number] = min(level, 6)
                del unused[position]
                break
    return levels


def _size_levels(boxes: Sequence[Box]) -> dict[int, int]:
    """Larger sizes rank first; a lone bold line at the body size (how Word exports its
    lower heading levels) is the level below the smallest larger size."""
    body = body_size(boxes)
    candidates: dict[int, float] = {}
    bold: list[int] = []
    for number, box in enumerate(boxes):
        sizes = {round(line.size * 2) / 2 for line in box.lines}
        text = box.text
        if len(sizes) != 1 or not 0 < len(text) <= HEADING_MAX_CHARS or not _WORD.search(text):
            continue
        size = sizes.pop()
        if len(box.lines) <= HEADING_MAX_LINES and size >= body + HEADING_MIN_GAIN:
            candidates[number] = size
        elif (len(box.lines) == 1 and box.lines[0].bold and abs(size - body) < HEADING_MIN_GAIN
              and len(text) <= BOLD_HEADING_MAX_CHARS and not text.endswith((".", ":", ","))
              and not _BULLET.match(text) and not _NUMBERED.match(text)):
            bold.append(number)
    ranked = sorted(set(candidates.values()), reverse=True)
    levels = {number: min(ranked.index(size) + 1, 6) for number, size in candidates.items()}
    levels.update(dict.fromkeys(bold, min(len(ranked) + 1, 6)))
    return levels


def running_text(boxes: Sequence[Box]) -> frozenset[str]:
    """Running headers and footers: one short line no larger than the body text, the
    top-most or bottom-most on its page, with the same words on most pages (digits aside,
    so "Page 3 of 9" repeats). Only the page's edges count, so content a template repeats
    on every page is kept."""
    pages: dict[int, list[Box]] = {}
    for box in boxes:
        pages.setdefault(box.page, []).append(box)
    if len(pages) < RUNNING_MIN_PAGES:
        return frozenset()
    seen: Counter[str] = Counter()
    largest = body_size(boxes) + 0.25  # furniture is set small; a heading atop each page is not it
    for on_page in pages.values():
        edges = (max(on_page, key=lambda box: box.y), min(on_page, key=lambda box: box.y))
        seen.update({_furniture_key(box) for box in edges if len(box.lines) == 1
                     and len(box.text) <= RUNNING_MAX_CHARS and box.lines[0].size <= largest})
    return frozenset(text for text, count in seen.items() if text and count >= RUNNING_SHARE * len(pages))


def _furniture_key(box: Box) -> str:
    return _DIGITS.sub("0", normalise(box.text))


def to_markdown(boxes: Sequence[Box], outline: Sequence[tuple[int, str]] = ()) -> str:
    furniture = running_text(boxes)
    boxes = [box for box in boxes if box.text and not _PAGE_NUMBER.match(box.text)
             and _furniture_key(box) not in furniture]
    levels = heading_levels(boxes, outline)
    parts: list[str] = []
    for number, box in enumerate(boxes):
        if number in levels:
            parts.append(f"{'#' * levels[number]} {_clean(box.text)}")
        elif all(line.mono for line in box.lines):
            parts.append(_code(box))
        else:
            parts.extend(_prose(box))
    return "\n\n".join(part for part in parts if part.strip()) + "\n"


def _clean(text: str) -> str:
    return " ".join(_CID.sub("", text).split())


def _code(box: Box) -> str:
    lines = [line.text.rstrip() for line in box.lines]
    margin = min(len(line) - len(line.lstrip()) for line in lines)
    body = "\n".join(line[margin:] for line in lines)
    fence = "~~~" if "```" in body else "```"
    return f"{fence}\n{body}\n{fence}"


def _prose(box: Box) -> list[str]:
    """A box as paragraphs and list items: a line opening with a bullet or a number
    starts an item, the lines after it continue it."""
    blocks: list[list[str]] = []
    kinds: list[str] = []
    for line in box.lines:
        text = line.text.strip()
        if bullet := _BULLET.match(text):
            blocks.append(["- " + _clean(text[bullet.end():])])
            kinds.append("item")
        elif number := _NUMBERED.match(text):
            blocks.append([f"{number.group(1)}. " + _clean(text[number.end():])])
            kinds.append("item")
        elif blocks:
            blocks[-1].append(_clean(text))
        else:
            blocks.append([_clean(text)])
            kinds.append("para")
    out: list[str] = []
    items: list[str] = []
    for kind, block in zip(kinds, blocks, strict=True):
        joined = _join(block)
        if kind == "item":
            items.append(joined)
            continue
        if items:
            out.append("\n".join(items))
            items = []
        out.append(_MARKDOWN_START.sub(r"\\\1", joined))
    if items:
        out.append("\n".join(items))
    return out


def _join(lines: Sequence[str]) -> str:
    """Lines of one paragraph; a line ending in a hyphen is joined without a space, which
    keeps identifiers broken across lines (``payments-`` / ``consumer``) whole."""
    text = ""
    for line in lines:
        if not line:
            continue
        text = f"{text}{line}" if text.endswith("-") or not text else f"{text} {line}"
    return text

