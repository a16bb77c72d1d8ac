"""``/v1/session``: the page signs in with a token and keeps a session cookie.

Signing in is rate limited twice, before the token is checked: per client address and
per token presented (its hash), each ``SIGN_IN_BURST`` at once and one every
``1 / SIGN_IN_RATE`` seconds after, so neither one address nor many addresses can mint
sessions (or try tokens) at the rate of the API; a token keeps at most
``MAX_SESSIONS_PER_TOKEN`` sessions (``lore.web.auth.Sessions``), its oldest dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from lore.access import Principal
from lore.web.auth import SESSION_COOKIE, Caller, auth_of
from lore.web.limits import RateLimiter
from lore.web.problems import Problem

router = APIRouter(tags=["session"])

#: Sign-ins per second, on average, per client address and per token; and at most at once.
SIGN_IN_RATE = 0.5
SIGN_IN_BURST = 20


def sign_in_limiter() -> RateLimiter:
    return RateLimiter(SIGN_IN_RATE, SIGN_IN_BURST)


def _limit_sign_in(request: Request, token: str) -> None:
    limiter = request.app.state.sign_ins
    assert isinstance(limiter, RateLimiter)
    address = request.client.host if request.client is not None else "unknown"
    digest = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()[:32]
    for key in (f"address:{address}", f"token:{digest}"):
        wait = limiter.take(key)
        if wait is not None:
            raise Problem(
                429,
                f"too many sign-ins; retry in {wait:.0f} s",
                headers={"Retry-After": str(max(1, round(wait + 0.5)))},
            )


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(default="", max_length=200)


def _body(principal: Principal, csrf_token: str | None, *, unauthenticated: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": principal.name, "role": principal.role.value, "csrf_token": csrf_token}
    if unauthenticated:
        body["unauthenticated"] = True
    return body


def _caller_body(caller: Caller) -> dict[str, Any]:
    return _body(caller.principal, caller.csrf_token, unauthenticated=caller.via == "local")


@router.post("/v1/session", summary="Sign in with a token; sets the lore_session cookie")
async def sign_in(body: SignIn, request: Request, response: Response) -> dict[str, Any]:
    auth = auth_of(request)
    if auth.unauthenticated:
        return _caller_body(await auth.identify(request))
    _limit_sign_in(request, body.token.strip())
    record = auth.tokens.verify_record(body.token.strip())
    if record is None:
        raise Problem(401, "that token is not valid (unknown or revoked)")
    principal = record.principal()
    session_id, session = await asyncio.to_thread(auth.sessions.create, record.digest)
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=int(auth.sessions.seconds),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return _body(principal, session.csrf_token)


@router.get("/v1/session", summary="Who this session (or token) is, and its CSRF token")
async def whoami(request: Request) -> dict[str, Any]:
    return _caller_body(await auth_of(request).identify(request))


@router.delete("/v1/session", status_code=204, summary="Sign out")
async def sign_out(request: Request) -> Response:
    caller = await auth_of(request).identify(request)
    if caller.session_id is not None:
        await asyncio.to_thread(auth_of(request).sessions.drop, caller.session_id)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
