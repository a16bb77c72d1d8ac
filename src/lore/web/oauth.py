"""lore as an OAuth 2.1 resource server (MCP authorization; RFC 9728, RFC 8707).

An access token from the configured issuer is a JWT checked here, locally, by joserfc:
its signature against the issuer's key set, then ``iss``, ``exp``/``nbf`` (with a small
leeway) and ``aud``, which must name lore's resource URI, so a token minted for another
API of the same IdP is refused. Only the configured asymmetric algorithms are accepted:
``none`` and every HS* are refused before any key is looked at, and joserfc will not use
an RSA or EC key as an HMAC secret, so a token "signed" with the public key is refused
twice over.

The key set comes from ``jwks_uri`` (configured, or read from the issuer's metadata); it
is cached, and fetched again when a token names a ``kid`` the cached set lacks (the
issuer rotated its keys), at most once per ``jwks_refresh_seconds``, so a stream of
forged ``kid``s cannot turn lore into a load generator for the IdP. A key set that cannot
be fetched fails closed with 503 and says why; it never lets a token through.

Claims become a ``Principal`` by the explicit mapping of ``[serve.oauth]``: the subject
claim names it, the groups claim gives its groups, the tenant claim its tenant (required
when configured), scopes or groups its role; a token that maps to no role is refused
unless ``default_role = "viewer"``. The result is the same ``Principal`` a lore token
gives, so every access rule downstream applies unchanged. The principal's name is
prefixed with the issuer's host (``oauth:<host>:<sub>``) so an IdP subject can never pass
for a lore token's name in the audit or the rate limiter. ``user_claim`` (an email, say)
gives the principal its ``user``, which access lists name people by (a Confluence page
restricted to users); an ``email`` the token marks unverified gives none.

The fetches are synchronous (httpx, a short timeout) and never run on the event loop:
``verify_async`` checks a token on the loop only when the cached key set can answer for
its ``kid`` without a fetch (the key is known, or an unknown one may not refresh yet), and
otherwise runs ``verify`` in a worker thread, where the fetch happens under the cache's
lock. So a slow or hanging IdP delays only the requests that need its keys, never every
other request of the server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
from fastapi import APIRouter
from joserfc import jwt
from joserfc.errors import (
    ExpiredTokenError,
    InvalidClaimError,
    InvalidKeyIdError,
    InvalidTokenError,
    JoseError,
    MissingClaimError,
)
from joserfc.jwk import KeySet

from lore.access import Principal, Role, identity
from lore.config import OAuthSettings
from lore.web.problems import Problem

METADATA_PATH = "/.well-known/oauth-protected-resource"
_FETCH_TIMEOUT = 5.0


def metadata_url(resource: str) -> str:
    """RFC 9728 section 3.1: the well-known path inserted before the resource's path."""
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{METADATA_PATH}{parts.path.rstrip('/')}"


def metadata_candidates(issuer: str) -> list[str]:
    """Where an issuer's metadata may live, in the order the MCP authorization spec tries
    them: RFC 8414 inserts the well-known path before the issuer's path; OpenID Connect
    Discovery appends it (Keycloak's realms, Entra ID's ``/v2.0``)."""
    parts = urlsplit(issuer)
    origin, path = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
    candidates = [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}/.well-known/openid-configuration{path}",
        f"{origin}{path}/.well-known/openid-configuration",
    ]
    return list(dict.fromkeys(candidates))


class KeySetCache:
    """The issuer's JWKS: fetched on first use, again on an unknown ``kid`` (bounded)."""

    def __init__(self, settings: OAuthSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._keys: KeySet | None = None
        self._jwks_uri = settings.jwks_uri
        self._last_fetch = float("-inf")
        #: The last fetch an unknown ``kid`` caused: at most one per interval.
        self._last_refresh = float("-inf")
        self._failure: Problem | None = None

    def ready(self, kid: str | None) -> KeySet | None:
        """The cached key set when checking a token of ``kid`` needs no fetch: the key is
        known (or the token names none), or the set lacks it but may not be refreshed yet.
        None when a fetch may be needed: the caller goes to ``keys`` off the event loop.
        Never takes the lock, so never waits for a fetch under way."""
        keys = self._keys
        if keys is None:
            return None
        if kid is None or _has_kid(keys, kid):
            return keys
        if time.monotonic() - self._last_refresh < self.settings.jwks_refresh_seconds:
            return keys
        return None

    def keys(self, *, refresh: bool = False) -> KeySet:
        with self._lock:
            now = time.monotonic()
            interval = self.settings.jwks_refresh_seconds
            if self._keys is None:
                if self._failure is not None and now - self._last_fetch < interval:
                    raise self._failure  # an IdP that is down is asked once per interval, not per request
            elif not refresh or now - self._last_refresh < interval:
                return self._keys
            else:
                self._last_refresh = now
            self._last_fetch = now
            try:
                self._keys = self._fetch()
            except Problem as failure:
                self._failure = failure
                if self._keys is None:
                    raise
                # A refresh that fails keeps the keys known so far: tokens signed with
                # them still pass, and the unknown kid is refused as unknown.
            return self._keys

    def _fetch(self) -> KeySet:
        try:
            uri = self._jwks_uri or self._discover()
            self._jwks_uri = uri
            document = _get_json(uri)
            return KeySet.import_key_set(document)  # type: ignore[arg-type]
        except (httpx.HTTPError, ValueError, KeyError, TypeError, JoseError) as error:
            raise Problem(
                503,
                f"cannot check the access token: the identity provider's key set is unavailable ({error})",
                headers={"Retry-After": "30"},
            ) from error

    def _discover(self) -> str:
        failures: list[str] = []
        for url in metadata_candidates(self.settings.issuer):
            try:
                document = _get_json(url)
            except (httpx.HTTPError, ValueError) as error:
                failures.append(f"{url}: {error}")
                continue
            if document.get("issuer") != self.settings.issuer:
                failures.append(f"{url}: names issuer {document.get('issuer')!r}")
                continue
            uri = document.get("jwks_uri")
            if isinstance(uri, str) and uri:
                return uri
            failures.append(f"{url}: no jwks_uri")
        raise ValueError("no usable issuer metadata (" + "; ".join(failures) + ")")


def _get_json(url: str) -> dict[str, Any]:
    response = httpx.get(url, timeout=_FETCH_TIMEOUT, follow_redirects=False)
    response.raise_for_status()
    document = response.json()
    if not isinstance(document, dict):
        raise ValueError(f"{url} did not return a JSON object")
    return document


class OAuthVerifier:
    """An IdP access token to a ``Principal``, or ``Problem`` 401 (bad token) / 503 (IdP)."""

    def __init__(self, settings: OAuthSettings) -> None:
        self.settings = settings
        self.key_sets = KeySetCache(settings)
        self._claims = jwt.JWTClaimsRegistry(
            leeway=settings.leeway_seconds,
            iss={"essential": True, "value": settings.issuer},
            aud={"essential": True, "values": [settings.resource, *settings.audiences]},
            exp={"essential": True},
        )
        self._host = urlsplit(settings.issuer).netloc or settings.issuer

    # -- what a client is told ------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "resource": self.settings.resource,
            "authorization_servers": [self.settings.issuer],
            "bearer_methods_supported": ["header"],
            "resource_signing_alg_values_supported": list(self.settings.algorithms),
        }
        if self.settings.scopes:
            document["scopes_supported"] = list(self.settings.scopes)
        return document

    def challenge(self, error: str | None = None) -> str:
        """The ``WWW-Authenticate`` value of a 401 (MCP authorization, RFC 9728 section 5.1)."""
        parts = [f'resource_metadata="{metadata_url(self.settings.resource)}"']
        if self.settings.scopes:
            parts.append(f'scope="{" ".join(self.settings.scopes)}"')
        if error is not None:
            parts.append(f'error="{error}"')
        return "Bearer " + ", ".join(parts)

    # -- checking a token -----------------------------------------------------------------

    async def verify_async(self, token: str) -> Principal:
        """``verify`` on the event loop when no key-set fetch can be needed, else in a
        worker thread (the first token, or an unknown ``kid`` that may refresh the set)."""
        ready = self.key_sets.ready(_kid(token))
        if ready is not None:
            return self._check(token, lambda refresh=False: ready)
        return await asyncio.to_thread(self.verify, token)

    def verify(self, token: str) -> Principal:
        """The token's principal; may fetch the key set (blocking): call off the loop."""
        return self._check(token, self.key_sets.keys)

    def _check(self, token: str, keys: Callable[..., KeySet]) -> Principal:
        algorithms = list(self.settings.algorithms)
        try:
            try:
                decoded = jwt.decode(token, keys(), algorithms=algorithms)
            except InvalidKeyIdError:
                decoded = jwt.decode(token, keys(refresh=True), algorithms=algorithms)
            self._claims.validate(decoded.claims)
        except ExpiredTokenError as error:
            raise self._refused("the access token has expired") from error
        except InvalidTokenError as error:
            raise self._refused("the access token is not valid yet (nbf/iat in the future)") from error
        except InvalidKeyIdError as error:
            raise self._refused(
                "the access token is signed with a key the issuer does not publish"
            ) from error
        except (InvalidClaimError, MissingClaimError) as error:
            raise self._refused(
                f"the access token is not for this resource or issuer ({error.description})"
            ) from error
        except (JoseError, ValueError, TypeError) as error:
            raise self._refused(f"the access token is not valid ({error})") from error
        return self.principal(decoded.claims)

    def principal(self, claims: dict[str, Any]) -> Principal:
        settings = self.settings
        subject = claims.get(settings.subject_claim)
        if not isinstance(subject, str) or not subject:
            raise self._refused(f"the access token has no {settings.subject_claim!r} claim")
        groups = _strings(claims.get(settings.groups_claim)) if settings.groups_claim else frozenset()
        tenant: str | None = None
        if settings.tenant_claim is not None:
            value = claims.get(settings.tenant_claim)
            if not isinstance(value, str) or not value:
                raise self._refused(
                    f"the access token has no {settings.tenant_claim!r} claim (tenants are configured)"
                )
            tenant = value
        scopes = _strings(claims.get("scope")) | _strings(claims.get("scp"))
        role = self._role(scopes, groups)
        if role is None:
            raise Problem(
                403,
                "the access token grants no role in lore (no configured scope or group)",
                headers={"WWW-Authenticate": self.challenge("insufficient_scope")},
            )
        name = f"oauth:{self._host}:{subject}"
        return Principal(name=name, role=role, groups=groups, tenant=tenant, user=self._user(claims))

    def _user(self, claims: dict[str, Any]) -> str | None:
        """The person the token names for access lists' user entries, or None (no claim
        configured, none in the token, one ``identity`` refuses, or an email the token
        says is not verified): fail closed, the principal then reads by its groups only."""
        claim = self.settings.user_claim
        if claim is None:
            return None
        if claim == "email" and claims.get("email_verified", True) not in (True, "true"):
            return None
        return identity(claims.get(claim))

    def _role(self, scopes: frozenset[str], groups: frozenset[str]) -> Role | None:
        settings = self.settings
        grants = (
            (Role.ADMIN, settings.admin_scopes, settings.admin_groups),
            (Role.EDITOR, settings.editor_scopes, settings.editor_groups),
            (Role.VIEWER, settings.viewer_scopes, settings.viewer_groups),
        )
        for role, by_scope, by_group in grants:
            if scopes.intersection(by_scope) or groups.intersection(by_group):
                return role
        return Role.VIEWER if settings.default_role == "viewer" else None

    def _refused(self, detail: str) -> Problem:
        return Problem(401, detail, headers={"WWW-Authenticate": self.challenge("invalid_token")})


def _kid(token: str) -> str | None:
    """The ``kid`` of a compact JWS's header, unverified (only to choose where to check
    it); None when there is none or the header does not parse (the check refuses it)."""
    try:
        header = token.split(".", 1)[0]
        decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (ValueError, TypeError):
        return None
    kid = decoded.get("kid") if isinstance(decoded, dict) else None
    return kid if isinstance(kid, str) else None


def _has_kid(keys: KeySet, kid: str) -> bool:
    return any(key.kid == kid for key in keys.keys)


def _strings(value: object) -> frozenset[str]:
    """A claim as a set of names: a list of strings, or one space-separated string."""
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(item for item in value if isinstance(item, str) and item)
    return frozenset()


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


def metadata_router(verifier: OAuthVerifier) -> APIRouter:
    """RFC 9728 metadata at the root and at the path of the resource (``/mcp``)."""
    router = APIRouter(tags=["oauth"])
    paths = {METADATA_PATH, METADATA_PATH + "/mcp", urlsplit(metadata_url(verifier.settings.resource)).path}

    async def metadata() -> dict[str, Any]:
        return verifier.metadata()

    for path in sorted(paths):
        router.add_api_route(path, metadata, methods=["GET"], include_in_schema=path == METADATA_PATH)
    return router
