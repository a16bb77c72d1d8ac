"""What a file is by its content, whatever its name says."""

from __future__ import annotations

import re

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
HTML = "text/html"
TEXT = "text/plain"

#: The PDF header may follow up to 1 KiB of junk (the spec's implementation note).
_PDF_WINDOW = 1024
_HTML_START = re.compile(
    rb"^\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)[\s>]",
    re.IGNORECASE | re.DOTALL,
)
_SNIFF_BYTES = 8192


def sniff(data: bytes, filename: str = "") -> str | None:
    """``application/pdf`` for ``%PDF-``, the DOCX type for a zip holding
    ``word/document.xml``, ``text/html`` for a document that opens like HTML,
    ``text/plain`` for any other valid UTF-8 without NUL bytes, else None (binary). HTML
    need not be UTF-8: it declares its own charset.
    ``filename`` is accepted for the callers' symmetry with ``extract``; content decides."""
    del filename
    head = data[:_SNIFF_BYTES]
    if b"%PDF-" in data[:_PDF_WINDOW]:
        return PDF
    if head.startswith(b"PK\x03\x04"):
        return DOCX if _is_docx(data) else None
    if b"\x00" in head:
        return None
    # HTML in a legacy charset (a saved intranet page in windows-1252) is still HTML: its
    # <meta charset> says how to decode it, and BeautifulSoup reads it.
    if _HTML_START.match(head.lstrip(b"\xef\xbb\xbf")):
        return HTML
    return TEXT if _is_utf8(data) else None


def _is_docx(data: bytes) -> bool:
    import io
    import zipfile  # here: a zip is rare, and the package is imported by every command

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "word/document.xml" in archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
