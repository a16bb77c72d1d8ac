"""Which library extracts structure best: heading fidelity (and lists, tables, code) of
the PDF and DOCX candidates on generated files whose structure is known exactly.

    .venv/bin/python bench/extract_fidelity.py [--pages 20]

PDF: pypdf (lore.extract.pdf) against pdfminer.six, both feeding the same layout rules
(lore.extract.pdf_layout), so only what each library reads differs: lines, font sizes,
the outline. DOCX: mammoth + markdownify (lore.extract.docx) against python-docx walking
paragraphs by style. Each PDF comes in three variants (bookmarks and sizes; sizes only;
one 1-pt string per word scaled by the text matrix), each DOCX in two (list styles; lists
as Word's toolbar makes them, "List Paragraph" with direct numbering). The figures are in
docs/ingestion.md.
"""

from __future__ import annotations

import argparse
import io
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _console import bench_console
from _documents import Block, Bullets, Code, Numbered, Table, docx_bytes, headings, pdf_bytes, runbook
from rich.table import Table as RichTable

from lore.extract import docx as lore_docx
from lore.extract import pdf as lore_pdf
from lore.extract.limits import DEFAULT_LIMITS
from lore.extract.pdf_layout import Box, Line, to_markdown

_HEADING = re.compile(r"^(#{1,6}) (.+)$", re.MULTILINE)
_ITEM = re.compile(r"^(?:- |\d+\. )(.+)$", re.MULTILINE)
_MONO = ("courier", "mono", "consol")


def pdfminer_markdown(data: bytes) -> str:
    from pdfminer.converter import PDFPageAggregator
    from pdfminer.layout import LAParams, LTChar, LTTextBox, LTTextLine
    from pdfminer.pdfdocument import PDFDocument, PDFNoOutlines
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdfparser import PDFParser

    document = PDFDocument(PDFParser(io.BytesIO(data)), password="")
    try:
        outline = [(level, str(title)) for level, title, *_ in document.get_outlines()]
    except PDFNoOutlines:
        outline = []
    manager = PDFResourceManager()
    device = PDFPageAggregator(manager, laparams=LAParams())
    interpreter = PDFPageInterpreter(manager, device)
    boxes: list[Box] = []
    for page in PDFPage.create_pages(document):
        interpreter.process_page(page)
        for element in device.get_result():
            if not isinstance(element, LTTextBox):
                continue
            box = Box()
            boxes.append(box)
            for text_line in element:
                if not isinstance(text_line, LTTextLine):
                    continue
                chars = [char for char in text_line if isinstance(char, LTChar)]
                if not chars:
                    continue
                mono = all(any(name in char.fontname.lower() for name in _MONO) for char in chars)
                line = Line(text_line.get_text().strip(), max(char.size for char in chars), mono)
                # pdfminer boxes a heading with the paragraph under it: split where the font changes.
                if box.lines and (abs(box.lines[-1].size - line.size) >= 0.5 or box.lines[-1].mono != mono):
                    box = Box()
                    boxes.append(box)
                box.lines.append(line)
    return to_markdown(boxes, outline)


def python_docx_markdown(data: bytes) -> str:
    from docx import Document
    from docx.table import Table as DocxTable
    from docx.text.paragraph import Paragraph

    document = Document(io.BytesIO(data))
    out: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, DocxTable):
            rows = [[cell.text for cell in row.cells] for row in item.rows]
            out += ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * len(rows[0])]
            out += ["| " + " | ".join(row) + " |" for row in rows[1:]]
            continue
        assert isinstance(item, Paragraph)
        style = item.style.name if item.style is not None else ""
        if style.startswith("Heading ") and style[8:].isdigit():
            out.append("#" * int(style[8:]) + " " + item.text)
        elif style == "List Bullet" or (
            style == "List Paragraph" and item._p.pPr is not None and item._p.pPr.numPr is not None
        ):
            out.append("- " + item.text)  # bullet or number: only numbering.xml would say
        elif style == "List Number":
            out.append("1. " + item.text)
        elif style == "Code":
            out.append("    " + item.text)
        elif item.text.strip():
            out.append(item.text)
    return "\n\n".join(out)


def score(blocks: Sequence[Block], markdown: str) -> dict[str, float]:
    """Shares of the expected structure recovered: headings at their exact level, list
    items as list items (bullet vs number), table cells in a table row, code lines."""
    expected = Counter((level, text) for level, text in headings(blocks))
    found = Counter((len(hashes), text.strip()) for hashes, text in _HEADING.findall(markdown))
    matched = sum((expected & found).values())
    precision = matched / max(sum(found.values()), 1)
    recall = matched / max(sum(expected.values()), 1)
    items = [
        (isinstance(block, Numbered), item)
        for block in blocks
        if isinstance(block, Bullets | Numbered)
        for item in block.items
    ]
    item_lines = {line.strip() for line in markdown.splitlines()}
    items_ok = sum(
        any(line.endswith(text) and (line[0].isdigit() == numbered) for line in item_lines)
        for numbered, text in items
    )
    cells = [cell for block in blocks if isinstance(block, Table) for row in block.rows for cell in row]
    table_lines = [line for line in markdown.splitlines() if line.startswith("|")]
    cells_ok = sum(any(f"| {cell} |" in line for line in table_lines) for cell in cells)
    code = [line for block in blocks if isinstance(block, Code) for line in block.lines]
    fenced = "\n".join(re.findall(r"```\n(.*?)\n```", markdown, re.DOTALL))
    indented = "\n".join(line[4:] for line in markdown.splitlines() if line.startswith("    "))
    code_ok = sum(line in fenced or line in indented for line in code)
    return {
        "heading_f1": 2 * precision * recall / max(precision + recall, 1e-9),
        "items": items_ok / max(len(items), 1),
        "table_cells": cells_ok / max(len(cells), 1),
        "code_lines": code_ok / max(len(code), 1),
    }


def pages_per_second(convert: Callable[[bytes], str], data: bytes, pages: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        convert(data)
        times.append(time.perf_counter() - started)
    return pages / statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    blocks = runbook(args.pages)
    pdf_variants = {
        "bookmarks + sizes": pdf_bytes(blocks, outline=True),
        "sizes only": pdf_bytes(blocks, outline=False),
        "scaled 1-pt words": pdf_bytes(blocks, outline=False, scaled=True),
    }
    docx_variants = {
        "list styles": docx_bytes(blocks),
        "Word toolbar lists": docx_bytes(blocks, word_lists=True),
    }
    candidates: list[tuple[str, str, Callable[[bytes], str], dict[str, bytes]]] = [
        ("PDF", "pypdf (chosen)", lambda data: lore_pdf.extract(data, DEFAULT_LIMITS).markdown, pdf_variants),
        ("PDF", "pdfminer.six", pdfminer_markdown, pdf_variants),
        (
            "DOCX",
            "mammoth + markdownify (chosen)",
            lambda data: lore_docx.extract(data, DEFAULT_LIMITS).markdown,
            docx_variants,
        ),
        ("DOCX", "python-docx", python_docx_markdown, docx_variants),
    ]
    table = RichTable(
        title=f"Extraction fidelity on generated {args.pages}-page runbooks "
        f"({len(headings(blocks))} headings)"
    )
    for column in (
        "format",
        "library",
        "variant",
        "heading F1",
        "list items",
        "table cells",
        "code lines",
        "pages/s",
    ):
        table.add_column(column, justify="left" if column in ("format", "library", "variant") else "right")
    for kind, name, convert, variants in candidates:
        for variant, data in variants.items():
            figures = score(blocks, convert(data))
            rate = pages_per_second(convert, data, args.pages, args.repeats)
            table.add_row(kind, name, variant, *(f"{figures[key]:.2f}" for key in figures), f"{rate:,.0f}")
    bench_console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
