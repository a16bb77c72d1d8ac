"""DOCX to Markdown: mammoth (BSD) maps Word's styles to HTML, markdownify turns that into
Markdown (the same converter as ``.html`` files).

mammoth rather than python-docx: it knows Word's numbering (bullets vs numbered lists,
nesting), tables and headings out of the box, where python-docx exposes raw paragraphs
and leaves lists to be rebuilt from numbering XML (docs/ingestion.md has the measurement).
The archive's directory is checked against ``Limits`` before mammoth reads a byte.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any
from xml.etree import ElementTree

import mammoth  # type: ignore[import-untyped]

from lore.errors import ExtractionError
from lore.extract import html
from lore.extract.limits import Limits, check_chars, open_zip
from lore.extract.records import Extracted

MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

#: Paragraph styles that hold code or commands, as Word and common templates name them.
CODE_STYLES = ("Code", "Source Code", "HTML Preformatted", "Plain Text", "Macro Text", "Preformatted Text",
               "Code Block")
STYLE_MAP = "\n".join(
    ["p[style-name='Title'] => h1:fresh", "p[style-name='Subtitle'] => h2:fresh"]
    + [f"p[style-name='{name}'] => pre:separator('\\n')" for name in CODE_STYLES]
    + ["r[style-name='HTML Code'] => code", "r[style-name='Inline Code'] => code"]
)
#: Font families that mark code when set directly on the text.
MONO_FONTS = ("courier", "consolas", "menlo", "monaco", "mono", "inconsolata", "source code", "fira code")
_DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
#: Images become their alt text: never read, never base64-encoded into the HTML.
_ALT_TEXT_ONLY = mammoth.images.img_element(lambda image: {})


def extract(data: bytes, limits: Limits) -> Extracted:
    with open_zip(data, limits, "DOCX") as archive:
        if "word/document.xml" not in archive.namelist():
            raise ExtractionError("not a DOCX (the zip has no word/document.xml)")
        title = _core_title(archive)
    try:
        converted = mammoth.convert_to_html(
            io.BytesIO(data), style_map=STYLE_MAP, convert_image=_ALT_TEXT_ONLY, transform_document=_monospace
        )
    # mammoth reports malformed parts with whatever its XML and zip layers raise.
    except Exception as err:
        raise ExtractionError(f"broken DOCX: {type(err).__name__}: {err}"[:200]) from err
    soup = html.parse(str(converted.value))
    title = title or html.first_heading(soup)
    markdown = check_chars(html.to_markdown(soup), limits)
    return Extracted(markdown=markdown, title=title, media_type=MEDIA_TYPE)


def _is_mono(run: Any) -> bool:
    return any(name in str(run.font or "").lower() for name in MONO_FONTS)


def _run_text(run: Any) -> str:
    return "".join(str(getattr(child, "value", "")) for child in getattr(run, "children", ()))


def _code_paragraph(paragraph: Any) -> Any:
    """A plain paragraph set wholly in a monospaced font (a pasted command) is code."""
    runs = [child for child in paragraph.children if isinstance(child, mammoth.documents.Run)
            and _run_text(child).strip()]
    if runs and paragraph.style_name in (None, "Normal") and all(_is_mono(run) for run in runs):
        return paragraph.copy(style_id="Code", style_name="Code")
    return paragraph


def _code_run(run: Any) -> Any:
    """A monospaced run inside prose is inline code."""
    if _is_mono(run) and not run.style_name:
        return run.copy(style_id="InlineCode", style_name="Inline Code")
    return run


_PARAGRAPHS = mammoth.transforms.paragraph(_code_paragraph)
_RUNS = mammoth.transforms.run(_code_run)


def _monospace(document: Any) -> Any:
    """Word users mark code by font more often than by style: mammoth's style map sees
    only styles, so monospaced paragraphs and runs are given the code styles first."""
    return _RUNS(_PARAGRAPHS(document))


def _core_title(archive: zipfile.ZipFile) -> str | None:
    """``dc:title`` of ``docProps/core.xml``: what Word shows as the document's title."""
    try:
        root = ElementTree.fromstring(archive.read("docProps/core.xml"))
    except (KeyError, ElementTree.ParseError, zipfile.BadZipFile, OSError):
        return None
    found = root.find(_DC_TITLE)
    text = " ".join((found.text or "").split()) if found is not None else ""
    return text or None
