"""lore as an OAuth 2.1 resource server, through the real server and a loopback IdP.

Every refusal has its legitimate look-alike that passes: the same token with the right
audience, inside the clock leeway, signed RS256, with a published ``kid``, from a key set
that answers, with the tenant claim.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from optional_extras import require_extra

require_extra("fastapi", "serve")
require_extra("joserfc", "serve")

import httpx  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from oauth_issuer import RESOURCE, Issuer, new_key, oauth_config, run_issuer  # noqa: E402
from web_helpers import Served, serve, wait_for  # noqa: E402

SECRET_DOC = "# Vault unseal\n\nThe unseal quorum procedure, marker word quokkaunseal.\n"


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with run_issuer() as running:
        yield running


def _served(tmp_path: Path, issuer: Issuer, **more: str) -> object:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "vault.md").write_text(SECRET_DOC, encoding="utf-8")
    sources = '[[sources]]\nname = "secret"\ntype = "filesystem"\npath = "secret"\naccess = ["vault-team"]\n'
    return serve(tmp_path, extra=oauth_config(issuer, **more), more_sources=sources)


def _search(served: Served, token: str | None, query: str = "zanzibarquorum") -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    with httpx.Client(base_url=served.url, headers=headers, timeout=30) as client:
        return client.post("/v1/search", json={"query": query, "top_k": 3})


def _uris(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {passage["uri"] for passage in response.json()["passages"]}


# -- discovery ------------------------------------------------------------------------------


def test_protected_resource_metadata_and_the_401_challenge(tmp_path: Path, issuer: Issuer) -> None:
    with _served(tmp_path, issuer) as served:  # type: ignore[attr-defined]
        metadata_url = "http://127.0.0.1/.well-known/oauth-protected-resource/lore/mcp"
        with httpx.Client(base_url=served.url, timeout=30) as client:
            for path in (
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource/lore/mcp",
            ):
                document = client.get(path).json()
                assert document["resource"] == RESOURCE
                assert document["authorization_servers"] == [issuer.url]
                assert document["scopes_supported"] == ["lore:read"]
            for method, path in (("POST", "/v1/search"), ("POST", "/mcp")):
                refused = client.request(method, path, json={"query": "x"})
                assert refused.status_code == 401
                challenge = refused.headers["www-authenticate"]
                assert challenge.startswith("Bearer ")
                assert f'resource_metadata="{metadata_url}"' in challenge
                assert 'scope="lore:read"' in challenge


def test_without_oauth_there_is_no_metadata_and_the_challenge_is_plain(tmp_path: Path) -> None:
    with serve(tmp_path) as served, httpx.Client(base_url=served.url, timeout=30) as client:
        assert client.get("/.well-known/oauth-protected-resource").status_code == 404
        assert (
            client.post("/v1/search", json={"query": "x"}).headers["www-authenticate"]
            == 'Bearer realm="lore"'
        )


# -- tokens: each refusal beside the look-alike that passes ---------------------------------


def test_claims_checks_refuse_the_bad_and_pass_the_look_alike(tmp_path: Path, issuer: Issuer) -> None:
    now = int(time.time())
    cases = {
        "wrong audience": (
            issuer.sign(aud="https://other.example.invalid/api"),
            issuer.sign(aud=[RESOURCE, "x"]),
        ),
        "wrong issuer": (issuer.sign(iss=issuer.url + "/evil"), issuer.sign(iss=issuer.url)),
        "expired": (issuer.sign(exp=now - 600), issuer.sign(exp=now - 20)),  # inside the 60 s leeway
        "not yet valid": (issuer.sign(nbf=now + 600), issuer.sign(nbf=now + 20)),
        "no exp": (issuer.sign(exp=None), issuer.sign()),
    }
    with _served(tmp_path, issuer) as served:  # type: ignore[attr-defined]
        lore_token = served.tokens["viewer"]
        for what, (bad, good) in cases.items():
            refused = _search(served, bad)
            assert refused.status_code == 401, what
            assert 'error="invalid_token"' in refused.headers["www-authenticate"], what
            assert "file://runbooks/etcd/no-leader.md" in _uris(_search(served, good)), what
        # lore's own tokens keep working beside the IdP's.
        assert "file://runbooks/etcd/no-leader.md" in _uris(_search(served, lore_token))
        assert _search(served, "lore_" + "A" * 43).status_code == 401


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forged(header: dict[str, object], claims: dict[str, object], secret: bytes | None) -> str:
    """A token as an attacker builds it by hand (no library would sign these)."""
    signing_input = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())
    signature = b"" if secret is None else hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + _b64(signature)


def test_alg_none_and_hs_rs_confusion_are_refused(tmp_path: Path, issuer: Issuer) -> None:
    claims = issuer.claims()
    unsigned = _forged({"alg": "none", "typ": "JWT"}, claims, None)
    unsigned_with_kid = _forged({"alg": "none", "kid": issuer.key.kid}, claims, None)
    # HS256 keyed with the issuer's published RSA key (PEM, and the JWK's modulus bytes):
    # a verifier that takes the alg from the token would accept it.
    confused = [
        _forged({"alg": "HS256", "kid": issuer.key.kid}, claims, issuer.public_pem()),
        _forged({"alg": "HS256"}, claims, issuer.public_pem()),
        _forged(
            {"alg": "HS256", "kid": issuer.key.kid},
            claims,
            json.dumps(issuer.key.as_dict(private=False)).encode(),
        ),
    ]
    with _served(tmp_path, issuer) as served:  # type: ignore[attr-defined]
        for token in [unsigned, unsigned_with_kid, *confused]:
            assert _search(served, token).status_code == 401
        # The look-alike: the same claims, signed RS256 by the issuer's key.
        assert _search(served, issuer.sign()).status_code == 200
        # A tampered signature of a real token.
        good = issuer.sign()
        head, body, signature = good.split(".")
        tampered = f"{head}.{body}.{signature[:-4]}{'AAAA' if signature[-4:] != 'AAAA' else 'BBBB'}"
        assert _search(served, tampered).status_code == 401


def test_key_rotation_and_an_unknown_kid_refresh_once(tmp_path: Path, issuer: Issuer) -> None:
    with _served(tmp_path, issuer) as served:  # type: ignore[attr-defined]
        assert _search(served, issuer.sign()).status_code == 200
        assert issuer.jwks_fetches == 1
        assert _search(served, issuer.sign()).status_code == 200
        assert issuer.jwks_fetches == 1  # cached
        # The IdP rotates: the new kid is unknown to the cache, which fetches again once.
        rotated = issuer.rotate("k2")
        assert _search(served, issuer.sign(rotated)).status_code == 200
        assert issuer.jwks_fetches == 2
        # A kid the IdP never published: refused; the refresh interval has not passed, so
        # a stream of forged kids costs the IdP nothing.
        stranger = new_key("k-unknown")
        for _ in range(3):
            refused = _search(served, issuer.sign(stranger))
            assert refused.status_code == 401
            assert "key the issuer does not publish" in refused.json()["detail"]
        assert issuer.jwks_fetches == 2


def test_an_unknown_kid_triggers_one_refresh_then_401(tmp_path: Path, issuer: Issuer) -> None:
    with _served(tmp_path, issuer) as served:  # type: ignore[attr-defined]
        assert _search(served, issuer.sign()).status_code == 200
        assert issuer.jwks_fetches == 1
        stranger = issuer.sign(new_key("k-unknown"))
        assert _search(served, stranger).status_code == 401
        assert issuer.jwks_fetches == 2  # exactly one refresh, and the kid is still unknown
        assert _search(served, stranger).status_code == 401
        assert issuer.jwks_fetches == 2  # bounded: no second fetch within the interval


def test_a_key_set_that_cannot_be_fetched_fails_closed(tmp_path: Path, issuer: Issuer) -> None:
    issuer.jwks_up = False
    with _served(tmp_path, issuer, jwks_refresh_seconds="1") as served:  # type: ignore[attr-defined]
        token = issuer.sign()
        down = _search(served, token)
        assert down.status_code == 503
        assert down.headers["content-type"].startswith("application/problem+json")
        assert "key set is unavailable" in down.json()["detail"]
        # Asked at most once per interval while down, not once per request.
        fetches = issuer.jwks_fetches
        assert _search(served, token).status_code == 503
        assert issuer.jwks_fetches <= fetches + 1
        # lore's own tokens do not depend on the IdP.
        assert _search(served, served.tokens["viewer"]).status_code == 200
        # The look-alike: the IdP back, the same token passes (after the interval).
        issuer.jwks_up = True
        wait_for(lambda: _search(served, token).status_code == 200, "the key set to be fetched again")


def test_a_slow_key_set_fetch_holds_only_the_requests_that_need_it(tmp_path: Path, issuer: Issuer) -> None:
    """The fetch runs off the event loop: while the IdP sits on its key set, a lore token
    (and an IdP token of a known key, once the set is cached) is answered meanwhile."""
    issuer.jwks_gate.clear()
    with _served(tmp_path, issuer) as served, ThreadPoolExecutor(2) as pool:  # type: ignore[attr-defined]
        first = pool.submit(_search, served, issuer.sign())
        wait_for(lambda: issuer.jwks_fetches == 1, "the key-set fetch to start")
        assert _search(served, served.tokens["viewer"]).status_code == 200
        assert not first.done(), "answered while the key set was still held"
        issuer.jwks_gate.set()
        assert first.result().status_code == 200
        # Cached: an IdP token of a known kid is checked on the loop, without a fetch; a
        # rotated key fetches again (in a worker thread), bounded as before.
        assert _search(served, issuer.sign()).status_code == 200
        assert issuer.jwks_fetches == 1
        issuer.jwks_gate.clear()
        rotated = pool.submit(_search, served, issuer.sign(issuer.rotate("k2")))
        wait_for(lambda: issuer.jwks_fetches == 2, "the refresh to start")
        assert _search(served, issuer.sign(issuer.keys[0])).status_code == 200  # the old key, cached
        assert not rotated.done()
        issuer.jwks_gate.set()
        assert rotated.result().status_code == 200
        assert issuer.jwks_fetches == 2


def test_an_issuer_without_metadata_fails_closed(tmp_path: Path, issuer: Issuer) -> None:
    with run_issuer() as other:
        other_url = other.url
    # A closed port: discovery cannot reach the issuer at all.
    config_issuer = Issuer()
    config_issuer.url = other_url
    with _served(tmp_path, config_issuer) as served:  # type: ignore[attr-defined]
        refused = _search(served, config_issuer.sign())
        assert refused.status_code == 503
        assert "no usable issuer metadata" in refused.json()["detail"]


# -- claims to a principal ------------------------------------------------------------------


def test_claims_map_to_a_principal_and_fail_closed(tmp_path: Path, issuer: Issuer) -> None:
    with _served(tmp_path, issuer, tenant_claim='"tenant"') as served:  # type: ignore[attr-defined]
        without = _search(served, issuer.sign())
        assert without.status_code == 401
        assert "'tenant' claim" in without.json()["detail"]
        # The look-alike with the claim passes; its tenant is its own (no default-tenant docs).
        assert _search(served, issuer.sign(tenant="acme")).status_code == 200
        assert _uris(_search(served, issuer.sign(tenant="acme"))) == set()
        # No scope or group granting a role: refused (no default role configured).
        roleless = _search(served, issuer.sign(scope="openid profile", tenant="acme"))
        assert roleless.status_code == 403
        assert 'error="insufficient_scope"' in roleless.headers["www-authenticate"]
        # No subject: refused.
        assert _search(served, issuer.sign(sub=None, tenant="acme")).status_code == 401


def test_roles_come_from_scopes_or_groups(tmp_path: Path, issuer: Issuer) -> None:
    with _served(tmp_path, issuer, default_role='"viewer"') as served:  # type: ignore[attr-defined]

        def whoami(token: str) -> dict[str, object]:
            with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {token}"}) as client:
                response = client.get("/v1/session")
                assert response.status_code == 200, response.text
                body: dict[str, object] = response.json()
                return body

        assert whoami(issuer.sign(scope="openid")) == {
            "name": f"oauth:{issuer.url.removeprefix('http://')}:alice",
            "role": "viewer",
            "csrf_token": None,
        }
        assert whoami(issuer.sign(groups=["lore-editors"]))["role"] == "editor"
        assert whoami(issuer.sign(scope="lore:read lore:admin"))["role"] == "admin"
        # A viewer may not list sources; an IdP admin may.
        with httpx.Client(base_url=served.url, timeout=30) as client:
            viewer = client.get("/v1/sources", headers={"Authorization": f"Bearer {issuer.sign()}"})
            admin = client.get(
                "/v1/sources", headers={"Authorization": f"Bearer {issuer.sign(scope='lore:admin')}"}
            )
        assert viewer.status_code == 403
        assert admin.status_code == 200


def test_group_restricted_documents_follow_the_groups_claim(tmp_path: Path, issuer: Issuer) -> None:
    with _served(tmp_path, issuer) as served:  # type: ignore[attr-defined]
        secret = "file://secret/vault.md"
        assert secret not in _uris(_search(served, issuer.sign(), "quokkaunseal"))
        assert secret in _uris(_search(served, issuer.sign(groups=["sre", "vault-team"]), "quokkaunseal"))


# -- a real MCP client with an IdP token ----------------------------------------------------


async def _mcp_search(url: str, token: str, query: str) -> set[str]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool("knowledge_search", {"query": query, "top_k": 3})
    assert result.structured_content is not None
    return {passage["uri"] for passage in result.structured_content["passages"]}


async def test_an_mcp_client_with_an_idp_token_sees_what_its_groups_allow(
    tmp_path: Path, issuer: Issuer
) -> None:
    with _served(tmp_path, issuer) as served:  # type: ignore[attr-defined]
        url = f"{served.url}/mcp"
        member = issuer.sign(sub="bob", groups=["vault-team"])
        outsider = issuer.sign(sub="carol", groups=["sre"])
        assert "file://secret/vault.md" in await _mcp_search(url, member, "quokkaunseal")
        assert "file://secret/vault.md" not in await _mcp_search(url, outsider, "quokkaunseal")
        # lore's own token over the same MCP endpoint.
        assert "file://runbooks/etcd/no-leader.md" in await _mcp_search(
            url, served.tokens["viewer"], "zanzibarquorum"
        )
        async with httpx.AsyncClient(timeout=30) as plain:
            expired = issuer.sign(exp=int(time.time()) - 600)
            refused = await plain.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={"Authorization": f"Bearer {expired}"},
            )
        assert refused.status_code == 401
        assert "resource_metadata=" in refused.headers["www-authenticate"]


def test_the_documented_idp_examples_are_valid_settings() -> None:
    """docs/service.md: every ``[serve.oauth]`` example parses as it stands."""
    import re
    import tomllib

    from lore.config import OAuthSettings

    text = (Path(__file__).parent.parent / "docs" / "service.md").read_text(encoding="utf-8")
    blocks = [block for block in re.findall(r"```toml\n(.*?)```", text, re.S) if "[serve.oauth]" in block]
    assert len(blocks) >= 4  # the reference and Okta, Entra ID, Keycloak
    for block in blocks:
        settings = OAuthSettings.model_validate(tomllib.loads(block)["serve"]["oauth"])
        assert settings.resource == "https://lore.example.com/mcp"


def test_issuer_metadata_is_looked_for_where_the_specs_put_it() -> None:
    from lore.web.oauth import metadata_candidates

    assert metadata_candidates("https://idp.example.com/realms/ops") == [
        "https://idp.example.com/.well-known/oauth-authorization-server/realms/ops",
        "https://idp.example.com/.well-known/openid-configuration/realms/ops",
        "https://idp.example.com/realms/ops/.well-known/openid-configuration",
    ]
    assert metadata_candidates("https://idp.example.com/") == [
        "https://idp.example.com/.well-known/oauth-authorization-server",
        "https://idp.example.com/.well-known/openid-configuration",
    ]


# -- the person a token names ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "user"),
    [
        ({"email": "Alice@Example.com"}, "alice@example.com"),
        ({"email": "alice@example.com", "email_verified": True}, "alice@example.com"),
        ({"email": "alice@example.com", "email_verified": "true"}, "alice@example.com"),
        ({"email": "alice@example.com", "email_verified": False}, None),  # unverified: no one
        ({"email": "alice@example.com", "email_verified": "false"}, None),
        ({"email": "alice @example.com"}, None),
        ({"email": ["alice@example.com"]}, None),
        ({"email": "alice@exampl\u212a.com"}, None),
        ({}, None),
    ],
)
def test_the_user_claim_names_a_verified_person_or_no_one(
    claims: dict[str, object], user: str | None
) -> None:
    from lore.config import OAuthSettings
    from lore.web.oauth import OAuthVerifier

    settings = OAuthSettings(
        issuer="http://127.0.0.1:9", resource=RESOURCE, viewer_scopes=["lore:read"], user_claim="email"
    )
    principal = OAuthVerifier(settings).principal({"sub": "s-1", "scope": "lore:read", **claims})
    assert principal.user == user
    assert principal.groups == frozenset()
    unconfigured = OAuthSettings(issuer="http://127.0.0.1:9", resource=RESOURCE, viewer_scopes=["lore:read"])
    assert OAuthVerifier(unconfigured).principal({"sub": "s-1", "scope": "lore:read", **claims}).user is None
