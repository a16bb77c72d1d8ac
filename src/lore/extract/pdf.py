"""PDF to Markdown with pypdf (BSD): text with each fragment's font size and position,
the outline (bookmarks) for headings, the metadata for the title.

pypdf rather than pdfminer.six: equal heading fidelity on the generated files, about three
times the pages per second, and it bounds every stream it inflates (75 MB by default),
where pdfminer.six inflates a FlateDecode stream whole, so a small PDF could hold a
decompression bomb (docs/ingestion.md has the measurement).
"""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pypdf import PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, PyPdfError
from pypdf.generic import Destination

from lore.errors import ExtractionError
from lore.extract.limits import Limits, check_chars
from lore.extract.pdf_layout import Box, Line, to_markdown
from lore.extract.records import Extracted

MEDIA_TYPE = "application/pdf"
_MONO_FONTS = ("courier", "mono", "consol", "menlo", "inconsolata", "code")
#: Font names of bold faces: "Helvetica-Bold", "ABCDEF+Calibri-Bold", "Arial,Bold", "Arial-BoldMT".
_BOLD_FONTS = ("bold", "black", "heavy", "semibold", "demi")
#: A line more than this many of its font sizes below the last one starts a new box.
_PARAGRAPH_GAP = 1.55
#: Titles tools write when the author set none.
_PLACEHOLDER_TITLES = frozenset({"untitled", "document", "untitled document", "title"})
_PLACEHOLDER_PREFIXES = ("microsoft word - ", "microsoft powerpoint - ")

# pypdf logs every recoverable oddity of a file as a warning; sync reports failures itself.
logging.getLogger("pypdf").setLevel(logging.ERROR)


def extract(data: bytes, limits: Limits) -> Extracted:
    reader = _open(data)
    try:
        pages = len(reader.pages)
        if pages > limits.max_pages:
            raise ExtractionError(f"PDF has {pages:,} pages, over the limit ({limits.max_pages:,})")
        boxes = page_boxes(reader)
        outline = outline_entries(reader)
        title = _metadata_title(reader)
    except ExtractionError:
        raise
    except DependencyError as err:
        raise ExtractionError(f"PDF needs a decoder that is not installed ({err})") from err
    except FileNotDecryptedError as err:
        raise ExtractionError("encrypted PDF (a password is needed to open it)") from err
    # A parser of untrusted files fails in many ways (pypdf's own errors, and KeyError,
    # TypeError, RecursionError... on malformed objects): each is this file's failure.
    except Exception as err:
        raise ExtractionError(f"broken PDF: {_brief(err)}") from err
    markdown = check_chars(to_markdown(boxes, outline), limits)
    # A scan may still carry a text page number or a running header: no words is no text.
    if not any(character.isalnum() for character in markdown.replace("#", "")):
        raise ExtractionError(
            f"scanned PDF: no text layer ({pages:,} page{'s' if pages != 1 else ''} without extractable text;"
            " OCR it first)"
        )
    if title is None:
        title = next((line[2:].strip() for line in markdown.splitlines() if line.startswith("# ")), None)
    return Extracted(markdown=markdown, title=title, media_type=MEDIA_TYPE)


def _open(data: bytes) -> PdfReader:
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            # An owner password alone (print/copy restrictions) opens with the empty user
            # password; anything else needs a password lore does not have.
            raise ExtractionError("encrypted PDF (a password is needed to open it)")
    except ExtractionError:
        raise
    except DependencyError as err:
        raise ExtractionError(f"encrypted PDF that needs a decoder that is not installed ({err})") from err
    except Exception as err:  # see extract(): any parser failure is this file's
        raise ExtractionError(f"broken PDF: {_brief(err)}") from err
    return reader


def _brief(err: BaseException) -> str:
    text = " ".join(str(err).split())[:160]
    kind = "" if isinstance(err, PyPdfError) else f"{type(err).__name__}: "
    return f"{kind}{text}" if text else type(err).__name__


def outline_entries(reader: PdfReader) -> list[tuple[int, str]]:
    """``(level, title)`` of every bookmark, depth first (level 1 at the top)."""
    found: list[tuple[int, str]] = []

    def walk(items: Sequence[Any], level: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, level + 1)
            elif isinstance(item, Destination) and isinstance(item.title, str):
                found.append((level, item.title))

    walk(reader.outline, 1)
    return found


def _metadata_title(reader: PdfReader) -> str | None:
    metadata = reader.metadata
    title = metadata.title if metadata is not None else None
    if not isinstance(title, str) or not title.strip():
        return None
    title = " ".join(title.split())
    lowered = title.lower()
    return None if lowered in _PLACEHOLDER_TITLES or lowered.startswith(_PLACEHOLDER_PREFIXES) else title


@dataclass
class _LineBuilder:
    """Collects pypdf's text fragments into lines by baseline, then lines into boxes."""

    boxes: list[Box] = field(default_factory=list)
    _parts: list[str] = field(default_factory=list)
    _y: float = math.nan
    _size: float = 0.0
    _mono: bool = False
    _bold: bool = False
    _last_y: float = math.nan
    page: int = 0

    def fragment(self, text: str, y: float, size: float, mono: bool, bold: bool = False) -> None:
        pieces = text.split("\n")
        for number, piece in enumerate(pieces):
            if number:
                self.end_line()
            if not piece.strip() and not self._parts:
                continue
            if self._parts and abs(y - self._y) > 0.4 * max(size, self._size, 1.0):
                self.end_line()
            if not self._parts:
                self._y, self._size, self._mono, self._bold = y, size, mono, bold
            elif piece.strip():  # a space in another font says nothing about the line
                self._mono, self._bold = self._mono and mono, self._bold and bold
                self._size = max(self._size, size)
            self._parts.append(piece)

    def end_line(self) -> None:
        joined = "".join(self._parts)
        # Code keeps its indentation: YAML and Python mean something by it.
        text = joined.rstrip() if self._mono else joined.strip()
        self._parts = []
        if not text.strip():
            return
        line = Line(text, round(self._size, 1), self._mono, self._bold)
        previous = self.boxes[-1].lines[-1] if self.boxes and self.boxes[-1].lines else None
        gap = self._last_y - self._y
        if (previous is None or math.isnan(gap) or gap <= 0 or gap > _PARAGRAPH_GAP * line.size
                or abs(previous.size - line.size) >= 0.5 or previous.mono != line.mono
                or previous.bold != line.bold):
            self.boxes.append(Box(page=self.page, y=self._y))
        self.boxes[-1].lines.append(line)
        self._last_y = self._y

    def end_page(self) -> None:
        self.end_line()
        self._last_y = math.nan
        self.page += 1


def page_boxes(reader: PdfReader) -> list[Box]:
    builder = _LineBuilder()
    for page in reader.pages:

        def visit(text: str, cm: Sequence[float], tm: Sequence[float], font: Any, font_size: float) -> None:
            if not text:
                return
            matrix = _multiply(tm, cm)
            size = abs(font_size) * math.hypot(matrix[2], matrix[3])
            name = str(font.get("/BaseFont", "")).lower() if isinstance(font, dict) else ""
            mono = any(part in name for part in _MONO_FONTS)
            builder.fragment(text, matrix[5], size, mono, any(part in name for part in _BOLD_FONTS))

        page.extract_text(visitor_text=visit)
        builder.end_page()
    return builder.boxes


def _multiply(m: Sequence[float], n: Sequence[float]) -> tuple[float, ...]:
    """The 3x3 affine product ``m × n`` of two PDF matrices ``[a b c d e f]``."""
    a, b, c, d, e, f = (float(value) for value in m)
    p, q, r, s, t, u = (float(value) for value in n)
    return (a * p + b * r, a * q + b * s, c * p + d * r, c * q + d * s, e * p + f * r + t, e * q + f * s + u)
