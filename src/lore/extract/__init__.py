"""One extraction layer for every source that sees files: the bytes of a file and its
name in, Markdown (with the file's headings as ``#`` headings), a title and the original
media type out, or an ``ExtractionError`` whose ``reason`` says in one line why not.

    extract(data, "advisory.pdf")    # PDF: pypdf, headings from bookmarks or font sizes
    extract(data, "runbook.docx")    # DOCX: mammoth + markdownify, Word heading styles
    extract(data, "page.html")       # HTML: markdownify, without scripts, styles, menus
    extract(data, "notes.md")        # text: checked to be UTF-8, returned as it is

The content decides, not the name alone: a file whose bytes are not what its extension
says is refused (``not a PDF (content does not match the .pdf extension)``), and a name
with no known extension is read as what its content is (``sniff``). Every limit
(``Limits``: size, zip members and inflated size, pages, characters) is checked before
the expensive work it guards. The format modules are imported on first use, so importing
this package (the filesystem source does) costs no PDF or DOCX library.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from lore.errors import ExtractionError
from lore.extract.limits import DEFAULT_LIMITS, Limits, check_size
from lore.extract.records import Extracted
from lore.extract.sniff import DOCX, HTML, PDF, TEXT, sniff

__all__ = [
    "CONVERTED_SUFFIXES",
    "EXTRACTION_VERSION",
    "MARKDOWN_MEDIA_TYPES",
    "MEDIA_TYPES",
    "SUPPORTED_SUFFIXES",
    "TEXT_MEDIA_TYPES",
    "Extracted",
    "Limits",
    "check_content",
    "extract",
    "sniff",
]

#: Bumped when a converter's output changes, so that sources can fold it into a converted
#: file's revision and the next sync re-extracts files whose bytes did not change.
EXTRACTION_VERSION = 1

#: Text formats: read as UTF-8 and returned unchanged; the chunker splits each its own way.
TEXT_MEDIA_TYPES: dict[str, str] = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".rst": "text/x-rst",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".json": "application/json",
}
#: Formats converted to Markdown; their documents keep the original's media type.
MEDIA_TYPES: dict[str, str] = {".pdf": PDF, ".docx": DOCX, ".html": HTML, ".htm": HTML}
CONVERTED_SUFFIXES = frozenset(MEDIA_TYPES)
SUPPORTED_SUFFIXES = frozenset(TEXT_MEDIA_TYPES) | CONVERTED_SUFFIXES
#: Media types whose document text is Markdown made by this package.
MARKDOWN_MEDIA_TYPES = frozenset(MEDIA_TYPES.values())

_NAMES = {PDF: "a PDF", DOCX: "a DOCX", HTML: "HTML", TEXT: "text"}
_SNIFF_BYTES = 8192
_ZIP_MAGIC = b"PK\x03\x04"


def extract(
    data: bytes, filename: str, *, max_bytes: int | None = None, limits: Limits | None = None
) -> Extracted:
    """``data`` (the bytes of ``filename``) as Markdown. ``max_bytes`` overrides the size
    limit of ``limits`` (default ``Limits()``). Raises ExtractionError."""
    limits = limits or DEFAULT_LIMITS
    check_size(data, limits.max_bytes if max_bytes is None else max_bytes)
    suffix = PurePosixPath(filename).suffix.lower()
    expected, found = _checked_type(data, suffix)
    if expected == PDF:
        from lore.extract import pdf

        return pdf.extract(data, limits)
    if expected == DOCX:
        from lore.extract import docx

        return docx.extract(data, limits)
    if expected == HTML and (suffix in MEDIA_TYPES or found == HTML):
        from lore.extract import html

        return html.extract(data, limits)
    return Extracted(markdown=_text(data), title=None, media_type=TEXT_MEDIA_TYPES.get(suffix, TEXT))


def check_content(data: bytes, filename: str) -> str:
    """The media type ``extract`` will read ``data`` as (``application/pdf``, the DOCX
    type, ``text/html`` or ``text/plain``), decided by content and extension alike; an
    ``ExtractionError`` when the content contradicts the extension. The check every
    caller that takes files (the upload source too) makes before extracting anything. A
    zip named .docx passes: the DOCX reader says what is wrong with it."""
    return _checked_type(data, PurePosixPath(filename).suffix.lower())[0]


def _checked_type(data: bytes, suffix: str) -> tuple[str, str | None]:
    """(the type to read, the type sniffed from the content)."""
    found = sniff(data)
    expected = MEDIA_TYPES.get(suffix) or (TEXT if suffix in TEXT_MEDIA_TYPES else None)
    if expected == DOCX and data.startswith(_ZIP_MAGIC):
        found = DOCX  # a zip that is no DOCX, or a broken one: the DOCX reader says which
    if expected is None:  # no extension lore knows: the content says what it is
        expected = found or TEXT
    elif found != expected and not (expected in (TEXT, HTML) and found in (TEXT, HTML)):
        _refuse(data, suffix, expected, found)
    return expected, found


def _refuse(data: bytes, suffix: str, expected: str, found: str | None) -> None:
    if expected in (TEXT, HTML) and found is None:
        _text(data)  # raises with the reason: NUL bytes or the first byte that is not UTF-8
    what = _NAMES[expected]
    actually = f"; it is {_NAMES[found]}" if found in _NAMES else ""
    raise ExtractionError(f"not {what} (content does not match the {suffix} extension{actually})")


def _text(data: bytes) -> str:
    if b"\x00" in data[:_SNIFF_BYTES]:
        raise ExtractionError("binary file (contains NUL bytes); only UTF-8 text is indexed")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ExtractionError(
            f"not valid UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start})"
        ) from err
