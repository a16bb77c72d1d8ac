"""The ``knowledge_search`` tool every entry point (MCP, adapters, HTTP, CLI) wraps."""

from lore.tool.core import (
    INPUT_SCHEMA,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    KnowledgeSearch,
    ToolMetadata,
    ToolPassage,
    ToolResult,
    build_knowledge_search,
)

__all__ = [
    "INPUT_SCHEMA",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "KnowledgeSearch",
    "ToolMetadata",
    "ToolPassage",
    "ToolResult",
    "build_knowledge_search",
]
