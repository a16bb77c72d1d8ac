"""Serve the ``knowledge_search`` tool over MCP with the SDK: streamable HTTP on 127.0.0.1.

``lore mcp`` over stdio is ``lore.mcp_stdio`` instead, which spares MCP clients the
SDK's import cost at spawn; the server built here also runs in-process (tests, embedding
lore). Every call goes through ``KnowledgeSearch.run``, so the safety chain (screening,
redaction, cap) and the audit record apply exactly as they do for the CLI and the Python
API; this module only translates to and from MCP.

The SDK's low-level ``Server`` is used rather than ``MCPServer``: ``MCPServer`` derives a
tool's input schema from a Python signature, while the schema here must be the core's
``INPUT_SCHEMA`` byte for byte, so every entry point advertises the same contract.

The MCP Skills extension (``lore.skills.wire``): the installed SDK (mcp 2.3) has SEP-2133's
extension hooks but no Skills extension, so its two methods are registered with
``Server.add_request_handler``, the capability under ``Server.extensions``, and the skill
files served through the ``resources/list`` and ``resources/read`` handlers; every one of
them acts as the call's principal, as the tools do.
"""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListResourcesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    RequestParams,
    TextContent,
    Tool,
)
from starlette.applications import Starlette

from lore.access import Principal
from lore.mcp_tools import INSTRUCTIONS, SERVER_NAME, lore_version, os_user, served_tools, tool_definition
from lore.metrics import IndexScope, metrics_route
from lore.skills.catalog import SkillCatalog
from lore.skills.wire import SKILLS_EXTENSION, SkillsEndpoint, SkillWireError
from lore.tool.core import KnowledgeSearch

__all__ = ["INSTRUCTIONS", "SERVER_NAME", "build_server", "http_app", "os_user", "run_http", "serve_http"]

#: Loopback only: the HTTP transport has no authentication of its own, so exposing it
#: beyond this machine is a deployment decision (a proxy with auth), not a flag.
HTTP_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8765
HTTP_PATH = "/mcp"


def _tools(search: KnowledgeSearch) -> dict[str, Tool]:
    # The same definitions the stdio loop advertises, so both transports offer one contract.
    return {
        tool.name: Tool.model_validate(tool_definition(tool), by_name=False) for tool in served_tools(search)
    }


#: Where an authenticating layer in front of the HTTP app (``lore.web.mcp_mount``) puts
#: the request's whole ``Principal`` in the ASGI scope.
SCOPE_PRINCIPAL = "lore.principal"


def _caller(ctx: ServerRequestContext[Any], default: Principal | None) -> Principal | None:
    """The principal the authenticating layer put in this request's scope, else
    ``default``; None when there is neither, and the call is refused."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    found = scope.get(SCOPE_PRINCIPAL) if isinstance(scope, dict) else None
    return found if isinstance(found, Principal) else default


class SkillGetParams(RequestParams):
    """``skills/get``: the uri of a skill's SKILL.md."""

    uri: str


def build_server(
    search: KnowledgeSearch, *, principal: Principal | None = None, skills: SkillCatalog | None = None
) -> Server[Any]:
    """An MCP server offering ``search``, ``runbook_for_alert`` and ``knowledge_feedback``,
    and the runbooks of ``skills`` (by default the search's own index) through the MCP
    Skills extension.

    Each call acts as the ``Principal`` an authenticating layer put in its request's
    scope (``SCOPE_PRINCIPAL``: ``lore serve``'s tokens), else as ``principal`` (the local
    user of ``lore mcp --http``, given by the CLI). A call with neither is refused: the
    server never falls back to some default user.
    """
    catalog = skills if skills is not None else SkillCatalog(search)
    endpoint = SkillsEndpoint(catalog)
    tools = _tools(search)
    runners = {tool.name: tool for tool in served_tools(search, catalog)}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=list(tools.values()))

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        runner = runners.get(params.name)
        if runner is None:
            offered = ", ".join(repr(name) for name in tools)
            message = f"unknown tool {params.name!r}; this server offers {offered}"
            return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
        caller = _caller(ctx, principal)
        if caller is None:
            message = f"{params.name}: no authenticated principal for this call; refused"
            return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
        result = await runner.run(params.arguments or {}, principal=caller)
        return CallToolResult(
            content=[TextContent(type="text", text=result.render_text())],
            structured_content=result.to_dict(),
            is_error=result.error is not None,
        )

    async def skill_call(ctx: ServerRequestContext[Any], method: str, params: Any) -> dict[str, Any]:
        caller = _caller(ctx, principal)
        if caller is None:
            raise MCPError(-32600, f"{method}: no authenticated principal for this call; refused")
        arguments = params.model_dump(by_alias=True, exclude_none=True) if params is not None else {}
        try:
            return await endpoint.answer(method, arguments, caller)
        except SkillWireError as err:
            raise MCPError(err.code, err.message) from None

    async def list_skills(ctx: ServerRequestContext[Any], params: PaginatedRequestParams) -> dict[str, Any]:
        # The caller's own view: never shared between callers, never cached for long.
        return {**await skill_call(ctx, "skills/list", params), "ttlMs": 0, "cacheScope": "private"}

    async def get_skill(ctx: ServerRequestContext[Any], params: SkillGetParams) -> dict[str, Any]:
        return {**await skill_call(ctx, "skills/get", params), "ttlMs": 0, "cacheScope": "private"}

    async def list_resources(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        return ListResourcesResult.model_validate(await skill_call(ctx, "resources/list", params))

    async def read_resource(
        ctx: ServerRequestContext[Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        return ReadResourceResult.model_validate(await skill_call(ctx, "resources/read", params))

    server: Server[Any] = Server(
        SERVER_NAME,
        version=lore_version(),
        title="lore",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=lambda name: tools[name].input_schema if name in tools else None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )
    server.add_request_handler("skills/list", PaginatedRequestParams, list_skills)
    server.add_request_handler("skills/get", SkillGetParams, get_skill)
    server.extensions[SKILLS_EXTENSION] = endpoint.capability
    return server


def http_app(search: KnowledgeSearch, principal: Principal, scope: IndexScope) -> Starlette:
    """The streamable-HTTP ASGI app (endpoint ``/mcp``, and ``/metrics``, publishing the
    gauges of the index ``scope`` describes), with DNS-rebinding protection for loopback
    hosts as the SDK sets it up. Every call acts as ``principal`` (the CLI's local user:
    this server has no tokens)."""
    return build_server(search, principal=principal).streamable_http_app(
        streamable_http_path=HTTP_PATH, host=HTTP_HOST,
        custom_starlette_routes=[
            metrics_route(search.retriever, scope, events=search.events, retriever=search.retriever)
        ],
    )


async def serve_http(
    search: KnowledgeSearch, principal: Principal, scope: IndexScope, *, port: int = DEFAULT_HTTP_PORT
) -> None:
    import uvicorn  # the SDK's own HTTP transport depends on it

    from lore.draining import DrainingServer
    from lore.serving import install_executor

    app = http_app(search, principal, scope)
    config = uvicorn.Config(app, host=HTTP_HOST, port=port, log_level="warning")
    pool = install_executor()
    try:
        await DrainingServer(config).serve()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def run_http(
    search: KnowledgeSearch, principal: Principal, scope: IndexScope, *, port: int = DEFAULT_HTTP_PORT
) -> None:
    from lore.serving import event_loop_options

    anyio.run(lambda: serve_http(search, principal, scope, port=port), backend_options=event_loop_options())
