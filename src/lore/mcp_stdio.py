"""``lore mcp`` over stdio: a small JSON-RPC 2.0 loop, without the MCP SDK.

Why hand-written: MCP clients spawn the server and give up when the first answer is
slow, and ``import mcp`` alone costs most of a second (the package imports its client,
servers, starlette, uvicorn and builds pydantic models for every protocol revision).
Serving one tool over newline-delimited JSON needs none of that, so the stdio transport
is this module; ``lore mcp --http`` still uses the SDK (``lore.mcp_server``). Both serve
the tools of ``lore.mcp_tools``. The tests
drive this loop with the SDK's own ``mcp.Client``, which is what proves it conforms.

What is implemented, and nothing more:

- both protocol eras the SDK speaks: the ``initialize`` handshake (2024-11-05 to
  2025-11-25; an unknown requested version gets our latest) and the 2026-07-28
  per-request envelope (``server/discover``; results carry ``resultType`` and the
  ``serverInfo`` stamp). The client's first request decides the era, as in the SDK.
- ``ping``, ``tools/list`` (no pagination: three tools, ``knowledge_search``,
  ``runbook_for_alert`` and ``knowledge_feedback``), ``tools/call``; every
  notification is accepted without a reply; any other method is -32601.
- the MCP Skills extension (``lore.skills.wire``): ``skills/list``, ``skills/get``, and
  the skill files as ``skill://`` resources (``resources/list``, ``resources/read``),
  declared under ``capabilities.extensions`` beside ``resources``, as the SDK server of
  ``--http`` declares them.
- a line that is not JSON gets -32700 with id null; bytes that are not UTF-8 are
  decoded with U+FFFD. The standard library parser keeps a lone surrogate escape
  (``"\\ud800"``), so the tool core sees it, refuses it and audits the call.

Requests are handled one at a time, in order: a search takes milliseconds once the
model is loaded, and sequential handling keeps stdout one whole line per message.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from typing import BinaryIO

from lore import tracing
from lore.access import Principal, local_user
from lore.alerts.tool import AlertResult
from lore.errors import LoreError
from lore.events.feedback import FeedbackResult
from lore.interrupt import lines
from lore.mcp_tools import (
    INSTRUCTIONS,
    SERVER_NAME,
    Json,
    JsonObject,
    Tool,
    lore_version,
    os_user,
    served_tools,
    tool_definition,
)
from lore.skills.catalog import SkillCatalog
from lore.skills.wire import RESOURCE_METHODS, SKILL_METHODS, SKILLS_EXTENSION, SkillsEndpoint, SkillWireError
from lore.tool.core import KnowledgeSearch, ToolResult

#: Read from the installed SDK (``mcp_types.version``) when this was written; hard-coded
#: so that serving stdio never imports it.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)

_META_VERSION = "io.modelcontextprotocol/protocolVersion"
_META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
#: Methods whose 2026-era results carry cache hints; the SDK's defaults.
_CACHEABLE = frozenset({"server/discover", "tools/list", *SKILL_METHODS, *RESOURCE_METHODS})

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

CAPABILITIES: JsonObject = {
    "tools": {"listChanged": False},
    "resources": {"listChanged": False, "subscribe": False},
    "extensions": {SKILLS_EXTENSION: {}},
}


class _RpcError(Exception):
    def __init__(self, code: int, message: str, data: Json = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def _envelope_version(params: Json) -> str | None:
    meta = params.get("_meta") if isinstance(params, dict) else None
    value = meta.get(_META_VERSION) if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


class StdioSession:
    """One client connection: decides the era on the first request, answers each message."""

    def __init__(
        self, search: KnowledgeSearch, *, principal: Principal, skills: SkillCatalog | None = None
    ) -> None:
        catalog = skills if skills is not None else SkillCatalog(search)
        self._skills = SkillsEndpoint(catalog)
        self._tools = {tool.name: tool for tool in served_tools(search, catalog)}
        self._definitions = [tool_definition(tool) for tool in self._tools.values()]
        self._principal = principal
        self._server_info: JsonObject = {"name": SERVER_NAME, "title": "lore", "version": lore_version()}
        self._modern: bool | None = None
        self._runner = asyncio.Runner()

    def close(self) -> None:
        self._runner.close()

    def handle_line(self, raw: bytes) -> JsonObject | None:
        """The reply to one stdin line, or None (a notification, a blank line)."""
        text = raw.decode("utf-8", errors="replace").strip()
        if not text:
            return None
        try:
            message = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
            return _error(None, PARSE_ERROR, "Parse error")
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            if isinstance(message, dict) and "method" not in message and message.keys() & {"result", "error"}:
                return None  # a response to a request we never sent: nothing to answer
            request_id = message.get("id") if isinstance(message, dict) else None
            return _error(_usable_id(request_id), INVALID_REQUEST, "Invalid Request")
        method: str = message["method"]
        params: Json = message.get("params")
        if "id" not in message:
            return None  # a notification (initialized, cancelled, ...): never answered
        request_id = _usable_id(message["id"])
        try:
            result = self._dispatch(method, params)
        except _RpcError as err:
            return _error(request_id, err.code, err.message, err.data)
        except LoreError as err:
            # The core turns bad calls and failed searches into results; a LoreError that
            # still escapes fails this one call, not the server and every call after it.
            print(f"error: {err}", file=sys.stderr, flush=True)
            return _error(request_id, INTERNAL_ERROR, "Internal error", str(err))
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _dispatch(self, method: str, params: Json) -> JsonObject:
        if self._modern is None and method != "initialize":
            self._modern = _envelope_version(params) in MODERN_VERSIONS
        elif self._modern is None:
            self._modern = False
        if self._modern and method == "initialize":
            raise _RpcError(
                INVALID_REQUEST,
                "connection is serving the 2026-07-28 protocol; the initialize handshake is not accepted",
                {"supported": list(MODERN_VERSIONS)},
            )
        if not self._modern and method == "server/discover":
            raise _RpcError(METHOD_NOT_FOUND, "Method not found", method)
        if not self._modern and method != "initialize" and _envelope_version(params) is not None:
            raise _RpcError(
                INVALID_REQUEST,
                "this connection serves the handshake protocol era; "
                "requests carrying the 2026-07-28 envelope are not accepted on it",
            )
        result = self._result(method, params)
        if self._modern:
            if method in _CACHEABLE:
                result = {"ttlMs": 0, "cacheScope": "private", **result}
            result.setdefault("resultType", "complete")
            result["_meta"] = {_META_SERVER_INFO: dict(self._server_info)}
        return result

    def _result(self, method: str, params: Json) -> JsonObject:
        if method == "initialize":
            requested = params.get("protocolVersion") if isinstance(params, dict) else None
            chosen = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
            return {
                "capabilities": CAPABILITIES,
                "instructions": INSTRUCTIONS,
                "protocolVersion": chosen,
                "serverInfo": dict(self._server_info),
            }
        if method == "server/discover":
            return {
                "capabilities": CAPABILITIES,
                "instructions": INSTRUCTIONS,
                "supportedVersions": list(MODERN_VERSIONS),
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": list(self._definitions)}
        if method == "tools/call":
            return self._call(params)
        if method in SKILL_METHODS or method in RESOURCE_METHODS:
            try:
                answer = self._runner.run(self._skills.answer(method, params, self._principal))
            except SkillWireError as err:
                raise _RpcError(err.code, err.message) from None
            result: JsonObject = json.loads(json.dumps(answer))
            return result
        raise _RpcError(METHOD_NOT_FOUND, "Method not found", method)

    def _call(self, params: Json) -> JsonObject:
        name = params.get("name") if isinstance(params, dict) else None
        arguments = params.get("arguments", {}) if isinstance(params, dict) else None
        if not isinstance(name, str) or not isinstance(arguments, dict | None):
            raise _RpcError(INVALID_PARAMS, "Invalid request parameters", "")
        tool = self._tools.get(name)
        if tool is None:
            offered = ", ".join(repr(known) for known in self._tools)
            message = f"unknown tool {name!r}; this server offers {offered}"
            return {"content": [{"type": "text", "text": message}], "isError": True}
        meta = params.get("_meta") if isinstance(params, dict) else None
        result = self._runner.run(_run_tool(tool, arguments or {}, self._principal, _trace_context(meta)))
        structured: Json = json.loads(json.dumps(result.to_dict()))
        return {
            "content": [{"type": "text", "text": result.render_text()}],
            "isError": result.error is not None,
            "structuredContent": structured,
        }


async def _run_tool(
    tool: Tool,
    arguments: JsonObject,
    principal: Principal,
    trace: tuple[str | None, str | None] = (None, None),
) -> ToolResult | AlertResult | FeedbackResult:
    # The caller's W3C trace context from the request's _meta: the call's spans join its
    # trace when traced (lore.tracing).
    with tracing.remote_parent(*trace):
        return await tool.run(arguments, principal=principal)


def _trace_context(meta: Json) -> tuple[str | None, str | None]:
    """``traceparent`` and ``tracestate`` of a request's ``_meta``, as MCP clients send them."""
    if not isinstance(meta, dict):
        return None, None
    parent, state = meta.get("traceparent"), meta.get("tracestate")
    return (parent if isinstance(parent, str) else None), (state if isinstance(state, str) else None)


def _usable_id(value: Json) -> Json:
    # JSON-RPC ids are strings or numbers; anything else is answered with null.
    return value if isinstance(value, str | int | float) and not isinstance(value, bool) else None


def _error(request_id: Json, code: int, message: str, data: Json = None) -> JsonObject:
    error: JsonObject = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def encode(message: Mapping[str, Json]) -> bytes:
    """One line of UTF-8; a lone surrogate echoed back (an id) becomes "?" rather than a crash."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", errors="replace") + b"\n"


def serve(search: KnowledgeSearch, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Answer each line of ``stdin`` on ``stdout`` until EOF."""
    # The local user who launched the server, over their own index.
    session = StdioSession(search, principal=local_user(os_user()))
    try:
        for raw in lines(stdin):
            reply = session.handle_line(raw)
            if reply is not None:
                stdout.write(encode(reply))
                stdout.flush()
    except BrokenPipeError:
        # The client is gone: nobody is left to answer. Point fd 1 at /dev/null so that
        # the interpreter's own flush at exit does not fail on the same pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stdout.fileno())
        os.close(devnull)
    finally:
        session.close()


def run(search: KnowledgeSearch) -> None:
    """Serve on the process's stdin/stdout; anything else printed goes to stderr."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # A stray print (a library's warning) must not corrupt the protocol stream.
    sys.stdout = sys.stderr
    serve(search, stdin, stdout)
