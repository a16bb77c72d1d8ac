"""Passages rendered as Markdown for a human reader (``lore search`` without ``--json``).

Imported only to print such a passage: rich.markdown brings markdown-it and pygments.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import CodeBlock, Markdown, MarkdownElement


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
