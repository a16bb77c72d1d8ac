"""Confluence storage format (XHTML with ``ac:``/``ri:`` elements) to Markdown.

A pre-pass rewrites what only Confluence has into plain HTML (code macros to ``<pre>``,
panels to block quotes with a label, expand to its body under a bold title, status
lozenges to ``[STATUS]``, task lists to check boxes, page and user links to their text,
images to their alt text); ``markdownify`` (MIT) converts the rest, keeping headings,
lists, tables and fenced code.

The pre-pass parses with the stdlib ``html.parser`` through BeautifulSoup: storage format
is a fragment with undeclared namespace prefixes and HTML entities (``&nbsp;``), which an
XML parser refuses.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bs4 import BeautifulSoup, Tag

#: Panel macros and the label their block quote opens with.
PANELS = {"info": "Info", "note": "Note", "warning": "Warning", "tip": "Tip", "panel": "Panel"}
#: Macros whose text is code, kept verbatim in a fenced block.
CODE_MACROS = ("code", "noformat")
_LANGUAGE = re.compile(r"^[A-Za-z0-9_+#.-]{1,32}$")
_BLANK_RUNS = re.compile(r"\n{3,}")


def storage_to_markdown(storage: str) -> str:
    """The page body as Markdown (empty for an empty body)."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(storage, "html.parser")
    _rewrite(soup)
    converter = MarkdownConverter(
        heading_style="ATX",
        bullets="-",
        code_language_callback=_code_language,
        escape_misc=False,
        # Identifiers (kube_system, *.log) are what on-call searches for: kept verbatim.
        escape_underscores=False,
        escape_asterisks=False,
    )
    markdown = converter.convert_soup(soup)
    return _BLANK_RUNS.sub("\n\n", markdown).strip() + "\n" if markdown.strip() else ""


def _code_language(element: Tag) -> str | None:
    language = element.get("data-language")
    return language if isinstance(language, str) and language else None


def _parameter(macro: Tag, name: str) -> str:
    for parameter in macro.find_all("ac:parameter", recursive=False):
        if parameter.get("ac:name") == name:
            return str(parameter.get_text()).strip()
    return ""


def _child(element: Tag, name: str) -> Tag | None:
    found = element.find(name, recursive=False)
    return found if found is not None and not isinstance(found, str) and found.name == name else None


def _rewrite(soup: BeautifulSoup) -> None:
    """Innermost elements first, so a code block inside an expand inside a panel is
    already plain HTML when its container is rewritten. A macro's own parameters and
    bodies are read by its handler; whatever ``ac:`` element is left is then removed."""
    for element in reversed(soup.find_all(re.compile(r"^ac:"))):
        handler = _HANDLERS.get(element.name)
        if handler is not None and element.parent is not None:
            handler(soup, element)
    for element in soup.find_all(re.compile(r"^ac:")):
        if element.parent is not None:
            element.decompose()


def _macro(soup: BeautifulSoup, macro: Tag) -> None:
    name = str(macro.get("ac:name", "")).lower()
    body = _child(macro, "ac:rich-text-body")
    if name in CODE_MACROS:
        plain = _child(macro, "ac:plain-text-body")
        pre = soup.new_tag("pre")
        language = _parameter(macro, "language")
        if _LANGUAGE.match(language):
            pre["data-language"] = language
        pre.string = plain.get_text() if plain is not None else ""
        macro.replace_with(pre)
    elif name in PANELS:
        title = _parameter(macro, "title")
        label = f"{PANELS[name]}: {title}" if title else f"{PANELS[name]}:"
        macro.replace_with(_labelled(soup, "blockquote", label, body))
    elif name == "expand":
        macro.replace_with(_labelled(soup, "div", _parameter(macro, "title") or "Details", body))
    elif name == "status":
        macro.replace_with(f"[{(_parameter(macro, 'title') or _parameter(macro, 'colour')).upper()}]")
    elif body is not None:  # an unknown macro with content (section, column, ...): keep it
        block = soup.new_tag("div")
        block.extend(list(body.contents))
        macro.replace_with(block)
    else:  # toc, children, jira, ...: generated at view time, nothing to index
        macro.decompose()


def _labelled(soup: BeautifulSoup, container: str, label: str, body: Tag | None) -> Tag:
    """A ``container`` element opening with ``label`` in bold, then the macro's body."""
    block = soup.new_tag(container)
    heading = soup.new_tag("p")
    bold = soup.new_tag("strong")
    bold.string = label
    heading.append(bold)
    block.append(heading)
    if body is not None:
        block.extend(list(body.contents))
    return block


def _task_list(soup: BeautifulSoup, tasks: Tag) -> None:
    items = soup.new_tag("ul")
    for task in tasks.find_all("ac:task", recursive=False):
        status = _child(task, "ac:task-status")
        done = status is not None and status.get_text().strip().lower() == "complete"
        item = soup.new_tag("li")
        item.append("[x] " if done else "[ ] ")
        body = _child(task, "ac:task-body")
        if body is not None:
            item.extend(list(body.contents))
        items.append(item)
    tasks.replace_with(items)


def _link(soup: BeautifulSoup, link: Tag) -> None:
    body = _child(link, "ac:plain-text-link-body") or _child(link, "ac:link-body")
    text = body.get_text().strip() if body is not None else ""
    if not text:
        target = link.find(re.compile(r"^ri:"))
        if target is not None and not isinstance(target, str):
            if target.name == "ri:user":
                username = target.get("ri:username")
                text = f"@{username}" if username else "@user"
            else:
                names = ("ri:content-title", "ri:filename", "ri:space-key")
                text = next((str(target[name]) for name in names if target.get(name)), "")
    link.replace_with(text)


def _image(soup: BeautifulSoup, image: Tag) -> None:
    alt = image.get("ac:alt") or image.get("ac:title") or ""
    image.replace_with(str(alt))


def _drop(soup: BeautifulSoup, element: Tag) -> None:
    element.decompose()


def _emoticon(soup: BeautifulSoup, element: Tag) -> None:
    element.replace_with(str(element.get("ac:emoji-fallback") or ""))


def _unwrap(soup: BeautifulSoup, element: Tag) -> None:
    element.unwrap()


_HANDLERS = {
    "ac:structured-macro": _macro,
    "ac:macro": _macro,
    "ac:task-list": _task_list,
    "ac:link": _link,
    "ac:image": _image,
    "ac:emoticon": _emoticon,
    "ac:placeholder": _drop,
    "ac:layout": _unwrap,
    "ac:layout-section": _unwrap,
    "ac:layout-cell": _unwrap,
}
