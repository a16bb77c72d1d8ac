"""The ``knowledge_search`` tool every entry point (MCP, adapters, HTTP, CLI) wraps
(``lore.resolve.build_knowledge_search`` builds the configured one).

The names below load ``lore.tool.core`` on first use (PEP 562), not with the package: a
cold ``lore search`` reads ``lore.tool.limits`` first and starts loading the query model
before it pays for the core's safety chain (regexes, detect-secrets' patterns, the input schema).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lore.tool.core import (
        INPUT_SCHEMA,
        TOOL_DESCRIPTION,
        TOOL_NAME,
        KnowledgeSearch,
        ToolMetadata,
        ToolPassage,
        ToolResult,
    )

__all__ = [
    "INPUT_SCHEMA",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "KnowledgeSearch",
    "ToolMetadata",
    "ToolPassage",
    "ToolResult",
]


def __getattr__(name: str) -> object:
    if name in __all__:
        return getattr(importlib.import_module("lore.tool.core"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
