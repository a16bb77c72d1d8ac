"""lore's own redaction rules: the structure around a secret rather than its vendor format.

A key and its value (``DB_PASSWORD=…``, ``signing_key: …``), credentials inside a URL, a
password on a command line (``mysql -p…``, ``curl -u user:pass``, ``sshpass -p``) and
whole PEM private-key blocks. Credentials given in prose live in ``secret_prose``.
Vendor token formats live in ``secret_vendors``. Every rule keeps the surrounding text
(the key, the scheme, the command) and replaces only the secret.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from lore.safety.lazy_regex import compile_later
from lore.safety.pattern_shortcuts import lowered_pattern
from lore.safety.secret_shapes import (
    decode_base64,
    is_placeholder,
    is_resource_name,
    looks_random,
    redacted,
)


class Rule(Protocol):
    """One detector: replaces what it finds in ``text`` and counts it in ``findings``."""

    @property
    def kind(self) -> str: ...

    @property
    def hints(self) -> tuple[str, ...]:
        """Strings of which a text must hold one for the rule to match (none: always run);
        matched ignoring case when written in lower case. A substring test is far cheaper
        than a regex scan, and spares most texts most regexes."""
        ...

    def apply(self, text: str, findings: Counter[str]) -> str: ...


@dataclass(frozen=True)
class PatternRule:
    kind: str
    pattern: re.Pattern[str]
    #: From the match to its replacement, or None to keep the match (a look-alike).
    replace: Callable[[re.Match[str]], str | None]
    hints: tuple[str, ...] = ()

    def apply(self, text: str, findings: Counter[str]) -> str:
        def replace(match: re.Match[str]) -> str:
            replacement = self.replace(match)
            if replacement is None:
                return match.group(0)
            findings[self.kind] += 1
            return replacement

        matches = self._ascii_matches(text)
        if matches is None:
            return self.pattern.sub(replace, text)
        pieces: list[str] = []
        last = 0
        for match in matches:
            pieces += [text[last : match.start()], replace(match)]
            last = match.end()
        return "".join(pieces) + text[last:] if pieces else text

    @functools.cached_property
    def _lowered(self) -> re.Pattern[str] | None:
        return lowered_pattern(self.pattern)

    def _ascii_matches(self, text: str) -> list[re.Match[str]] | None:
        """The pattern's matches in an ASCII ``text``, found by its case-sensitive copy over
        the text in lower case and taken by the pattern itself where the copy found them
        (``lore.safety.pattern_shortcuts``: the same matches, a case-insensitive pattern
        costing several times its copy); None where the pattern must run as it is."""
        copy = self._lowered
        if copy is None or not text.isascii():
            return None
        found: list[re.Match[str]] = []
        for hit in copy.finditer(text.lower()):
            match = self.pattern.match(text, hit.start())
            if match is None or match.end() != hit.end():
                return None  # never seen; should it happen, the pattern alone decides
            found.append(match)
        return found


def whole(kind: str) -> Callable[[re.Match[str]], str]:
    return lambda _match: redacted(kind)


def replace_span(kind: str, match: re.Match[str], start: int, end: int) -> str:
    whole_match, offset = match.group(0), match.start()
    return whole_match[: start - offset] + redacted(kind) + whole_match[end - offset :]


def group(
    kind: str, name: str, accept: Callable[[str], bool] = lambda v: True
) -> Callable[[re.Match[str]], str | None]:
    """Redact only group ``name``; keep the rest of the match (the key, the scheme)."""

    def replace(match: re.Match[str]) -> str | None:
        value = match[name]
        if is_placeholder(value) or not accept(value):
            return None
        return replace_span(kind, match, *match.span(name))

    return replace


def keyed(kind: str, accept: Callable[[str], bool]) -> Callable[[re.Match[str]], str | None]:
    """For patterns ending in ``VALUE``: whichever of its quoted or bare forms matched."""

    def replace(match: re.Match[str]) -> str | None:
        name = next(name for name in ("dq", "sq", "bq", "bare") if match[name] is not None)
        return group(kind, name, accept)(match)

    return replace


PRIVATE_KEY = PatternRule(
    "private_key",
    compile_later(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\s+[A-Za-z0-9+/=\s]{40,})",
        re.DOTALL,
    ),
    whole("private_key"),
    ("private key",),
)

_DB_SCHEME = (
    r"postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|mssql|sqlserver|oracle"
    r"|cockroachdb|clickhouse|couchbase"
)
_USER_PASSWORD = r"(?P<user>[^\s:/@?#\[\]]*):(?P<password>[^\s@/?#]+)@"

#: Keys whose value is a secret whatever it looks like (``DB_PASSWORD``, ``x-api-key``).
_STRONG_KEY = (
    r"(?:password|passwd|passphrase|pwd|api[_-]?key|apikey|secret[_-]?key|private[_-]?key"
    r"|client[_-]?secret|access[_-]?token|auth[_-]?token|refresh[_-]?token)"
)
#: Keys that also name non-secrets (``secret: db-creds`` is a k8s Secret's name).
_WEAK_KEY = r"(?:secret|token)"
_KEY_PREFIX = r"(?<![A-Za-z0-9_.\-])(?P<key>[A-Za-z0-9_.\-]*?"
#: A bare value ends before a ``\\`` that continues the line (``secret_context.continuation``
#: takes the rest).
VALUE = (
    r"""(?:"(?P<dq>[^"\n]+)"|'(?P<sq>[^'\n]+)'|`(?P<bq>[^`\n]+)`"""
    r"""|(?P<bare>(?=[^\s"'`&;|])[^\s"'`&;|\\]*(?:\\(?!\r?\n)[^\s"'`&;|\\]*)*))"""
)
_SEPARATOR = r"""["']?[ \t]*(?:=|:(?!//))[ \t]*"""
#: The rest of one shell command before a flag (no pipe, no next command).
_SAME_COMMAND = r"[^\n|;&]*?[ \t]"

#: ``…_KEY`` names that hold identifiers, not key material (``partition_key``, ``ssh_public_key``).
_NON_SECRET_KEY_WORDS = frozenset(
    {"public", "pub", "partition", "sort", "routing", "cache", "idempotency", "primary", "foreign",
     "shard", "hash", "range", "dedup", "dedupe", "lookup", "row", "object", "s3", "bucket", "index",
     "group", "message", "join", "composite", "unique", "natural", "surrogate", "map", "dict", "sharding",
     "distribution"}
)  # fmt: skip
_HEX_KEY = compile_later(r"[0-9a-fA-F]{32,}")


def is_key_material(value: str) -> bool:
    """A hex or base64 value long and random enough to be a key (not a SHA-1: 40 hex
    characters under a ``…_key`` name is still a key, since commit ids are not keyed so)."""
    return bool(_HEX_KEY.fullmatch(value)) or looks_random(value, min_length=16)


def _secret_key_name(match: re.Match[str]) -> bool:
    words = [w for w in re.split(r"[_.\-]|(?<=[a-z])(?=[A-Z])", match["key"]) if w]
    before = words[-2].lower() if len(words) >= 2 else ""
    return words[-1].lower() in ("key", "keys") and before not in _NON_SECRET_KEY_WORDS


def _key_material(match: re.Match[str]) -> str | None:
    if not _secret_key_name(match):
        return None
    return group("key_material", "value", is_key_material)(match)


#: Keys naming a digest or an identifier: ``SHA256:<fingerprint>``, ``correlation_id``,
#: ``cluster_uuid``, and the public parts of ciphertext (``iv``, ``auth_tag``).
_ID_KEY = compile_later(
    r"(?:^|[-_.])(?:id|ids|uuid|ulid|guid|uid|jid|sid|ray|etag|digest|checksum|fingerprint|iv|nonce"
    r"|auth[-_]?tag|(?:sha|md|blake)\d*(?:sum)?)$",
    re.I,
)
_CAMEL_ID_KEY = compile_later(r"[a-z](?:Id|ID|Uuid|UUID|Digest|Checksum)$")
#: URL query parameters that carry credentials (Azure SAS ``sig``, Google ``key``);
#: other parameters (``list=``, ``id=``) hold ids, so a random look is not enough there.
_CREDENTIAL_PARAMS = frozenset(
    {"sig", "signature", "key", "apikey", "auth", "code", "token", "secret", "credential",
     "x-amz-signature", "x-amz-security-token", "x-goog-signature", "access_token", "id_token"}
)  # fmt: skip


def _high_entropy(match: re.Match[str]) -> str | None:
    key, text = match["key"], match.string
    if (_ID_KEY.search(key) or _CAMEL_ID_KEY.search(key)) and "secret" not in key.lower():
        return None
    before = text[match.start() - 1] if match.start() > 0 else ""
    if before != "" and before in "?&" and key.lower() not in _CREDENTIAL_PARAMS:
        return None
    return group("high_entropy", "bare", looks_random)(match)


def structural_rules() -> list[PatternRule]:
    return [
        PatternRule(
            "db_connection_string",
            compile_later(rf"\b(?:jdbc:)?(?:{_DB_SCHEME})://{_USER_PASSWORD}", re.IGNORECASE),
            group("db_connection_string", "password"),
            ("@",),
        ),
        PatternRule(
            "url_password",
            compile_later(rf"\b[a-z][a-z0-9+.\-]*://{_USER_PASSWORD}", re.IGNORECASE),
            group("url_password", "password"),
            ("@",),
        ),
        PatternRule(
            "bearer_token",
            compile_later(
                r"\bbearer[ \t]+(?P<value>(?=[A-Za-z0-9\-._~+/]*\d)[A-Za-z0-9\-._~+/]{16,}=*)", re.I
            ),
            group("bearer_token", "value"),
            ("bearer",),
        ),
        PatternRule(
            "basic_auth",
            compile_later(r"\bbasic[ \t]+(?P<value>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])", re.I),
            group("basic_auth", "value", lambda v: ":" in decode_base64(v)),
            ("basic",),
        ),
        *_command_line_rules(),
        PatternRule(
            "password",
            compile_later(rf"{_KEY_PREFIX}{_STRONG_KEY}){_SEPARATOR}{VALUE}", re.I),
            keyed("password", lambda v: True),
            ("pass", "pwd", "api", "secret", "private", "token"),
        ),
        PatternRule(
            "password",
            compile_later(rf"(?P<key>--(?:password|passwd|api-key|token))[ \t]+{VALUE}", re.I),
            # ``psql --password --port=5432``: a flag that prompts, followed by the next flag
            keyed("password", lambda v: not v.startswith("-")),
            ("--pass", "--api-key", "--token"),
        ),
        PatternRule(
            "key_material",
            compile_later(
                rf"{_KEY_PREFIX}key){_SEPARATOR}[\"']?(?:base64:)?"
                r"(?P<value>[A-Za-z0-9+/_\-]{16,}={0,2})(?![A-Za-z0-9+/=_\-])",
                re.I,
            ),
            _key_material,
            ("key",),
        ),
        PatternRule(
            "secret",
            compile_later(rf"{_KEY_PREFIX}{_WEAK_KEY}){_SEPARATOR}{VALUE}", re.I),
            keyed("secret", lambda v: len(v) >= 16 and not is_resource_name(v)),
            ("secret", "token"),
        ),
        PatternRule(
            "high_entropy",
            compile_later(
                rf"(?<![A-Za-z0-9_.\-])(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{{0,60}}){_SEPARATOR}"
                r"""["']?(?P<bare>[A-Za-z0-9+/=_\-]{20,})(?![A-Za-z0-9+/=_\-])"""
            ),
            _high_entropy,
        ),
    ]


def _command_line_rules() -> list[PatternRule]:
    """Passwords handed to a client on its command line, each in its client's own flag."""

    def flag(command: str, option: str) -> PatternRule:
        return PatternRule(
            "password",
            compile_later(rf"\b(?:{command})\b{_SAME_COMMAND}(?:{option}){VALUE}"),
            keyed("password", lambda v: True),
            tuple(command.split("|")),
        )

    return [
        # mysql -pSECRET (no space: "-p name" prompts and names a database)
        flag(r"mysql|mysqldump|mysqladmin|mysqlimport|mariadb|mariadb-dump", r"-p(?=[^\s-])"),
        flag(r"sshpass", r"-p[ \t]*"),
        flag(r"redis-cli|valkey-cli", r"(?:-a|--pass)[ \t]+"),
        flag(r"mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport", r"-p[ \t]+"),
        flag(r"login", r"-p[ \t]+"),  # docker / podman / helm registry / oc login -p
        flag(r"htpasswd", r"-[a-zA-Z]*b[a-zA-Z]*[ \t]+\S+[ \t]+\S+[ \t]+"),
        PatternRule(
            "password",
            compile_later(r"[ \t]-pass(?:in|out)?[ \t]+['\"]?pass:(?P<bare>[^\s'\"]+)"),
            group("password", "bare"),
            ("pass:",),
        ),  # openssl -passin pass:SECRET
        PatternRule(
            "password",
            compile_later(
                rf"\b(?:curl|wget|http|httpie)\b{_SAME_COMMAND}(?:-u|--user)(?:[ \t]+|=)?['\"]?"
                r"(?P<user>[^\s:'\"]*):(?P<bare>[^\s'\"]+)"
            ),
            group("password", "bare"),
            ("-u", "--user"),
        ),
    ]


def pii_rules(*, emails: bool, phone_numbers: bool) -> list[PatternRule]:
    rules = []
    if emails:
        rules.append(
            PatternRule(
                "email",
                compile_later(
                    r"(?<![\w.+-])(?P<local>[A-Za-z0-9._%+-]+)@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
                ),
                _email,
                ("@",),
            )
        )
    if phone_numbers:
        rules.append(
            PatternRule(
                "phone_number",
                compile_later(
                    r"(?<![\w.+/-])(?:\+\d{1,3}[ .\-]?(?:\(\d{1,4}\)[ .\-]?)?\d{1,4}(?:[ .\-]?\d{2,4}){2,4}"
                    r"|\(\d{3}\)[ .\-]?\d{3}[ .\-]\d{4}|\d{3}[.\-]\d{3}[.\-]\d{4})(?![\w-]|\.\d)"
                ),
                whole("phone_number"),
            )
        )
    return rules


def _email(match: re.Match[str]) -> str | None:
    # git@github.com:org/repo is a remote, not a person.
    return None if match["local"].lower() in {"git", "noreply", "no-reply"} else redacted("email")
