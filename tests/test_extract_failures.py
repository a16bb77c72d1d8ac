"""Bad files fail one at a time with a one-line reason: ExtractionError, never a crash."""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _documents import docx_bytes, encrypted_pdf_bytes, pdf_bytes, runbook, scanned_pdf_bytes

from lore.errors import ExtractionError, LoreError
from lore.extract import Limits, extract


def reason(data: bytes, filename: str, **options: object) -> str:
    with pytest.raises(ExtractionError) as failed:
        extract(data, filename, **options)  # type: ignore[arg-type]
    assert isinstance(failed.value, LoreError)
    assert "\n" not in failed.value.reason
    return failed.value.reason


def test_a_pdf_that_needs_a_password() -> None:
    locked = encrypted_pdf_bytes(pdf_bytes(runbook(1)), user_password="open-" + "sesame")
    assert reason(locked, "locked.pdf") == "encrypted PDF (a password is needed to open it)"


def test_a_pdf_with_only_an_owner_password_is_read() -> None:
    restricted = encrypted_pdf_bytes(pdf_bytes(runbook(1)), user_password="")
    assert "# Payments API latency runbook" in extract(restricted, "restricted.pdf").markdown


def test_a_scanned_pdf_is_reported_as_having_no_text_layer() -> None:
    assert reason(scanned_pdf_bytes(3), "scan.pdf").startswith("scanned PDF: no text layer (3 pages")
    stamped = scanned_pdf_bytes(2, page_numbers=True)  # only page numbers as text: still a scan
    assert reason(stamped, "scan.pdf").startswith("scanned PDF: no text layer (2 pages")


@pytest.mark.parametrize(
    "damage",
    [lambda pdf: pdf[: len(pdf) // 3], lambda pdf: b"%PDF-1.7\n" + b"\x8f garbage " * 200],
    ids=["truncated", "garbage"],
)
def test_a_broken_pdf(damage: object) -> None:
    broken = damage(pdf_bytes(runbook(2)))  # type: ignore[operator]
    text = reason(broken, "broken.pdf")
    assert text.startswith(("broken PDF", "scanned PDF")), text


def test_a_file_over_the_size_limit() -> None:
    pdf = pdf_bytes(runbook(1))
    assert reason(pdf, "big.pdf", max_bytes=1000) == f"file is {len(pdf):,} bytes, over the limit (1,000)"


@pytest.mark.parametrize(
    ("data", "filename", "expected"),
    [
        (b"<html><body><p>hi</p></body></html>", "a.pdf", "not a PDF (content does not match the .pdf "
                                                           "extension; it is HTML)"),
        (b"%PDF-1.7\n", "a.docx", "not a DOCX (content does not match the .docx extension; it is a PDF)"),
        (b"plain words", "a.docx", "not a DOCX (content does not match the .docx extension; it is text)"),
        (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", "a.md", "not text (content does not match the .md extension; "
                                                   "it is a PDF)"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "a.html",
         "binary file (contains NUL bytes); only UTF-8 text is indexed"),
        (b"caf\xe9", "a.txt", "not valid UTF-8 (byte 0xe9 at offset 3)"),
    ],
)
def test_content_that_does_not_match_the_extension(data: bytes, filename: str, expected: str) -> None:
    assert reason(data, filename) == expected


def test_a_zip_that_is_not_a_docx() -> None:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("README.txt", "not a word document")
    assert reason(archive.getvalue(), "a.docx").startswith("not a DOCX")


def docx_with(members: dict[str, bytes], *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A real DOCX with extra members added."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx_bytes(runbook(1)))) as source, zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            target.writestr(item, source.read(item))
        for name, data in members.items():
            target.writestr(name, data, compress_type=compression)
    return out.getvalue()


def test_a_docx_zip_bomb_is_refused_by_its_compression_ratio() -> None:
    bomb = docx_with({"word/media/filler.bin": b"\x00" * 8_000_000})
    assert len(bomb) < 100_000
    assert "compression ratio" in reason(bomb, "bomb.docx")
    assert "zip bomb" in reason(bomb, "bomb.docx")


def test_a_docx_too_large_when_uncompressed_is_refused_before_anything_is_inflated() -> None:
    # word/document.xml padded to 3 MB inflated, then its deflate stream corrupted: reading
    # it fails as a broken DOCX, so a size refusal can only come from the zip directory.
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx_bytes(runbook(1)))) as source, zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "word/document.xml":
                data += b"<!--" + bytes(range(32, 127)) * 32_000 + b"-->"
            target.writestr(item, data, compress_type=zipfile.ZIP_DEFLATED)
    bomb = bytearray(out.getvalue())
    start = bytes(bomb).index(b"word/document.xml") + 200
    bomb[start : start + 400] = b"\xff" * 400
    roomy = Limits(max_ratio=1e9)

    assert reason(bytes(bomb), "bomb.docx", limits=roomy).startswith("broken DOCX")
    text = reason(bytes(bomb), "bomb.docx", limits=Limits(max_uncompressed_bytes=2_000_000, max_ratio=1e9))
    assert text.startswith("DOCX too large when uncompressed (3,"), text
    assert text.endswith("> 2,000,000 bytes)")


def test_a_docx_with_too_many_members() -> None:
    crowded = docx_with({f"customXml/extra{number}.xml": b"<a/>" for number in range(2_001)})
    assert reason(crowded, "crowded.docx").startswith("DOCX has too many parts (2,0")


def test_a_docx_with_a_broken_document_part() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx_bytes(runbook(1)))) as source, zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            data = b"<w:document><unclosed" if item.filename == "word/document.xml" else source.read(item)
            target.writestr(item, data)
    assert reason(out.getvalue(), "broken.docx").startswith("broken DOCX")


def test_a_pdf_over_the_page_limit() -> None:
    assert reason(pdf_bytes(runbook(3)), "long.pdf", limits=Limits(max_pages=2)) == (
        "PDF has 3 pages, over the limit (2)"
    )
