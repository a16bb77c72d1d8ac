"""Generated PDF and DOCX files with known structure, for the extraction tests and benches.

A document is a list of blocks (``Heading``, ``Para``, ``Bullets``, ``Numbered``, ``Code``,
``Table``, ``PageBreak``); the generators lay them out with reportlab (PDF) and
python-docx (DOCX), both dev dependencies, so the expected headings are known exactly and
can be compared with what an extractor recovers.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

#: Font sizes of heading levels 1..3 in generated PDFs; body text is 10 pt.
BODY_SIZE = 10.0
#: Level 4 is bold at the body size, as Word exports its lower heading levels.
HEADING_SIZES = {1: 20.0, 2: 15.0, 3: 12.5, 4: BODY_SIZE}


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    #: The bookmark's level when it differs from the level the font size shows.
    outline_level: int | None = None


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Numbered:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Code:
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class PageBreak:
    pass


Block = Heading | Para | Bullets | Numbered | Code | Table | PageBreak


def headings(blocks: Sequence[Block]) -> list[tuple[int, str]]:
    return [(block.level, block.text) for block in blocks if isinstance(block, Heading)]


def runbook(pages: int = 1, *, seed: int = 0) -> list[Block]:
    """A runbook-shaped document: per page a level-1 or level-2 heading, prose, a level-3
    heading, a list and a code block, and on the first page a table."""
    blocks: list[Block] = [
        Heading(1, "Payments API latency runbook"),
        Para(
            "This runbook covers elevated p99 latency on the payments API. Page the on-call "
            "engineer when the PaymentsLatencyHigh alert fires for more than ten minutes."
        ),
        Table((("Signal", "Threshold", "Action"), ("p99 latency", "800 ms", "scale out"),
               ("error rate", "2 %", "roll back"))),
    ]
    for page in range(pages):
        number = page + seed
        if page:
            blocks.append(PageBreak())
        blocks += [
            Heading(2, f"Diagnosis step {number}"),
            Para(
                f"Check the gateway dashboards for shard {number}. Look for connection pool "
                "exhaustion in the upstream service and compare the queue depth with the "
                "baseline of the previous week before changing anything in production."
            ),
            Heading(3, f"Check the pods of shard {number}"),
            Bullets((f"kubectl get pods -n payments-{number}", "look for CrashLoopBackOff",
                     "note the restart count")),
            Numbered(("drain the node", "restart the deployment", "watch the error budget")),
            Code((f"kubectl -n payments-{number} rollout restart deploy/api",
                  "kubectl -n payments rollout status deploy/api")),
            Para(
                "If the latency does not recover within fifteen minutes, escalate to the "
                "database team with the slow query log attached."
            ),
        ]
    return blocks


# -- PDF (reportlab) -----------------------------------------------------------------


def pdf_bytes(
    blocks: Sequence[Block],
    *,
    outline: bool = True,
    title: str | None = None,
    scaled: bool = False,
    running_header: str | None = None,
) -> bytes:
    """A text PDF of ``blocks``; headings are larger Helvetica-Bold lines and, with
    ``outline``, also bookmarks at their level. ``scaled`` writes every word as its own
    string in a 1-point font scaled by the text matrix, as many producers do, so the size
    is only known from the matrix. ``running_header`` is printed atop every page, with
    "Page N" at its foot."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import simpleSplit
    from reportlab.pdfgen.canvas import Canvas

    buffer = io.BytesIO()
    canvas = Canvas(buffer, pagesize=A4, pageCompression=1)
    if title:
        canvas.setTitle(title)
    width, height = A4
    margin, y = 56.0, A4[1] - 56.0
    marks = 0
    pages = 0

    def new_page() -> None:
        nonlocal pages
        pages += 1
        if running_header:
            canvas.setFont("Helvetica", 8)
            canvas.drawString(margin, height - 30, running_header)
            canvas.drawString(width - margin - 40, 24, f"Page {pages}")
        canvas.showPage()

    def line(text: str, font: str, size: float, indent: float = 0.0) -> None:
        nonlocal y
        if y < margin + size:
            new_page()
            y = height - margin
        if scaled:
            words = canvas.beginText()
            words.setTextTransform(size, 0, 0, size, margin + indent, y - size)
            words.setFont(font, 1)
            for word in text.split(" "):
                words.textOut(word + " ")
            canvas.drawText(words)
        else:
            canvas.setFont(font, size)
            canvas.drawString(margin + indent, y - size, text)
        y -= size * 1.35

    def wrapped(text: str, font: str, size: float, indent: float = 0.0, first: str = "") -> None:
        lines = simpleSplit(text, font, size, width - 2 * margin - indent - 14)
        for number, part in enumerate(lines):
            line((first if number == 0 else "") + part, font, size, indent if number == 0 or not first
                 else indent + 14)

    for block in blocks:
        if isinstance(block, Heading):
            y -= 6
            if outline:
                key = f"h{marks}"
                marks += 1
                canvas.bookmarkHorizontal(key, 0, y)
                canvas.addOutlineEntry(block.text, key, level=(block.outline_level or block.level) - 1)
            line(block.text, "Helvetica-Bold", HEADING_SIZES[block.level])
        elif isinstance(block, Para):
            wrapped(block.text, "Helvetica", BODY_SIZE)
            y -= 4
        elif isinstance(block, Bullets | Numbered):
            for number, item in enumerate(block.items, 1):
                marker = "• " if isinstance(block, Bullets) else f"{number}. "
                wrapped(item, "Helvetica", BODY_SIZE, indent=12, first=marker)
            y -= 4
        elif isinstance(block, Code):
            for text in block.lines:
                line(text, "Courier", BODY_SIZE - 1)
            y -= 4
        elif isinstance(block, Table):
            for row in block.rows:
                line("    ".join(row), "Helvetica", BODY_SIZE)
            y -= 4
        else:
            new_page()
            y = height - margin
    new_page()
    canvas.save()
    return buffer.getvalue()


def scanned_pdf_bytes(pages: int = 2, *, page_numbers: bool = False) -> bytes:
    """A PDF whose pages are only images (a scan): no text layer at all, or with
    ``page_numbers`` only a "Page N" line that the scanning software stamped on."""
    from PIL import Image
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen.canvas import Canvas

    picture = io.BytesIO()
    Image.new("L", (200, 280), color=235).save(picture, format="PNG")
    buffer = io.BytesIO()
    canvas = Canvas(buffer, pagesize=A4)
    for _ in range(pages):
        picture.seek(0)
        canvas.drawImage(ImageReader(picture), 56, 200, width=400, height=560)
        if page_numbers:
            canvas.setFont("Helvetica", 8)
            canvas.drawString(500, 24, f"Page {canvas.getPageNumber()}")
        canvas.showPage()
    canvas.save()
    return buffer.getvalue()


def encrypted_pdf_bytes(pdf: bytes, user_password: str) -> bytes:
    """``pdf`` encrypted with AES-256; an empty ``user_password`` gives a file anyone may
    open (only an owner password), as many vendor advisories are."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password="owner-" + "pw", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# -- DOCX (python-docx) --------------------------------------------------------------


def docx_bytes(blocks: Sequence[Block], *, title: str | None = None, word_lists: bool = False) -> bytes:
    """A DOCX of ``blocks`` with Word's own styles: Heading 1..6, List Bullet, List
    Number, a table, and a ``Code`` paragraph style in Courier New. ``word_lists`` makes
    lists as Word's toolbar does: "List Paragraph" paragraphs with their own numbering."""
    from docx import Document
    from docx.enum.style import WD_STYLE_TYPE
    from docx.shared import Pt

    document = Document()
    if title:
        document.core_properties.title = title
    code_style = document.styles.add_style("Code", WD_STYLE_TYPE.PARAGRAPH)
    code_style.font.name = "Courier New"
    code_style.font.size = Pt(9)
    for block in blocks:
        if isinstance(block, Heading):
            document.add_heading(block.text, level=block.level)
        elif isinstance(block, Para):
            document.add_paragraph(block.text)
        elif isinstance(block, Bullets | Numbered):
            style = "List Bullet" if isinstance(block, Bullets) else "List Number"
            for item in block.items:
                paragraph = document.add_paragraph(item, style=style)
                if word_lists:
                    _direct_numbering(document, paragraph, style)
        elif isinstance(block, Code):
            for text in block.lines:
                document.add_paragraph(text, style="Code")
        elif isinstance(block, Table):
            table = document.add_table(rows=len(block.rows), cols=len(block.rows[0]))
            for cells, row in zip(table.rows, block.rows, strict=True):
                for cell, text in zip(cells.cells, row, strict=True):
                    cell.text = text
        else:
            document.add_page_break()
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _direct_numbering(document: object, paragraph: object, style: str) -> None:
    """Move the list style's numbering onto the paragraph and restyle it "List Paragraph"."""
    import copy

    from docx.oxml.ns import qn

    source = document.styles[style].element  # type: ignore[attr-defined]
    numbering = source.find(qn("w:pPr")).find(qn("w:numPr"))
    properties = paragraph._p.get_or_add_pPr()  # type: ignore[attr-defined]
    properties.append(copy.deepcopy(numbering))
    paragraph.style = document.styles["List Paragraph"]  # type: ignore[attr-defined]


def page_count(blocks: Sequence[Block]) -> int:
    """Pages of a generated DOCX: DOCX has no fixed pages, so its explicit page breaks + 1."""
    return 1 + sum(isinstance(block, PageBreak) for block in blocks)
