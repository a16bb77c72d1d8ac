"""Passages rendered as Markdown for a human reader (``lore search`` without ``--json``).

Imported only to print such a passage: rich.markdown brings markdown-it and pygments.

Fenced code is never re-flowed: rich's Markdown wraps a code block's long lines at the
terminal's width (and a padded block crops them), which breaks a long ``grep -E '…'`` in
the middle of a token, so a copied command no longer runs. A passage is therefore cut into
its prose and its fenced blocks (``pieces``); the prose is rendered as Markdown, each code
line is printed whole (``soft_wrap``: the terminal scrolls or folds it, and a copy gives
the line as written).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import CodeBlock, Markdown, MarkdownElement
from rich.syntax import Syntax
from rich.text import Text


class _CodeBlock(CodeBlock):
    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if console.color_system is None:
            # No style reaches this output (a pipe, a file, a dumb terminal), so the
            # highlighting would not show, and building the language's lexer and running
            # it are most of what printing a passage costs: the same text, unlexed.
            self.lexer_name = "text"
        yield from super().__rich_console__(console, options)


class PassageMarkdown(Markdown):
    """rich's Markdown, with code blocks highlighted only where colours are shown."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **Markdown.elements,
        "fence": _CodeBlock,
        "code_block": _CodeBlock,
    }


#: rich.markdown's own default theme, so a block looks the same as before.
CODE_THEME = "monokai"

#: An opening fence (CommonMark: three or more backticks or tildes, indented at most 3).
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})([^`\n]*)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Piece:
    """Prose (``lexer`` None) or one fenced block's code (without its fences)."""

    text: str
    lexer: str | None = None


def pieces(text: str) -> list[Piece]:
    """``text`` cut into prose and fenced code blocks, in order. A fence left open (a chunk
    cut inside a block) runs to the end, as CommonMark reads it."""
    found: list[Piece] = []
    position = 0
    while (opening := _FENCE.search(text, position)) is not None:
        fence = opening.group(2)
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        body_start = opening.end() + 1
        end = closing.search(text, body_start) if body_start <= len(text) else None
        if prose := text[position : opening.start()].strip("\n"):
            found.append(Piece(prose))
        code = text[body_start : end.start() if end else len(text)].rstrip("\n")
        found.append(Piece(code, opening.group(3).strip().split(" ")[0] or "text"))
        position = end.end() if end else len(text)
    if rest := text[position:].strip("\n"):
        found.append(Piece(rest))
    return found


def code_lines(piece: Piece, console: Console, indent: str) -> list[Text]:
    """A code block's lines, highlighted where colours show, each to be printed whole."""
    lexer = piece.lexer if console.color_system is not None and piece.lexer else "text"
    highlighted = Syntax(piece.text, lexer, theme=CODE_THEME).highlight(piece.text)
    highlighted.rstrip()
    return [Text(indent) + line for line in highlighted.split("\n", allow_blank=True)]
