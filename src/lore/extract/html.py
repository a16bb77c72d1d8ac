"""HTML to Markdown with markdownify (MIT) over BeautifulSoup's stdlib parser.

Scripts, styles, navigation and other chrome are removed before conversion, so neither
code nor menus end up in the index; images become their alt text (a ``data:`` URI would
otherwise put megabytes of base64 into a chunk).
"""

from __future__ import annotations

from typing import Any

from bs4 import BeautifulSoup, Tag
from markdownify import MarkdownConverter

from lore.errors import ExtractionError
from lore.extract.limits import Limits, check_chars
from lore.extract.records import Extracted

MEDIA_TYPE = "text/html"
#: Elements whose content is never knowledge: code, styling, menus, embedded objects.
DROPPED = ("script", "style", "nav", "noscript", "template", "iframe", "object", "embed", "svg", "head")


class _Converter(MarkdownConverter):
    def convert_img(self, el: Tag, text: str, parent_tags: Any) -> str:
        alt = el.attrs.get("alt") or ""
        return str(alt).strip() if isinstance(alt, str) else ""


# A Word table has no header row; the first row is taken as one, since a Markdown table needs it.
_CONVERTER = _Converter(heading_style="ATX", bullets="-", escape_underscores=False, escape_asterisks=False,
                        table_infer_header=True)


def to_markdown(soup: BeautifulSoup) -> str:
    for name in DROPPED:
        for element in soup.find_all(name):
            element.decompose()
    markdown = _CONVERTER.convert_soup(soup)
    lines = [line.rstrip() for line in markdown.strip().splitlines()]
    # markdownify separates blocks with up to three newlines; one blank line is Markdown's own.
    compact: list[str] = []
    for line in lines:
        if line or (compact and compact[-1]):
            compact.append(line)
    return "\n".join(compact).strip() + "\n"


def parse(markup: bytes | str) -> BeautifulSoup:
    return BeautifulSoup(markup, "html.parser")


def first_heading(soup: BeautifulSoup) -> str | None:
    heading = soup.find("h1")
    text = " ".join(heading.get_text(" ").split()) if heading is not None else ""
    return text or None


def extract(data: bytes, limits: Limits) -> Extracted:
    try:
        soup = parse(data)
        found = soup.find("title")
        title = " ".join(found.get_text(" ").split()) if found is not None else ""
        title = title or first_heading(soup) or ""
        markdown = to_markdown(soup)
    except (ValueError, TypeError, AssertionError, RecursionError) as err:
        raise ExtractionError(f"broken HTML: {type(err).__name__}: {err}") from err
    return Extracted(markdown=check_chars(markdown, limits), title=title or None, media_type=MEDIA_TYPE)
