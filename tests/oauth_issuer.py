"""A loopback OAuth authorization server for the resource-server tests.

It serves what lore reads from a real IdP, in the documented wire format: the RFC 8414
metadata (``/.well-known/oauth-authorization-server``) naming its ``jwks_uri``, and the
JWKS. Its keys are generated at test time (RSA via the cryptography package); it can
rotate them, and stop answering the key set, and counts the key-set fetches. Tokens are
minted by ``sign`` as the IdP would after a client's authorization flow.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from joserfc import jwt
from joserfc.jwk import RSAKey

RESOURCE = "http://127.0.0.1/lore/mcp"


def new_key(kid: str) -> RSAKey:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return RSAKey.import_key(pem, parameters={"kid": kid, "use": "sig", "alg": "RS256"})


class Issuer:
    def __init__(self) -> None:
        self.url = ""
        self.keys: list[RSAKey] = [new_key("k1")]
        self.jwks_fetches = 0
        #: While False, the key set answers 503 (an IdP outage).
        self.jwks_up = True
        #: While cleared, the key set's answer waits (a slow IdP), at most 30 s.
        self.jwks_gate = threading.Event()
        self.jwks_gate.set()

    @property
    def key(self) -> RSAKey:
        return self.keys[-1]

    def rotate(self, kid: str) -> RSAKey:
        """Publish a new key beside the old one (as IdPs do) and sign with it from now on."""
        self.keys.append(new_key(kid))
        return self.key

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.url,
            "aud": RESOURCE,
            "sub": "alice",
            "iat": now,
            "exp": now + 300,
            "scope": "lore:read",
            "groups": ["sre"],
        }
        claims.update(overrides)
        return {key: value for key, value in claims.items() if value is not None}

    def sign(self, key: RSAKey | None = None, **overrides: Any) -> str:
        key = key or self.key
        return jwt.encode({"alg": "RS256", "kid": key.kid}, self.claims(**overrides), key)

    def public_pem(self) -> bytes:
        return self.key.as_pem(private=False)

    # -- the HTTP side ---------------------------------------------------------------------

    def _answer(self, path: str) -> tuple[int, dict[str, Any]]:
        if path == "/.well-known/oauth-authorization-server":
            return 200, {
                "issuer": self.url,
                "jwks_uri": f"{self.url}/jwks",
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
                "code_challenge_methods_supported": ["S256"],
            }
        if path == "/jwks":
            self.jwks_fetches += 1
            self.jwks_gate.wait(30)
            if not self.jwks_up:
                return 503, {"error": "down"}
            return 200, {"keys": [key.as_dict(private=False) for key in self.keys]}
        return 404, {"error": "not_found"}


@contextmanager
def run_issuer() -> Iterator[Issuer]:
    issuer = Issuer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = issuer._answer(self.path)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    issuer.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield issuer
    finally:
        server.shutdown()
        server.server_close()


def oauth_config(issuer: Issuer, **more: str) -> str:
    """The ``[serve.oauth]`` table for a ``lore.toml`` (``web_helpers.serve(extra=...)``)."""
    lines = [
        "[serve.oauth]",
        f'issuer = "{issuer.url}"',
        f'resource = "{RESOURCE}"',
        'scopes = ["lore:read"]',
        'viewer_scopes = ["lore:read"]',
        'editor_groups = ["lore-editors"]',
        'admin_scopes = ["lore:admin"]',
    ]
    lines += [f"{key} = {value}" for key, value in more.items()]
    return "\n".join(lines) + "\n"
