"""MCP streamable HTTP at ``/mcp`` of ``lore serve``: the same ``KnowledgeSearch`` the
REST API calls, so the safety chain and the audit apply, behind the same bearer tokens
(lore's, or an IdP's access tokens: ``lore.web.oauth``). Stateless (``mcp_app``), so
replicas need no sticky sessions.

The SDK's server comes from ``lore.mcp_server.build_server`` (the tool's schema byte for
byte). Authentication is a thin ASGI layer in front of it rather than the SDK's OAuth
resource-server setup: lore's own tokens are opaque API keys beside the IdP's JWTs, and
the layer sees tokens created or revoked while the server runs. The caller's whole
``Principal`` (role, groups, tenant: never only its name) rides in the request's ASGI
scope to every tool call (``lore.mcp_server.SCOPE_PRINCIPAL``); a call that arrives
without one is refused by the server, so a mount that forgets it answers nothing.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from lore.mcp_server import HTTP_PATH, SCOPE_PRINCIPAL, build_server
from lore.skills.catalog import SkillCatalog
from lore.tool.core import KnowledgeSearch
from lore.web.auth import UNAUTHENTICATED, Auth
from lore.web.problems import Problem, problem_response


def mcp_app(search: KnowledgeSearch, host: str, skills: SkillCatalog | None = None) -> Starlette:
    """The SDK's streamable-HTTP app, stateless: each request is answered on its own,
    with no ``Mcp-Session-Id`` to remember, so any replica behind a load balancer answers
    any request without sticky sessions. The 2026-07-28 revision is stateless anyway; a
    client of an earlier one (the ``initialize`` handshake) gets the SDK's stateless
    handling of it. lore's tools never call back to the client (no sampling, no
    elicitation), which is all a session would carry."""
    # DNS-rebinding protection as the SDK sets it up for a loopback host. No default
    # principal: each call acts as the one ``McpAuth`` put in its scope (skills too).
    return build_server(search, skills=skills).streamable_http_app(
        streamable_http_path=HTTP_PATH, host=host, stateless_http=True
    )


class McpAuth:
    """Bearer check in front of the MCP app; in unauthenticated mode every call acts as
    ``UNAUTHENTICATED`` (the default tenant's admin), as on ``/v1``."""

    def __init__(self, app: ASGIApp, auth: Auth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.auth.unauthenticated:
            await self.app({**scope, SCOPE_PRINCIPAL: UNAUTHENTICATED}, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        try:
            if scheme.lower() != "bearer" or not token.strip():
                raise self.auth.unauthorized("send 'Authorization: Bearer <token>' with a lore or IdP token")
            principal = await self.auth.bearer(token.strip())
        except Problem as refused:
            response = problem_response(refused.status, refused.detail, headers=refused.headers)
            await response(scope, receive, send)
            return
        wait = self.auth.limiter.take(principal.name)
        if wait is not None:
            response = problem_response(
                429,
                f"too many requests for {principal.name!r}",
                headers={"Retry-After": str(max(1, round(wait + 0.5)))},
            )
            await response(scope, receive, send)
            return
        await self.app({**scope, SCOPE_PRINCIPAL: principal}, receive, send)
