"""Who is calling: a bearer token, a page session cookie, or (with no tokens configured)
the local user.

- ``Authorization: Bearer <token>``: checked against the token store on every request.
- ``lore_session`` cookie (``POST /v1/session``): HttpOnly, SameSite=Strict; sessions live
  in memory (a restart signs everyone out), or, over an index whose database replicas
  share (``lore.protocols.Replicas``: pgvector), in that database under a hash of the
  cookie's id, so any replica knows them; they expire after ``SESSION_SECONDS``. Every
  non-GET request on a session must carry ``X-CSRF-Token`` with the session's token. A
  session holds the HMAC of the token it signed in with, never a principal: each request
  reads role, groups and tenant from the token store again, so revoking a token ends its
  sessions at their next request, and a new token given the old name is another token.
- Unauthenticated mode (no tokens; the server binds 127.0.0.1 only): every request acts as
  ``UNAUTHENTICATED``, an admin of the default tenant (documents labelled with a named
  tenant need a token of it), and non-GET requests still need the process's CSRF token (from
  ``GET /v1/session``), because any web page the local user visits can send requests to
  127.0.0.1 but cannot read that token.

- An IdP access token (``[serve.oauth]``, ``lore.web.oauth``): a JWT, checked locally;
  it gives the same ``Principal`` a lore token does. lore's tokens start ``lore_`` and are
  never JWTs, so each bearer goes to exactly one checker.

Bearer requests need no CSRF token: a browser never adds that header on its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import Request

from lore.access import Principal, Role
from lore.protocols import Replicas, SharedSession
from lore.web.limits import RateLimiter
from lore.web.oauth import OAuthVerifier, looks_like_jwt
from lore.web.problems import Problem
from lore.web.service import Service
from lore.web.tokens import TokenStore

SESSION_COOKIE = "lore_session"
CSRF_HEADER = "X-CSRF-Token"
SESSION_SECONDS = 12 * 3600
#: Sessions one token keeps at once; a new one beyond drops its oldest.
MAX_SESSIONS_PER_TOKEN = 16
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Paths that take no CSRF token: signing in (its body is the credential itself).
_NO_CSRF = frozenset({("POST", "/v1/session")})

#: The caller of unauthenticated mode: an ordinary service principal (the default
#: tenant's admin), not the CLI's ``LocalUser``, so no request reaches every tenant.
UNAUTHENTICATED = Principal(name="local", role=Role.ADMIN)


@dataclass(frozen=True)
class Session:
    #: ``TokenRecord.digest`` of the token that signed in.
    token_digest: str
    csrf_token: str
    expires: float


class Sessions:
    """Server-side sessions: the cookie holds only a random id. In this process's memory,
    or with ``shared`` in the index's database, where every replica finds them."""

    def __init__(self, seconds: float = SESSION_SECONDS, shared: Replicas | None = None) -> None:
        self.seconds = seconds
        self.shared = shared
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(self, token_digest: str) -> tuple[str, Session]:
        session_id = secrets.token_urlsafe(32)
        if self.shared is not None:
            stored = SharedSession(token_digest, secrets.token_urlsafe(32), time.time() + self.seconds)
            self.shared.put_session(_shared_key(session_id), stored, MAX_SESSIONS_PER_TOKEN)
            return session_id, Session(stored.token_digest, stored.csrf_token, stored.expires)
        session = Session(token_digest, secrets.token_urlsafe(32), time.monotonic() + self.seconds)
        with self._lock:
            now = time.monotonic()
            self._sessions = {key: value for key, value in self._sessions.items() if value.expires > now}
            # Bounded: signing in again and again keeps the newest few, never all of them.
            own = [key for key, value in self._sessions.items() if value.token_digest == token_digest]
            for key in own[: max(0, len(own) - MAX_SESSIONS_PER_TOKEN + 1)]:
                del self._sessions[key]
            self._sessions[session_id] = session
        return session_id, session

    def get(self, session_id: str) -> Session | None:
        if self.shared is not None:
            found = self.shared.session(_shared_key(session_id))
            return Session(found.token_digest, found.csrf_token, found.expires) if found else None
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and session.expires <= time.monotonic():
                del self._sessions[session_id]
                return None
            return session

    def drop(self, session_id: str) -> None:
        if self.shared is not None:
            self.shared.drop_session(_shared_key(session_id))
            return
        with self._lock:
            self._sessions.pop(session_id, None)


def _shared_key(session_id: str) -> str:
    """What the database keeps of a session id: its hash, so a copy of the table (a
    backup, a replica of the database) signs no one in."""
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


@dataclass(frozen=True)
class Caller:
    principal: Principal
    via: Literal["bearer", "session", "local"]
    csrf_token: str | None = None
    session_id: str | None = None


class Auth:
    def __init__(
        self, tokens: TokenStore, sessions: Sessions, limiter: RateLimiter, oauth: OAuthVerifier | None = None
    ) -> None:
        self.tokens = tokens
        self.oauth = oauth
        self.sessions = sessions
        self.limiter = limiter
        #: The CSRF token of unauthenticated mode (one local user, one process).
        self.local_csrf = secrets.token_urlsafe(32)

    @property
    def unauthenticated(self) -> bool:
        return self.oauth is None and not self.tokens.configured()

    async def bearer(self, token: str) -> Principal:
        """The principal of a bearer token (lore's or the IdP's), or ``Problem`` 401/403/503.
        An IdP token whose key set must be fetched first waits for it off the event loop."""
        if self.oauth is not None and looks_like_jwt(token):
            return await self.oauth.verify_async(token)
        principal = self.tokens.verify(token)
        if principal is None:
            raise self.unauthorized("the bearer token is not valid (unknown or revoked)")
        return principal

    def unauthorized(self, detail: str) -> Problem:
        challenge = self.oauth.challenge() if self.oauth is not None else 'Bearer realm="lore"'
        return Problem(401, detail, headers={"WWW-Authenticate": challenge})

    async def identify(self, request: Request) -> Caller:
        """The caller, or ``Problem(401)``; also checks CSRF and the rate limit."""
        caller = await self._identify(request)
        self._check_csrf(request, caller)
        wait = self.limiter.take(caller.principal.name)
        if wait is not None:
            raise Problem(
                429,
                f"too many requests for {caller.principal.name!r}; retry in {wait:.1f} s",
                headers={"Retry-After": str(max(1, round(wait + 0.5)))},
            )
        return caller

    async def _identify(self, request: Request) -> Caller:
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise self.unauthorized("the Authorization header must be 'Bearer <token>'")
            return Caller(await self.bearer(token.strip()), "bearer")
        session_id = request.cookies.get(SESSION_COOKIE)
        if session_id:
            # Off the event loop when the session is in the index's database (replicas):
            # a slow database then holds one thread, not every request.
            shared = self.sessions.shared is not None
            session = (
                await asyncio.to_thread(self.sessions.get, session_id)
                if shared
                else self.sessions.get(session_id)
            )
            record = self.tokens.by_digest(session.token_digest) if session is not None else None
            if session is not None and record is not None:
                return Caller(record.principal(), "session", session.csrf_token, session_id)
            if session is not None:  # its token is revoked: the session ends here
                if shared:
                    await asyncio.to_thread(self.sessions.drop, session_id)
                else:
                    self.sessions.drop(session_id)
        if self.unauthenticated:
            return Caller(UNAUTHENTICATED, "local", self.local_csrf)
        raise self.unauthorized("sign in: send 'Authorization: Bearer <token>' or a session cookie")

    def _check_csrf(self, request: Request, caller: Caller) -> None:
        if caller.via == "bearer" or request.method in SAFE_METHODS:
            return
        if (request.method, request.url.path) in _NO_CSRF:
            return
        sent = request.headers.get(CSRF_HEADER, "")
        if caller.csrf_token is None or not hmac.compare_digest(sent.encode(), caller.csrf_token.encode()):
            raise Problem(403, f"missing or wrong {CSRF_HEADER} header (GET /v1/session gives the token)")


_WHO = {Role.VIEWER: "viewers, editors and admins", Role.EDITOR: "editors and admins", Role.ADMIN: "admins"}


def auth_of(request: Request) -> Auth:
    auth = request.app.state.auth
    assert isinstance(auth, Auth)
    return auth


def require(role: Role, action: str) -> Callable[[Request], Awaitable[Caller]]:
    """A route dependency: the caller, who must hold at least ``role`` to ``action``."""

    # A coroutine, so FastAPI runs it on the event loop: as a plain function it went to a
    # worker thread and back on every request, for a dictionary look-up, an HMAC and a
    # stat of the tokens file (re-read only when it changed).
    async def dependency(request: Request) -> Caller:
        caller = await auth_of(request).identify(request)
        if not caller.principal.role.allows(role):
            raise Problem(403, f"{_WHO[role]} may {action}; this token is a {caller.principal.role.value}")
        return caller

    return dependency


def service_of(request: Request) -> Service:
    service = request.app.state.service
    assert isinstance(service, Service)
    return service
