"""API tokens of ``lore serve``: created by ``lore token create``, checked on every request.

A token is 256 random bits (``lore_`` + 43 url-safe characters), shown once. Only its
HMAC-SHA256 under a server secret is stored. A slow KDF (argon2, scrypt) defends a
*guessable* secret against an offline attack on a stolen hash file; a 256-bit random
token cannot be guessed whatever the hash, so a KDF would buy nothing and cost every
request tens of milliseconds. The HMAC key (``server-secret``) lives apart from the
hashes, so a copy of ``tokens.json`` alone does not even allow checking a candidate.
Both files are 0600 in the data dir. Comparison is constant-time
(``hmac.compare_digest``) against every stored hash.

Standard library only: ``lore token`` works on a base install, without the serve extra.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from lore.access import Principal, Role, identity
from lore.errors import ConfigError, LoreError
from lore.sources.stored import write_atomic

TOKEN_PREFIX = "lore_"
TOKENS_FILE = "tokens.json"
SECRET_FILE = "server-secret"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@")


@dataclass(frozen=True)
class TokenRecord:
    name: str
    role: Role
    #: hex HMAC-SHA256 of the token under the server secret.
    digest: str
    created_at: str
    groups: tuple[str, ...] = field(default_factory=tuple)
    tenant: str | None = None
    #: The person it stands for, as access lists name people (``lore.access.identity``).
    user: str | None = None

    def principal(self) -> Principal:
        return Principal(
            name=self.name, role=self.role, groups=frozenset(self.groups), tenant=self.tenant, user=self.user
        )


class TokenStore:
    """``tokens.json`` and ``server-secret`` in ``folder``; re-read when the file changes,
    so ``lore token revoke`` takes effect on a running server at its next request."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._lock = threading.Lock()
        self._loaded: tuple[int, int, int] | None = None
        self._records: list[TokenRecord] = []
        self._secret: bytes | None = None

    @property
    def path(self) -> Path:
        return self.folder / TOKENS_FILE

    # -- reading ---------------------------------------------------------------------

    def records(self) -> list[TokenRecord]:
        with self._lock:
            return list(self._fresh())

    def configured(self) -> bool:
        return bool(self.records())

    def verify(self, token: str) -> Principal | None:
        """The principal of ``token``, or None."""
        record = self.verify_record(token)
        return record.principal() if record is not None else None

    def verify_record(self, token: str) -> TokenRecord | None:
        """The stored record of ``token``, or None. Every stored hash is compared, in
        constant time, so the answer's timing says nothing about which one matched."""
        with self._lock:
            records = self._fresh()
            if not records or not token.startswith(TOKEN_PREFIX):
                return None
            digest = self._digest(token)
        found: TokenRecord | None = None
        for record in records:
            if hmac.compare_digest(record.digest, digest):
                found = record
        return found

    def by_digest(self, digest: str) -> TokenRecord | None:
        """The record a session was signed in with, as the store holds it now: None once
        that token is revoked, whatever token is later given its name."""
        with self._lock:
            records = self._fresh()
        found: TokenRecord | None = None
        for record in records:
            if hmac.compare_digest(record.digest, digest):
                found = record
        return found

    def check(self) -> None:
        """``ConfigError`` unless the stored tokens can be verified (their server secret is
        there): ``lore serve`` says so at start, not with a 401 for every token."""
        with self._lock:
            if self._fresh():
                self._server_secret()

    def _fresh(self) -> list[TokenRecord]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._records, self._loaded = [], None
            return self._records
        except OSError as err:
            raise ConfigError(f"cannot read {self.path}: {err}") from err
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if key != self._loaded:
            self._records = self._read()
            self._loaded = key
        return self._records

    def _read(self) -> list[TokenRecord]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return [
                TokenRecord(
                    name=item["name"],
                    role=Role(item["role"]),
                    digest=item["digest"],
                    created_at=item["created_at"],
                    groups=tuple(item.get("groups") or ()),
                    tenant=item.get("tenant"),
                    # One the file spells wrongly names no one (fail closed), never someone else.
                    user=identity(item.get("user")),
                )
                for item in raw["tokens"]
            ]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"{self.path} is not a lore tokens file: {err}") from err

    def _digest(self, token: str) -> str:
        return hmac.new(self._server_secret(), token.encode("utf-8"), hashlib.sha256).hexdigest()

    def _server_secret(self) -> bytes:
        if self._secret is None:
            path = self.folder / SECRET_FILE
            try:
                self._secret = bytes.fromhex(path.read_text(encoding="ascii").strip())
            except FileNotFoundError:
                if self._records:
                    # Their hashes were made under the lost key: a new one would turn every
                    # token away without a word, and list them as if they still worked.
                    raise ConfigError(
                        f"the server secret {path} is missing, but {self.path} holds "
                        f"{len(self._records)} token(s) hashed with it: restore the file, or revoke "
                        "every token (lore token revoke NAME) and create new ones"
                    ) from None
                self._secret = secrets.token_bytes(32)
                self.folder.mkdir(parents=True, exist_ok=True)
                write_atomic(path, self._secret.hex().encode("ascii") + b"\n", mode=0o600)
            except (OSError, ValueError) as err:
                raise ConfigError(f"cannot read the server secret {path}: {err}") from err
        return self._secret

    # -- writing (``lore token``) ----------------------------------------------------

    def create(
        self,
        name: str,
        role: Role,
        *,
        groups: tuple[str, ...] = (),
        tenant: str | None = None,
        user: str | None = None,
    ) -> str:
        """A new token for ``name`` (which must be unused); returns the token itself,
        which is never stored. ``user``: the person it stands for (an email address), which
        access lists naming people (a Confluence page restricted to users) match."""
        if not name or not set(name) <= _NAME_CHARS or len(name) > 64:
            raise ConfigError(f"token name {name!r}: use 1-64 letters, digits, '.', '_', '-' or '@'")
        person = identity(user) if user is not None else None
        if user is not None and person is None:
            raise ConfigError(f"--user {user!r}: an email address or login, ASCII, without spaces")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._lock:
            records = self._fresh()
            if any(record.name == name for record in records):
                raise ConfigError(f"a token named {name!r} exists; revoke it first or choose another name")
            record = TokenRecord(
                name=name,
                role=role,
                digest=self._digest(token),
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                groups=tuple(groups),
                tenant=tenant,
                user=person,
            )
            self._write([*records, record])
        return token

    def revoke(self, name: str) -> None:
        with self._lock:
            records = self._fresh()
            kept = [record for record in records if record.name != name]
            if len(kept) == len(records):
                raise LoreError(f"no token named {name!r}")
            self._write(kept)

    def _write(self, records: list[TokenRecord]) -> None:
        payload = {"tokens": [{**asdict(record), "groups": list(record.groups)} for record in records]}
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(payload, indent=2).encode("utf-8") + b"\n", mode=0o600)
        self._loaded = None
