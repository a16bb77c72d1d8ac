"""OpenAI function calling: the tool's schema and a handler for the model's tool calls.

Works with any client speaking the Chat Completions ``tools`` format (OpenAI, Azure
OpenAI, vLLM, LiteLLM, Ollama); no SDK is imported here::

    tools = openai_tools(settings)                      # pass as tools=... to the model
    search = build_knowledge_search(settings)
    for call in message.tool_calls:                     # when the model calls it
        content = await handle_openai_tool_call(search, call.function.arguments)
        # append {"role": "tool", "tool_call_id": call.id, "content": content}
"""

from __future__ import annotations

import copy
import json
from typing import Any, Literal

from lore.access import local_user
from lore.config import LoreSettings, load_settings
from lore.resolve import NO_BACKEND
from lore.tool.core import INPUT_SCHEMA, TOOL_DESCRIPTION, TOOL_NAME, UNTRUSTED_NOTICE, KnowledgeSearch


def openai_tool_schema() -> dict[str, Any]:
    """``{"type": "function", "function": {name, description, parameters}}``.

    Not ``strict``: OpenAI's strict mode demands every property be required, and
    ``top_k``, ``source_type`` and ``labels`` are optional by design.
    """
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": TOOL_DESCRIPTION,
            # A copy: callers (and SDKs) mutate tool lists in place.
            "parameters": copy.deepcopy(INPUT_SCHEMA),
        },
    }


def openai_tools(settings: LoreSettings | None = None) -> list[dict[str, Any]]:
    """The tools list to send to the model; empty when no corpus is configured."""
    settings = settings if settings is not None else load_settings()
    return [] if settings.backend == NO_BACKEND else [openai_tool_schema()]


async def handle_openai_tool_call(
    search: KnowledgeSearch,
    arguments_json: str,
    *,
    principal: str | None = None,
    output: Literal["text", "json"] = "text",
) -> str:
    """Answer one tool call; the string is the ``content`` of the ``role: tool`` message.

    ``text`` (default) is the core's citation-numbered rendering with passages fenced as
    untrusted reference data; ``json`` is the structured result (``ToolResult.to_dict()``,
    whose ``untrusted`` and ``notice`` fields say the same). Never raises: bad
    arguments come back as an error message the model can act on.
    """
    try:
        arguments = json.loads(arguments_json) if arguments_json.strip() else {}
    except json.JSONDecodeError as err:
        # The arguments are not echoed back: a model may have pasted a secret into them.
        return _error(f"{TOOL_NAME} arguments are not valid JSON ({err.msg} at position {err.pos})", output)
    if not isinstance(arguments, dict):
        return _error(f"{TOOL_NAME} arguments must be a JSON object", output)
    # In-process: the application's own agent, the local user named for the audit.
    result = await search.run(arguments, principal=local_user(principal))
    return json.dumps(result.to_dict(), ensure_ascii=False) if output == "json" else result.render_text()


def _error(message: str, output: Literal["text", "json"]) -> str:
    if output == "text":
        return f"error: {message}"
    return json.dumps({"untrusted": True, "notice": UNTRUSTED_NOTICE, "error": message, "passages": []})
